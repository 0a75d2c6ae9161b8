"""The ONNX export on ONNX Runtime against the torch float32 path: tokens/s of the same real sentences, batches of 1
and 32, alternating passes.

    python benchmarks/bench_onnx.py [--model default] [--sentences 64] [--passes 5] [--batch-sizes 1,32]
                                    [--threads default,1] [--quick]

``--model``: what ``load_bilm`` takes (default: the bundled model; ``original`` is used only when already in the
download cache: the script runs offline and says so otherwise). The model is exported to a temporary folder
(``spacy_elmo.onnx.export_onnx``, which checks it against torch first). The sentences are WikiText-2's first test
sentences (3-60 tokens, ``bench.py``'s reader; ``../shared/data/wikitext-2/test.txt``). Both sides run with no cache
(no sentence cache, no token-vector cache: each call computes the char CNN and the biLSTM), over the same consecutive
batches of the corpus, at each of ``--threads``: ``default`` (each library's own: torch's count with the package's
small-work limit, ONNX Runtime's default pool) or a number (torch's count and ONNX Runtime's ``threads``). Each pass
times both (the order reversed every other pass); figures are the median over passes. Prints the CPU (``lscpu``'s
model name), the versions, the load average and a table. Exits 2 (saying why) when WikiText-2 or the model is missing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench

TEST_LINES = bench.SHARED / "data" / "wikitext-2" / "test.txt"


def cpu_name() -> str:
    """``lscpu``'s model name (``/proc/cpuinfo``'s where lscpu is missing), and the core count."""
    name = "?"
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        name = next((line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")), "?")
    except (OSError, subprocess.SubprocessError):
        pass
    return f"{name}, {os.cpu_count()} cores"


def batches(work: list[list[str]], size: int) -> list[list[list[str]]]:
    """Consecutive batches of ``size`` sentences, in corpus order."""
    return [work[i : i + size] for i in range(0, len(work), size)]


def tokens_per_second(run: Callable[[list[list[str]]], object], parts: list[list[list[str]]]) -> float:
    """Tokens of ``parts`` per second of ``run`` over each batch in turn."""
    start = time.perf_counter()
    for part in parts:
        run(part)
    return sum(len(s) for part in parts for s in part) / (time.perf_counter() - start)


def table(results: dict[tuple[str, int], dict[str, list[float]]]) -> str:
    """Markdown: a row per (threads, batch size); torch's and ONNX Runtime's tokens/s (median and range), their
    ratio."""
    lines = [
        "| threads | batch | torch float32: tokens/s | ONNX Runtime: tokens/s | ONNX / torch |",
        "|---|---:|---:|---:|---:|",
    ]
    for (threads, size), by_path in results.items():
        cells = [f"{median(v):,.0f} ({min(v):,.0f}-{max(v):,.0f})" for v in by_path.values()]
        ratio = median(by_path["onnx"]) / median(by_path["torch"])
        lines.append(f"| {threads} | {size} | {cells[0]} | {cells[1]} | {ratio:.2f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="default")
    parser.add_argument("--sentences", type=int, default=64)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--batch-sizes", default="1,32")
    parser.add_argument("--threads", default="default,1", help="thread settings: 'default' or a count, by commas")
    parser.add_argument("--text", type=Path, default=TEST_LINES, help="WikiText-2's test.txt")
    parser.add_argument("--quick", action="store_true", help="8 sentences, 1 pass (a smoke test)")
    args = parser.parse_args(argv)
    count, passes = (8, 1) if args.quick else (args.sentences, args.passes)
    sizes = [int(s) for s in args.batch_sizes.split(",")]
    settings = [t.strip() for t in args.threads.split(",")]
    if not args.text.is_file():
        print(
            f"WikiText-2 test lines not found at {args.text}: see ../shared/data/wikitext-2/README.md", file=sys.stderr
        )
        return 2
    work = bench.read_sentences(count, path=args.text)

    import onnx
    import onnxruntime
    import torch

    from spacy_elmo import load_bilm
    from spacy_elmo.onnx import OnnxBiLM
    from spacy_elmo.onnx.graph import OPSET
    from spacy_elmo.output.onnx_export import export_onnx, layer_errors

    try:
        backend = load_bilm(args.model, cache_mb=0, cache_dir=False, token_cache_size=0)
    except (OSError, ValueError) as err:
        print(f"model {args.model!r} is not available here, skipped: {str(err).splitlines()[0]}", file=sys.stderr)
        return 2
    default_threads = torch.get_num_threads()
    results: dict[tuple[str, int], dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        exported = export_onnx(args.model, Path(tmp) / "onnx")
        runners = {
            t: OnnxBiLM(exported.folder, threads=None if t == "default" else int(t), token_cache_size=0)
            for t in settings
        }
        error = max(layer_errors(runners[settings[0]].layers(work), backend.embed(work)))
        for setting, runner in runners.items():
            torch.set_num_threads(default_threads if setting == "default" else int(setting))
            paths: dict[str, Callable[[list[list[str]]], object]] = {
                "torch": lambda part: backend.embed(part, batch_size=len(part)),
                "onnx": runner.layers,
            }
            for run in paths.values():  # warm up: packed weights, thread pools
                tokens_per_second(run, batches(work[:4], 2))
            for size in sizes:
                results[setting, size] = {name: [] for name in paths}
            for index in range(passes):
                order = list(paths) if index % 2 == 0 else list(paths)[::-1]
                for size in sizes:
                    for name in order:
                        results[setting, size][name].append(tokens_per_second(paths[name], batches(work, size)))
        torch.set_num_threads(default_threads)
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"CPU: {cpu_name()}")
    print(
        f"model {args.model} ({backend.n_layers} layers, dim {backend.dim}); torch {torch.__version__} "
        f"(default {default_threads} threads), onnxruntime {onnxruntime.__version__}, "
        f"onnx {onnx.__version__}, opset {OPSET}"
    )
    print(
        f"{len(work)} WikiText-2 test sentences ({sum(map(len, work)):,} tokens), no caches, {passes} passes, "
        f"load average after {load}; "
        f"largest ONNX error on them {error:.2g} of a layer's scale (export check: {exported.max_relative_error:.2g})"
    )
    print()
    print(table(results))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("SPACY_ELMO_OFFLINE", "1")  # a model not yet downloaded is skipped, not fetched
    sys.exit(main())
