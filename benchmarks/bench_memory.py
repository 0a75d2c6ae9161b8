"""Resident memory of a loaded backend per precision, each in a fresh process (Linux: /proc/self/status).

    flock /tmp/bench.lock .venv/bin/python benchmarks/bench_memory.py --out /tmp/memory.md

For each weight set (random "small" and "original" architectures written at benchmark time, as
``bench.py`` does) and each precision, a child process imports the package, notes its resident set
(VmRSS), loads the backend (VmRSS "loaded"), embeds 64 real sentences (batch 32) twice so that every
pack and buffer exists, drops the caches, and notes VmRSS again and the peak (VmHWM). Each figure is
the growth over the resident set before loading: what a server worker pays per model, without and with
the working memory of batch-32 embedding (which the allocator keeps for the next call). The weights' own size (4 bytes
per float32 parameter) is printed beside it. ``--amx-packs`` makes the int8 packs a CPU with AMX makes (oneDNN's
for many rows) on any CPU, for their memory: ``--dtypes float32,int8 --sets original --amx-packs``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench

CHILD = r"""
import gc, json, sys
def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024  # MiB
import torch
torch.set_num_threads(int(sys.argv[4]))
if sys.argv[5] == "amx":  # the packs an AMX CPU makes (oneDNN for many rows), on any CPU: memory only
    from spacy_elmo.bilm import cpu_support
    cpu_support.amx_int8 = lambda: True
from spacy_elmo import load_bilm
sentences = json.loads(sys.argv[3])
before = status("VmRSS")
backend = load_bilm(sys.argv[1], dtype=sys.argv[2], cache_mb=0, token_cache_size=0)
loaded = status("VmRSS")
for _ in range(2):
    backend.embed(sentences, batch_size=32)
backend.clear_cache()
gc.collect()
params = sum(p.numel() for p in backend.model.parameters())
after, peak = status("VmRSS"), status("VmHWM")
print(json.dumps({"before": before, "loaded": loaded, "after": after, "peak": peak, "params": params}))
"""


def measure(directory: Path, dtype: str, sentences, threads: int, amx: bool = False) -> dict[str, float]:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD,
            str(directory),
            dtype,
            json.dumps(sentences),
            str(threads),
            "amx" if amx else "-",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", default="small,original")
    parser.add_argument("--dtypes", default="float32,int8,bfloat16")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--amx-packs",
        action="store_true",
        help="int8 packs as on a CPU with AMX (oneDNN for many rows) whatever this CPU has: their memory, not speed",
    )
    args = parser.parse_args(argv)
    sentences = bench.read_sentences(64, max_len=40)
    lines = [
        f"# Resident memory per precision ({bench.cpu_description()}; {args.threads} threads"
        f"{'; int8 packed as with AMX' if args.amx_packs else ''})",
        "",
        "| weights | dtype | float32 weights (MiB) | loaded (MiB) | x float32 | loaded + embedding (MiB) | x float32 "
        "| peak (MiB) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        sets = bench.write_weight_sets(Path(tmp))
        for name in args.sets.split(","):
            results = {
                d: measure(sets[name], d, sentences, args.threads, args.amx_packs) for d in args.dtypes.split(",")
            }
            f32 = results.get("float32")
            for dtype, r in results.items():
                cells = []
                for stage in ("loaded", "after"):
                    growth = r[stage] - r["before"]
                    ratio = f"{growth / (f32[stage] - f32['before']):.2f}" if f32 else "-"
                    cells.append(f"{growth:.0f} | {ratio}")
                lines.append(
                    f"| {name} | {dtype} | {r['params'] * 4 / 2**20:.0f} | {' | '.join(cells)} | {r['peak']:.0f} |"
                )
                print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
