"""Bad options.json / weight files fail at load with a WeightFileError naming the file and the option or dataset.

Each case copies the fixture model into tmp_path and edits the copy with json / h5py.
"""

import json
import shutil

import h5py
import numpy as np
import pytest
import spacy
import srsly
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import spacy_elmo
from spacy_elmo import WeightFileError
from spacy_elmo.bilm import load_model, save_model
from spacy_elmo.bilm import model as model_module
from spacy_elmo.bilm import weights as weights_module
from spacy_elmo.bilm.weights import options_from_dict
from spacy_elmo.train.network.presets import PRESETS

LSTM = "RNN_0/RNN/MultiRNNCell/Cell{}/LSTMCell"


@pytest.fixture
def model_copy(fixture_dir, tmp_path):
    """A private copy of the fixture model: (options path, weights path)."""
    shutil.copy(fixture_dir / "options.json", tmp_path / "options.json")
    shutil.copy(fixture_dir / "lm_weights.hdf5", tmp_path / "lm_weights.hdf5")
    return tmp_path / "options.json", tmp_path / "lm_weights.hdf5"


def edit_options(path, section, key, value):
    raw = json.loads(path.read_text())
    raw[section][key] = value
    path.write_text(json.dumps(raw))


def load(options, weights):
    """Load through the public entry point (the process-wide cache is keyed by path, size and mtime)."""
    return spacy_elmo.load_bilm(options=options, weights=weights)


def refusal(options, weights) -> str:
    """The message of the WeightFileError that loading refuses with (fails the test if it loads)."""
    with pytest.raises(WeightFileError) as err:
        load(options, weights)
    return str(err.value)


# -- item 4: NaN / Inf in the weights -------------------------------------------------------


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_weights_are_refused(model_copy, bad):
    options, weights = model_copy
    with h5py.File(weights, "a") as f:
        f["CNN_proj/W_proj"][3, 5] = bad
    message = refusal(options, weights)
    assert str(weights) in message and "'CNN_proj/W_proj'" in message
    assert "1 non-finite value(s)" in message and "index (3, 5)" in message


def test_float64_beyond_float32_range_is_refused(model_copy):
    options, weights = model_copy
    name = f"{LSTM.format(1)}/B"
    with h5py.File(weights, "a") as f:
        values = f[name][...].astype(np.float64)
        values[7] = 1e300
        del f[name]
        f[name] = values
    expected = rf"{weights.name}: dataset '{name}' holds 1 non-finite .* index \(7,\)"
    with pytest.raises(WeightFileError, match=expected):
        load_model(options, weights)


