"""Low precision against float32: one benchmark, four modes (``python benchmarks/bench_precision.py MODE --help``).

    python benchmarks/bench_precision.py compare --out precision.md   # speed, error, downstream accuracy
    python benchmarks/bench_precision.py errors                       # the figures of tests/bilm/test_precision.py
    python benchmarks/bench_precision.py trained --markdown           # error on the bundled trained model
    python benchmarks/bench_precision.py per-product                  # which LSTM product's rounding moves it

Every error is one measure: per layer, max |low - float32| over that layer's activation scale (its largest
|float32| value); where one number is given, the worst layer's. Prefix a command with
``ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 MKL_CBWR=COMPATIBLE ONEDNN_MAX_CPU_ISA=AVX2
FBGEMM_ENABLE_INSTRUCTIONS=AVX2`` to measure AVX2's kernels (CI's second pass).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import bench

WIKITEXT = bench.SHARED / "data" / "wikitext-2"
BOUND = {"float32": 1e-4, "bfloat16": 2.5e-2, "float16": 2e-3, "int8": 4e-2}  # tests/bilm/test_precision.py


# ---- shared by every mode: the error measure and the float32 reference path ----


def layer_errors(low: Sequence[np.ndarray], exact: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per layer, over every sentence given (arrays of layers x tokens x width): the max |low - exact| and the
    layer's activation scale (its max |exact|)."""
    worst = np.max([np.abs(a - b).max(axis=(1, 2)) for a, b in zip(low, exact)], axis=0)
    scale = np.max([np.abs(b).max(axis=(1, 2)) for b in exact], axis=0)
    return worst, scale


def relative_errors(low: Sequence[np.ndarray], exact: Sequence[np.ndarray]) -> np.ndarray:
    """Per layer: the max |low - exact| over the layer's activation scale."""
    worst, scale = layer_errors(low, exact)
    return worst / np.maximum(scale, np.finfo(np.float32).tiny)


def reference_model(name: str) -> torch.nn.Module:
    """The model's float32 *reference* path: ``BiLM.forward`` with gradients on (the autograd path, which BiLM
    chooses when a parameter needs a gradient)."""
    from spacy_elmo.bilm.weights import load_model
    from spacy_elmo.sources.model_paths import resolve_model_files

    return load_model(*resolve_model_files(name)).train(False).requires_grad_(True)


def reference_layers(model: torch.nn.Module, sentences: list[list[str]], batch: int = 32) -> list[np.ndarray]:
    """float32 activations by the reference path, ``batch`` sentences of similar length at a time (its packed
    sequences make a sentence's outputs independent of its neighbours, to float32 rounding)."""
    from spacy_elmo.bilm.chars import batch_to_char_ids

    out: list[np.ndarray] = [np.empty(0)] * len(sentences)
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    with torch.enable_grad():
        for start in range(0, len(order), batch):
            rows = order[start : start + batch]
            layers, _, _ = model(torch.as_tensor(batch_to_char_ids([sentences[i] for i in rows])))
            for k, i in enumerate(rows):
                out[i] = layers[:, k, : len(sentences[i])].detach().numpy()
    return out


def default_dtypes() -> list[str]:
    """float32, bfloat16 where this CPU has native bf16 kernels, int8."""
    from spacy_elmo.bilm import cpu_support

    return ["float32"] + (["bfloat16"] if cpu_support.bf16_native() else []) + ["int8"]


# ---- compare: speed, error and downstream accuracy in one run ----


