"""Single sentences on the bundled model: tokens/s of ``load_bilm("default").embed([sentence])``, one sentence per
call, with 1 and 2 threads, on a quiet machine and with one core kept busy by another process, side by side.

    python benchmarks/bench_latency.py [--sentences 60] [--passes 5] [--quick] [--out latency.md]

The sentences are the first ``--sentences`` of WikiText-2's test lines (split at " . ", 3-60 tokens, as
``bench.py`` reads them; ``../shared/data/wikitext-2/test.txt``, see that folder's README). Caches are off (no
sentence cache, no token-vector cache): every call computes the char CNN and the biLSTM. Each pass times every
configuration once, in turn (the order reversed every other pass), first on the machine as it is ("quiet"), then
with a busy loop running in a second process ("busy core": on a 2-core machine, one core); figures are the median
over passes (and the range). Configurations:

- ``1 thread``: torch's count 1;
- ``2 threads``: torch's count 2, the package's own thread choice (``bilm/threads.py``: one thread for small work);
- ``2 threads, team``: torch's count 2 with the small-work limit off (``backend.small_work_threads = None``): every
  operator may wake a team of two, as single sentences did before their step counted as small work.

Also prints the CPU, the load average before and after, and the float32 engine. ``--quick``: 10 sentences, 1 pass
(a smoke test). Exits 2 (with where to get it) when WikiText-2 is missing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench

TEST_LINES = bench.SHARED / "data" / "wikitext-2" / "test.txt"
CONFIGS = {"1 thread": (1, 1), "2 threads": (2, 1), "2 threads, team": (2, None)}  # torch's count, small_work_threads
BUSY_LOOP = "while True: pass"
CONDITIONS = ("quiet", "busy core")  # the machine as it is; with BUSY_LOOP running in another process


def sentences(path: Path, count: int) -> list[list[str]]:
    """The first ``count`` sentences of ``path``; raises ``FileNotFoundError`` saying where to get it."""
    if not path.is_file():
        raise FileNotFoundError(
            f"WikiText-2 test lines not found at {path}: put WikiText-2 (wikitext-2-v1, tokenized) there, "
            "see ../shared/data/wikitext-2/README.md for its source"
        )
    return bench.read_sentences(count, path=path)


def tokens_per_second(backend, work: list[list[str]], threads: int, small_work_threads) -> float:
    """One sentence per ``embed`` call over ``work``, at torch's count ``threads`` (this benchmark's own process)."""
    torch.set_num_threads(threads)
    backend.small_work_threads = small_work_threads
    start = time.perf_counter()
    for sentence in work:
        backend.embed([sentence])
    return sum(len(s) for s in work) / (time.perf_counter() - start)


def busy_core() -> subprocess.Popen:
    """Another process spinning on one core until it is stopped."""
    return subprocess.Popen([sys.executable, "-c", BUSY_LOOP])


def measure(backend, work: list[list[str]], passes: int, configs: dict = CONFIGS) -> dict[str, dict[str, list[float]]]:
    """tokens/s per condition (:data:`CONDITIONS`) and configuration, one figure per pass."""
    results: dict[str, dict[str, list[float]]] = {c: {name: [] for name in configs} for c in CONDITIONS}
    for index in range(passes):
        order = list(configs) if index % 2 == 0 else list(configs)[::-1]
        for condition in results:
            busy = busy_core() if condition == CONDITIONS[1] else None
            try:
                if busy is not None:
                    time.sleep(0.2)  # the loop is running before the first call
                for name in order:
                    results[condition][name].append(tokens_per_second(backend, work, *configs[name]))
            finally:
                if busy is not None:
                    busy.kill()
                    busy.wait()
    return results


def table(results: dict[str, dict[str, list[float]]]) -> str:
    """Markdown: one row per configuration, a column per condition (tokens/s, median and range)."""
    lines = [
        "| configuration | " + " | ".join(f"{c}: tokens/s, median (range)" for c in results) + " |",
        "|---" * (len(results) + 1) + "|",
    ]
    for name in results[CONDITIONS[0]]:
        cells = [
            f"{median(results[c][name]):,.0f} ({min(results[c][name]):,.0f}-{max(results[c][name]):,.0f})"
            for c in results
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=60)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--model", default="default")
    parser.add_argument("--text", type=Path, default=TEST_LINES, help="WikiText-2's test.txt")
    parser.add_argument("--quick", action="store_true", help="10 sentences, 1 pass (a smoke test)")
    parser.add_argument("--out", type=Path, help="also write the report here")
    args = parser.parse_args(argv)
    count, passes = (10, 1) if args.quick else (args.sentences, args.passes)
    try:
        work = sentences(args.text, count)
    except FileNotFoundError as err:
        print(err, file=sys.stderr)
        return 2
    from spacy_elmo import load_bilm
    from spacy_elmo.bilm.engine import engine_of

    backend = load_bilm(args.model, cache_mb=0, cache_dir=False, token_cache_size=0)
    saved = (torch.get_num_threads(), backend.small_work_threads)
    load_before = os.getloadavg()
    try:
        for threads in (1, 2):  # warm up: packs, compiled loops, thread pools
            tokens_per_second(backend, work[:3], threads, 1)
        results = measure(backend, work, passes)
    finally:
        torch.set_num_threads(saved[0])
        backend.small_work_threads = saved[1]
    load_after = os.getloadavg()
    report = "\n".join(
        [
            f"CPU: {bench.cpu_description()}",
            f"float32 engine: {engine_of(backend.model.lstm).describe()}",
            f"{len(work)} WikiText-2 test sentences ({sum(len(s) for s in work):,} tokens), one per embed call, "
            f"{passes} passes; load average (1/5/15 min) {' / '.join(f'{x:.1f}' for x in load_before)} before, "
            f"{' / '.join(f'{x:.1f}' for x in load_after)} after",
            "",
            table(results),
        ]
    )
    print(report)
    if args.out:
        args.out.write_text(report + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
