"""Throughput of ``spacy_elmo.dask.embed_texts`` with 1 vs 2 Dask worker processes, and in this process.

    python benchmarks/bench_dask.py [--texts 2000] [--model default]

The same wikitext-2 sentences (as strings, spaCy-tokenized by the vectorizer) go through: a
LocalCluster of 1 worker process, one of 2 worker processes (one thread each: Dask's nanny starts
workers with OMP_NUM_THREADS=1), and ``ElmoVectorizer.transform`` in this process (torch's own
thread count). Both clusters start first and the model is loaded on every worker before timing;
the passes alternate between the three set-ups (best of ``--passes``), each pass starting with
empty sentence caches everywhere (no disk cache). Prints a markdown table with the CPU line.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import cpu_description, read_sentences


def clear_caches(model: str) -> None:
    from spacy_elmo import load_bilm

    load_bilm(model).clear_cache()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=2000)
    parser.add_argument("--model", default="default")
    parser.add_argument(
        "--partitions", type=int, default=16, help="partitions of the input bag (the same for every set-up)"
    )
    parser.add_argument("--passes", type=int, default=3)
    args = parser.parse_args()
    os.environ.pop("SPACY_ELMO_CACHE_DIR", None)

    import dask.bag as db
    import torch

    from spacy_elmo import ElmoVectorizer
    from spacy_elmo.dask import embed_texts, local_cluster

    texts = [" ".join(tokens) for tokens in read_sentences(args.texts)]
    n_tokens = sum(len(t.split()) for t in texts)
    print(f"CPU: {cpu_description()}")
    load_start = os.getloadavg()
    print(
        f"{len(texts)} texts, {n_tokens} whitespace tokens, model {args.model}; load average at start "
        f"{load_start[0]:.2f}"
    )

    opened = ExitStack()  # the clusters, closed at the end as local_cluster closes them
    clusters = {n: opened.enter_context(local_cluster(n, dashboard_address=":0")) for n in (1, 2)}
    bag = db.from_sequence(texts, npartitions=args.partitions)
    lengths = bag.map_partitions(len).compute(scheduler="sync")  # known chunks, without a pass inside the timing
    reference = ElmoVectorizer(model=args.model).fit(texts[:2])
    for n, client in clusters.items():  # warm-up: model loaded, spaCy tokenizer built on every worker
        client.compute(
            embed_texts(db.from_sequence(texts[: 4 * n], npartitions=2 * n), model=args.model, lengths=False)
        ).result()
        print(f"{n} worker(s): torch threads per worker {sorted(client.run(torch.get_num_threads).values())}")

    timings = {"1 worker": [], "2 workers": [], "in-process": []}
    result = {}
    for _ in range(args.passes):
        for label in timings:
            if label == "in-process":
                clear_caches(args.model)
                start = time.perf_counter()
                result[label] = reference.transform(texts)
            else:
                client = clusters[1 if label == "1 worker" else 2]
                client.run(clear_caches, args.model)
                start = time.perf_counter()
                result[label] = client.compute(embed_texts(bag, model=args.model, lengths=lengths)).result()
            timings[label].append(time.perf_counter() - start)
    for label in ("1 worker", "2 workers"):
        scale = np.abs(result["in-process"]).max()
        worst = float(np.abs(result[label] - result["in-process"]).max() / scale)
        print(f"{label}: largest difference from in-process {worst:.1e} of the scale")
    print(f"in-process torch threads: {torch.get_num_threads()}; load average at end {os.getloadavg()[0]:.2f}")
    print()
    print("| set-up | best s | texts/s | tokens/s | all passes s |")
    print("|---|---:|---:|---:|---|")
    for label, seconds in timings.items():
        best = min(seconds)
        print(
            f"| {label} | {best:.2f} | {len(texts) / best:.0f} | {n_tokens / best:.0f} | "
            f"{', '.join(f'{s:.2f}' for s in seconds)} |"
        )
    print(f"\n2 workers / 1 worker: {min(timings['1 worker']) / min(timings['2 workers']):.2f}x")
    opened.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
