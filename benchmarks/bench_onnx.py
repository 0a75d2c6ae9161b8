"""The ONNX export on ONNX Runtime against the torch float32 path: tokens/s of the same real sentences through the
product path (``load_bilm(...).embed``), batches of 1 and 32, alternating batch by batch.

    python benchmarks/bench_onnx.py [--model default] [--random-weights ARCH] [--sentences 128] [--single 32]
                                    [--passes 5] [--batch-sizes 1,32] [--threads default,1] [--quick]
                                    [--precision float32|int8]

``--model``: what ``load_bilm`` takes (default: the bundled model; ``original`` is used only when already in the
download cache: the script runs offline and says so otherwise). ``--random-weights original`` (or ``small``) instead
times a model of that published architecture with random weights (``bench.write_weight_sets``, written to a temporary
folder: ~30 s and ~2.5 GB of memory for ``original``). The model is exported to a temporary folder
(``spacy_elmo.output.onnx_export.export_onnx``, which checks it against torch first). The sentences are WikiText-2's
first test sentences (3-60 tokens, ``bench.py``'s reader; ``../shared/data/wikitext-2/test.txt``).

Both sides are backends as ``load_bilm`` gives them, the sentence cache off (``configure_cache(cache_mb=0)``) and the
token-vector caches on, as in production (a first pass fills them: the figures are the steady state, where the
contextualizer dominates). Batch size 1 embeds ``--single`` sentences one call each; a larger size embeds the
sentences sorted by length (as ``embed`` sorts them), one call per batch. Each batch is run by every path in turn, the
order rotated from batch to batch, so that a busy moment of the machine falls on all of them alike; a pass's figure is
its tokens over the time each path spent, and the table shows the median over passes and the median of the per-pass
ratios. ``--threads``: ``default`` (what ``load_bilm`` opens: torch's count with the package's small-work limit; the
ONNX runner's threads the cores available, the two directions at the same time) or a number (torch's count and the
ONNX runner's ``threads``). ``--precision int8``: the model exported with ``--precision int8`` against the torch int8
path (``load_bilm(model, precision="int8")``), and a second table: both int8 paths' error against torch float32 on
the same sentences (per layer, per sentence, and the cosine of the mixed vectors). Run as a script, it sets
``OMP_WAIT_POLICY=PASSIVE`` unless set (see the end of the file: torch's spinning OpenMP threads would otherwise slow
the ONNX path that runs after them in the same process). Prints the CPU (``lscpu``'s
model name), the versions, the load average and a table. Exits 2 (saying why) when
WikiText-2 or the model is missing.
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

import numpy as np

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


def alternating_pass(
    paths: dict[str, Callable[[list[list[str]]], object]], parts: list[list[list[str]]], shift: int
) -> dict[str, float]:
    """One pass over ``parts``, each batch run by every path in turn (the order rotated by one from batch to batch,
    starting at ``shift``): tokens per second of each path's own time."""
    names = list(paths)
    spent = dict.fromkeys(names, 0.0)
    for index, part in enumerate(parts):
        turn = (shift + index) % len(names)
        for name in names[turn:] + names[:turn]:
            start = time.perf_counter()
            paths[name](part)
            spent[name] += time.perf_counter() - start
    tokens = sum(len(s) for part in parts for s in part)
    return {name: tokens / spent[name] for name in names}


def table(results: dict[tuple[str, int], dict[str, list[float]]], precision: str = "float32") -> str:
    """Markdown: a row per (threads, batch size); torch's and ONNX Runtime's tokens/s (median and range over passes),
    the median of the per-pass ratios; both in ``precision``."""
    lines = [
        f"| threads | batch | torch {precision}: tokens/s | ONNX Runtime {precision}: tokens/s | ONNX / torch |",
        "|---|---:|---:|---:|---:|",
    ]
    for (threads, size), by_path in results.items():
        cells = [f"{median(v):,.0f} ({min(v):,.0f}-{max(v):,.0f})" for v in by_path.values()]
        ratio = median(o / t for o, t in zip(by_path["onnx"], by_path["torch"]))
        lines.append(f"| {threads} | {size} | {cells[0]} | {cells[1]} | {ratio:.2f}x |")
    return "\n".join(lines)


def error_lines(paths: dict[str, list[np.ndarray]], reference: list[np.ndarray]) -> list[str]:
    """Markdown rows, one per path of ``paths`` (its layers of the sentences) against ``reference`` (float32's):
    per layer the largest ``|path - reference|`` over the layer's largest ``|reference|`` (all sentences), and the
    mean ``|path - reference|`` over the mean ``|reference|``; each sentence's worst layer over that layer's scale in
    the sentence (median / max, as bench_precision.py's ``trained``); the cosine of the mixed vectors (the layers'
    mean, per token) to float32's (mean / min)."""
    lines = [
        "| path | max error per layer | mean error per layer | worst layer per sentence: median / max "
        "| cosine of mixed vectors: mean / min |",
        "|---|---|---|---|---|",
    ]
    n_layers = reference[0].shape[0]
    for name, ours in paths.items():
        diffs = [np.abs(o - r) for o, r in zip(ours, reference)]
        largest = [
            max(float(d[k].max()) for d in diffs) / max(float(np.abs(r[k]).max()) for r in reference)
            for k in range(n_layers)
        ]
        mean = [
            sum(float(d[k].sum()) for d in diffs) / sum(float(np.abs(r[k]).sum()) for r in reference)
            for k in range(n_layers)
        ]
        worst = [max(float(d[k].max() / np.abs(r[k]).max()) for k in range(n_layers)) for d, r in zip(diffs, reference)]
        cosines = np.concatenate(
            [
                (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))
                for a, b in ((o.mean(0), r.mean(0)) for o, r in zip(ours, reference))
            ]
        )
        lines.append(
            f"| {name} | {' / '.join(f'{x:.3g}' for x in largest)} | {' / '.join(f'{x:.3g}' for x in mean)} "
            f"| {median(worst):.3g} / {max(worst):.3g} | {cosines.mean():.5f} / {cosines.min():.5f} |"
        )
    return lines


