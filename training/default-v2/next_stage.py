"""Train the next stage of the bundled model "default" v2 (or train a recorded stage again), and list every stage.

    python training/default-v2/next_stage.py DATA/prep --minutes 90 [--threads 2 | --processes 2] [--work DIR]
    python training/default-v2/next_stage.py DATA/prep --reproduce N [--work DIR]  # stage N again, step for step
    python training/default-v2/next_stage.py --table-only    # only rewrite README.md's table (and the cards' paths)
    python training/default-v2/next_stage.py --bundled-card  # only rewrite the bundled default's card

Each ``stage-N`` folder beside this script is the record of a stage (its model card ``README.md``, ``metrics.json``
and ``options.json``); the exported weights are not kept in the repository (``exports.json`` holds their sha256).
A stage trains from the export of the stage before (``--init-from``, ``--continue-corpus`` on the three prepared
corpora in ``DATA/prep``, which ``corpus.sh`` makes): from ``WORK/stage-N`` when this script trained or reproduced
it there, or, for the newest stage, from the bundled default when that is its export (the same sha256). The new
stage's export stays in ``WORK/stage-N+1``; its record is written here and the "Stages so far" table of README.md
is rewritten from every stage's ``metrics.json``. ``--reproduce N`` trains stage N again for its recorded number
of steps from stage N-1's export into ``WORK/stage-N`` and compares the result with the recorded sha256 (equal
only on the same kind of CPU and precision). The machine line of a stage comes from the CPU this script runs on.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
# WikiText-2 (tokenized), whose valid.txt every stage validates on: --wikitext, by default the copy beside the checkout
WIKITEXT = ROOT.parent / "shared" / "data" / "wikitext-2"
EXPORT = ("options.json", "weights.hdf5", "softmax.safetensors", "vocab.txt", "metrics.json")
RECORD = ("options.json", "metrics.json")  # what a stage keeps here, beside its card
EXPORTS = HERE / "exports.json"  # stage number -> sha256 of its exported files (the files are not committed)
CORPORA = ("gutenberg", "wiki", "simplewiki")
FLAGS = ["--arch", "small", "--vocab-size", "80000", "--cutoffs", "2000,10000,40000", "--epochs", "1", "--seed", "0"]
TABLE_START = "| stage | words seen (stage / all) |"
MACHINES = HERE / "machines.json"  # stage number -> the machine it ran on (this script records it)
BUNDLED = ROOT / "spacy_elmo" / "models" / "default"  # the bundled default, once a stage became it
BUNDLED_NOTES = HERE / "bundled-card-notes.md"  # its card's notes: dates, commits, licences, evidence
# a stage's card shows its commands with these folders, where metrics.json names each by its name alone
# (spacy_elmo/train/output_folder/recorded_paths.py): the stage folders, the prepared corpora, WikiText-2's valid.txt
PORTABLE_PATHS = (
    (re.compile(r"(?<= train )(stage-\d+)\b"), r"OUT/\1"),  # the training run's own folder
    (re.compile(r"(?<=--init-from )(stage-\d+)\b"), r"OUT/\1"),  # the export of the stage before
    (re.compile(r"(?<=--corpus )(gutenberg|wiki|simplewiki)\b"), r"DATA/prep/\1"),  # corpus.sh's output
    (re.compile(r"(?<=--valid )valid\.txt\b"), "wikitext-2/valid.txt"),
)
PATHS_NOTE = (
    "The commands below name `DATA/prep` (the prepared corpus: `training/default-v2/corpus.sh`), `OUT` (the "
    "training runs' work folder) and `wikitext-2` (WikiText-2's tokenized text, as in GitHub's `pytorch/examples`, "
    "`word_language_model/data/wikitext-2`), which `metrics.json` names by their names alone."
)


def stages() -> list[Path]:
    found = [p for p in HERE.glob("stage-*") if p.is_dir() and p.name.split("-", 1)[1].isdigit()]
    return sorted(found, key=lambda p: int(p.name.split("-", 1)[1]))


def machine() -> str:
    """This CPU's model name and the flags that decide training's kernels, and how many cores."""
    fields: dict[str, str] = {}
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())  # the first CPU's
    flags = set(fields.get("flags", "").split())
    wanted = [f for f in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16") if f in flags]
    family = f", family {fields['cpu family']} model {fields['model']}" if "cpu family" in fields else ""
    name = fields.get("model name") or platform.processor() or "unknown CPU"
    return f"{name}{family} ({' '.join(wanted)}), {os.cpu_count()} cores"


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def recorded_exports() -> dict[str, dict[str, str]]:
    return json.loads(EXPORTS.read_text()) if EXPORTS.is_file() else {}


def matches_record(folder: Path, number: int) -> bool:
    """Whether ``folder`` holds stage ``number``'s export, byte for byte as recorded in ``exports.json``."""
    recorded = recorded_exports().get(str(number), {})
    return bool(recorded) and all(
        (folder / name).is_file() and sha256(folder / name) == digest for name, digest in recorded.items()
    )


