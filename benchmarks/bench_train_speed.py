"""Training speed: ``spacy-elmo train`` of a baseline commit vs this checkout, alternating, words/s from metrics.json.

    nice .venv/bin/python benchmarks/bench_train_speed.py [--baseline ac1d3f8] [--steps 20] [--rounds 3]

Extracts the baseline commit (``git archive``, into a temporary directory) and runs
``python -m spacy_elmo train OUT --train TEXT --max-steps N --no-progress`` from each tree
(``PYTHONPATH`` set to it) with otherwise default flags: the default (bundled) architecture,
4,096-token batches, ``--precision auto`` and ``--processes auto`` where the code has them
(``--processes N`` and ``--precision P`` here pass those to the new tree only: with ``--baseline HEAD``
they compare a choice with the default's on this CPU; ``--baseline-precision P`` passes one to the
baseline). The two alternate, the order flipping every round, so that a machine shared with other
work loads both alike. Each run's speed is its own ``metrics.json``: ``words_seen / train_seconds``
(the optimizer steps' time; reading and batching the text are not in it). Prints every run, then
the best and the median of new / baseline, the CPU and the precision each tree chose. Cap the CPU
(``ONEDNN_MAX_CPU_ISA=AVX2`` and the like) in the environment to measure another ISA level.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import SHARED, cpu_description

ROOT = Path(__file__).resolve().parent.parent


def extract(commit: str, into: Path) -> Path:
    """The tree of ``commit`` in ``into`` (``git archive``: no worktree bookkeeping left behind)."""
    archive = into / "tree.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "-o", str(archive), commit], check=True)
    tree = into / commit
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    return tree


def train_once(
    tree: Path,
    text: Path,
    steps: int,
    out: Path,
    threads: int | None,
    processes: str | None = None,
    precision: str | None = None,
) -> dict[str, object]:
    """One training run from ``tree``; its words/s, steps and the precision and processes lines it printed (if any)."""
    command = [sys.executable, "-m", "spacy_elmo", "train", str(out), "--train", str(text), "--max-steps", str(steps)]
    command += ["--no-progress"] + (["--threads", str(threads)] if threads else [])
    command += ["--processes", processes] if processes else []
    command += ["--precision", precision] if precision else []
    env = {**os.environ, "PYTHONPATH": str(tree)}
    result = subprocess.run(command, env=env, capture_output=True, text=True, cwd=tree)
    if result.returncode != 0:
        raise SystemExit(f"{shlex.join(command)} in {tree} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    precision = next((line for line in result.stdout.splitlines() if line.startswith("training precision")), "")
    processes_line = next((line for line in result.stdout.splitlines() if line.startswith("training processes")), "")
    return {
        "words_per_s": metrics["words_seen"] / metrics["train_seconds"],
        "steps": metrics["steps"],
        "words": metrics["words_seen"],
        "precision": precision or "float32 (no --precision option)",
        "processes": processes_line or "1 process",
        "load": os.getloadavg()[0],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="ac1d3f8", help="the commit to compare with")
    parser.add_argument("--text", type=Path, default=SHARED / "data" / "wikitext-2" / "train.txt")
    parser.add_argument("--steps", type=int, default=20, help="--max-steps of every run")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each tree, alternating")
    parser.add_argument("--threads", type=int, default=None, help="--threads of every run (default: torch's)")
    parser.add_argument("--processes", default=None, help="--processes of the new tree's runs (default: its auto)")
    parser.add_argument("--precision", default=None, help="--precision of the new tree's runs (default: its auto)")
    parser.add_argument(
        "--baseline-precision", default=None, help="--precision of the baseline's runs (default: its auto)"
    )
    args = parser.parse_args(argv)
    print(f"date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
    print(f"CPU: {cpu_description()}")
    print(f"command: {shlex.join([Path(sys.executable).name, *sys.argv])}")
    runs: dict[str, list[dict[str, object]]] = {"baseline": [], "new": []}
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"baseline": extract(args.baseline, Path(tmp)), "new": ROOT}
        for round_ in range(args.rounds):
            order = ["baseline", "new"] if round_ % 2 == 0 else ["new", "baseline"]
            for name in order:
                out = Path(tmp) / f"{name}-{round_}"
                new = name == "new"
                run = train_once(
                    trees[name],
                    args.text,
                    args.steps,
                    out,
                    args.threads,
                    args.processes if new else None,
                    args.precision if new else args.baseline_precision,
                )
                runs[name].append(run)
                print(
                    f"round {round_ + 1} {name:8s}: {run['words_per_s']:8.0f} words/s "
                    f"({run['steps']} steps, {run['words']} words, load {run['load']:.1f}); {run['precision']}; "
                    f"{run['processes']}",
                    flush=True,
                )
    speeds = {name: [float(r["words_per_s"]) for r in rs] for name, rs in runs.items()}  # type: ignore[arg-type]
    best = max(speeds["new"]) / max(speeds["baseline"])
    median = statistics.median(speeds["new"]) / statistics.median(speeds["baseline"])
    pairs = [n / b for n, b in zip(speeds["new"], speeds["baseline"])]
    for name in ("baseline", "new"):
        label = f"baseline {args.baseline}" if name == "baseline" else "new"
        print(f"{label}: best {max(speeds[name]):.0f}, median {statistics.median(speeds[name]):.0f} words/s")
    print(f"new / baseline: best {best:.2f}x, median {median:.2f}x, per round {' '.join(f'{p:.2f}x' for p in pairs)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
