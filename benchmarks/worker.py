"""One side of the side-by-side benchmark, driven over stdin/stdout (one JSON object per line).

``--impl ours`` runs spacy_elmo's backend; ``--impl allennlp`` runs AllenNLP 0.9.0's unmodified
ELMo through ``../shared/peers/allennlp_oracle.py`` (start it with that peer's python). Both use
the same thread count and see the same commands, so the driver can interleave them.

Commands: ``{"cmd": "load", "options", "weights"}``, ``{"cmd": "time", "calls": [[sentence, ...], ...],
"batch_size"}`` (embed each call, stateless; returns seconds), ``{"cmd": "dump", "sentences", "out"}``
(activations to an .npz), ``{"cmd": "stream", ...}`` and ``{"cmd": "cache", ...}`` (ours only), ``quit``.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import sys
import time


def rss_mb() -> float:
    """Current resident set size in MiB (Linux)."""
    with open("/proc/self/statm") as handle:
        pages = int(handle.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def peak_rss_mb() -> float:
    """Peak RSS of this process image (VmHWM; ru_maxrss would include the parent's before exec)."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Ours:
    def __init__(self, options: str, weights: str) -> None:
        from spacy_elmo import load_bilm

        self.backend = load_bilm(options=options, weights=weights, cache_mb=0, cache_dir=False)

    def embed(self, sentences, batch_size):
        return self.backend.embed(sentences, batch_size=batch_size)

    def cold(self) -> None:
        """Forget cached token vectors, so every timed pass starts cold."""
        self.backend.clear_cache()


class AllenNLP:
    def __init__(self, options: str, weights: str, oracle: str) -> None:
        sys.path.insert(0, oracle)
        import allennlp_oracle

        self.oracle = allennlp_oracle
        self.bilm = allennlp_oracle.build_bilm(options, weights)

    def embed(self, sentences, batch_size):
        out = [None] * len(sentences)
        for i, acts, _ in self.oracle.run_batches(self.bilm, sentences, batch_size, stateful=False):
            out[i] = acts
        return out

    def cold(self) -> None:
        self.bilm._elmo_lstm.reset_states()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--impl", choices=["ours", "allennlp"], required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--oracle", default="../shared/peers")
    args = parser.parse_args()
    import numpy as np
    import torch

    torch.set_num_threads(args.threads)
    model = None
    for line in sys.stdin:
        msg = json.loads(line)
        cmd = msg["cmd"]
        reply = {"ok": True}
        if cmd == "load":
            t = time.perf_counter()
            if args.impl == "ours":
                model = Ours(msg["options"], msg["weights"])
            else:
                model = AllenNLP(msg["options"], msg["weights"], args.oracle)
            reply.update(load_s=time.perf_counter() - t, threads=torch.get_num_threads(), torch=torch.__version__)
        elif cmd == "time":
            model.cold()
            gc.collect()
            t = time.perf_counter()
            for call in msg["calls"]:
                model.embed(call, msg["batch_size"])
            reply.update(seconds=time.perf_counter() - t, peak_rss_mb=peak_rss_mb())
        elif cmd == "dump":
            model.cold()
            arrays = model.embed(msg["sentences"], msg["batch_size"])
            np.savez(msg["out"], *[np.asarray(a, dtype=np.float32) for a in arrays])
        elif cmd == "stream":  # ours: RSS while embedding chunk after chunk, results dropped
            marks = {}
            done = 0
            sentences = msg["sentences"]
            for start in range(0, len(sentences), msg["chunk"]):
                model.embed(sentences[start : start + msg["chunk"]], None)
                done += len(sentences[start : start + msg["chunk"]])
                if done in msg["marks"]:
                    gc.collect()
                    marks[done] = rss_mb()
            reply.update(rss_mb=marks, peak_rss_mb=peak_rss_mb())
        elif cmd == "cache":  # ours: first pass vs cached passes (memory, then disk) on one corpus
            reply.update(cache_passes(model.backend, msg["sentences"], msg["cache_dir"]))
        elif cmd == "sgemm":  # this machine's matmul rate right now, with this worker's threads
            size, a, b = 2048, torch.randn(2048, 2048), torch.randn(2048, 2048)
            a @ b
            best = float("inf")
            for _ in range(5):
                t = time.perf_counter()
                a @ b
                best = min(best, time.perf_counter() - t)
            reply.update(gflops=2 * size**3 / best / 1e9)
        elif cmd == "quit":
            break
        else:
            reply = {"ok": False, "error": f"unknown command {cmd!r}"}
        print(json.dumps(reply), flush=True)


def cache_passes(backend, sentences, cache_dir):
    import numpy as np

    backend.configure_cache(cache_mb=4096, cache_dir=cache_dir)
    backend.clear_cache(disk=True)
    times = {"sentences": len(sentences)}
    t = time.perf_counter()
    first = backend.embed(sentences)
    times["first_s"] = time.perf_counter() - t
    t = time.perf_counter()
    memory = backend.embed(sentences)
    times["memory_s"] = time.perf_counter() - t
    backend.clear_cache()  # memory only: the next pass reads the disk cache, as a new process would
    t = time.perf_counter()
    disk = backend.embed(sentences)
    times["disk_s"] = time.perf_counter() - t
    times["identical"] = all(np.array_equal(a, b) and np.array_equal(a, c) for a, b, c in zip(first, memory, disk))
    backend.configure_cache(cache_mb=0, cache_dir=False)
    return times


if __name__ == "__main__":
    main()
