"""What a model string names, checked before anything is read, downloaded or imported (torch)."""

import subprocess
import sys

import pytest

from spacy_elmo import WeightFileError
from spacy_elmo.sources.model_files import resolve_model_files
from spacy_elmo.sources.model_names import require_model


def test_require_model_takes_every_kind_of_name_reading_and_downloading_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("SPACY_ELMO_OFFLINE", "1")  # a download attempt would fail
    monkeypatch.chdir(tmp_path)
    (tmp_path / "folder").mkdir()
    for model in ("default", "default-v1", "original", "https://example.org/elmo.tar.gz", "folder", tmp_path):
        require_model(model)


@pytest.mark.parametrize("model, message", [("orignal", "did you mean 'original'?"), ("no/such/dir", "not found")])
def test_a_model_that_names_nothing_is_the_error_loading_it_gives(model, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(WeightFileError) as early:
        require_model(model)
    with pytest.raises(WeightFileError) as loading:
        resolve_model_files(model)
    assert str(early.value) == str(loading.value) and message in str(early.value)


def test_the_names_import_neither_torch_nor_spacy():
    code = "import sys, spacy_elmo.sources.model_names\nassert not {'torch', 'spacy'} & set(sys.modules)\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
