"""Bad options.json / weight files fail at load with a WeightFileError naming the file and the option or dataset.

Each case copies the fixture model into tmp_path and edits the copy with json / h5py.
"""
import json
import shutil

import pytest

import spacy_elmo
from spacy_elmo import WeightFileError
from spacy_elmo.bilm.weights import options_from_dict
from spacy_elmo.train.presets import PRESETS


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


# -- item 5: options.json is checked by a schema ---------------------------------------------


@pytest.mark.parametrize(
    "section, key, value, message",
    [
        ("lstm", "use_skip_connections", "false", 'lstm.use_skip_connections must be true or false (a JSON boolean), '
                                                  'not "false"'),
        ("lstm", "use_skip_connections", 1, "lstm.use_skip_connections must be true or false (a JSON boolean), not 1"),
        ("lstm", "dim", 64.0, "lstm.dim must be an int >= 1, not 64.0"),
        ("lstm", "projection_dim", True, "lstm.projection_dim must be an int >= 1, not true"),
        ("lstm", "n_layers", 0, "lstm.n_layers must be an int >= 1, not 0"),
        ("lstm", "n_layers", "2", 'lstm.n_layers must be an int >= 1, not "2"'),
        ("lstm", "cell_clip", "3", 'lstm.cell_clip must be a finite number >= 0, or null, not "3"'),
        ("lstm", "proj_clip", -1, "lstm.proj_clip must be a finite number >= 0, or null, not -1"),
        ("char_cnn", "n_highway", -1, "char_cnn.n_highway must be an int >= 0, not -1"),
        ("char_cnn", "n_highway", 2.0, "char_cnn.n_highway must be an int >= 0, not 2.0"),
        ("char_cnn", "n_characters", 100, "char_cnn.n_characters must be an int >= 261, not 100"),
        ("char_cnn", "max_characters_per_token", 49, "char_cnn.max_characters_per_token must be 50, not 49"),
        ("char_cnn", "activation", "gelu", 'char_cnn.activation must be "relu" or "tanh", not "gelu"'),
        ("char_cnn", "embedding", 4, "char_cnn.embedding must be an object, not 4"),
        ("char_cnn", "embedding", {"dim": 4.5}, "char_cnn.embedding.dim must be an int >= 1, not 4.5"),
    ],
)
def test_options_are_checked_by_the_schema(model_copy, section, key, value, message):
    options, weights = model_copy
    edit_options(options, section, key, value)
    with pytest.raises(WeightFileError) as err:
        load(options, weights)
    assert str(err.value) == f"{options}: {message}"


@pytest.mark.parametrize(
    "filters",
    [[], [[1, 4], [2]], [[1, 4.0]], [[0, 4]], [[1, -4]], [[51, 4]], [[True, 4]], "1,4", [[1, 4, 1]], [(1, 4)], None],
)
def test_filters_must_be_width_count_pairs_of_positive_ints(filters):
    raw = PRESETS["tiny"]
    raw = {**raw, "char_cnn": {**raw["char_cnn"], "filters": filters}}
    with pytest.raises(WeightFileError, match=r"char_cnn\.filters must be a non-empty list of \[width, count\] pairs"):
        options_from_dict(raw)


def test_presets_and_their_json_round_trip():
    for raw in PRESETS.values():
        options = options_from_dict(raw)
        assert options_from_dict(json.loads(json.dumps(options.to_json()))) == options