def export_of(number: int, work: Path) -> Path:
    """Where stage ``number``'s exported model is: trained or reproduced in ``work``, or the bundled default."""
    trained = work / f"stage-{number}"
    if (trained / "weights.hdf5").is_file():
        return trained
    if matches_record(BUNDLED, number):
        return BUNDLED
    sys.exit(
        f"stage {number}'s export is in neither {trained} nor the bundled default: train it again first "
        f"(python {Path(__file__).name} DATA/prep --reproduce {number} --work {work}), which needs stage "
        f"{number - 1}'s export the same way"
    )


def stage_command(
    prep: Path, out: Path, previous: Path | None, threads: int, processes: int, wikitext: Path
) -> list[str]:
    # several processes of one thread each (torchrun, gloo) keep 2 cores busier than one process of 2 threads
    launcher = [sys.executable]
    if processes > 1:
        launcher += ["-m", "torch.distributed.run", "--nproc_per_node", str(processes)]
    command = [*launcher, "-m", "spacy_elmo", "train", str(out)]
    if previous is not None:
        command += ["--init-from", str(previous), "--continue-corpus"]
    for corpus in CORPORA:
        command += ["--corpus", str(prep / corpus)]
    command += ["--valid", str(wikitext / "valid.txt"), *FLAGS]
    return [*command, "--eval-every", "1000", "--threads", str(threads), "--no-progress"]


def train(prep: Path, minutes: float, threads: int, processes: int, work: Path, wikitext: Path) -> Path:
    number = int(stages()[-1].name.split("-", 1)[1]) + 1
    out = work / f"stage-{number}"
    command = stage_command(prep, out, export_of(number - 1, work), threads, processes, wikitext)
    command += ["--max-minutes", str(minutes)]
    print(" ".join(command), flush=True)
    subprocess.run(command, check=True)
    target = HERE / f"stage-{number}"
    target.mkdir()
    for name in RECORD:
        shutil.copyfile(out / name, target / name)
    from spacy_elmo.train.output_folder.model_card import write_model_card

    write_model_card(out, title=f"spacy-elmo default v2, stage {number} (in training)")
    shutil.copyfile(out / "README.md", target / "README.md")  # main makes it portable
    recorded = json.loads(MACHINES.read_text()) if MACHINES.is_file() else {}
    per_process = f"{processes} processes of {threads} thread(s)" if processes > 1 else f"{threads} thread(s)"
    recorded[str(number)] = f"{machine()}, {per_process}"
    MACHINES.write_text(json.dumps(recorded, indent=2) + "\n")
    exports = recorded_exports()
    exports[str(number)] = {name: sha256(out / name) for name in ("weights.hdf5", "softmax.safetensors", "vocab.txt")}
    EXPORTS.write_text(json.dumps(exports, indent=2) + "\n")
    print(f"export in {out}; record in {target}")
    return target


def reproduce(prep: Path, number: int, threads: int, processes: int, work: Path, wikitext: Path) -> Path:
    """Train recorded stage ``number`` again for its recorded steps into ``work``; say whether it is byte-equal."""
    record = HERE / f"stage-{number}" / "metrics.json"
    if not record.is_file():
        sys.exit(f"no stage {number} is recorded here ({record} is missing)")
    steps = json.loads(record.read_text())["stages"][-1]["steps"]
    out = work / f"stage-{number}"
    previous = export_of(number - 1, work) if number > 1 else None
    command = [*stage_command(prep, out, previous, threads, processes, wikitext), "--max-steps", str(steps)]
    print(" ".join(command), flush=True)
    subprocess.run(command, check=True)
    same = matches_record(out, number)
    print(
        f"stage {number} trained again in {out}: "
        + (
            "byte-equal to the record"
            if same
            else "not byte-equal to the record (expected on another kind of CPU or precision: float sums differ)"
        )
    )
    return out


