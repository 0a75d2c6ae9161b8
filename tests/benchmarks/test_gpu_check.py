"""benchmarks/gpu_check.py, the one command a GPU machine runs, cannot rot: its CPU smoke run works end to end."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import DATA_DIR, require_corpora

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_smoke_run_writes_a_complete_report(tmp_path):
    text = require_corpora(DATA_DIR / "wikitext-2" / "test.txt")
    command = [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--device", "cpu", "--quick"]
    command += ["--out", str(tmp_path), "--text", str(text), "--peer", str(tmp_path / "no-peer.py")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["environment"]["device"] == "cpu" and "skipped" in report["tests"]
    for rows in report["parity"].values():
        assert rows["float32"]["layer_errors"] == [0.0, 0.0, 0.0]  # CPU against itself
        assert all(0 < e < 2.5e-2 for e in rows["bfloat16"]["layer_errors"])  # docs/precision.md's bound
        assert rows["float32, process asks for TF32"]["process_setting_kept"]
    speeds = report["speed"]["batches"]
    assert set(speeds) == {"1", "4"} and all(r["tokens_per_s"] > 0 for e in speeds.values() for r in e["rows"].values())
    assert "AllenNLP not run" in report["speed"]["note"]
    assert report["trainer"].get("words_per_s", 0) > 0, report["trainer"]
    table = (tmp_path / "gpu_check.md").read_text()
    assert "| 1 | ours float32 |" in table and "## Trainer" in table


def test_every_gpu_test_file_is_found():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu_check import gpu_test_files

    files = gpu_test_files()
    assert {"tests/bilm/test_cuda.py", "tests/bilm/test_engines.py", "tests/spacy/test_spacy_ops.py"} <= set(files)
    assert "tests/benchmarks/test_gpu_check.py" not in files


# spaCy and thinc as the GPU machine lacks them: an import of either fails as a missing package does
WITHOUT_SPACY = """
import importlib.abc, sys
class Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"spacy", "thinc"}:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Missing())
import pytest
sys.exit(pytest.main(["--collect-only", "-q", "-m", "gpu", "-p", "no:cacheprovider", *sys.argv[1:]]))
"""


@pytest.mark.slow
def test_gpu_test_files_collect_without_spacy():
    """The GPU machine has no spaCy: every gpu-marked test outside spaCy's own files must still be collected there
    (a file that imports spaCy at the top hides its CUDA tests from the GPU check)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu_check import gpu_test_files

    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_SPACY, *gpu_test_files()], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert "test_cuda_rows_match_cpu" in done.stdout  # the vectorizer's CUDA test is among them


def test_the_carry_keeps_what_spacy_imports_and_drops_the_rest():
    """benchmarks/gpu_carry.py packs spaCy for the GPU machine: every language stays (spaCy's registry imports ja,
    ko, th, vi and zh at its first blank pipeline), tests, Cython sources and caches go."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu_carry import run_command, spacy_unneeded

    for kept in ("spacy/lang/ja/__init__.py", "spacy/lang/en/stop_words.py", "thinc/api.py", "blis/py.so"):
        assert not spacy_unneeded(Path(kept)), kept
    for dropped in ("spacy/tests/conftest.py", "thinc/__pycache__/api.cpython-312.pyc", "spacy/tokens/doc.pyx"):
        assert spacy_unneeded(Path(dropped)), dropped
    assert "tar -xJf" in run_command(with_spacy=True) and "tar -xJf" not in run_command(with_spacy=False)
    assert "benchmarks/gpu_check.py --peer .peer/allennlp_oracle.py --text .peer/test.txt" in run_command(False)
