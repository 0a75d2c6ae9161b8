"""What a newcomer's mistakes and tools get: clear errors, fit-time checks, plain CLI help, quiet notebooks."""

import warnings

import pytest
from typer.testing import CliRunner

from spacy_elmo import ElmoVectorizer, WeightFileError, load_bilm
from spacy_elmo.cli import app


def test_embed_help_shows_the_dask_extra_and_the_threads_option():
    result = CliRunner().invoke(app, ["embed", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "the [dask] extra" in result.output  # rich markup used to swallow "[dask]"
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
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    try:  # the docstring parser newer scikit-learn's display runs on each estimator
        from sklearn.externals._numpydoc.docscrape import ClassDoc
    except ImportError:  # scikit-learn 1.3 has none and reads no docstring
        ClassDoc = None

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "Unknown section Input" was a UserWarning
        if ClassDoc is not None:
            ClassDoc(ElmoVectorizer)
        html = make_pipeline(ElmoVectorizer(model=str(fixture_dir)), LogisticRegression())._repr_html_()
    assert "ElmoVectorizer" in html


def test_a_missing_options_or_weights_file_is_named_by_model_files(tmp_path, fixture_dir):
    """``model_paths.resolve_model_files`` is where a missing file of an ``options=`` / ``weights=`` pair is found."""
    from spacy_elmo.sources.model_paths import resolve_model_files

    for options, weights, role in [
        (fixture_dir / "options.json", tmp_path / "nope.hdf5", "weights"),
        (tmp_path / "nope.json", fixture_dir / "lm_weights.hdf5", "options"),
    ]:
        with pytest.raises(WeightFileError, match=rf"{role} file not found: .*nope"):
            resolve_model_files(options=options, weights=weights)
        with pytest.raises(WeightFileError, match=rf"{role} file not found: .*nope"):
            load_bilm(options=options, weights=weights)


def test_a_mistyped_model_name_says_did_you_mean_at_add_pipe_and_load_bilm(tmp_path, monkeypatch):
    """Not a wall of every published name at the first doc: the close name, when the model is named, nothing fetched."""
    import spacy

    home = tmp_path / "home"
    monkeypatch.setenv("SPACY_ELMO_HOME", str(home))
    monkeypatch.setenv("SPACY_ELMO_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    routes = {
        "load_bilm": lambda name: load_bilm(name),
        "add_pipe": lambda name: spacy.blank("en").add_pipe("elmo", config={"model": name}),
        "ElmoBiLM.v1": lambda name: spacy.blank("en").add_pipe(
            "elmo", config={"model": {"@misc": "spacy_elmo.ElmoBiLM.v1", "path": name}}
        ),
    }
    for route, call in routes.items():
        for typo, meant in [("orignal", "'original'"), ("Smal", "'small'"), ("defualt", "'default'")]:
            with pytest.raises(WeightFileError, match=f"did you mean {meant}") as raised:
                call(typo)
            message = str(raised.value)
            assert len(message) < 300 and "manylangs" not in message and "spacy-elmo models" in message, (
                route,
                message,
            )
    assert not home.exists() or not any(home.rglob("*"))  # nothing downloaded, nothing cached
    # a bare word close to no name may be the folder a saved pipeline came from: loaded (and refused) at the first doc
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": "my_elmo"})
    with pytest.raises(WeightFileError, match="ELMo model 'my_elmo' not found") as raised:
        nlp("a b")
    assert len(str(raised.value)) < 300 and "did you mean" not in str(raised.value)
