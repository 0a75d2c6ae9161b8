"""The elmo component's ``max_length = null`` (docs/spacy.md: no windows): taken by add_pipe and a config.cfg, and
each biLM input embedded whole however long it is."""

import numpy as np
import spacy
from spacy.lang.en import English
from thinc.api import Config

from spacy_elmo import load_bilm
from spacy_elmo.runtime.configuration.defaults import DEFAULT_MAX_LENGTH
from tests.numerics import assert_recomputed_close

WORDS = [f"w{i % 7}" for i in range(2 * DEFAULT_MAX_LENGTH + 44)]  # longer than the default window


def elmo_nlp(fixture_dir, **config):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": str(fixture_dir), **config})
    return nlp


def test_max_length_null_embeds_a_long_doc_whole(fixture_dir):
    nlp = elmo_nlp(fixture_dir, max_length=None)
    assert nlp.get_pipe("elmo").max_length is None
    whole = load_bilm(fixture_dir).embed([WORDS])[0]  # the sentence in one biLM input, no windows
    np.testing.assert_allclose(nlp(" ".join(WORDS))._.elmo_layers, whole, rtol=0, atol=1e-6)
    windowed = elmo_nlp(fixture_dir)(" ".join(WORDS))._.elmo_layers  # the default: windows of 128 tokens
    assert not np.allclose(windowed, whole, atol=1e-4)  # so the comparison above tells the two apart


def test_max_length_null_survives_the_config_round_trip(fixture_dir, tmp_path):
    nlp = elmo_nlp(fixture_dir, max_length=None)
    text = nlp.config.to_str()
    assert "max_length = null" in text
    again = English.from_config(Config().from_str(text))  # config.cfg -> a pipeline again
    assert again.get_pipe("elmo").max_length is None
    nlp.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline")
    assert loaded.get_pipe("elmo").max_length is None
    # the saved copy is another backend: its vectors are recomputed (float32 rounding, tests/numerics.py)
    assert_recomputed_close(loaded(" ".join(WORDS))._.elmo_layers, nlp(" ".join(WORDS))._.elmo_layers)
