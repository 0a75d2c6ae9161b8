"""ELMoForManyLangs model directories: loaded everywhere a model is named, equal to the package's own output.

The reference activations come from the ``elmoformanylangs`` package itself (one batch from a
fresh ``Embedder``), for small random models built and saved with its own classes:
``tests/fixtures/elmoformanylangs/make_reference.py`` makes them (see its docstring).
"""

import io
import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import spacy_elmo
from spacy_elmo import WeightFileError
from spacy_elmo.bilm import manylangs_reader
from spacy_elmo.bilm.manylangs import ManyLangsBiLM

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "elmoformanylangs"
KINDS = ("word_char", "char_only")
TOLERANCE = 1e-5  # of each layer's scale (its largest magnitude in the reference)


def sentences():
    return json.loads((FIXTURES / "sentences.json").read_text(encoding="utf-8"))


def reference(kind):
    with np.load(FIXTURES / kind / "reference.npz", allow_pickle=False) as data:
        return [data[f"s{i}"] for i in range(len(sentences()))]


def relative_errors(got, expected):
    """Per layer: the largest |got - expected| over all sentences, over that layer's largest |expected|."""
    n_layers = expected[0].shape[0]
    errors = []
    for layer in range(n_layers):
        scale = max(float(np.abs(e[layer]).max()) for e in expected)
        errors.append(max(float(np.abs(g[layer] - e[layer]).max()) for g, e in zip(got, expected)) / scale)
    return errors


def copy_model(kind, tmp_path):
    target = tmp_path / kind
    shutil.copytree(FIXTURES / kind, target)
    return target


@pytest.mark.parametrize("kind", KINDS)
def test_backend_matches_elmoformanylangs(kind):
    """load_bilm(dir).embed == the package's Embedder.sents2elmo(output_layer=-2), every layer, to 1e-5 of scale."""
    backend = spacy_elmo.load_bilm(FIXTURES / kind)
    got = backend.embed(sentences())
    expected = reference(kind)
    assert [g.shape for g in got] == [e.shape for e in expected]
    errors = relative_errors(got, expected)
    print(kind, "inference path, max error / layer scale:", [f"{e:.1e}" for e in errors])
    assert max(errors) <= TOLERANCE


@pytest.mark.parametrize("kind", KINDS)
def test_reference_path_matches_elmoformanylangs(kind):
    """The autograd path (CharCNNEncoder.forward hooks, ElmoBiLSTM.forward) gives the same numbers."""
    model = manylangs_reader.load_model(FIXTURES / kind)
    tokens = sentences()
    ids = torch.as_tensor(
        np.stack([np.pad(model.token_encoder.token_ids(s), ((0, 8 - len(s)), (0, 0))) for s in tokens])
    )
    for p in model.parameters():
        p.requires_grad_(True)
    layers, _mask, _ = model(ids)
    got = [layers[:, i, : len(s)].detach().numpy() for i, s in enumerate(tokens)]
    errors = relative_errors(got, reference(kind))
    print(kind, "reference path, max error / layer scale:", [f"{e:.1e}" for e in errors])
    assert max(errors) <= TOLERANCE


def test_vectors_do_not_depend_on_the_batch():
    """Stateless: each sentence alone gives what the whole batch gives (the peer carries state over)."""
    backend = spacy_elmo.load_bilm(FIXTURES / "word_char")
    together = backend.embed(sentences())
    backend.clear_cache()
    alone = [backend.embed([s])[0] for s in reversed(sentences())][::-1]
    for a, b in zip(together, alone):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)