def portable(text: str) -> str:
    """``text`` with the folders that commands name by their names alone shown as ``PORTABLE_PATHS`` says."""
    for pattern, replacement in PORTABLE_PATHS:
        text = pattern.sub(replacement, text)
    return text


def make_card_portable(card: Path) -> None:
    """Rewrite a stage's model card with portable paths and say what they stand for (once; idempotent)."""
    text = portable(card.read_text())
    heading = "## How it was trained\n\n"
    if PATHS_NOTE not in text and heading in text:
        text = text.replace(heading, heading + PATHS_NOTE + "\n\n", 1)
    card.write_text(text)


def write_bundled_card() -> Path:
    """Write the bundled default's card from its files and ``BUNDLED_NOTES``, with portable paths.

    Run again after anything rewrites the card: ``spacy-elmo evaluate --record`` keeps its title and notes but
    renders the commands' folders by their names again.
    """
    from spacy_elmo.train.output_folder.model_card import write_model_card

    card = write_model_card(BUNDLED, title="spacy-elmo default v2", notes=BUNDLED_NOTES.read_text())
    make_card_portable(card)
    return card


def table() -> str:
    recorded = json.loads(MACHINES.read_text()) if MACHINES.is_file() else {}
    lines = [
        TABLE_START + " wall time | machine | validation perplexity, WikiText-2 valid (fwd / bwd) |",
        "|---|---|---|---|---|",
    ]
    total = 0
    for folder in stages():
        number = folder.name.split("-", 1)[1]
        stage = json.loads((folder / "metrics.json").read_text())["stages"][-1]
        total += int(stage["words_seen"])
        ppl = stage.get("valid_perplexity") or {}
        lines.append(
            f"| [{number}]({folder.name}/README.md) | {stage['words_seen']:,} / {total:,} | "
            f"{stage['wall_time_s'] / 60:.0f} min | {recorded.get(number, '')} | "
            f"{ppl.get('forward', float('nan')):.1f} / {ppl.get('backward', float('nan')):.1f} |"
        )
    return "\n".join(lines)


def rewrite_readme() -> None:
    readme = HERE / "README.md"
    text = readme.read_text()
    start = text.index(TABLE_START)
    end = text.index("\n\n", start)
    readme.write_text(text[:start] + table() + text[end:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("prep", type=Path, nargs="?", help="the folder of the prepared corpora (corpus.sh's DATA/prep)")
    parser.add_argument("--minutes", type=float, default=90.0, help="--max-minutes of the stage")
    parser.add_argument("--threads", type=int, default=2, help="torch threads per process")
    parser.add_argument("--processes", type=int, default=1, help="training processes (torchrun); with --threads 1")
    parser.add_argument(
        "--work", type=Path, default=Path(tempfile.gettempdir()) / "default-v2", help="where the run writes"
    )
    parser.add_argument(
        "--wikitext", type=Path, default=WIKITEXT, help="WikiText-2's folder (tokenized; its valid.txt validates)"
    )
    parser.add_argument("--reproduce", type=int, metavar="N", help="train recorded stage N again (its steps)")
    parser.add_argument(
        "--table-only", action="store_true", help="only rewrite README.md's stage table and the cards' paths"
    )
    parser.add_argument(
        "--bundled-card", action="store_true", help="only rewrite the bundled default's card (with its notes)"
    )
    args = parser.parse_args()
    if args.bundled_card:
        print(f"card written: {write_bundled_card()}")
        return
    if not args.table_only:
        if args.prep is None:
            parser.error("give the folder of the prepared corpora")
        if args.reproduce is not None:
            reproduce(args.prep, args.reproduce, args.threads, args.processes, args.work, args.wikitext)
            return
        trained = train(args.prep, args.minutes, args.threads, args.processes, args.work, args.wikitext)
        print(f"stage recorded in {trained}")
    for folder in stages():
        make_card_portable(folder / "README.md")
    rewrite_readme()


if __name__ == "__main__":
    main()