def test_float64_weights_still_load(model_copy, fixture_dir):
    options, weights = model_copy
    with h5py.File(weights, "a") as f:
        values = f["CNN_proj/b_proj"][...].astype(np.float64)
        del f["CNN_proj/b_proj"]
        f["CNN_proj/b_proj"] = values
    model = load_model(options, weights)
    reference = load_model(fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5")
    assert torch.equal(model.token_encoder.projection.bias, reference.token_encoder.projection.bias)


def test_saving_non_finite_weights_is_refused(fixture_dir, tmp_path):
    model = load_model(fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5")
    with torch.no_grad():
        model.lstm.backward_layers[0].projection[2, 1] = float("nan")
    with pytest.raises(WeightFileError, match=r"cannot write .*'RNN_1/RNN/MultiRNNCell/Cell0/LSTMCell/W_P_0'"):
        save_model(model, tmp_path / "out")
    assert not (tmp_path / "out" / "weights.hdf5").exists()
    assert not [p.name for p in (tmp_path / "out").iterdir() if p.name.endswith(".tmp")]  # the temporary file went too


# -- item 5: options.json is checked by a schema ---------------------------------------------


@pytest.mark.parametrize(
    "section, key, value, message",
    [
        (
            "lstm",
            "use_skip_connections",
            "false",
            'lstm.use_skip_connections must be true or false (a JSON boolean), not "false"',
        ),
        ("lstm", "use_skip_connections", 1, "lstm.use_skip_connections must be true or false (a JSON boolean), not 1"),
        ("lstm", "dim", 64.0, "lstm.dim must be an int from 1 to 65536, not 64.0"),
        ("lstm", "projection_dim", True, "lstm.projection_dim must be an int from 1 to 65536, not true"),
        ("lstm", "n_layers", 0, "lstm.n_layers must be an int from 1 to 64, not 0"),
        ("lstm", "n_layers", "2", 'lstm.n_layers must be an int from 1 to 64, not "2"'),
        ("lstm", "cell_clip", "3", 'lstm.cell_clip must be a finite number >= 0, or null, not "3"'),
        ("lstm", "proj_clip", -1, "lstm.proj_clip must be a finite number >= 0, or null, not -1"),
        ("char_cnn", "n_highway", -1, "char_cnn.n_highway must be an int from 0 to 64, not -1"),
        ("char_cnn", "n_highway", 2.0, "char_cnn.n_highway must be an int from 0 to 64, not 2.0"),
        ("lstm", "n_layers", 10**9, "lstm.n_layers must be an int from 1 to 64, not 1000000000"),
        ("char_cnn", "n_highway", 10**9, "char_cnn.n_highway must be an int from 0 to 64, not 1000000000"),
        ("char_cnn", "n_characters", 100, "char_cnn.n_characters must be an int from 261 to 65536, not 100"),
        ("char_cnn", "max_characters_per_token", 49, "char_cnn.max_characters_per_token must be 50, not 49"),
        ("char_cnn", "activation", "gelu", 'char_cnn.activation must be "relu" or "tanh", not "gelu"'),
        ("char_cnn", "embedding", 4, "char_cnn.embedding must be an object, not 4"),
        ("char_cnn", "embedding", {"dim": 4.5}, "char_cnn.embedding.dim must be an int from 1 to 65536, not 4.5"),
    ],
)
def test_options_are_checked_by_the_schema(model_copy, section, key, value, message):
    options, weights = model_copy
    edit_options(options, section, key, value)
    assert refusal(options, weights) == f"{options}: {message}"


@pytest.mark.parametrize(
    "filters",
    [[], [[1, 4], [2]], [[1, 4.0]], [[0, 4]], [[1, -4]], [[51, 4]], [[True, 4]], "1,4", [[1, 4, 1]], [(1, 4)], None],
)
def test_filters_must_be_width_count_pairs_of_positive_ints(filters):
    raw = PRESETS["tiny"]
    raw = {**raw, "char_cnn": {**raw["char_cnn"], "filters": filters}}
    with pytest.raises(WeightFileError, match=r"char_cnn\.filters must be a list of 1 to 64 \[width, count\] pairs"):
        options_from_dict(raw)


def test_presets_and_their_json_round_trip():
    for raw in PRESETS.values():
        options = options_from_dict(raw)
        assert options_from_dict(json.loads(json.dumps(options.to_json()))) == options


def _tiny_with(section, key, value):
    raw = json.loads(json.dumps(PRESETS["tiny"]))
    raw[section][key] = value
    return raw


@pytest.mark.parametrize(
    "section, key, value, message",
    [
        ("lstm", "dim", 10**9, "lstm.dim must be an int from 1 to 65536, not 1000000000"),
        ("lstm", "projection_dim", 10**8, "lstm.projection_dim must be an int from 1 to 65536, not 100000000"),
        ("char_cnn", "filters", [[1, 16], [2, 10**9]], "char_cnn.filters must be a list of 1 to 64 [width, count]"),
        ("char_cnn", "filters", [[1, 1]] * 65, "char_cnn.filters must be a list of 1 to 64 [width, count]"),
        ("char_cnn", "embedding", {"dim": 10**9}, "char_cnn.embedding.dim must be an int from 1 to 65536, not 1000"),
        ("char_cnn", "n_characters", 10**9, "char_cnn.n_characters must be an int from 261 to 65536, not 1000"),
        # each width allowed (projection_dim 60000 too), together 1.3e11 parameters: two layers' W_0 of each direction
        ("lstm", "dim", 60000, "the architecture has 129,606,802,984 parameters, more than the 1,000,000,000"),
    ],
)
def test_absurd_architectures_are_refused_with_the_options(monkeypatch, section, key, value, message):
    """docs/guarantees.md: an absurd size is refused at once (it ended in a 150-line allocator traceback)."""
    monkeypatch.setattr(model_module, "BiLM", lambda *a, **k: pytest.fail("built the model"))
    raw = _tiny_with(section, key, value)
    if message.startswith("the architecture"):
        raw["lstm"]["projection_dim"] = 60000
    with pytest.raises(WeightFileError) as err:
        options_from_dict(raw, source="huge.json")
    assert str(err.value).startswith(f"huge.json: {message}") and "\n" not in str(err.value), str(err.value)


def test_the_parameter_bound_is_far_above_the_original_and_checked_on_load(model_copy):
    from spacy_elmo.bilm.weights import MAX_PARAMETERS, parameter_count

    assert 10 * parameter_count(options_from_dict(PRESETS["original"])) <= MAX_PARAMETERS  # 93.6M
    options, weights = model_copy
    raw = json.loads(options.read_text())
    raw["lstm"].update(dim=60000, projection_dim=60000)  # a file that declares it is no more than its options
    options.write_text(json.dumps(raw))
    with pytest.raises(WeightFileError, match=r"parameters, more than the 1,000,000,000 a biLM may have"):
        load(options, weights)


@pytest.mark.parametrize(
    "section, key, value, message",
    [
        (
            "lstm",
            "n_layers",
            1,
            f"unexpected dataset '{LSTM.format(1)}/W_0': "
            "lstm.n_layers is 1 in the options, but the file has 2 LSTM layers",
        ),
        (
            "lstm",
            "n_layers",
            3,
            f"missing dataset '{LSTM.format(2)}/W_0': "
            "lstm.n_layers is 3 in the options, but the file has 2 LSTM layers",
        ),
        (
            "char_cnn",
            "n_highway",
            0,
            "unexpected dataset 'CNN_high_0/W_transform': "
            "char_cnn.n_highway is 0 in the options, but the file has 2 highway layers",
        ),
        (
            "char_cnn",
            "filters",
            [[1, 4], [2, 8], [3, 16], [4, 32]],
            "unexpected dataset 'CNN/W_cnn_4': len(char_cnn.filters) is 4 in the options, but the file has 5 CNN "
            "filters",
        ),
    ],
)
def test_options_that_disagree_with_the_weights_are_refused(model_copy, section, key, value, message):
    options, weights = model_copy
    edit_options(options, section, key, value)
    assert refusal(options, weights) == f"weight file {weights}: {message}"


def test_an_extra_lstm_layer_in_the_file_is_refused(model_copy):
    options, weights = model_copy
    with h5py.File(weights, "a") as f:
        for direction in (0, 1):
            f.copy(f[f"RNN_{direction}/RNN/MultiRNNCell/Cell1"], f"RNN_{direction}/RNN/MultiRNNCell/Cell2")
    assert refusal(options, weights) == (
        f"weight file {weights}: unexpected dataset '{LSTM.format(2)}/W_0': "
        "lstm.n_layers is 2 in the options, but the file has 3 LSTM layers"
    )


def test_an_extra_highway_layer_in_the_file_is_refused(model_copy):
    options, weights = model_copy
    with h5py.File(weights, "a") as f:
        f.copy(f["CNN_high_1"], "CNN_high_2")
    expected = "'CNN_high_2/W_transform': char_cnn.n_highway is 2 in the options, but the file has 3 highway layers"
    with pytest.raises(WeightFileError, match=expected):
        load(options, weights)


def test_an_unknown_dataset_in_the_file_is_refused(model_copy):
    options, weights = model_copy
    with h5py.File(weights, "a") as f:
        f["softmax/W"] = np.zeros((3, 4), np.float32)
        f["CNN/W_cnn_01"] = f["CNN/W_cnn_1"][...]  # not a canonical copy number
    assert refusal(options, weights) == (
        f"weight file {weights}: unexpected dataset 'CNN/W_cnn_01' (and 1 more): "
        "not part of the model the options describe"
    )


def test_a_missing_layer_in_the_middle_names_the_dataset(model_copy):
    options, weights = model_copy
    with h5py.File(weights, "a") as f:
        del f["RNN_1/RNN/MultiRNNCell/Cell0"]
    expected = r"missing dataset 'RNN_1/RNN/MultiRNNCell/Cell0/LSTMCell/W_0' \(expected shape \(32, 256\)\)"
    with pytest.raises(WeightFileError, match=expected):
        load(options, weights)


def test_the_fixture_and_the_default_model_still_load(fixture_dir):
    fixture = load_model(fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5")
    assert fixture.token_encoder.char_embed.weight.shape == (262, 4) and fixture.n_layers == 2
    default = spacy_elmo.load_bilm("default").model
    assert default.token_encoder.char_embed.weight.shape == (262, 16) and len(default.token_encoder.highways) == 1


# -- item 6: sizes are checked against the file before anything is allocated -----------------


@pytest.fixture
def no_model_building(monkeypatch):
    """Fail the test if the loader builds a BiLM (the check must come first)."""

    def refuse(options):
        raise AssertionError(f"BiLM built before the weight file was checked: {options}")

    monkeypatch.setattr(model_module, "BiLM", refuse)  # (weights.load_model builds it from there)


@pytest.mark.parametrize(
    "section, key, value, message",
    [
        (
            "char_cnn",
            "n_characters",
            65536,  # the most the schema takes (more: test_absurd_architectures_are_refused_with_the_options)
            "dataset 'char_embed' has shape (261, 4), expected (65535, 4) "
            "from the options (char_cnn.n_characters, char_cnn.embedding.dim)",
        ),
        (
            "lstm",
            "n_layers",
            64,  # the most the schema takes (more: test_options_are_checked_by_the_schema)
            f"missing dataset '{LSTM.format(2)}/W_0': "
            "lstm.n_layers is 64 in the options, but the file has 2 LSTM layers",
        ),
        (
            "char_cnn",
            "n_highway",
            64,
            "missing dataset 'CNN_high_2/W_transform': "
            "char_cnn.n_highway is 64 in the options, but the file has 2 highway layers",
        ),
        (
            "lstm",
            "dim",
            65536,
            f"dataset '{LSTM.format(0)}/W_0' has shape (32, 256), expected (32, 262144) "
            "from the options (lstm.projection_dim, lstm.dim)",
        ),
        (
            "char_cnn",
            "filters",
            [[1, 4], [2, 8], [3, 16], [4, 32], [5, 10000]],
            "dataset 'CNN/W_cnn_4' has shape (1, 5, 4, 64), expected (1, 5, 4, 10000) "
            "from the options (char_cnn.filters, char_cnn.embedding.dim)",
        ),
    ],
)
def test_huge_sizes_fail_before_allocating(model_copy, no_model_building, section, key, value, message):
    options, weights = model_copy
    edit_options(options, section, key, value)
    assert refusal(options, weights) == f"weight file {weights}: {message}"


# -- item 12: wrong object types and links --------------------------------------------------


def test_a_group_where_a_dataset_should_be(model_copy):
    options, weights = model_copy
    with h5py.File(weights, "a") as f:
        del f["CNN_proj/W_proj"]
        f.create_group("CNN_proj/W_proj")
    expected = f"weight file {weights}: 'CNN_proj/W_proj' is a group, expected a dataset of shape (124, 16)"
    assert refusal(options, weights) == expected


@pytest.mark.parametrize(
    "value, words",
    [
        ("hello", "strings (dtype object)"),
        (np.array([b"x"] * 16), "strings (dtype |S1)"),
        (np.arange(16, dtype=np.int32), "values of dtype int32"),
    ],
)
def test_a_dataset_that_does_not_hold_floats(model_copy, value, words):
    options, weights = model_copy
    with h5py.File(weights, "a") as f:
        del f["CNN_proj/b_proj"]
        f["CNN_proj/b_proj"] = value
    assert refusal(options, weights) == (
        f"weight file {weights}: dataset 'CNN_proj/b_proj' holds {words}, expected floating-point numbers (float32)"
    )


def test_external_links_are_refused(model_copy, tmp_path):
    options, weights = model_copy
    outside = tmp_path / "elsewhere" / "other.hdf5"
    outside.parent.mkdir()
    shutil.copy(weights, outside)
    with h5py.File(weights, "a") as f:
        del f["CNN_proj/W_proj"]
        f["CNN_proj/W_proj"] = h5py.ExternalLink(str(outside), "/CNN_proj/W_proj")
    assert refusal(options, weights) == (
        f"weight file {weights}: 'CNN_proj/W_proj' is an external link to {outside}:/CNN_proj/W_proj; "
        "links are refused, a weight file must hold its datasets itself"
    )


def test_soft_links_are_refused(model_copy):
    options, weights = model_copy
    with h5py.File(weights, "a") as f:
        f.move("CNN_high_1", "stash")
        f["CNN_high_1"] = h5py.SoftLink("/stash")
    with pytest.raises(WeightFileError, match=r"'CNN_high_1' is a soft link to /stash; links are refused"):
        load(options, weights)


@pytest.mark.parametrize("storage", ["virtual", "external"])
def test_datasets_stored_outside_the_file_are_refused(model_copy, tmp_path, storage):
    options, weights = model_copy
    with h5py.File(weights, "a") as f:
        values = f["CNN_proj/b_proj"][...]
        del f["CNN_proj/b_proj"]
        if storage == "external":
            (tmp_path / "raw.bin").write_bytes(values.tobytes())
            external = [(str(tmp_path / "raw.bin"), 0, 64)]
            f.create_dataset("CNN_proj/b_proj", shape=(16,), dtype="f4", external=external)
        else:
            with h5py.File(tmp_path / "source.hdf5", "w") as source:
                source["b"] = values
            layout = h5py.VirtualLayout(shape=(16,), dtype="f4")
            layout[:] = h5py.VirtualSource(str(tmp_path / "source.hdf5"), "b", shape=(16,))
            f.create_virtual_dataset("CNN_proj/b_proj", layout)
    with pytest.raises(WeightFileError, match=r"dataset 'CNN_proj/b_proj' keeps its data outside the file"):
        load(options, weights)


def test_a_second_link_to_a_group_is_refused(model_copy):
    options, weights = model_copy
    with h5py.File(weights, "a") as f:
        f["CNN/loop"] = f["/"]  # a hard-link cycle
    with pytest.raises(WeightFileError, match="group 'CNN/loop' is a second link to a group seen before"):
        load(options, weights)


# -- item 12: a saved pipeline whose model description is damaged ---------------------------


def test_saved_pipeline_model_json_without_source(fixture_dir, tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": str(fixture_dir)})
    nlp.to_disk(tmp_path / "pipeline")
    meta_path = tmp_path / "pipeline" / "elmo" / "model" / "model.json"
    meta = json.loads(meta_path.read_text())
    del meta["source"]
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(ValueError) as err:
        spacy.load(tmp_path / "pipeline")
    assert str(err.value) == f"component 'elmo': {meta_path}: missing key 'source' (expected \"default\" or \"files\")"


@pytest.mark.parametrize(
    "payload, message",
    [
        ({"fingerprint": None}, 'missing key \'source\' (expected "default" or "files")'),
        ({"source": "url"}, 'key \'source\' must be "default", "files" or "remote", not \'url\''),
        ({"source": "files", "options": b"{}"}, "missing key 'weights' (the bytes of the saved model file)"),
        (["default"], "expected an object with a 'source' key, not list"),
    ],
)
def test_serialized_component_without_source(payload, message):
    component = spacy.blank("en").add_pipe("elmo")
    data = srsly.msgpack_dumps({"model": srsly.msgpack_dumps(payload)})
    with pytest.raises(ValueError) as err:
        component.from_bytes(data)
    assert str(err.value) == f"component 'elmo': the model in the serialized bytes: {message}"


def test_info_counts_parameters_without_building_the_model(fixture_dir, tmp_path, monkeypatch):
    import spacy_elmo.bilm.model
    from spacy_elmo.bilm.weights import parameter_count, read_options

    options = json.loads((fixture_dir / "options.json").read_text())
    options["char_cnn"]["n_characters"] = 65536
    path = tmp_path / "options.json"
    path.write_text(json.dumps(options))
    monkeypatch.setattr(spacy_elmo.bilm.model, "BiLM", lambda *a, **k: pytest.fail("built the model"))
    base = parameter_count(read_options(fixture_dir / "options.json"))
    assert parameter_count(read_options(path)) == base + (65536 - 262) * options["char_cnn"]["embedding"]["dim"]


def _random_bytes(options, weights):
    weights.write_bytes(np.random.default_rng(0).bytes(weights.stat().st_size))


def _wrong_shape(options, weights):
    with h5py.File(weights, "a") as f:
        del f["CNN_proj/W_proj"]
        f["CNN_proj/W_proj"] = np.zeros((3, 3), dtype=np.float32)


def _nan(options, weights):
    with h5py.File(weights, "a") as f:
        f["CNN_proj/W_proj"][0, 0] = np.nan


@pytest.mark.parametrize(
    "damage, message",
    [
        (_random_bytes, "is not a readable HDF5 file"),
        (_wrong_shape, "dataset 'CNN_proj/W_proj' has shape (3, 3), expected (124, 16)"),
        (_nan, "dataset 'CNN_proj/W_proj' holds 1 non-finite value(s)"),
    ],
)
def test_info_refuses_what_loading_refuses(model_copy, damage, message):
    """`spacy-elmo info` printed the architecture of these files and exited 0, while loading them failed."""
    from typer.testing import CliRunner

    from spacy_elmo.cli import app

    options, weights = model_copy
    assert CliRunner().invoke(app, ["info", str(options.parent)]).exit_code == 0
    damage(options, weights)
    with pytest.raises(WeightFileError) as loading:
        load(options, weights)
    assert message in str(loading.value)
    result = CliRunner().invoke(app, ["info", str(options.parent)])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [f"error: {loading.value}"]


# -- damaged files: any failure to read is a WeightFileError naming the file ---------


def _data_ranges(path):
    """Each dataset's raw data as (name, first byte, end) in the file (the fixture stores them contiguously)."""
    ranges = []
    with h5py.File(path, "r") as handle:

        def visit(name, item):
            if isinstance(item, h5py.Dataset):
                offset = item.id.get_offset()
                ranges.append((name, offset, offset + item.id.get_storage_size()))

        handle.visititems(visit)
    return ranges


def _damaged(original: bytes, offset: int, mask: bytes) -> bytes:
    data = bytearray(original)
    for k, bits in enumerate(mask[: len(data) - offset]):
        data[offset + k] ^= bits
    return bytes(data)


@pytest.mark.parametrize("signature", [b"SNOD", b"TREE", b"HEAP"])
def test_a_damaged_structure_is_a_weight_file_error_and_embed_exits_2(model_copy, signature, tmp_path):
    """A damaged symbol table, B-tree or heap made h5py raise RuntimeError/KeyError; the CLI printed a traceback."""
    from typer.testing import CliRunner

    from spacy_elmo.cli import app

    options, weights = model_copy
    data = weights.read_bytes()
    at = data.index(signature)
    weights.write_bytes(_damaged(data, at, b"\xff\xff\xff\xff"))
    with pytest.raises(WeightFileError, match=f"weight file {weights}.*damaged") as err:
        load_model(options, weights)
    assert isinstance(err.value.__cause__, Exception) and not isinstance(err.value.__cause__, WeightFileError)
    (tmp_path / "in.txt").write_text("a b\n")
    result = CliRunner().invoke(
        app, ["embed", str(tmp_path / "in.txt"), str(tmp_path / "out.hdf5"), "--model", str(tmp_path), "--no-progress"]
    )
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: weight file") and "Traceback" not in result.output


@pytest.fixture(scope="module")
def damage_targets(fixture_dir):
    """The fixture's bytes, its datasets' data ranges, the bytes outside them (metadata) and its exported datasets."""
    path = fixture_dir / "lm_weights.hdf5"
    original = path.read_bytes()
    ranges = _data_ranges(path)
    in_data = np.zeros(len(original), dtype=bool)
    for _, start, end in ranges:
        in_data[start:end] = True
    with h5py.File(path, "r") as handle:
        reference = {name: handle[name][...] for name, _, _ in ranges}
    return original, ranges, [int(i) for i in np.flatnonzero(~in_data)], reference


@pytest.mark.slow
@settings(
    max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_random_damage_gives_a_faithful_load_or_a_weight_file_error(model_copy, damage_targets, data):
    """Flip 1-4 bytes anywhere (mostly in the metadata, where h5py's raw errors came from).

    Outcomes allowed: WeightFileError, or a model whose every dataset equals the undamaged file's,
    except datasets whose own data bytes were flipped (those equal what the damaged file holds).
    """
    original, ranges, metadata, reference = damage_targets
    options, weights = model_copy
    offset = data.draw(st.one_of(st.sampled_from(metadata), st.integers(0, len(original) - 1)), label="offset")
    mask = data.draw(st.binary(min_size=1, max_size=4).filter(any), label="xor mask")
    weights.write_bytes(_damaged(original, offset, mask))
    try:
        model = load_model(options, weights)
    except WeightFileError as err:
        assert str(weights) in str(err)
        return
    hit = {name for name, start, end in ranges if start < offset + len(mask) and offset < end}
    saved = weights.with_name("saved.hdf5")
    weights_module.write_weights_file(model, saved, shown_as=saved)
    with h5py.File(saved, "r") as out, h5py.File(weights, "r") as damaged:
        for name, expected in reference.items():
            wanted = damaged[name][...].astype(np.float32) if name in hit else expected
            np.testing.assert_array_equal(out[name][...], wanted, err_msg=f"{name} at offset {offset}")