def test_vectorizer_and_spacy_component_take_the_directory(tmp_path):
    """ElmoVectorizer(model=DIR) and nlp.add_pipe("elmo", config={"model": DIR}); the pipeline saves a working copy."""
    import spacy

    from spacy_elmo import ElmoVectorizer

    directory = str(FIXTURES / "word_char")
    expected = reference("word_char")[0]  # "The cat sat on the mat ."
    rows = ElmoVectorizer(model=directory, layers="average", pooling="mean").fit_transform([" ".join(sentences()[0])])
    assert np.allclose(rows[0], expected.mean(axis=0).mean(axis=0), atol=1e-5)
    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config={"model": directory})
    doc = nlp(" ".join(sentences()[0]))
    assert np.abs(doc._.elmo_layers - expected).max() <= TOLERANCE * np.abs(expected).max()
    nlp.to_disk(tmp_path / "pipeline")
    saved = tmp_path / "pipeline" / "elmo" / "model"
    assert manylangs_reader.is_model_dir(saved) and (saved / "cnn_test.json").is_file()
    np.testing.assert_allclose(
        spacy.load(tmp_path / "pipeline")(doc.text)._.elmo_layers, doc._.elmo_layers, atol=1e-6
    )  # another backend: rounding
    other = spacy.blank("xx")
    other.add_pipe("elmo", config={"model": str(FIXTURES / "char_only")})
    np.testing.assert_allclose(other.from_bytes(nlp.to_bytes())(doc.text)._.elmo_layers, doc._.elmo_layers, atol=1e-6)


def test_cli_info_and_embed_take_the_directory(tmp_path):
    import h5py

    from spacy_elmo.cli import app

    runner = CliRunner()
    result = runner.invoke(app, ["info", str(FIXTURES / "char_only")])
    assert result.exit_code == 0, result.output
    assert "ELMoForManyLangs" in result.output and "no word embedding" in result.output
    (tmp_path / "in.txt").write_text(" ".join(sentences()[0]) + "\n", encoding="utf-8")
    result = runner.invoke(
        app,
        [
            "embed",
            str(tmp_path / "in.txt"),
            str(tmp_path / "out.hdf5"),
            "--model",
            str(FIXTURES / "char_only"),
            "--no-progress",
        ],
    )
    assert result.exit_code == 0, result.output
    with h5py.File(tmp_path / "out.hdf5", "r") as f:
        assert (
            np.abs(f["0"][...] - reference("char_only")[0]).max() <= TOLERANCE * np.abs(reference("char_only")[0]).max()
        )


def test_an_archive_of_the_directory_loads(tmp_path):
    archive = shutil.make_archive(str(tmp_path / "model"), "zip", FIXTURES, "char_only")
    got = spacy_elmo.load_bilm(archive).embed(sentences()[:1])[0]
    np.testing.assert_allclose(got, spacy_elmo.load_bilm(FIXTURES / "char_only").embed(sentences()[:1])[0], atol=1e-6)


# -- what is refused, and how it is said ------------------------------------------------------


