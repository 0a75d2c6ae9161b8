"""benchmarks/bench_onnx.py's parts: the batches, the table, and a smoke run on the bundled model."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import DATA_DIR, imported_script, require_corpora

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_onnx.py"


@pytest.fixture(scope="module")
def bench():
    with imported_script(SCRIPT) as module:
        yield module


def test_batches_keep_corpus_order(bench):
    work = [["a"], ["b"], ["c"]]
    assert bench.batches(work, 2) == [[["a"], ["b"]], [["c"]]]


def test_the_table_has_a_row_per_setting_and_batch_size(bench):
    results = {("default", 1): {"torch": [100.0, 300.0, 200.0], "onnx": [400.0, 400.0, 400.0]}}
    lines = bench.table(results).splitlines()
    assert len(lines) == 3
    assert lines[2] == "| default | 1 | 200 (100-300) | 400 (400-400) | 2.00x |"


def test_missing_wikitext_says_where_to_get_it(bench, tmp_path, capsys):
    assert bench.main(["--text", str(tmp_path / "test.txt")]) == 2
    assert "wikitext-2/README.md" in capsys.readouterr().err


@pytest.mark.slow
def test_the_smoke_run_prints_the_table():
    """In its own process: the script reconfigures the shared backend (no caches), which other tests rely on."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    text = require_corpora(DATA_DIR / "wikitext-2" / "test.txt")
    command = [sys.executable, str(SCRIPT), "--quick", "--text", str(text), "--threads", "1"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "CPU: " in done.stdout and "| 1 | 32 |" in done.stdout


def test_the_error_table_has_a_row_per_path(bench):
    """``--precision int8``'s second table: per layer, per sentence and the mixed vectors' cosine against float32."""
    import numpy as np

    reference = [np.ones((3, 2, 4), np.float32), np.full((3, 1, 4), 2.0, np.float32)]
    ours = [a.copy() for a in reference]
    ours[0][1] += 0.1  # layer 1 of the first sentence 10% off
    lines = bench.error_lines({"int8": ours, "exact": reference}, reference)
    assert len(lines) == 4  # (layer 1's scale over both sentences is 2; the cosine ignores a shift along a vector)
    assert lines[2] == "| int8 | 0 / 0.05 / 0 | 0 / 0.05 / 0 | 0.05 / 0.1 | 1.00000 / 1.00000 |"
    assert lines[3] == "| exact | 0 / 0 / 0 | 0 / 0 / 0 | 0 / 0 | 1.00000 / 1.00000 |"


def test_the_table_names_the_precision(bench):
    results = {("default", 32): {"torch": [100.0], "onnx": [150.0]}}
    assert "| torch int8: tokens/s | ONNX Runtime int8: tokens/s |" in bench.table(results, "int8")
