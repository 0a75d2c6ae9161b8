"""What serving an ONNX export saves against the torch path: import time, load and first sentence, peak resident
memory after two batches, each in a fresh process (twice, alternating), and the installed size of each runtime.

    python benchmarks/bench_onnx_footprint.py [--model default] [--rounds 2]

``--model``: what ``load_bilm`` takes; it is exported to a temporary folder first. The sentences are WikiText-2's
first test sentences (../shared/data/wikitext-2/test.txt); exits 2 saying so when they are missing. Prints the CPU
and a table (benchmarks/RESULTS.md, "ONNX export on ONNX Runtime vs the torch path").
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_onnx

# one process: import the runtime, load the model, embed one sentence, then two batches of 32
CHILD = """
import json, sys, time
runtime, model, text = sys.argv[1:4]
start = time.perf_counter()
__import__(runtime)
imported = time.perf_counter() - start
from spacy_elmo import load_bilm
lines = [line.split() for line in open(text, encoding="utf-8") if 3 <= len(line.split()) <= 60][:65]
start = time.perf_counter()
backend = load_bilm(model)
backend.embed(lines[:1])
first = time.perf_counter() - start
backend.embed(lines[1:33]); backend.embed(lines[33:65])
peak = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM")) / 1024  # (ru_maxrss
# would count the parent's pages at the fork)
print(json.dumps({"import_s": imported, "first_s": first, "peak_mb": peak, "torch": "torch" in sys.modules}))
"""


def installed_mb(module: str) -> float:
    """The size on disk of ``module``'s package folder (0 where it is not installed)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return 0.0
    folder = Path(next(iter(spec.submodule_search_locations)))
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20


def measure(runtime: str, model: str, text: Path) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, runtime, model, str(text)], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="default")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--text", type=Path, default=bench_onnx.TEST_LINES)
    args = parser.parse_args(argv)
    if not args.text.is_file():
        print(f"{args.text} is missing: see ../shared/data/wikitext-2/README.md", file=sys.stderr)
        return 2
    from spacy_elmo.output.onnx_export import export_onnx

    print(f"CPU: {bench_onnx.cpu_name()}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = str(Path(tmp) / "export")
        export_onnx(args.model, folder)
        runs: dict[str, list[dict]] = {"torch": [], "onnxruntime": []}
        for _ in range(args.rounds):
            runs["torch"].append(measure("torch", args.model, args.text))
            runs["onnxruntime"].append(measure("onnxruntime", folder, args.text))
    print("| runtime | installed MB | import s | load + first sentence s | peak resident MB | imports torch |")
    print("|---|---:|---:|---:|---:|---|")
    for runtime, results in runs.items():
        cells = [f"{min(r[key] for r in results):.2f}" for key in ("import_s", "first_s")]
        peak = max(r["peak_mb"] for r in results)
        torch = any(r["torch"] for r in results)
        print(f"| {runtime} | {installed_mb(runtime):.0f} | {' | '.join(cells)} | {peak:.0f} | {torch} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
