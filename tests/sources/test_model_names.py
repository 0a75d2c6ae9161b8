"""What a model string names, checked before anything is read, downloaded or imported (torch); and a model name no
path can have (300 characters, a megabyte): one WeightFileError where the name is resolved, never the OSError "File
name too long", every message echoing such names as a bounded excerpt, from every entry point: load_bilm,
ElmoVectorizer, the spaCy component's config and a saved model.json, `spacy-elmo info` and `spacy-elmo embed --model`
(one line, exit 2)."""

import json
import subprocess
import sys

import pytest
import spacy
from typer.testing import CliRunner

from spacy_elmo import ElmoVectorizer, WeightFileError, load_bilm
from spacy_elmo.cli import app
from spacy_elmo.sources.model_names import require_model
from spacy_elmo.sources.model_paths import resolve_model_files
from spacy_elmo.spacy.saved_model import COMPONENT_MODEL


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


NAMES = {
    "300-characters": "a" * 300,  # longer than a folder entry may be
    "1-MB": "m" * (1 << 20),  # longer than a path may be
    "300-character-archive": "a" * 300 + ".zip",
    "long-relative-path": "no-such-folder/" + "b" * 300,  # not found before it is too long: the message bounded too
}
BOUND = 300


def check_message(message: str, name: str) -> None:
    assert "\n" not in message and len(message) < BOUND, message
    assert "not found" in message and name[:20] in message and "File name too long" not in message, message


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    monkeypatch.setenv("SPACY_ELMO_OFFLINE", "1")
    monkeypatch.setenv("SPACY_ELMO_HOME", str(tmp_path / "home"))


@pytest.mark.parametrize("name", NAMES.values(), ids=NAMES)
def test_load_bilm_and_the_vectorizer_say_the_name_is_not_found(name):
    with pytest.raises(WeightFileError) as err:
        load_bilm(name)
    check_message(str(err.value), name)
    with pytest.raises(WeightFileError) as err:
        ElmoVectorizer(model=name, tokenizer="whitespace").fit(["a b"])
    check_message(str(err.value), name)


@pytest.mark.parametrize("name", [NAMES["300-characters"], NAMES["1-MB"]], ids=["300-characters", "1-MB"])
def test_the_spacy_component_refuses_it_in_add_pipe(name):
    with pytest.raises(WeightFileError) as err:
        spacy.blank("en").add_pipe("elmo", config={"model": name})
    check_message(str(err.value), name)


def test_a_saved_model_json_naming_it_fails_at_load(fixture_dir, tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": str(fixture_dir)})
    nlp.to_disk(tmp_path / "pipeline")
    meta = tmp_path / "pipeline" / "elmo" / "model" / COMPONENT_MODEL
    saved = json.loads(meta.read_text(encoding="utf-8"))
    meta.write_text(json.dumps({**saved, "source": "remote", "model": NAMES["1-MB"]}), encoding="utf-8")
    with pytest.raises(WeightFileError) as err:
        spacy.load(tmp_path / "pipeline")
    message = str(err.value)  # refused by model.json's schema (a name beyond any path), the file named in full
    assert "\n" not in message and len(message) < BOUND + len(str(meta)), message
    assert f"{meta}: model: " in message and "save it again" in message, message


@pytest.mark.parametrize("name", NAMES.values(), ids=NAMES)
@pytest.mark.parametrize("command", ["info", "embed"])
def test_the_command_line_says_it_in_one_line_and_exits_2(tmp_path, command, name):
    source = tmp_path / "in.txt"
    source.write_text("a b\n", encoding="utf-8")
    args = ["info", name] if command == "info" else ["embed", str(source), str(tmp_path / "o.hdf5"), "--model", name]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output[:2000]
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output[:2000]
    check_message(lines[0], name)