class _RunsCode:
    """Unpickling this object calls Path.touch: what a crafted state file would do."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.mark.parametrize("legacy", [False, True])
def test_a_crafted_pickle_is_refused_and_never_runs(tmp_path, legacy):
    directory = copy_model("word_char", tmp_path)
    marker = tmp_path / "code-ran"
    state = dict(torch.load(FIXTURES / "word_char" / "encoder.pkl", weights_only=True))
    state["forward_layer_0.input_linearity.weight"] = _RunsCode(marker)
    torch.save(state, directory / "encoder.pkl", _use_new_zipfile_serialization=not legacy)
    with pytest.raises(WeightFileError, match=r"encoder\.pkl holds more than tensors and was refused"):
        spacy_elmo.load_bilm(directory)
    assert not marker.exists()


def _nested(*tensors):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "nested tensors are in prototype stage"
        return torch.nested.nested_tensor(list(tensors))


def _saves_nested_tensors() -> bool:
    """Whether this torch can save a nested tensor at all (torch 2.1 cannot: no file of its making holds one)."""
    try:
        torch.save({"x": _nested(torch.zeros(2), torch.zeros(3))}, io.BytesIO())
    except RuntimeError:
        return False
    return True


def _edit_state(directory, name, edit):
    path = directory / name
    state = dict(torch.load(path, weights_only=True))
    edit(state)
    torch.save(state, path)
    return path


@pytest.mark.parametrize(
    "file, edit, message",
    [
        (
            "encoder.pkl",
            lambda s: s.pop("backward_layer_1.state_projection.weight"),
            r"missing tensor 'backward_layer_1\.state_projection\.weight' \(expected shape \(16, 32\)\)",
        ),
        ("encoder.pkl", lambda s: s.update(extra=torch.zeros(1)), r"unexpected tensor 'extra'"),
        (
            "token_embedder.pkl",
            lambda s: s.update({"projection.bias": torch.zeros(15)}),
            r"'projection\.bias' has shape \(15,\), expected \(16,\) from the config \(encoder\.projection_dim\)",
        ),
        (
            "token_embedder.pkl",
            lambda s: s["convolutions.1.weight"].__setitem__((0, 0, 0), float("nan")),
            r"'convolutions\.1\.weight' holds 1 non-finite",
        ),
        (
            "token_embedder.pkl",
            lambda s: s.update({"projection.bias": torch.zeros(16, dtype=torch.int64)}),
            r"'projection\.bias' holds torch\.int64",
        ),
        (
            "encoder.pkl",
            lambda s: s.update({"forward_layer_0.state_linearity.bias": torch.zeros(128).to_sparse()}),
            r"'forward_layer_0\.state_linearity\.bias' is a sparse_coo tensor, expected a dense one",
        ),
        pytest.param(
            "encoder.pkl",
            lambda s: s.update({"forward_layer_0.state_linearity.bias": _nested(torch.zeros(64), torch.zeros(64))}),
            r"'forward_layer_0\.state_linearity\.bias' is a nested tensor, expected a dense one",
            marks=pytest.mark.skipif(not _saves_nested_tensors(), reason="this torch cannot save a nested tensor"),
        ),
    ],
)
def test_bad_state_files_fail_naming_the_file_and_tensor(tmp_path, file, edit, message):
    directory = copy_model("word_char", tmp_path)
    path = _edit_state(directory, file, edit)
    with pytest.raises(WeightFileError, match=message) as err:
        spacy_elmo.load_bilm(directory)
    assert str(path) in str(err.value)


def test_info_refuses_a_directory_that_would_not_load(tmp_path):
    from spacy_elmo.cli import app

    directory = copy_model("word_char", tmp_path)
    _edit_state(directory, "encoder.pkl", lambda s: s["forward_layer_1.state_linearity.bias"].__setitem__(0, np.inf))
    with pytest.raises(WeightFileError) as loading:
        spacy_elmo.load_bilm(directory)
    result = CliRunner().invoke(app, ["info", str(directory)])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [f"error: {loading.value}"]


def test_a_truncated_state_file_is_an_error(tmp_path):
    directory = copy_model("word_char", tmp_path)
    data = (directory / "token_embedder.pkl").read_bytes()
    (directory / "token_embedder.pkl").write_bytes(data[: len(data) // 2])
    with pytest.raises(WeightFileError, match=r"token_embedder\.pkl is not a readable torch\.save file"):
        spacy_elmo.load_bilm(directory)


def _edit_config(directory, section, key, value):
    path = directory / "cnn_test.json"
    raw = json.loads(path.read_text())
    raw[section][key] = value
    path.write_text(json.dumps(raw))


@pytest.mark.parametrize(
    "section, key, value, message",
    [
        ("encoder", "name", "lstm", r"encoder\.name must be \"elmo\""),
        ("token_embedder", "name", "lstm", r"token_embedder\.name must be \"cnn\""),
        ("token_embedder", "char_dim", 0, r"word-only models are not supported"),
        ("encoder", "cell_clip", "3", r"encoder\.cell_clip must be a finite number >= 0, or null, not \"3\""),
        (
            "token_embedder",
            "filters",
            [[60, 4]],
            r"a filter of width 60 is wider than token_embedder\.max_characters_per_token \(50\)",
        ),
        ("encoder", "n_layers", 3, r"missing tensor 'forward_layer_2\.input_linearity\.weight'"),
        (
            "token_embedder",
            "filters",
            [[1, 70_000]],
            r"token_embedder\.filters must be a list of 1 to 64 \[width, count\]",
        ),
        (
            "token_embedder",
            "filters",
            [[1, 1]] * 65,
            r"token_embedder\.filters must be a list of 1 to 64 \[width, count\]",
        ),
    ],
)
def test_bad_configs_fail_naming_the_option(tmp_path, section, key, value, message):
    directory = copy_model("word_char", tmp_path)
    _edit_config(directory, section, key, value)
    with pytest.raises(WeightFileError, match=message):
        spacy_elmo.load_bilm(directory)


@pytest.mark.parametrize(
    "section, key, bound",
    [
        ("encoder", "n_layers", "an int from 1 to 64"),
        ("token_embedder", "n_highway", "an int from 0 to 64"),
        ("token_embedder", "max_characters_per_token", "an int from 3 to 256"),
        ("encoder", "dim", "an int from 1 to 65536"),
        ("encoder", "projection_dim", "an int from 1 to 65536"),
        ("token_embedder", "char_dim", r"an int from 1 to 65536 \(word-only models are not supported\)"),
        ("token_embedder", "word_dim", "an int from 0 to 65536"),
    ],
)
def test_absurd_sizes_are_refused_before_anything_is_allocated(tmp_path, section, key, bound):
    """10**9 layers listed a layout for minutes and gigabytes; 10**9 characters a token loaded, then tried 15 GiB."""
    directory = copy_model("word_char", tmp_path)
    _edit_config(directory, section, key, 10**9)
    with pytest.raises(WeightFileError, match=rf"{section}\.{key} must be {bound}, not 1000000000"):
        spacy_elmo.load_bilm(directory)
    with pytest.raises(WeightFileError, match=rf"{section}\.{key} must be {bound}"):
        manylangs_reader.read_config(directory)  # what `spacy-elmo info` reads


def test_widths_each_within_bounds_but_too_many_parameters_together_are_refused(tmp_path):
    """encoder.dim and projection_dim of 60,000 each: 4 * 60,000 * 120,000 numbers per LSTM layer, about 58 GB."""
    directory = copy_model("word_char", tmp_path)
    _edit_config(directory, "encoder", "dim", 60_000)
    _edit_config(directory, "encoder", "projection_dim", 60_000)
    with pytest.raises(WeightFileError, match=r"parameters, more than the 1,000,000,000 a biLM may have here"):
        spacy_elmo.load_bilm(directory)


def test_the_architecture_file_is_found_as_the_peer_finds_it(tmp_path):
    """config_path as written, then its name in the directory, then the package's sample configs by name."""
    directory = copy_model("word_char", tmp_path)
    config = json.loads((directory / "config.json").read_text())
    config["config_path"] = "/elsewhere/on/the/authors/machine/cnn_test.json"  # as published models have it
    (directory / "config.json").write_text(json.dumps(config))
    assert manylangs_reader.architecture_file(directory) == directory / "cnn_test.json"
    (directory / "cnn_test.json").unlink()
    with pytest.raises(WeightFileError, match=r"config_path '/elsewhere/.*/cnn_test\.json' not found"):
        spacy_elmo.load_bilm(directory)
    config["config_path"] = "/elsewhere/cnn_50_100_512_4096_sample.json"
    (directory / "config.json").write_text(json.dumps(config))
    assert manylangs_reader.read_config(directory).cell_dim == 4096  # the sample architecture
    with pytest.raises(
        WeightFileError, match=r"has shape \(27, 8\), expected \(27, 100\)"
    ):  # ... which this model is not
        spacy_elmo.load_bilm(directory)


