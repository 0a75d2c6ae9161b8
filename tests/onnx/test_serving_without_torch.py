"""An ONNX export served without torch: .ci/serving_check.py's two steps, here with torch refused by an import hook
(CI's serving pass runs the same steps in an install without torch): a saved scikit-learn Pipeline and a saved spaCy
pipeline on an export give the torch path's vectors within 1e-5 of their scale."""

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("onnx", reason="the ONNX export needs the onnx package (pip install onnx)")
pytest.importorskip("onnxruntime", reason="the ONNX runner needs onnxruntime (pip install onnxruntime)")
pytest.importorskip("spacy")
pytest.importorskip("sklearn")

from tests.conftest import REFUSE_TORCH

CHECK = Path(__file__).resolve().parents[2] / ".ci" / "serving_check.py"

# the child: torch refused before anything else is imported, then the check's run step
CHILD = REFUSE_TORCH + textwrap.dedent(
    """
    import importlib.util

    spec = importlib.util.spec_from_file_location("serving_check", sys.argv[1])
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    sys.exit(check.main(["run", sys.argv[2]]))
    """
)


def test_saved_pipelines_on_an_export_need_no_torch(tmp_path):
    spec = importlib.util.spec_from_file_location("serving_check", CHECK)
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    check.make(tmp_path)
    ran = subprocess.run([sys.executable, "-c", CHILD, str(CHECK), str(tmp_path)], capture_output=True, text=True)
    assert ran.returncode == 0 and ran.stdout.strip().endswith("ok"), ran.stdout + ran.stderr[-4000:]


def test_the_check_fails_on_other_vectors(tmp_path):
    """Guards the check: a reference of other vectors is said, not passed."""
    import numpy as np

    spec = importlib.util.spec_from_file_location("serving_check", CHECK)
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    check.make(tmp_path)
    want = dict(np.load(tmp_path / "reference.npz"))
    want["rows"] = want["rows"] * 1.001
    np.savez(tmp_path / "reference.npz", **want)
    assert any(problem.startswith("rows:") for problem in check.run(tmp_path))
