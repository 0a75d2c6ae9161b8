"""benchmarks/bench_onnx_footprint.py: a run on the bundled model prints each runtime's row, the ONNX one without
torch imported."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import DATA_DIR, require_corpora

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_onnx_footprint.py"


@pytest.mark.slow
def test_the_run_prints_both_runtimes():
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    text = require_corpora(DATA_DIR / "wikitext-2" / "test.txt")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--rounds", "1", "--text", str(text)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {
        line.split("|")[1].strip(): line
        for line in done.stdout.splitlines()
        if line.startswith("| torch") or line.startswith("| onnxruntime")
    }
    assert rows["torch"].rstrip().endswith("| True |") and rows["onnxruntime"].rstrip().endswith("| False |"), (
        done.stdout
    )