def parts_of(work: list[list[str]], size: int, single: int) -> list[list[list[str]]]:
    """What one call embeds, per call: ``single`` sentences alone for size 1, else the sentences sorted by length (as
    ``embed`` sorts them) in batches of ``size``."""
    if size == 1:
        return batches(work[:single], 1)
    return batches(sorted(work, key=len), size)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="default")
    parser.add_argument("--random-weights", metavar="ARCH", help="a published architecture with random weights")
    parser.add_argument("--sentences", type=int, default=128)
    parser.add_argument("--single", type=int, default=32, help="sentences embedded one call each at batch size 1")
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--batch-sizes", default="1,32")
    parser.add_argument("--threads", default="default", help="thread settings: 'default' or a count, by commas")
    parser.add_argument("--text", type=Path, default=TEST_LINES, help="WikiText-2's test.txt")
    parser.add_argument("--quick", action="store_true", help="8 sentences, 1 pass (a smoke test)")
    parser.add_argument(
        "--precision",
        choices=("float32", "int8"),
        default="float32",
        help="int8: an int8 export against the torch int8 path, and both int8 paths' error against torch float32",
    )
    args = parser.parse_args(argv)
    count, passes = (8, 1) if args.quick else (args.sentences, args.passes)
    single = min(args.single, count)
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
    from spacy_elmo.runtime.embedding.backend import ElmoBackend
    from spacy_elmo.sources.model_paths import resolve_model_files

    results: dict[tuple[str, int], dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model
        if args.random_weights:
            model = str(
                bench.write_weight_sets(Path(tmp) / "weights", archs=(args.random_weights,))[args.random_weights]
            )
        try:
            backend = load_bilm(model, precision=args.precision)
        except (OSError, ValueError) as err:
            print(f"model {model!r} is not available here, skipped: {str(err).splitlines()[0]}", file=sys.stderr)
            return 2
        backend.configure_cache(cache_mb=0)
        default_threads = torch.get_num_threads()
        exported = export_onnx(model, Path(tmp) / "onnx", precision=args.precision)
        onnx_backend = load_bilm(exported.folder)
        onnx_backend.configure_cache(cache_mb=0)
        files = resolve_model_files(exported.folder, None, None)
        onnx_backends = {
            t: onnx_backend
            if t == "default"
            else ElmoBackend.on_runner(
                OnnxBiLM(exported.folder, threads=int(t), token_cache_size=onnx_backend.runner.token_cache.max_tokens),
                *files,
            )
            for t in settings
        }
        for other in onnx_backends.values():
            other.configure_cache(cache_mb=0)
        error = max(layer_errors(onnx_backend.embed(work), backend.embed(work)))
        errors: list[str] = []
        if args.precision != "float32":  # both low-precision paths against torch float32, on the same sentences
            exact = load_bilm(model)
            exact.configure_cache(cache_mb=0)
            layers = {
                f"ONNX Runtime {args.precision}": onnx_backend.embed(work),
                f"torch {args.precision}": backend.embed(work),
            }
            errors = error_lines(layers, exact.embed(work))
        for setting, runner_backend in onnx_backends.items():
            torch.set_num_threads(default_threads if setting == "default" else int(setting))
            paths: dict[str, Callable[[list[list[str]]], object]] = {
                "torch": lambda part: backend.embed(part, batch_size=len(part)),
                "onnx": lambda part, b=runner_backend: b.embed(part, batch_size=len(part)),
            }
            for size in sizes:  # warm up: packed weights, thread pools, the token-vector caches
                for run in paths.values():
                    tokens_per_second(run, parts_of(work, size, single))
                results[setting, size] = {name: [] for name in paths}
            for index in range(passes):
                for size in sizes:
                    for name, speed in alternating_pass(paths, parts_of(work, size, single), index).items():
                        results[setting, size][name].append(speed)
        torch.set_num_threads(default_threads)
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"CPU: {cpu_name()}")
    print(
        f"model {args.random_weights + ' (random weights)' if args.random_weights else args.model} "
        f"({backend.n_layers} layers, dim {backend.dim}); torch {torch.__version__} "
        f"(default {default_threads} threads), onnxruntime {onnxruntime.__version__}, "
        f"onnx {onnx.__version__}, opset {OPSET}; OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}"
    )
    print(
        f"{len(work)} WikiText-2 test sentences ({sum(map(len, work)):,} tokens; batch 1: the first {single}, one call "
        f"each), sentence cache off, token caches on (warm), {passes} passes, load average after {load}; "
        f"largest ONNX error on them {error:.2g} of a layer's scale against torch {args.precision} (export check "
        f"against torch float32: {exported.max_relative_error:.2g})"
    )
    print()
    print(table(results, args.precision))
    if errors:
        print(f"\nagainst torch float32 on the same {len(work)} sentences (layers 0 / 1 / ...):\n")
        print("\n".join(errors))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("SPACY_ELMO_OFFLINE", "1")  # a model not yet downloaded is skipped, not fetched
    # torch's OpenMP threads otherwise spin on a core for a while after each torch call, and ONNX Runtime's threads,
    # run right after in this same process, wait on that core: measured on 2 cores, the "original" architecture's
    # ONNX path ran at half its own speed (369 against 769 tokens/s at batch 32, torch unchanged). A process serving
    # one of the paths never sees that. Set before torch is imported (OpenMP reads it once).
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    sys.exit(main())