def test_dictionaries_are_checked(tmp_path):
    directory = copy_model("word_char", tmp_path)
    lines = (directory / "char.dic").read_text(encoding="utf-8").splitlines()
    (directory / "char.dic").write_text(
        "\n".join(line for line in lines if not line.startswith("<bow>\t")) + "\n", encoding="utf-8"
    )
    with pytest.raises(WeightFileError, match=r"char\.dic has no '<bow>' entry"):
        spacy_elmo.load_bilm(directory)
    (directory / "char.dic").write_text("a\tb\n", encoding="utf-8")
    with pytest.raises(WeightFileError, match=r"char\.dic, line 1: expected 'token<TAB>id'"):
        spacy_elmo.load_bilm(directory)
    (directory / "char.dic").write_text("a\t\u00b2\n", encoding="utf-8")  # "²".isdigit(), but int("²") fails
    with pytest.raises(WeightFileError, match=r"char\.dic, line 1: expected 'token<TAB>id', not 'a\\t²'"):
        spacy_elmo.load_bilm(directory)


def test_the_ideographic_space_line_reads_as_the_peer_reads_it():
    """Its writer's '\\u3000<TAB>id' line loses the space to strip(): a lone id means '\\u3000'."""
    chars = manylangs_reader.read_lexicon(FIXTURES / "word_char" / "char.dic", ())
    line = next(
        entry
        for entry in (FIXTURES / "word_char" / "char.dic").read_text(encoding="utf-8").splitlines()
        if entry.startswith("\u3000")
    )
    assert chars["\u3000"] == int(line.split("\t")[1])


