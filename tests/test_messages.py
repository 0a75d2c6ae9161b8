"""What a newcomer's mistakes and tools get: clear errors, fit-time checks, plain CLI help, quiet notebooks."""

import warnings

import pytest
from typer.testing import CliRunner

from spacy_elmo import ElmoVectorizer, WeightFileError, load_bilm
from spacy_elmo.cli import app


def test_embed_help_shows_the_dask_extra_and_the_threads_option():
    result = CliRunner().invoke(app, ["embed", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "spacy-elmo[dask]" in result.output  # rich markup used to swallow "[dask]"
    assert "--threads" in result.output and "non-blank" in result.output


def test_embed_threads_sets_the_cli_process_threads(fixture_dir, tmp_path, monkeypatch):
    import torch

    calls = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)  # the CLI's process, not the library, sets it
    source = tmp_path / "in.txt"
    source.write_text("a b\n")
    result = CliRunner().invoke(
        app,
        [
            "embed",
            str(source),
            str(tmp_path / "out.hdf5"),
            "--model",
            str(fixture_dir),
            "--threads",
            "1",
            "--no-progress",
        ],
    )
    assert result.exit_code == 0, result.output
    assert calls == [1]
    assert CliRunner().invoke(app, ["embed", str(source), str(tmp_path / "o.hdf5"), "--threads", "0"]).exit_code == 2


def test_a_weights_file_instead_of_its_folder_says_what_to_pass(fixture_dir):
    with pytest.raises(WeightFileError, match=r"is a file, not an ELMo model directory: pass its folder") as err:
        load_bilm(fixture_dir / "lm_weights.hdf5")
    assert str(fixture_dir) in str(err.value) and "options=..., weights=..." in str(err.value)


@pytest.mark.parametrize("device", ["tpu", "cuda:x", 3.5])
def test_a_bogus_device_is_a_value_error_naming_it(fixture_dir, device):
    with pytest.raises(ValueError, match=r"is not a torch device"):
        load_bilm(fixture_dir, device=device)
    with pytest.raises(ValueError, match=r"is not a torch device"):
        ElmoVectorizer(model=str(fixture_dir), device=device).fit(["a b"])


def test_an_unknown_tokenizer_language_fails_in_fit(fixture_dir):
    with pytest.raises(ValueError, match=r"tokenizer='xx-nope': not a spaCy language code"):
        ElmoVectorizer(model=str(fixture_dir), tokenizer="xx-nope").fit([["already", "tokens"]])
    with pytest.raises(TypeError, match=r"tokenizer=3"):
        ElmoVectorizer(model=str(fixture_dir), tokenizer=3).fit(["a"])


def test_a_pipeline_displays_in_a_notebook_without_warnings(fixture_dir):
    from sklearn.externals._numpydoc.docscrape import ClassDoc
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "Unknown section Input" was a UserWarning
        ClassDoc(ElmoVectorizer)
        html = make_pipeline(ElmoVectorizer(model=str(fixture_dir)), LogisticRegression())._repr_html_()
    assert "ElmoVectorizer" in html


def test_a_missing_options_or_weights_file_is_named_by_model_files(tmp_path, fixture_dir):
    """``model_files.resolve_model_files`` is where a missing file of an ``options=`` / ``weights=`` pair is found."""
    from spacy_elmo.model_files import resolve_model_files

    for options, weights, role in [
        (fixture_dir / "options.json", tmp_path / "nope.hdf5", "weights"),
        (tmp_path / "nope.json", fixture_dir / "lm_weights.hdf5", "options"),
    ]:
        with pytest.raises(WeightFileError, match=rf"{role} file not found: .*nope"):
            resolve_model_files(options=options, weights=weights)
        with pytest.raises(WeightFileError, match=rf"{role} file not found: .*nope"):
            load_bilm(options=options, weights=weights)
