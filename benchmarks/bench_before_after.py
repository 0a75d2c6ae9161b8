"""Before/after speed of two checkouts of spacy-elmo, alternating in separate processes on the same machine.

    git worktree add /tmp/engine-before 710a841
    flock -x /tmp/cpu.lock .venv/bin/python benchmarks/bench_before_after.py --before /tmp/engine-before

Each round runs every (model, dtype) once per side, in a fresh process whose ``PYTHONPATH`` is that
side's source tree, the sides' order swapped every round so that both share the machine's load. A
process loads the model (caches off: every call computes the char CNN and the biLSTM), warms up, and
times batch 1 (one sentence per ``embed`` call) and batch 32 (``batch_size=32``) on real wikitext-2
sentences, best of three passes. Models: the bundled default biLM and the "original" architecture with
random weights (``bench.write_weight_sets``). Prints a markdown table of the best and the median over
rounds of each process's best time, and the after/before ratios; also checks that both sides give the
same activations. On a shared machine the best is the steadier figure (load only ever adds time).
``--ops`` (use with ``--threads 1``, so that every operator runs on the profiled thread) also counts the
torch operators each workload issues (``torch.profiler``) and its CPU time: figures that load hardly moves;
where the counts differ, each operator whose count changed is printed. A source tree of another branch for
``--before`` without a worktree: ``git archive BRANCH | tar -x -C /tmp/before``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from statistics import median

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

WORKER = r"""
import json, sys, time
import numpy as np
import torch
from spacy_elmo import load_bilm
spec = json.loads(sys.argv[1])
torch.set_num_threads(spec["threads"])
backend = load_bilm(spec["model"], dtype=spec["dtype"]).configure_cache(cache_mb=0, token_cache_size=0)
one, many = spec["batch1"], spec["batch32"]
backend.embed(one[:2]); backend.embed(many[:32], batch_size=32)  # warm up: packs, compiled loops, pools
def best(fn):
    times = []
    for _ in range(spec["passes"]):
        start = time.perf_counter(); fn(); times.append(time.perf_counter() - start)
    return min(times)
work = {"batch1": lambda: [backend.embed([s]) for s in one], "batch32": lambda: backend.embed(many, batch_size=32)}
result = {key: best(fn) for key, fn in work.items()}
if spec["ops"]:  # every torch operator the workloads issue (one thread: all of them on this one), and CPU time
    import collections
    from torch.profiler import ProfilerActivity, profile
    for key, fn in work.items():
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            fn()
        result[key + "_ops"] = dict(collections.Counter(e.name for e in prof.events()))
        cpu = []
        for _ in range(spec["passes"]):
            start = time.process_time(); fn(); cpu.append(time.process_time() - start)
        result[key + "_cpu"] = min(cpu)
