"""One check of spacy-elmo on a GPU, in one command: its gpu tests, parity with the CPU per precision, speed
against AllenNLP 0.9.0's ELMo code on the same GPU, the trainer's words/s, and peak GPU memory.

    python benchmarks/gpu_check.py [--peer ../shared/peers/allennlp_oracle.py] [--out DIR]
    python benchmarks/gpu_check.py --device cpu --quick --out DIR  # CPU smoke run (tests/benchmarks/test_gpu_check.py)

Needs torch (a CUDA build for ``--device cuda``), numpy, h5py, pytest; not spaCy (the tests that need it are
reported as not collected where it is missing). AllenNLP's side runs its unmodified 0.9.0 ELMo modules
(``_ElmoBiLm``) through ``--peer`` (``allennlp_oracle.py``, which imports them without AllenNLP's other
dependencies; the ``allennlp==0.9.0`` wheel must be importable). Sentences come from ``--text`` (WikiText-2,
one paragraph per line, split at " . ").

Speed: random weights of the published "original" model's shapes (``bench.py``'s), sentences batched 1 (a
20-token sentence), 32 and 256 at a time; ours in float32 / bfloat16 / float16 and AllenNLP's in float32
alternate in one process, round after round, and each figure is the median round. Both sides return the
vectors in host memory (ours as numpy arrays; AllenNLP's activations copied off the GPU), ours with its
sentence and token caches off, AllenNLP's with its LSTM state reset per batch (so both compute the same
stateless vectors, compared to 1e-5 of each layer's scale). "ours on CPU" is the same model in float32 on this
machine's CPU. The trainer: ``spacy-elmo train --device DEVICE`` on the "small" architecture with default flags
and a GPU-sized token budget, words/s from its metrics.json. Writes ``DIR/gpu_check.json`` and
``DIR/gpu_check.md`` and prints the table.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench import ROOT, SHARED, cpu_description, model_files, read_sentences, write_weight_sets  # noqa: E402

from spacy_elmo import load_bilm  # noqa: E402

DTYPES = ("float32", "bfloat16", "float16")
# what each run measures: the random weights' architecture for parity and speed, batch sizes, timing rounds,
# sentences (for parity: of each model), and the trainer's run
FULL = dict(model="original", batches=(1, 32, 256), rounds=5, parity_sentences=32, train_steps=60, train_budget=65536)
QUICK = dict(model="fixture", batches=(1, 4), rounds=2, parity_sentences=4, train_steps=2, train_budget=512)


def layer_errors(ours: list[np.ndarray], reference: list[np.ndarray]) -> np.ndarray:
    """Per layer: the largest |ours - reference| over all sentences, over that layer's largest |reference|."""
    worst = np.max([np.abs(a - b).max(axis=(1, 2)) for a, b in zip(ours, reference)], axis=0)
    scale = np.max([np.abs(b).max(axis=(1, 2)) for b in reference], axis=0)
    return worst / scale


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def environment(device: torch.device) -> dict[str, object]:
    env: dict[str, object] = {"torch": torch.__version__, "cpu": cpu_description(), "device": str(device)}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(
            gpu=props.name,
            gpu_memory_gib=round(props.total_memory / 2**30, 1),
            cuda=torch.version.cuda,
            cudnn=torch.backends.cudnn.version(),
            bf16_supported=torch.cuda.is_bf16_supported(),
        )
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
            env["driver"] = subprocess.run(query, capture_output=True, text=True, timeout=30).stdout.strip()
    return env


# -- the gpu tests --------------------------------------------------------------------------


def gpu_test_files() -> list[str]:
    """The test files with gpu-marked tests."""
    return sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "tests").rglob("test_*.py")
        if re.search(r"mark\.gpu\b", p.read_text(encoding="utf-8"))
    )


