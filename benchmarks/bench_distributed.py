"""1 vs 2 training processes (torchrun, DistributedDataParallel on gloo): throughput and validation perplexity.

    python benchmarks/bench_distributed.py [--steps 150] [--lines 6000]

Trains the tiny preset on the first ``--lines`` lines of WikiText-2 train for ``--steps`` steps
with the same global batch (``--token-budget``, split across the ranks under torchrun) and seed,
validating on the first ``--valid-lines`` lines of WikiText-2 valid, in three configurations:
one process with all cores as threads, one process with one thread, and ``torchrun`` with 2
processes of cores/2 threads each. Prints the figures side by side: training tokens/s (the run's
own ``tokens_per_s``: words of the global batches / rank 0's step time), wall-clock tokens/s of
the whole command (start-up and validation included), and the validation perplexity, with the
2-process perplexity's difference from the 1-process run (the bar: within 5%).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import SHARED, cpu_description


def run(label: str, command: list[str], out: Path, env: dict[str, str]) -> dict[str, object]:
    load = os.getloadavg()[0]
    started = time.time()
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.time() - started
    if result.returncode != 0:
        raise SystemExit(f"{label} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    last = metrics["evaluations"][-1] if metrics["evaluations"] else metrics["epochs"][-1]
    return {
        "label": label,
        "steps": metrics["steps"],
        "words": metrics["words_seen"],
        "train_tok_s": last["tokens_per_s"],
        "wall_s": wall,
        "wall_tok_s": metrics["words_seen"] / wall,
        "valid_ppl": last["valid_ppl_mean"],
        "load": load,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--lines", type=int, default=6000)
    parser.add_argument("--valid-lines", type=int, default=600)
    parser.add_argument("--token-budget", type=int, default=2048)
    args = parser.parse_args(argv)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    print(f"CPU: {cpu_description()}")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    wiki = SHARED / "data" / "wikitext-2"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        train, valid = root / "train.txt", root / "valid.txt"
        train.write_text("\n".join((wiki / "train.txt").read_text(encoding="utf-8").splitlines()[: args.lines]) + "\n")
        valid.write_text(
            "\n".join((wiki / "valid.txt").read_text(encoding="utf-8").splitlines()[: args.valid_lines]) + "\n"
        )
        common = [
            "--train",
            str(train),
            "--valid",
            str(valid),
            "--arch",
            "tiny",
            "--max-steps",
            str(args.steps),
            "--token-budget",
            str(args.token_budget),
            "--seed",
            "0",
            "--no-progress",
            "--checkpoint-every",
            "0",
        ]
        env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "OMP_NUM_THREADS")}
        python = [sys.executable]
        runs = [
            (
                f"1 process x {cores} threads",
                [*python, "-m", "spacy_elmo", "train", str(root / "p1"), *common, "--threads", str(cores)],
                root / "p1",
            ),
            (
                "1 process x 1 thread",
                [*python, "-m", "spacy_elmo", "train", str(root / "p1t1"), *common, "--threads", "1"],
                root / "p1t1",
            ),
            (
                f"2 processes x {max(1, cores // 2)} thread{'' if cores // 2 == 1 else 's'}",
                [
                    *python,
                    "-m",
                    "torch.distributed.run",
                    "--standalone",
                    "--nproc_per_node",
                    "2",
                    "-m",
                    "spacy_elmo",
                    "train",
                    str(root / "p2"),
                    *common,
                ],
                root / "p2",
            ),
        ]
        results = [run(label, command, out, env) for label, command, out in runs]
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    base = results[0]
    print(
        f"\ntiny preset, {args.lines} WikiText-2 train lines, {args.steps} steps, global batch {args.token_budget} "
        "padded tokens, "
        f"validation on {args.valid_lines} valid lines\n"
    )
    print(
        "| run | steps | words | train tokens/s | wall s | wall tokens/s | valid ppl (mean) | ppl vs 1 process | load "
        "avg at start |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        diff = 100.0 * (r["valid_ppl"] - base["valid_ppl"]) / base["valid_ppl"]
        print(
            f"| {r['label']} | {r['steps']} | {r['words']} | {r['train_tok_s']:.0f} | {r['wall_s']:.1f} | "
            f"{r['wall_tok_s']:.0f} | {r['valid_ppl']:.2f} | {diff:+.2f}% | {r['load']:.2f} |"
        )
    two = results[-1]
    within = abs(two["valid_ppl"] - base["valid_ppl"]) <= 0.05 * base["valid_ppl"]
    print(
        f"\n2-process perplexity within 5% of 1 process: {'yes' if within else 'NO'}; "
        f"training throughput 2 processes / 1 process x {cores} threads: "
        f"{two['train_tok_s'] / base['train_tok_s']:.2f}x, "
        f"/ 1 process x 1 thread: {two['train_tok_s'] / results[1]['train_tok_s']:.2f}x"
    )
    return 0 if within else 1


if __name__ == "__main__":
    sys.exit(main())
