"""Each engine's error on the bundled TRAINED model, on ordinary text and on repetitive / degenerate input.

    nice .venv/bin/python benchmarks/bench_precision_trained.py --out /tmp/trained.json
    ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 MKL_CBWR=COMPATIBLE ONEDNN_MAX_CPU_ISA=AVX2 \
        FBGEMM_ENABLE_INSTRUCTIONS=AVX2 nice .venv/bin/python benchmarks/bench_precision_trained.py   # AVX2's kernels

The other precision figures (``bench_precision_errors.py``) are measured on the small fixture and on random
weights; this one measures what a default user gets: ``spacy_elmo/models/default`` (trained, no cell clip), whose
recurrence carries a small error along a run of repeated tokens instead of forgetting it.

For every dtype asked for (``float32`` = the inference path with its MKL packs, ``bfloat16``, ``int8``, ``auto``:
what it resolves to) against the float32 *reference* path (the autograd path,
``BiLM.forward`` with gradients on): the worst layer's max |difference| over that layer's activation scale (its
largest |float32 reference| value in the same input), per input:

- WikiText-2 validation sentences (``../shared/data/wikitext-2/valid.txt``: paragraphs split after each ".",
  3 tokens or more, cut to 128 tokens; ``--sentences`` of them): median, p99, max, and the share over each
  precision's documented bound;
- degenerate inputs: runs of "." (50 / 500 / 2,000), 200 "the", a 3-word phrase repeated 10 / 30 / 80 times,
  single characters, 48-byte tokens.

Prints (and with ``--out`` writes) one JSON object; ``--markdown`` prints the table RESULTS.md holds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from spacy_elmo import load_bilm
from spacy_elmo.bilm import cpu_support
from spacy_elmo.bilm.chars import batch_to_char_ids
from spacy_elmo.bilm.weights import load_model
from spacy_elmo.sources.model_files import resolve_model_files

ROOT = Path(__file__).resolve().parents[1]
WIKITEXT = ROOT.parent / "shared" / "data" / "wikitext-2" / "valid.txt"
BOUND = {"float32": 1e-4, "bfloat16": 2.5e-2, "float16": 2e-3, "int8": 4e-2}  # tests/bilm/test_precision.py


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


def reference_layers(model: torch.nn.Module, sentences: list[list[str]], batch: int = 32) -> list[np.ndarray]:
    """float32 activations by the reference (autograd) path, ``batch`` sentences of similar length at a time (its
    packed sequences make a sentence's outputs independent of its neighbours, to float32 rounding)."""
    out: list[np.ndarray] = [np.empty(0)] * len(sentences)
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    with torch.enable_grad():
        for start in range(0, len(order), batch):
            rows = order[start : start + batch]
            layers, _, _ = model(torch.as_tensor(batch_to_char_ids([sentences[i] for i in rows])))
            for k, i in enumerate(rows):
                out[i] = layers[:, k, : len(sentences[i])].detach().numpy()
    return out


def sig(value: float) -> float:
    """``value`` to 3 significant digits (float32's errors are ~1e-6, low precision's ~1e-2)."""
    return float(f"{value:.3g}")


def worst_layer_error(low: np.ndarray, exact: np.ndarray) -> float:
    """The worst layer's max |low - exact| over that layer's max |exact|."""
    diff = np.abs(low - exact).max(axis=(1, 2))
    scale = np.maximum(np.abs(exact).max(axis=(1, 2)), np.finfo(np.float32).tiny)
    return float((diff / scale).max())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--sentences", type=int, default=1500, help="WikiText-2 validation sentences (0: none)")
    parser.add_argument("--dtypes", default="float32,bfloat16,int8")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    options, weights = resolve_model_files(args.model)
    reference = load_model(options, weights).train(False)
    for p in reference.parameters():
        p.requires_grad_(True)  # the reference path: BiLM chooses it when a parameter needs a gradient
    dtypes = args.dtypes.split(",")
    report: dict[str, object] = {
        "model": args.model,
        "isa": cpu_support.isa_flags(),
        "int8 kernels": cpu_support.summary()["int8"],
        "auto": str(cpu_support.auto_dtype(torch.device("cpu"))).replace("torch.", ""),
        "torch": torch.__version__,
    }
    degenerate = degenerate_inputs()
    exact_degenerate = reference_layers(reference, list(degenerate.values()))
    corpus = wikitext_sentences(WIKITEXT, args.sentences) if args.sentences and WIKITEXT.exists() else []
    if args.sentences and not corpus:
        print(f"no WikiText-2 at {WIKITEXT}: degenerate inputs only", file=sys.stderr)
    start = time.perf_counter()
    exact_corpus = reference_layers(reference, corpus)
    report["reference seconds"] = round(time.perf_counter() - start, 1)
    for dtype in dtypes:
        backend = load_bilm(args.model, dtype=dtype, cache_mb=0)
        precision = str(backend.dtype).replace("torch.", "")  # what "auto" resolved to
        row: dict[str, object] = {"runs": precision}
        for (name, tokens), exact in zip(degenerate.items(), exact_degenerate):
            backend.clear_cache()
            row[name] = sig(worst_layer_error(backend.embed([tokens])[0], exact))
        if corpus:
            backend.clear_cache()
            errors = np.array([worst_layer_error(a, b) for a, b in zip(backend.embed(corpus), exact_corpus)])
            lengths = np.array([len(s) for s in corpus])
            row["wikitext"] = {
                "sentences": len(corpus),
                "median": sig(float(np.median(errors))),
                "p99": sig(float(np.quantile(errors, 0.99))),
                "max": sig(float(errors.max())),
                "share over bound": round(float((errors > BOUND[precision]).mean()), 4),
                "share over bound, 3-20 tokens": round(float((errors[lengths <= 20] > BOUND[precision]).mean()), 4),
                "share over bound, 80-128 tokens": round(float((errors[lengths >= 80] > BOUND[precision]).mean()), 4)
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
        print(markdown(report, dtypes))
    return 0


def markdown(report: dict, dtypes: list[str]) -> str:
    """The degenerate inputs as rows, the dtypes as columns; then the WikiText-2 summary per dtype."""
    names = list(degenerate_inputs())
    lines = ["| input | " + " | ".join(dtypes) + " |", "|---" * (len(dtypes) + 1) + "|"]
    for name in names:
        lines.append(f"| {name} | " + " | ".join(f"{report[d][name]:.3g}" for d in dtypes) + " |")
    for d in dtypes:
        wiki = report[d].get("wikitext")
        if wiki:
            lines.append(
                f"\n{d}: WikiText-2 ({wiki['sentences']} sentences) median {wiki['median']:.3g}, "
                f"p99 {wiki['p99']:.3g}, max {wiki['max']:.3g}, over the bound {100 * wiki['share over bound']:.1f}%"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