def run_gpu_tests(device: torch.device, timeout: float) -> dict[str, object]:
    if device.type != "cuda":
        return {"skipped": "no CUDA device: the gpu-marked tests need one"}
    files = gpu_test_files()
    command = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "-rfE"]
    command += ["--continue-on-collection-errors", *files]
    started = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        output, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as stopped:
        output, code = (
            (stopped.stdout or b"").decode() if isinstance(stopped.stdout, bytes) else str(stopped.stdout),
            -1,
        )
    summary = next((line for line in reversed(output.splitlines()) if re.search(r"\d+ (passed|failed)", line)), "")
    counts = {kind: int(n) for n, kind in re.findall(r"(\d+) (passed|failed|skipped|errors?)", summary)}
    problems = [line for line in output.splitlines() if line.startswith(("FAILED", "ERROR"))]
    return {
        "files": files,
        "summary": summary or "no summary (timed out?)",
        "counts": counts,
        "exit_code": code,
        "problems": problems[:40],
        "seconds": round(time.perf_counter() - started, 1),
    }


# -- parity ---------------------------------------------------------------------------------


@contextlib.contextmanager
def process_asks_for_tf32():
    """What a user's ``torch.set_float32_matmul_precision("high")`` asks for (put back afterwards)."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def parity(device: torch.device, model_dir: Path, sentences: list[list[str]]) -> dict[str, object]:
    """Each precision on ``device`` against float32 on the CPU: per layer, max error over the layer's scale."""
    reference = load_bilm(model_dir, cache_mb=0).embed(sentences)
    rows: dict[str, object] = {}
    for dtype in DTYPES:
        backend = load_bilm(model_dir, device=device, dtype=dtype, cache_mb=0)
        backend.configure_cache(token_cache_size=0)
        with warnings_quiet():
            ours = backend.embed(sentences)
        finite = all(np.isfinite(a).all() for a in ours)
        rows[dtype] = {"layer_errors": [float(e) for e in layer_errors(ours, reference)], "finite": finite}
    with process_asks_for_tf32(), warnings_quiet():
        backend = load_bilm(model_dir, device=device, cache_mb=0)
        ours = backend.embed(sentences)
        rows["float32, process asks for TF32"] = {
            "layer_errors": [float(e) for e in layer_errors(ours, reference)],
            "finite": all(np.isfinite(a).all() for a in ours),
            "process_setting_kept": torch.get_float32_matmul_precision() == "high",
        }
    return rows


@contextlib.contextmanager
def warnings_quiet():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # emulated precisions on a CPU say so once; this report says it anyway
        yield


# -- speed ----------------------------------------------------------------------------------


class Peer:
    """AllenNLP 0.9.0's ``_ElmoBiLm`` on ``device``, stateless (state reset per batch), vectors to host memory."""

    def __init__(self, oracle: Path, options: Path, weights: Path, device: torch.device) -> None:
        spec = importlib.util.spec_from_file_location("allennlp_oracle", oracle)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        self.allennlp = module.load_allennlp()
        self.version = self.allennlp.version
        self.bilm = module.build_bilm(str(options), str(weights)).to(device)
        self.device = device

    def embed(self, batch: list[list[str]]) -> list[np.ndarray]:
        elmo, util = self.allennlp.elmo, self.allennlp.nn_util
        with torch.no_grad():
            self.bilm._elmo_lstm.reset_states()
            out = self.bilm(elmo.batch_to_ids(batch).to(self.device))
            pairs = [util.remove_sentence_boundaries(t, out["mask"]) for t in out["activations"]]
            stacked = torch.stack([p[0] for p in pairs], dim=1).cpu().numpy()  # (batch, layers, time, dim)
        return [stacked[k, :, : len(s)] for k, s in enumerate(batch)]


def batches_for(size: int, sentences: list[list[str]], count: int) -> list[list[list[str]]]:
    """``count`` batches of ``size`` sentences (size 1: sentences of exactly 20 tokens, as in the targets)."""
    pool = [s for s in sentences if len(s) == 20] if size == 1 else sentences
    pool = pool or sentences
    out = []
    for i in range(count):
        start = (i * size) % max(1, len(pool) - size + 1)
        out.append(pool[start : start + size])
    return out


