"""Precision comparison in one run: float32 vs bfloat16 vs int8 (speed, activation error, downstream accuracy).

    flock /tmp/bench.lock .venv/bin/python benchmarks/bench_precision.py --out /tmp/precision.md

1. Speed: the "small" and "original" architectures with random weights written at benchmark time
   (as ``bench.py`` does), ``--threads`` threads, real wikitext-2 sentences; tokens/s at batch 1
   (~20-token sentences) and batch 32, caches off and token vectors cold on every pass. The
   precisions' passes alternate (f32, bf16, int8, f32, ...) so they share the machine's load; the
   best pass of each is reported, and the ratio to float32 of the same round trip.
2. Error vs float32 on 64 sentences, every layer: the max abs difference, and the max difference
   over that layer's activation scale (its largest |float32| value).
3. Downstream, on the bundled default model: TREC-6 and SST-5 test accuracy of
   ``ElmoVectorizer(dtype=...)`` + StandardScaler + LogisticRegression (examples/sklearn_classify.py's setup),
   and paired with float32's predictions on the same test items: how many changed, how many of those
   became right or wrong, and the exact McNemar p-value (is the difference more than chance?).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import bench

DTYPES = ["float32", "bfloat16", "int8"]


def speed(
    backends: dict[str, object], calls: list[list[list[str]]], batch_size: int, repeats: int, min_seconds: float
) -> dict[str, float]:
    """Best seconds per precision over alternating passes (at least ``repeats``, more until each side timed
    ``min_seconds``)."""
    best = {d: float("inf") for d in backends}
    spent = {d: 0.0 for d in backends}
    for backend in backends.values():  # warm-up: packs made, pages touched
        backend.embed(calls[0], batch_size=batch_size)
    passes = 0
    while True:
        for name, backend in backends.items():
            backend.clear_cache()
            start = time.perf_counter()
            for call in calls:
                backend.embed(call, batch_size=batch_size)
            seconds = time.perf_counter() - start
            best[name] = min(best[name], seconds)
            spent[name] += seconds
        passes += 1
        if passes >= bench.MAX_PASSES or (passes >= repeats and min(spent.values()) >= min_seconds):
            return best


def kernel_ceiling(repeats: int = 50) -> list[str]:
    """The products' own speed limit: one "original" LSTM step's recurrent (512 -> 16384) and projection (4096 -> 512)
    products, float32 (``torch.mm``, MKL) vs int8 (this CPU's chosen kernel, :mod:`spacy_elmo.bilm.cpu_support`), on
    one thread, for 1 and 32 rows. The whole biLM cannot gain more from int8 than these ratios."""
    from spacy_elmo.bilm import cpu_support
    from spacy_elmo.bilm.engine import int8

    kernels = cpu_support.int8_kernels()
    rows_out = []
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for inner, outer in ((512, 16384), (4096, 512)):
            weight = torch.randn(outer, inner) * 0.02
            pack = int8.make_pack(weight, step=True)  # the LSTM's step weights (kernels.few_rows)
            for rows in (1, 32):
                x = torch.randn(rows, inner).tanh()
                timings = {}
                for name, run in (
                    ("float32", lambda x=x, weight=weight: torch.mm(x, weight.t())),
                    ("int8", lambda x=x, pack=pack: pack.multiply(x, None)),
                ):
                    run()
                    start = time.perf_counter()
                    for _ in range(repeats):
                        run()
                    timings[name] = (time.perf_counter() - start) / repeats
                kernel = kernels.few_rows
                rows_out.append(
                    f"| {inner} -> {outer} | {rows} | {timings['float32'] * 1e6:,.0f} | {timings['int8'] * 1e6:,.0f} "
                    f"({kernel.engine}{', 7-bit activations' if kernel.reduce_range else ''}) "
                    f"| **{timings['float32'] / timings['int8']:.2f}x** |"
                )
    finally:
        torch.set_num_threads(saved)
    return rows_out


def errors(low: list[np.ndarray], exact: list[np.ndarray]) -> dict[str, list[float]]:
    worst = np.max([np.abs(a - b).max(axis=(1, 2)) for a, b in zip(low, exact)], axis=0)
    scale = np.max([np.abs(b).max(axis=(1, 2)) for b in exact], axis=0)
    return {"max_abs": worst.tolist(), "relative": (worst / scale).tolist(), "scale": scale.tolist()}


def downstream(dataset: str, dtype: str, max_train, data_dir: Path, folds: int = 0) -> dict[str, Any]:
    """Test accuracy of ``ElmoVectorizer(dtype=...)`` + StandardScaler + LogisticRegression trained on the train split;
    with ``folds``, also the accuracy of ``folds``-fold cross-validated predictions over train + test together
    (every labelled item predicted once, by a model that did not see it: a larger, less noisy sample)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_predict
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn_classify import load_dataset, subsample

    from spacy_elmo import ElmoVectorizer, load_bilm

    (train_x, train_y), (test_x, test_y) = load_dataset(dataset, data_dir)
    train_x, train_y = subsample(train_x, train_y, max_train)
    load_bilm("default", dtype=dtype).clear_cache()
    start = time.perf_counter()
    vectorizer = ElmoVectorizer(model="default", tokenizer=str.split, dtype=dtype)
    train_rows, test_rows = vectorizer.transform(train_x), vectorizer.transform(test_x)

    def classifier():
        return make_pipeline(StandardScaler(), LogisticRegression(max_iter=3000))

    predictions = classifier().fit(train_rows, train_y).predict(test_rows)
    result: dict[str, Any] = {
        "accuracy": float(np.mean(predictions == np.asarray(test_y))),
        "train": len(train_x),
        "test": len(test_x),
        "predictions": predictions,
        "truth": np.asarray(test_y),
    }
    if folds:
        rows, labels = np.vstack([train_rows, test_rows]), np.asarray(list(train_y) + list(test_y))
        splits = StratifiedKFold(folds, shuffle=True, random_state=0)
        cv = cross_val_predict(classifier(), rows, labels, cv=splits)
        result["cv"] = {"accuracy": float(np.mean(cv == labels)), "predictions": cv, "truth": labels, "n": len(labels)}
    result["seconds"] = time.perf_counter() - start
    return result


def paired(low: dict, exact: dict) -> str:
    """How the low-precision classifier's test predictions differ from float32's: the changed predictions, those that
    became right / wrong, and the exact McNemar p-value (two-sided binomial test on those two counts)."""
    from scipy.stats import binomtest

    changed = low["predictions"] != exact["predictions"]
    fixed = int(np.sum(changed & (low["predictions"] == low["truth"])))
    broken = int(np.sum(changed & (exact["predictions"] == exact["truth"])))
    p = binomtest(fixed, fixed + broken).pvalue if fixed + broken else 1.0
    return f"{int(changed.sum())} changed: {fixed} right / {broken} wrong, McNemar p = {p:.2f}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--min-seconds", type=float, default=2.0)
    parser.add_argument("--sets", default="small,original")
    parser.add_argument(
        "--dtypes",
        default=None,
        help="comma-separated, float32 first (default: float32, bfloat16 where this CPU has native bf16 kernels, int8)",
    )
    parser.add_argument("--datasets", default="trec,sst5")
    parser.add_argument("--max-train", type=int, default=None, help="a seeded subset of the training sentences")
    parser.add_argument(
        "--folds", type=int, default=5, help="also K-fold cross-validated accuracy over train + test (0: off)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke test: few sentences, 1 pass, 500 training sentences"
    )
    parser.add_argument("--out", help="also write the markdown report here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    from spacy_elmo import load_bilm
    from spacy_elmo.bilm import cpu_support

    global DTYPES
    DTYPES = (
        args.dtypes.split(",")
        if args.dtypes
        else ["float32"] + (["bfloat16"] if cpu_support.bf16_native() else []) + ["int8"]
    )

    cpu = bench.cpu_description()
    print(f"CPU: {cpu}", flush=True)
    print(f"precision support: {cpu_support.summary()}", flush=True)
    started, load_start = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), os.getloadavg()[0]
    pool = bench.read_sentences(25000)
    near20 = [s for s in pool if 18 <= len(s) <= 22]
    n1, n32 = (2, 32) if args.quick else (6, 64)
    workloads = {
        "batch 1": ([[s] for s in near20[:n1]], 1),
        "batch 32": ([pool[1000 + i : 1032 + i] for i in range(0, n32, 32)], 32),
    }
    check = pool[:64]
    rows, error_rows = [], []
    with tempfile.TemporaryDirectory(prefix="elmo-precision-") as tmp:
        sets = bench.write_weight_sets(Path(tmp))
        for name in args.sets.split(","):
            options, weights = bench.model_files(sets[name])
            backends = {
                d: load_bilm(options=options, weights=weights, dtype=d, cache_mb=0, cache_dir=False) for d in DTYPES
            }
            exact = backends["float32"].embed(check, batch_size=32)
            for d in DTYPES[1:]:
                backends[d].clear_cache()
                error_rows.append((name, d, errors(backends[d].embed(check, batch_size=32), exact)))
            for label, (calls, batch_size) in workloads.items():
                tokens = sum(len(s) for call in calls for s in call)
                best = speed(
                    backends,
                    calls,
                    batch_size,
                    1 if args.quick else args.repeats,
                    0 if args.quick else args.min_seconds,
                )
                rows.append((name, label, tokens, {d: tokens / best[d] for d in DTYPES}))
                print(
                    f"[{name}] {label}: " + ", ".join(f"{d} {tokens / best[d]:.0f} tok/s" for d in DTYPES),
                    file=sys.stderr,
                    flush=True,
                )
    accuracy: dict[str, dict[str, dict[str, float]]] = {}
    max_train = 500 if args.quick else args.max_train
    data_dir = bench.SHARED / "data"
    for dataset in filter(None, args.datasets.split(",")):
        accuracy[dataset] = {}
        for d in DTYPES:
            accuracy[dataset][d] = downstream(dataset, d, max_train, data_dir, 0 if args.quick else args.folds)
            print(f"[{dataset}] {d}: accuracy {accuracy[dataset][d]['accuracy']:.4f}", file=sys.stderr, flush=True)
    lines = [
        f"CPU: {cpu}",
        "",
        f"Precision support: {cpu_support.summary()}",
        "",
        f"{args.threads} threads; started {started}, load average {load_start:.2f} at start, {os.getloadavg()[0]:.2f} "
        "at end.",
        "",
        "| weights | workload | tokens | float32 tok/s | "
        + " | ".join(f"{d} tok/s (x f32)" for d in DTYPES[1:])
        + " |",
        "|---|---|---|---|" + "---|" * (len(DTYPES) - 1),
    ]
    for name, label, tokens, tps in rows:
        f32 = tps["float32"]
        lines.append(
            f"| {name} | {label} | {tokens} | {f32:,.0f} | "
            + " | ".join(f"{tps[d]:,.0f} (**{tps[d] / f32:.2f}x**)" for d in DTYPES[1:])
            + " |"
        )
    lines += [
        "",
        f"Error vs float32 ({len(check)} sentences, batch 32), per layer 0 / 1 / 2:",
        "",
        "| weights | dtype | max abs | max abs / layer's activation scale |",
        "|---|---|---|---|",
    ]
    for name, d, e in error_rows:
        lines.append(
            f"| {name} | {d} | {' / '.join(f'{v:.2e}' for v in e['max_abs'])} | "
            f"{' / '.join(f'{v:.2e}' for v in e['relative'])} |"
        )
    lines += [
        "",
        "Downstream (bundled default model, ElmoVectorizer + StandardScaler + LogisticRegression, test accuracy):",
        "",
        "| dataset | train / test | " + " | ".join(DTYPES) + " |",
        "|---|---|" + "---|" * len(DTYPES),
    ]
    for dataset, by_dtype in accuracy.items():
        first = by_dtype["float32"]
        cells = [
            f"{100 * by_dtype[d]['accuracy']:.1f}"
            + (
                ""
                if d == "float32"
                else f" ({100 * (by_dtype[d]['accuracy'] - first['accuracy']):+.1f}; {paired(by_dtype[d], first)})"
            )
            for d in DTYPES
        ]
        lines.append(f"| {dataset} | {first['train']} / {first['test']} | " + " | ".join(cells) + " |")
        if "cv" in first:
            cv = {d: by_dtype[d]["cv"] for d in DTYPES}
            cells = [
                f"{100 * cv[d]['accuracy']:.1f}"
                + (
                    ""
                    if d == "float32"
                    else f" ({100 * (cv[d]['accuracy'] - cv['float32']['accuracy']):+.1f}; "
                    f"{paired(cv[d], cv['float32'])})"
                )
                for d in DTYPES
            ]
            lines.append(
                f"| {dataset}, {args.folds}-fold CV over train + test | {cv['float32']['n']} items | "
                + " | ".join(cells)
                + " |"
            )
    lines += [
        "",
        "The products' own limit (one LSTM step's products on one thread, microseconds per call):",
        "",
        "| product | rows | float32 (MKL) | int8 (kernel) | int8 x f32 |",
        "|---|---|---|---|---|",
    ]
    lines += kernel_ceiling()
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        Path(args.out).write_text(report, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
