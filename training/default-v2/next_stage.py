"""Train the next stage of the bundled model "default" v2, keep its export, and list every stage in README.md.

    python training/default-v2/next_stage.py DATA/prep --minutes 90 [--threads 2 | --processes 2] [--work /tmp/v2]
    python training/default-v2/next_stage.py --table-only    # only rewrite README.md's table (and the cards' paths)
    python training/default-v2/next_stage.py --bundled-card  # only rewrite the bundled default's card

Finds the newest ``stage-N`` folder beside this script, trains ``stage-N+1`` from it (``--init-from`` it,
``--continue-corpus`` on the three prepared corpora in ``DATA/prep``, which ``corpus.sh`` makes) into a work
folder, then copies the export (never the checkpoint) to ``stage-N+1/`` with its model card, and rewrites the
"Stages so far" table of README.md from every stage's ``metrics.json``. The machine line of a stage comes from
the CPU this script runs on.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SHARED = ROOT.parent / "shared"
EXPORT = ("options.json", "weights.hdf5", "softmax.safetensors", "vocab.txt", "metrics.json")
CORPORA = ("gutenberg", "wiki", "simplewiki")
FLAGS = ["--arch", "small", "--vocab-size", "80000", "--cutoffs", "2000,10000,40000", "--epochs", "1", "--seed", "0"]
TABLE_START = "| stage | words seen (stage / all) |"
MACHINES = HERE / "machines.json"  # stage number -> the machine it ran on (this script records it)
BUNDLED = ROOT / "spacy_elmo" / "models" / "default"  # the bundled default, once a stage became it
BUNDLED_NOTES = HERE / "bundled-card-notes.md"  # its card's notes: dates, commits, licences, evidence
# a stage's card shows its commands with these paths instead of the training machine's own (metrics.json keeps those)
_ABSOLUTE = r"(?<![^\s`])(?:/[^\s/`]+)+"  # a path from the root, starting a word
PORTABLE_PATHS = (
    (re.compile(_ABSOLUTE + r"/(training/default-v2/stage-\d+)"), r"\1"),  # a committed stage: from the repository
    (re.compile(_ABSOLUTE + r"/prep/(gutenberg|wiki|simplewiki)\b"), r"DATA/prep/\1"),  # corpus.sh's output
    (re.compile(_ABSOLUTE + r"/shared/data/"), "../shared/data/"),  # the shared data beside the checkout
    (re.compile(_ABSOLUTE + r"/(stage-\d+)"), r"OUT/\1"),  # a training run's own folder
)
PATHS_NOTE = (
    "The commands below name `DATA/prep` (the prepared corpus: `training/default-v2/corpus.sh`) and `OUT` (the "
    "training run's work folder) where the training machine had its own paths; `metrics.json` keeps them as run."
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


def train(prep: Path, minutes: float, threads: int, processes: int, work: Path) -> Path:
    previous = stages()[-1]
    number = int(previous.name.split("-", 1)[1]) + 1
    out = work / f"stage-{number}"
    # several processes of one thread each (torchrun, gloo) keep 2 cores busier than one process of 2 threads
    launcher = [sys.executable]
    if processes > 1:
        launcher += ["-m", "torch.distributed.run", "--nproc_per_node", str(processes)]
    command = [*launcher, "-m", "spacy_elmo", "train", str(out), "--init-from", str(previous), "--continue-corpus"]
    for corpus in CORPORA:
        command += ["--corpus", str(prep / corpus)]
    command += ["--valid", str(SHARED / "data" / "wikitext-2" / "valid.txt"), *FLAGS]
    command += ["--eval-every", "1000", "--max-minutes", str(minutes), "--threads", str(threads), "--no-progress"]
    print(" ".join(command), flush=True)
    subprocess.run(command, check=True)
    target = HERE / f"stage-{number}"
    target.mkdir()
    for name in EXPORT:
        shutil.copyfile(out / name, target / name)
    from spacy_elmo.train.model_card import write_model_card

    write_model_card(target, title=f"spacy-elmo default v2, stage {number} (in training)")  # main makes it portable
    recorded = json.loads(MACHINES.read_text()) if MACHINES.is_file() else {}
    per_process = f"{processes} processes of {threads} thread(s)" if processes > 1 else f"{threads} thread(s)"
    recorded[str(number)] = f"{machine()}, {per_process}"
    MACHINES.write_text(json.dumps(recorded, indent=2) + "\n")
    return target


def portable(text: str) -> str:
    """``text`` with the training machine's absolute paths in commands replaced by ``PORTABLE_PATHS``' names."""
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
    renders the training machine's paths again.
    """
    from spacy_elmo.train.model_card import write_model_card

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
    parser.add_argument("--work", type=Path, default=Path("/tmp/default-v2"), help="where the run writes")
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
        print(f"stage kept in {train(args.prep, args.minutes, args.threads, args.processes, args.work)}")
    for folder in stages():
        make_card_portable(folder / "README.md")
    rewrite_readme()


if __name__ == "__main__":
    main()