def speed(
    device: torch.device,
    model_dir: Path,
    sentences: list[list[str]],
    batch_sizes: tuple[int, ...],
    rounds: int,
    peer_path: Path | None,
    cpu_too: bool,
) -> dict[str, object]:
    options, weights = (Path(p) for p in model_files(model_dir))
    runners: dict[str, object] = {}
    memory: dict[str, float] = {}
    for dtype in DTYPES:
        backend = load_bilm(model_dir, device=device, dtype=dtype, cache_mb=0)
        backend.configure_cache(token_cache_size=0)
        runners[f"ours {dtype}"] = backend
    if cpu_too and device.type == "cuda":
        backend = load_bilm(model_dir, cache_mb=0)
        backend.configure_cache(token_cache_size=0)
        runners["ours float32 on CPU"] = backend
    peer_note = ""
    if peer_path is not None and peer_path.is_file():
        try:
            peer = Peer(peer_path, options, weights, device)
            runners[f"AllenNLP {peer.version} float32"] = peer
        except Exception as error:  # the peer is optional: say why it is missing
            peer_note = f"AllenNLP not run: {type(error).__name__}: {error}"
    else:
        peer_note = f"AllenNLP not run: no --peer file ({peer_path})"
    results: dict[str, object] = {"note": peer_note, "batches": {}}
    for size in batch_sizes:
        batches = batches_for(size, sentences, 8 if size == 1 else max(1, 512 // size))
        tokens = sum(len(s) for b in batches for s in b)
        names = [n for n in runners if not (n.endswith("on CPU") and size > 32)]
        times: dict[str, list[float]] = {n: [] for n in names}
        first: dict[str, list[np.ndarray]] = {}
        for name in names:  # warm-up (kernels chosen, memory pools grown) and the outputs to compare
            first[name] = (
                runners[name].embed(batches[0], batch_size=size)
                if name.startswith("ours")
                else runners[name].embed(batches[0])
            )
        for r in range(rounds):
            for name in names if r % 2 == 0 else reversed(names):
                runner = runners[name]
                if device.type == "cuda" and not name.endswith("on CPU"):
                    torch.cuda.reset_peak_memory_stats(device)
                synchronize(device)
                start = time.perf_counter()
                for batch in batches:
                    runner.embed(batch, batch_size=size) if name.startswith("ours") else runner.embed(batch)
                synchronize(device)
                times[name].append(time.perf_counter() - start)
                if device.type == "cuda" and not name.endswith("on CPU"):
                    peak = torch.cuda.max_memory_allocated(device) / 2**20
                    memory[name] = max(memory.get(name, 0.0), peak)
        reference = first["ours float32"]
        row = {}
        for name in names:
            median = statistics.median(times[name])
            row[name] = {
                "tokens_per_s": tokens / median,
                "ms_per_batch": 1000 * median / len(batches),
                "max_layer_error_vs_ours_float32": float(layer_errors(first[name], reference).max()),
            }
        results["batches"][str(size)] = {"tokens": tokens, "batches": len(batches), "rows": row}
    results["peak_gpu_memory_mib"] = memory
    return results


# -- the trainer ----------------------------------------------------------------------------


def trainer_speed(device: torch.device, text: Path, arch: str, steps: int, budget: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        command = [sys.executable, "-m", "spacy_elmo", "train", str(out), "--train", str(text), "--arch", arch]
        command += ["--max-steps", str(steps), "--token-budget", str(budget), "--no-progress"]
        command += ["--device", str(device), "--checkpoint-every", str(10 * steps), "--epochs", "1000"]
        started = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
        wall = time.perf_counter() - started
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            return {"error": f"exit {done.returncode}: {last}", "command": " ".join(command[1:])}
        metrics = json.loads((out / "metrics.json").read_text())
    return {
        "words_per_s": metrics["words_seen"] / metrics["train_seconds"],
        "words_seen": metrics["words_seen"],
        "steps": steps,
        "token_budget": budget,
        "arch": arch,
        "precision": metrics.get("precision"),
        "wall_s": round(wall, 1),
    }


# -- the report -----------------------------------------------------------------------------


def render(report: dict) -> str:
    env = report["environment"]
    lines = [f"# spacy-elmo GPU check, {report['date']}", ""]
    lines += [f"- {k}: {v}" for k, v in env.items()]
    tests = report["tests"]
    lines += ["", "## gpu-marked tests", "", f"{tests.get('summary') or tests.get('skipped')}"]
    lines += [f"- {p}" for p in tests.get("problems", [])]
    lines += ["", "## Parity with float32 on the CPU (max error per layer / layer's largest value)", ""]
    for model, rows in report["parity"].items():
        lines += [f"**{model}**", "", "| precision | layer 0 | layer 1 | layer 2 | finite |", "|---|---|---|---|---|"]
        for name, row in rows.items():
            errors = " | ".join(f"{e:.2e}" for e in row["layer_errors"])
            lines.append(f"| {name} | {errors} | {row['finite']} |")
        lines.append("")
    sp = report["speed"]
    lines += [f"## Speed, {sp['model']}-size weights (median round; tokens/s)", ""]
    if sp.get("note"):
        lines += [sp["note"], ""]
    lines += ["| batch | implementation | tokens/s | ms/batch | vs AllenNLP | max error vs ours float32 |"]
    lines += ["|---|---|---|---|---|---|"]
    for size, entry in sp["batches"].items():
        rows = entry["rows"]
        peer = next((r["tokens_per_s"] for n, r in rows.items() if n.startswith("AllenNLP")), None)
        for name, row in rows.items():
            ratio = f"{row['tokens_per_s'] / peer:.2f}x" if peer else "-"
            lines.append(
                f"| {size} | {name} | {row['tokens_per_s']:,.0f} | {row['ms_per_batch']:.2f} | {ratio} | "
                f"{row['max_layer_error_vs_ours_float32']:.2e} |"
            )
    if sp.get("peak_gpu_memory_mib"):
        lines += [
            "",
            "Peak GPU memory (MiB): " + ", ".join(f"{k} {v:,.0f}" for k, v in sp["peak_gpu_memory_mib"].items()),
        ]
    tr = report["trainer"]
    lines += ["", "## Trainer", ""]
    if "error" in tr:
        lines.append(f"failed: {tr['error']}")
    else:
        lines.append(
            f"{tr['words_per_s']:,.0f} words/s ({tr['arch']} architecture, {tr['steps']} steps of "
            f"{tr['token_budget']:,} tokens, precision {tr['precision']})"
        )
    lines += ["", f"Took {report['seconds']:.0f} s."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (the smoke run)")
    parser.add_argument("--peer", type=Path, default=SHARED / "peers" / "allennlp_oracle.py")
    parser.add_argument("--text", type=Path, default=SHARED / "data" / "wikitext-2" / "test.txt")
    parser.add_argument("--out", type=Path, default=Path("gpu_check"))
    parser.add_argument("--quick", action="store_true", help="small sizes: the smoke run")
    parser.add_argument("--skip-tests", action="store_true", help="do not run the gpu-marked tests")
    parser.add_argument("--tests-timeout", type=float, default=240.0)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("no CUDA device here: use --device cpu for the smoke run")
    if not args.text.is_file():
        parser.error(f"no sentences at {args.text}: give --text (WikiText-2's test.txt, ../shared/data/wikitext-2)")
    sizes = QUICK if args.quick else FULL
    started = time.perf_counter()
    report: dict[str, object] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    report["environment"] = environment(device)
    print(json.dumps(report["environment"]), flush=True)
    report["tests"] = {"skipped": "--skip-tests"} if args.skip_tests else run_gpu_tests(device, args.tests_timeout)
    print("tests:", report["tests"].get("summary") or report["tests"].get("skipped"), flush=True)
    sentences = read_sentences(768, path=args.text)
    n = sizes["parity_sentences"]
    with tempfile.TemporaryDirectory() as tmp:
        sets = write_weight_sets(Path(tmp), () if sizes["model"] == "fixture" else (sizes["model"],))
        model = sets[sizes["model"]]
        report["parity"] = {"fixture": parity(device, sets["fixture"], sentences[:n])}
        if sizes["model"] != "fixture":
            report["parity"][f"{sizes['model']}-size random"] = parity(device, model, sentences[:n])
        report["parity"]["bundled default (trained)"] = parity(
            device, ROOT / "spacy_elmo" / "models" / "default", sentences[: 2 * n]
        )
        print("parity done", flush=True)
        report["speed"] = speed(
            device, model, sentences, sizes["batches"], sizes["rounds"], args.peer, cpu_too=not args.quick
        )
        report["speed"]["model"] = sizes["model"]
        print("speed done", flush=True)
    arch = "tiny" if args.quick else "small"
    report["trainer"] = trainer_speed(device, args.text, arch, sizes["train_steps"], sizes["train_budget"])
    report["seconds"] = time.perf_counter() - started
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_check.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    table = render(report)
    (args.out / "gpu_check.md").write_text(table, encoding="utf-8")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