np.savez(spec["activations"], *backend.embed(many[:8]))
print(json.dumps(result))
"""


def read_sentences(limit: int, min_len: int = 3, max_len: int = 60) -> list[list[str]]:
    """Real sentences of wikitext-2 (split at ' . '), in corpus order (as ``bench.py`` reads them)."""
    sys.path.insert(0, str(HERE))
    from bench import read_sentences as read

    return read(limit, min_len, max_len)


def run_side(source: Path, spec: dict) -> dict:
    env = dict(os.environ, PYTHONPATH=str(source))
    out = subprocess.run(
        [sys.executable, "-c", WORKER, json.dumps(spec)],
        env=env,
        cwd=source,  # "python -c" puts the working directory first on sys.path: it must be this side's tree
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{source}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="source tree of the old commit (a git worktree)")
    parser.add_argument("--after", default=str(ROOT), help="source tree of the new code (default: this one)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--passes", type=int, default=3, help="timed passes per process (its best counts)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dtypes", default="float32,int8,bfloat16")
    parser.add_argument("--models", default="default,original")
    parser.add_argument("--ops", action="store_true", help="also count torch operators and CPU time per workload")
    parser.add_argument("--out", help="also write the markdown table here")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from bench import write_weight_sets

    sentences = read_sentences(400)
    sizes = {"default": (32, 256), "original": (6, 64)}  # batch-1 sentences, batch-32 sentences
    sides = {"before": Path(args.before).resolve(), "after": Path(args.after).resolve()}
    rows, op_rows = [], []
    with tempfile.TemporaryDirectory() as tmp:
        models = {"default": "default"}
        if "original" in args.models:
            models["original"] = str(write_weight_sets(Path(tmp))["original"])
        for model in args.models.split(","):
            for dtype in args.dtypes.split(","):
                n1, n32 = sizes[model]
                times: dict[str, dict[str, list[float]]] = {s: {"batch1": [], "batch32": []} for s in sides}
                ops: dict[str, dict[str, dict]] = {s: {} for s in sides}
                for round_ in range(args.rounds):
                    order = list(sides) if round_ % 2 == 0 else list(sides)[::-1]
                    for side in order:
                        spec = {
                            "model": models[model],
                            "dtype": dtype,
                            "threads": args.threads,
                            "passes": args.passes,
                            "ops": args.ops,
                            "batch1": sentences[:n1],
                            "batch32": sentences[:n32],
                            "activations": f"{tmp}/{side}.npz",
                        }
                        result = run_side(sides[side], spec)
                        for key in ("batch1", "batch32"):
                            times[side][key].append(result[key])
                            if args.ops:
                                counts, cpu = result[key + "_ops"], result[key + "_cpu"]
                                ops[side][key] = (counts, min(cpu, ops[side].get(key, (None, cpu))[1]))
                import numpy as np

                before, after = np.load(f"{tmp}/before.npz"), np.load(f"{tmp}/after.npz")
                diff = max(float(np.abs(before[k] - after[k]).max()) for k in before.files)
                for key, n in (("batch1", n1), ("batch32", n32)):
                    b, a = min(times["before"][key]), min(times["after"][key])
                    bm, am = median(times["before"][key]), median(times["after"][key])
                    rows.append((model, dtype, key, n, b, a, bm, am, diff))
                    line = f"{model} {dtype} {key}: best {b:.3f}s -> {a:.3f}s, median {bm:.3f}s -> {am:.3f}s"
                    print(line, flush=True)
                    if args.ops:
                        (cb, tb), (ca, ta) = ops["before"][key], ops["after"][key]
                        same = "same" if cb == ca else f"DIFFERENT ({sum(cb.values())} vs {sum(ca.values())})"
                        op_rows.append((model, dtype, key, n, sum(cb.values()), same, tb, ta))
                        print(f"  operators: {same}; CPU time {tb:.3f}s -> {ta:.3f}s", flush=True)
                        for op in sorted(set(cb) | set(ca)):
                            if cb.get(op, 0) != ca.get(op, 0):
                                print(f"    {op}: {cb.get(op, 0)} -> {ca.get(op, 0)}", flush=True)
    lines = [
        "| model | dtype | workload | sentences | best before (s) | best after (s) | after/before "
        "| median before (s) | median after (s) | after/before | max abs diff |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for model, dtype, key, n, b, a, bm, am, diff in rows:
        lines.append(
            f"| {model} | {dtype} | {key} | {n} | {b:.3f} | {a:.3f} | {a / b:.2f} | {bm:.3f} | {am:.3f} "
            f"| {am / bm:.2f} | {diff:.1e} |"
        )
    if op_rows:
        lines += [
            "",
            "| model | dtype | workload | sentences | torch operators | kinds and counts after | CPU before (s) "
            "| CPU after (s) | after/before |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for model, dtype, key, n, count, same, tb, ta in op_rows:
            cells = [model, dtype, key, n, count, same, f"{tb:.3f}", f"{ta:.3f}", f"{ta / tb:.2f}"]
            lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        Path(args.out).write_text(table + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