def speed(
    backends: dict[str, Any], calls: list[list[list[str]]], batch_size: int, repeats: int, min_seconds: float
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
    products, float32 (``torch.mm``, MKL) vs int8 (this CPU's chosen kernel, :mod:`spacy_elmo.bilm.engine.int8`), on
    one thread, for 1 and 32 rows. The whole biLM cannot gain more from int8 than these ratios."""
    from spacy_elmo.bilm.engine import int8

    kernels = int8.int8_kernels()
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


def run_compare(args: argparse.Namespace) -> int:
    """Speed, error and downstream accuracy of each precision against float32, in one run (a markdown report).

    1. Speed: the "small" and "original" architectures with random weights written at benchmark time (as
       ``bench.py`` does), ``--threads`` threads, real wikitext-2 sentences; tokens/s at batch 1 (~20-token
       sentences) and batch 32, caches off and token vectors cold on every pass. The precisions' passes alternate
       (f32, bf16, int8, f32, ...) so they share the machine's load; the best pass of each is reported, and the
       ratio to float32 of the same round trip.
    2. Error vs float32 on 64 sentences, every layer: the max abs difference, and the max difference over that
       layer's activation scale.
    3. Downstream, on the bundled default model: TREC-6 and SST-5 test accuracy of ``ElmoVectorizer(dtype=...)``
       + StandardScaler + LogisticRegression (examples/sklearn_classify.py's setup), and paired with float32's
       predictions on the same test items: how many changed, how many of those became right or wrong, and the
       exact McNemar p-value (is the difference more than chance?).
    4. The products' own limit: one LSTM step's products on one thread, float32 (MKL) vs int8.
    """
    torch.set_num_threads(args.threads)
    from spacy_elmo import load_bilm
    from spacy_elmo.bilm import engine

    dtypes = args.dtypes.split(",") if args.dtypes else default_dtypes()
    cpu = bench.cpu_description()
    print(f"CPU: {cpu}", flush=True)
    print(f"precision support: {engine.summary()}", flush=True)
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
                d: load_bilm(options=options, weights=weights, dtype=d, cache_mb=0, cache_dir=False) for d in dtypes
            }
            exact = backends["float32"].embed(check, batch_size=32)
            for d in dtypes[1:]:
                backends[d].clear_cache()
                worst, scale = layer_errors(backends[d].embed(check, batch_size=32), exact)
                error_rows.append((name, d, worst, worst / scale))
            for label, (calls, batch_size) in workloads.items():
                tokens = sum(len(s) for call in calls for s in call)
                best = speed(
                    backends,
                    calls,
                    batch_size,
                    1 if args.quick else args.repeats,
                    0 if args.quick else args.min_seconds,
                )
                rows.append((name, label, tokens, {d: tokens / best[d] for d in dtypes}))
                print(
                    f"[{name}] {label}: " + ", ".join(f"{d} {tokens / best[d]:.0f} tok/s" for d in dtypes),
                    file=sys.stderr,
                    flush=True,
                )
    accuracy: dict[str, dict[str, dict[str, Any]]] = {}
    max_train = 500 if args.quick else args.max_train
    for dataset in filter(None, args.datasets.split(",")):
        accuracy[dataset] = {}
        for d in dtypes:
            accuracy[dataset][d] = downstream(
                dataset, d, max_train, bench.SHARED / "data", 0 if args.quick else args.folds
            )
            print(f"[{dataset}] {d}: accuracy {accuracy[dataset][d]['accuracy']:.4f}", file=sys.stderr, flush=True)
    lines = [
        f"CPU: {cpu}",
        "",
        f"Precision support: {engine.summary()}",
        "",
        f"{args.threads} threads; started {started}, load average {load_start:.2f} at start, {os.getloadavg()[0]:.2f} "
        "at end.",
        "",
        "| weights | workload | tokens | float32 tok/s | "
        + " | ".join(f"{d} tok/s (x f32)" for d in dtypes[1:])
        + " |",
        "|---|---|---|---|" + "---|" * (len(dtypes) - 1),
    ]
    for name, label, tokens, tps in rows:
        f32 = tps["float32"]
        lines.append(
            f"| {name} | {label} | {tokens} | {f32:,.0f} | "
            + " | ".join(f"{tps[d]:,.0f} (**{tps[d] / f32:.2f}x**)" for d in dtypes[1:])
            + " |"
        )
    lines += [
        "",
        f"Error vs float32 ({len(check)} sentences, batch 32), per layer 0 / 1 / 2:",
        "",
        "| weights | dtype | max abs | max abs / layer's activation scale |",
        "|---|---|---|---|",
    ]
    for name, d, worst, relative in error_rows:
        lines.append(
            f"| {name} | {d} | {' / '.join(f'{v:.2e}' for v in worst)} | {' / '.join(f'{v:.2e}' for v in relative)} |"
        )
    lines += [
        "",
        "Downstream (bundled default model, ElmoVectorizer + StandardScaler + LogisticRegression, test accuracy):",
        "",
        "| dataset | train / test | " + " | ".join(dtypes) + " |",
        "|---|---|" + "---|" * len(dtypes),
    ]
    for dataset, by_dtype in accuracy.items():
        first = by_dtype["float32"]
        lines.append(
            f"| {dataset} | {first['train']} / {first['test']} | " + " | ".join(accuracy_cells(by_dtype)) + " |"
        )
        if "cv" in first:
            cv = {d: by_dtype[d]["cv"] for d in dtypes}
            lines.append(
                f"| {dataset}, {args.folds}-fold CV over train + test | {cv['float32']['n']} items | "
                + " | ".join(accuracy_cells(cv))
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
        args.out.write_text(report, encoding="utf-8")
    return 0


def accuracy_cells(by_dtype: dict[str, dict[str, Any]]) -> list[str]:
    """Each precision's accuracy; beside each low precision, its difference to float32 and :func:`paired`."""
    exact = by_dtype["float32"]
    return [
        f"{100 * result['accuracy']:.1f}"
        + (
            ""
            if d == "float32"
            else f" ({100 * (result['accuracy'] - exact['accuracy']):+.1f}; {paired(result, exact)})"
        )
        for d, result in by_dtype.items()
    ]


# ---- errors: the figures tests/bilm/test_precision.py holds each precision to ----


def random_small_options(fixture: Path):
    """The tests' random small architecture: the fixture's, with a smaller char CNN."""
    from dataclasses import replace

    from spacy_elmo.bilm.weights import read_options

    return replace(read_options(fixture / "options.json"), filters=((1, 4), (2, 8), (3, 8)), n_highway=1)


def random_sentences(seed: int, n: int, longest: int) -> list[list[str]]:
    """``n`` sentences of 1 to ``longest`` words (one of exactly ``longest``) from a vocabulary with long, accented
    and numeric tokens."""
    rng = random.Random(seed)
    vocab = ["the", "of", "bank", "river", "approved", ",", ".", "Zürich", "x" * 60, "1965"]
    lengths = [rng.randint(1, longest) for _ in range(n)]
    lengths[rng.randrange(n)] = longest
    return [[rng.choice(vocab) for _ in range(k)] for k in lengths]


def run_errors(args: argparse.Namespace) -> int:
    """Worst-layer error of each low precision vs float32 on this CPU's kernels (the figures of
    tests/bilm/test_precision.py), as one JSON line: the fixture's 30 sentences (int8, bfloat16, float16), random small
    models (3 seeds, 12 sentences each; int8, bfloat16), and the "original" architecture (random weights at bilm-tf's
    init scale, 32 wikitext-2 test sentences of 6-40 tokens) in int8, per layer."""
    from spacy_elmo import load_bilm
    from spacy_elmo.bilm import BiLM, cpu_support
    from spacy_elmo.bilm.weights import save_model

    out: dict[str, Any] = {"isa": cpu_support.isa_flags()}
    with tempfile.TemporaryDirectory(prefix="elmo-precision-") as tmp:
        sets = bench.write_weight_sets(Path(tmp), archs=("original",))
        fixture = sets["fixture"]
        groups = json.loads((fixture / "sentences.json").read_text(encoding="utf-8"))
        sentences = [s.split() for group in groups for s in group]
        exact = load_bilm(fixture).embed(sentences)
        for d in ["int8", "bfloat16", "float16"]:
            out["fixture " + d] = relative_errors(load_bilm(fixture, dtype=d).embed(sentences), exact).max()
        small = []
        for seed in range(3):
            torch.manual_seed(seed)
            small.append(
                (
                    save_model(BiLM(random_small_options(fixture)), Path(tmp) / f"m{seed}"),
                    random_sentences(seed, 12, 20),
                )
            )
        for d in ["int8", "bfloat16"]:
            out["random " + d] = max(
                relative_errors(load_bilm(folder, dtype=d).embed(s), load_bilm(folder).embed(s)).max()
                for folder, s in small
            )
        test_lines = (WIKITEXT / "test.txt").read_text(encoding="utf-8").splitlines()
        lines = [line.split() for line in test_lines if 5 < len(line.split()) <= 40][:32]
        exact = load_bilm(sets["original"]).embed(lines)
        low = load_bilm(sets["original"], dtype="int8").embed(lines)
        out["original int8 per layer"] = relative_errors(low, exact).round(4).tolist()
    print(json.dumps({k: (round(float(v), 4) if isinstance(v, (float, np.floating)) else v) for k, v in out.items()}))
    return 0


# ---- trained: each engine's error on the bundled trained model ----


def degenerate_inputs() -> dict[str, list[str]]:
    """The repetitive and degenerate sentences measured (each one sentence)."""
    phrase = ["the", "cat", "sat"]
    return {
        '50 "."': ["."] * 50,
        '500 "."': ["."] * 500,
        '2000 "."': ["."] * 2000,
        '200 "the"': ["the"] * 200,
        "10 x 3 words": phrase * 10,
        "30 x 3 words": phrase * 30,
        "80 x 3 words": phrase * 80,
        "single characters": list("abcdefghijklmnopqrstuvwxyz0123456789.,;!?"),
        "48-byte tokens": ["x" * 48, "é" * 24, "€" * 16, "y" * 48, "z" * 48] * 4,
    }


def wikitext_sentences(path: Path, limit: int, longest: int = 128) -> list[list[str]]:
    """Up to ``limit`` sentences of WikiText-2 (paragraphs split after each "."), 3+ tokens, cut to ``longest``."""
    sentences: list[list[str]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        tokens = line.split()
        if not tokens or tokens[0] == "=":
            continue
        current: list[str] = []
        for token in tokens:
            current.append(token)
            if token == ".":
                if len(current) >= 3:
                    sentences.append(current[:longest])
                current = []
        if len(current) >= 3:
            sentences.append(current[:longest])
        if len(sentences) >= limit:
            break
    return sentences[:limit]


def sig(value: float) -> float:
    """``value`` to 3 significant digits (float32's errors are ~1e-6, low precision's ~1e-2)."""
    return float(f"{value:.3g}")


def run_trained(args: argparse.Namespace) -> int:
    """Each engine's error on the bundled TRAINED model, on ordinary text and on repetitive / degenerate input.

    The ``errors`` mode measures the small fixture and random weights; this one measures what a default user gets:
    ``spacy_elmo/models/default`` (trained, no cell clip), whose recurrence carries a small error along a run of
    repeated tokens instead of forgetting it. For every dtype asked for (``float32`` = the inference path with its
    MKL packs, ``bfloat16``, ``int8``, ``auto``: what it resolves to) against the float32 reference path, the worst
    layer's error, per input:

    - WikiText-2 sentences (``--split``: validation by default, or the held-out test lines; paragraphs split after
      each ".", 3 tokens or more, cut to 128 tokens; ``--sentences`` of them): median, p99, max, and the share over
      each precision's documented bound;
    - degenerate inputs: runs of "." (50 / 500 / 2,000), 200 "the", a 3-word phrase repeated 10 / 30 / 80 times,
      single characters, 48-byte tokens.

    Prints (and with ``--out`` writes) one JSON object; ``--markdown`` also prints the table RESULTS.md holds.
    """
    from spacy_elmo import load_bilm
    from spacy_elmo.bilm import cpu_support, engine

    reference = reference_model(args.model)
    dtypes = args.dtypes.split(",")
    report: dict[str, Any] = {
        "model": args.model,
        "isa": cpu_support.isa_flags(),
        "int8 kernels": engine.summary()["int8"],
        "auto": engine.summary()["auto (cpu)"],
        "torch": torch.__version__,
    }
    degenerate = degenerate_inputs()
    exact_degenerate = reference_layers(reference, list(degenerate.values()))
    text = WIKITEXT / f"{args.split}.txt"
    corpus = wikitext_sentences(text, args.sentences) if args.sentences and text.exists() else []
    if args.sentences and not corpus:
        print(f"no WikiText-2 at {text} (see its README in the shared data): degenerate inputs only", file=sys.stderr)
    report["text"] = f"wikitext-2 {args.split}"
    start = time.perf_counter()
    exact_corpus = reference_layers(reference, corpus)
    report["reference seconds"] = round(time.perf_counter() - start, 1)
    for dtype in dtypes:
        backend = load_bilm(args.model, dtype=dtype, cache_mb=0)
        precision = str(backend.dtype).replace("torch.", "")  # what "auto" resolved to
        row: dict[str, Any] = {"runs": precision}
        for (name, tokens), exact in zip(degenerate.items(), exact_degenerate):
            backend.clear_cache()
            row[name] = sig(relative_errors(backend.embed([tokens]), [exact]).max())
        if corpus:
            backend.clear_cache()
            errors = np.array([relative_errors([a], [b]).max() for a, b in zip(backend.embed(corpus), exact_corpus)])
            lengths = np.array([len(s) for s in corpus])
            over = errors > BOUND[precision]
            row["wikitext"] = {
                "sentences": len(corpus),
                "median": sig(float(np.median(errors))),
                "p99": sig(float(np.quantile(errors, 0.99))),
                "max": sig(float(errors.max())),
                "share over bound": round(float(over.mean()), 4),
                "share over bound, 3-20 tokens": round(float(over[lengths <= 20].mean()), 4),
                "share over bound, 80-128 tokens": round(float(over[lengths >= 80].mean()), 4)
                if (lengths >= 80).any()
                else None,
            }
        report[dtype] = row
        print(dtype, json.dumps(row), file=sys.stderr, flush=True)
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    if args.markdown:
        print(trained_markdown(report, dtypes))
    return 0


def trained_markdown(report: dict, dtypes: list[str]) -> str:
    """The degenerate inputs as rows, the dtypes as columns; then the WikiText-2 summary per dtype."""
    lines = ["| input | " + " | ".join(dtypes) + " |", "|---" * (len(dtypes) + 1) + "|"]
    for name in degenerate_inputs():
        lines.append(f"| {name} | " + " | ".join(f"{report[d][name]:.3g}" for d in dtypes) + " |")
    for d in dtypes:
        wiki = report[d].get("wikitext")
        if wiki:
            lines.append(
                f"\n{d}: WikiText-2 ({wiki['sentences']} sentences) median {wiki['median']:.3g}, "
                f"p99 {wiki['p99']:.3g}, max {wiki['max']:.3g}, over the bound {100 * wiki['share over bound']:.1f}%"
            )
    return "\n".join(lines)


# ---- per-product: which LSTM product's low precision moves the trained model ----

PRODUCT_INPUTS = {'50 "."': ["."] * 50, '200 "the"': ["the"] * 200, '500 "."': ["."] * 500}
PRODUCT_VARIANTS = {
    "none (float32)": {},
    "int8: every product": {"in": "wa", "st": "wa", "pr": "wa"},
    "int8: input projection alone": {"in": "wa"},
    "int8: recurrent alone": {"st": "wa"},
    "int8: projection alone": {"pr": "wa"},
    "int8 weights of the step products (activations exact)": {"st": "w", "pr": "w"},
    "int8 activations of the step products (weights exact)": {"st": "a", "pr": "a"},
    "bfloat16: every product": {"in": "b", "st": "b", "pr": "b"},
}


def activations_8bit(x: torch.Tensor) -> torch.Tensor:
    """``x`` rounded to 8 bits per tensor, asymmetric, as torch's dynamic quantization does."""
    low, high = torch.clamp(x.min(), max=0.0), torch.clamp(x.max(), min=0.0)
    scale = torch.clamp((high - low) / 255, min=1e-12)
    zero = torch.round(-low / scale)
    return (torch.clamp(torch.round(x / scale) + zero, 0, 255) - zero) * scale


def weight_8bit(in_out: torch.Tensor) -> torch.Tensor:
    """An (in, out) weight rounded to 8 bits per output channel, as ``engine.int8.quantize_weight`` does."""
    from spacy_elmo.bilm.engine.int8 import quantize_weight

    q, scale = quantize_weight(in_out.t())
    return (q.float() * scale[:, None]).t()


MATMUL = (torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__)  # the forms ``x @ weight`` reaches


class RoundedProducts(torch.overrides.TorchFunctionMode):
    """While active, each product ``x @ weight`` of an LSTM cell's weight named in ``rounding`` (role -> ``w``: weight
    to int8, ``a``: activations to int8, ``b``: both operands to bfloat16) runs on rounded operands; every other
    operation, the cell's own arithmetic included, runs as written in :mod:`spacy_elmo.bilm.lstm`."""

    def __init__(self, model: torch.nn.Module, rounding: dict[str, str]) -> None:
        super().__init__()
        self.rounding: dict[int, str] = {}
        self.rounded = 0  # products rounded so far
        for cell in [*model.lstm.forward_layers, *model.lstm.backward_layers]:
            for role, weight in (("in", cell.input_weight), ("st", cell.state_weight), ("pr", cell.projection)):
                if role in rounding:
                    self.rounding[id(weight)] = rounding[role]

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        how = self.rounding.get(id(args[1])) if func in MATMUL else None
        if how is None:
            return func(*args, **kwargs)
        x, weight = args
        self.rounded += 1
        if "w" in how:
            weight = weight_8bit(weight)
        if "a" in how:
            x = activations_8bit(x)
        if "b" in how:
            x, weight = x.bfloat16().float(), weight.bfloat16().float()
        return func(x, weight, **kwargs)


def run_per_product(args: argparse.Namespace) -> int:
    """Which LSTM product's low precision moves the bundled trained model on repetitive input: one at a time.

    Simulates each precision on the float32 reference path (its own arithmetic, float32 everywhere else): a
    product's weight rounded to 8 bits per output channel as ``engine.int8.quantize_weight`` does, and/or its
    activations to 8 bits per tensor (asymmetric, as torch's dynamic quantization does); bfloat16 rounds both
    operands. Each variant rounds only the products it names: ``in`` (the input projection x -> gates), ``st``
    (the recurrent h -> gates), ``pr`` (the projection of the cell output). Prints, per variant, the worst layer's
    error against exact float32 per input; a value at or above 4e-2 (int8's bound) means that product alone breaks
    it.
    """
    model = reference_model(args.model)
    exact = {name: reference_layers(model, [tokens]) for name, tokens in PRODUCT_INPUTS.items()}
    for variant, rounding in PRODUCT_VARIANTS.items():
        row = {}
        for name, tokens in PRODUCT_INPUTS.items():  # one at a time: activations round per tensor
            with RoundedProducts(model, rounding) as products:
                low = reference_layers(model, [tokens])
            if rounding and not products.rounded:
                raise SystemExit("no LSTM product went through `x @ weight`: RoundedProducts must learn the new form")
            row[name] = round(float(relative_errors(low, exact[name]).max()), 4)
        print(json.dumps({variant: row}), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    modes = parser.add_subparsers(dest="mode", required=True, metavar="MODE")

    def mode(name: str, run) -> argparse.ArgumentParser:
        sub = modes.add_parser(
            name,
            help=run.__doc__.split("\n")[0],
            description=run.__doc__,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        sub.set_defaults(run=run)
        return sub

    compare = mode("compare", run_compare)
    compare.add_argument("--threads", type=int, default=2)
    compare.add_argument("--repeats", type=int, default=3)
    compare.add_argument("--min-seconds", type=float, default=2.0)
    compare.add_argument("--sets", default="small,original")
    compare.add_argument(
        "--dtypes",
        default=None,
        help="comma-separated, float32 first (default: float32, bfloat16 where this CPU has native bf16 kernels, int8)",
    )
    compare.add_argument("--datasets", default="trec,sst5")
    compare.add_argument("--max-train", type=int, default=None, help="a seeded subset of the training sentences")
    compare.add_argument(
        "--folds", type=int, default=5, help="also K-fold cross-validated accuracy over train + test (0: off)"
    )
    compare.add_argument(
        "--quick", action="store_true", help="smoke test: few sentences, 1 pass, 500 training sentences"
    )
    compare.add_argument("--out", type=Path, help="also write the markdown report here")
    mode("errors", run_errors)
    trained = mode("trained", run_trained)
    trained.add_argument("--model", default="default")
    trained.add_argument("--sentences", type=int, default=1500, help="WikiText-2 sentences (0: none)")
    trained.add_argument(
        "--split", choices=("valid", "test"), default="valid", help="WikiText-2's validation or held-out test lines"
    )
    trained.add_argument("--dtypes", default="float32,bfloat16,int8")
    trained.add_argument("--out", type=Path, help="also write the JSON report here")
    trained.add_argument("--markdown", action="store_true", help="also print the table RESULTS.md holds")
    per_product = mode("per-product", run_per_product)
    per_product.add_argument("--model", default="default", help="a trained model without cell clipping")
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