def test_the_model_class_and_padding_char():
    model = spacy_elmo.load_bilm(FIXTURES / "word_char").model
    assert isinstance(model, ManyLangsBiLM)
    pad = model.token_encoder.special["<pad>"]
    assert model.token_encoder.char_embed.weight[pad].abs().sum() > 0  # the padding char keeps its trained embedding


def test_a_published_archive_downloads_by_name_and_loads(tmp_path, monkeypatch):
    """A manylangs-* entry is one zip (its own URL): fetched once into the cache, unpacked, found, loaded."""
    from spacy_elmo.sources.published import PUBLISHED
    from tests.sources.test_download import LoopbackServer, publish_test_model

    monkeypatch.setenv("SPACY_ELMO_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SPACY_ELMO_OFFLINE", raising=False)
    archive = Path(shutil.make_archive(str(tmp_path / "model"), "zip", FIXTURES, "word_char"))
    server = LoopbackServer({"11/1.zip": archive.read_bytes()})
    try:
        unstated = dict(parameters_m=None, approx_mb=None, language="Test")
        entry = publish_test_model(monkeypatch, "manylangs-test", archive_url=server.url("11/1.zip"), **unstated)
        backend = spacy_elmo.load_bilm("manylangs-test")
        assert max(relative_errors(backend.embed(sentences()), reference("word_char"))) <= TOLERANCE
        spacy_elmo.load_bilm("manylangs-test")
        assert server.hits == {"11/1.zip": 1}
    finally:
        server.stop()
    english = PUBLISHED["manylangs-en"]
    assert english.language == "English" and english.archive_url == "http://vectors.nlpl.eu/repository/11/144.zip"
    assert sum(name.startswith("manylangs-") for name in PUBLISHED if name != entry.name) == 44


def test_the_backend_pickles_by_reference():
    """Backends pickle as a reference (dask, multiprocessing): the same shared object comes back."""
    import pickle

    backend = spacy_elmo.load_bilm(FIXTURES / "char_only")
    assert pickle.loads(pickle.dumps(backend)) is backend


@pytest.mark.parametrize("kind", KINDS)
def test_model_shape_from_the_config_equals_the_loaded_backend(kind):
    from spacy_elmo.sources.model_paths import model_shape, resolve_model_files

    backend = spacy_elmo.load_bilm(FIXTURES / kind)
    assert model_shape(*resolve_model_files(FIXTURES / kind)) == (backend.n_layers, backend.dim)
