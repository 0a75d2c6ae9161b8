"""Adding a precision is one row of the precision table and one engine file (ARCHITECTURE.md, "Inference engines").

A temporary copy of the package gets a dummy precision, float64: a row appended to ``bilm/engine/precisions.py``
(copied from float32's, with its own names) and ``bilm/engine/float64.py``, an engine family whose steps the one
step loop runs compiled. Nothing else of the copy is edited; in a process that imports the copy, the
command line's help, ``info``, the checks of a precision's name, the fingerprints and the spaCy component all take
it, and its vectors are float32's to float32 rounding.
"""

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

ROW = """
# --- the dummy precision of tests/bilm/test_new_precision.py ---
PRECISIONS = (
    *PRECISIONS,
    __import__("dataclasses").replace(
        PRECISIONS[-2],  # float32's row, with its own names
        name="float64",
        torch_name="float64",
        aliases=("double", "fp64"),
        description="float64 (a test's dummy precision)",
        gist="dummy",
        cuda_vectors=None,
        native=None,
        emulated="",
        engines=("float64.Float64Engine",),
        trains=False,
    ),
)
"""

ENGINE_FILE = '''"""A dummy precision's engine family (tests/bilm/test_new_precision.py): float64, torch's products."""

import torch

from .contract import Target
from .plain import PlainEngine


class Float64Engine(PlainEngine):
    name = "float64"
    load_dtype = torch.float64
    tolerance = 1e-5

    @classmethod
    def serves(cls, target: Target) -> bool:
        return target.dtype == torch.float64 and not target.int8

    def steps_compiled(self) -> bool:
        return True
'''

SCRIPT = r"""
import subprocess, sys, warnings
from pathlib import Path

import numpy as np
import spacy
import torch

import spacy_elmo
from spacy_elmo.bilm import engine
from spacy_elmo.bilm.engine import float64, precisions
from spacy_elmo.runtime.configuration.validation import check_precision
from spacy_elmo.sources.bundled_versions import precision_fingerprint
from spacy_elmo.cli.model_info import describe
from spacy_elmo.sources.pinned_model import PinnedModel

fixture = Path(sys.argv[1])
copy = Path(sys.argv[2])
assert Path(spacy_elmo.__file__).parent == copy / "spacy_elmo", spacy_elmo.__file__

# the table and the checks of a name
row = precisions.precision("float64")
assert row in precisions.PRECISIONS and "float64" in precisions.VECTOR_PRECISIONS
for spelling in ("float64", "double", "fp64", torch.float64):
    assert check_precision(spelling) == "float64", spelling
assert float64.Float64Engine in engine.ENGINES

# the command line's help
for command in ("embed",):
    shown = subprocess.run(
        [sys.executable, "-m", "spacy_elmo", command, "--help"], capture_output=True, text=True, cwd=copy,
        env={**__import__("os").environ, "COLUMNS": "400", "TERM": "dumb"}
    )
    assert shown.returncode == 0, shown.stderr
    assert "float64" in shown.stdout and "double" in shown.stdout, shown.stdout

# info
text = describe(fixture / "options.json", fixture / "lm_weights.hdf5")
assert "float64" in text.splitlines()[-2] or "float64" in text, text

# the backend: its engine, its step products, its vectors and its fingerprint
sentences = [["The", "cat", "sat", "on", "the", "mat", "."], ["Hello", "world"]]
exact = spacy_elmo.load_bilm(str(fixture))
backend = spacy_elmo.load_bilm(str(fixture), precision="float64")
assert backend.dtype == torch.float64
assert backend is spacy_elmo.load_bilm(str(fixture), precision=torch.float64)
assert backend is spacy_elmo.load_bilm(str(fixture), precision="double")
layers = backend.embed(sentences)
assert type(engine.engine_of(backend.model.lstm)) is float64.Float64Engine
for got, want in zip(layers, exact.embed(sentences)):
    np.testing.assert_allclose(got, want, atol=2e-5)
    assert not np.array_equal(got, want)  # computed in float64: not float32's bits
assert backend.fingerprint != exact.fingerprint
assert backend.fingerprint == precision_fingerprint(exact.files_fingerprint, "float64")
pin = PinnedModel(str(fixture), fingerprint=backend.fingerprint, saved_by=spacy_elmo.__version__)
assert pin.matches(exact.files_fingerprint)

# the spaCy component
nlp = spacy.blank("en")
nlp.add_pipe("elmo", config={"model": str(fixture), PRECISION_KEY: "fp64"})
reference = spacy.blank("en")
reference.add_pipe("elmo", config={"model": str(fixture)})
doc, want = nlp("The cat sat on the mat ."), reference("The cat sat on the mat .")
assert nlp.get_pipe("elmo").backend is backend
np.testing.assert_allclose(doc.tensor, want.tensor, atol=2e-5)
print("ok")
"""


def copy_with_dummy_precision(tmp_path: Path) -> Path:
    """A copy of the package with the dummy row and its engine file, and nothing else changed."""
    copy = tmp_path / "tree"
    shutil.copytree(ROOT / "spacy_elmo", copy / "spacy_elmo", ignore=shutil.ignore_patterns("__pycache__"))
    table = copy / "spacy_elmo" / "bilm" / "engine" / "precisions.py"
    source = table.read_text(encoding="utf-8")
    end = source.index("\nPRECISION_NAMES = ")
    table.write_text(source[:end] + ROW + source[end:], encoding="utf-8")
    (copy / "spacy_elmo" / "bilm" / "engine" / "float64.py").write_text(ENGINE_FILE, encoding="utf-8")
    return copy


@pytest.mark.slow
def test_a_new_precision_is_one_row_and_one_engine_file(tmp_path, fixture_dir):
    copy = copy_with_dummy_precision(tmp_path)
    script = tmp_path / "check.py"
    script.write_text(textwrap.dedent(SCRIPT).replace("PRECISION_KEY", repr(PRECISION_KEY)), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(copy)}
    ran = subprocess.run(
        [sys.executable, str(script), str(fixture_dir), str(copy)], capture_output=True, text=True, env=env
    )
    assert ran.returncode == 0 and ran.stdout.strip().endswith("ok"), ran.stdout[-3000:] + ran.stderr[-6000:]


PRECISION_KEY = "precision"  # the component's setting
