"""The bundled default biLM: loads offline, is documented, and separates word senses in context."""

import json
from itertools import combinations, product

import numpy as np
import pytest

from spacy_elmo import load_bilm
from spacy_elmo.runtime.embedding.backend import DEFAULT_MODEL_DIR

pytestmark = pytest.mark.skipif(
    not (DEFAULT_MODEL_DIR / "options.json").is_file(), reason="the bundled default model is not in this checkout"
)

# word -> (sentences using sense A, sentences using sense B); hand-written, WikiText-style tokens
SENSES = {
    "bank": (
        ["The bank approved the loan and raised its interest rate .", "She opened an account at the bank on Monday ."],
        [
            "They walked along the bank of the river at dusk .",
            "The boat drifted towards the muddy bank of the stream .",
        ],
    ),
    "plant": (
        ["The plant employs 300 workers who build car engines .", "The company closed the steel plant in 1980 ."],
        ["Water the plant every day so that its leaves stay green .", "This plant grows flowers in the spring ."],
    ),
    "cell": (
        ["The prisoner was locked in a small cell for ten years .", "Guards searched every cell in the prison ."],
        ["Each cell contains a nucleus and DNA .", "The virus enters the cell through its membrane ."],
    ),
    "match": (
        ["The team won the match by two goals .", "He was injured during the final match of the season ."],
        ["She struck a match to light the candle .", "He lit his pipe with a match and a sigh ."],
    ),
    "crane": (
        ["The crane lifted the steel beams onto the roof .", "Workers used a crane to load the ship ."],
        ["The crane is a tall bird that lives in wetlands .", "A crane caught a fish in the shallow lake ."],
    ),
    "bat": (
        ["The bat flew out of the cave at night .", "A bat hunts insects in the dark ."],
        ["He hit the ball with a wooden bat .", "The batsman raised his bat to the crowd ."],
    ),
}


def _vector(backend, sentence: str, word: str) -> np.ndarray:
    tokens = sentence.split()
    layers = backend.embed([tokens])[0]
    return layers[1:, tokens.index(word)].mean(axis=0)  # the contextual (LSTM) layers, averaged


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_default_model_loads_offline_with_its_documented_files():
    backend = load_bilm()
    assert backend is load_bilm("default")
    files = {p.name for p in DEFAULT_MODEL_DIR.iterdir()}
    assert {"options.json", "weights.hdf5", "metrics.json", "README.md"} <= files
    assert (
        "checkpoint.safetensors" not in files and "checkpoint.pt" not in files
    )  # optimizer state stays out of the package
    assert "softmax.safetensors" in files and "softmax.pt" not in files  # no pickle ships
    size = sum(p.stat().st_size for p in DEFAULT_MODEL_DIR.iterdir())
    assert size <= 25e6
    options = json.loads((DEFAULT_MODEL_DIR / "options.json").read_text())
    assert backend.dim == 2 * options["lstm"]["projection_dim"]
    layers = backend.embed([["The", "bank", "approved", "the", "loan", "."]])[0]
    assert layers.shape == (options["lstm"]["n_layers"] + 1, 6, backend.dim) and layers.dtype == np.float32
    assert np.isfinite(layers).all()


def test_model_card_states_the_recorded_numbers():
    card = (DEFAULT_MODEL_DIR / "README.md").read_text(encoding="utf-8")
    metrics = json.loads((DEFAULT_MODEL_DIR / "metrics.json").read_text())
    assert "spacy-elmo train" in card
    best = metrics["best"]
    for key in ("valid_ppl_forward", "valid_ppl_backward"):
        assert f"{best[key]:.1f}" in card, key
    test = metrics["test"]["wikitext-2/test.txt"]
    assert f"{test['forward']:.1f}" in card and f"{test['backward']:.1f}" in card
    assert f"seed {metrics['config']['seed']}," in card


@pytest.mark.slow
def test_same_sense_pairs_are_closer_than_different_sense_pairs():
    backend = load_bilm()
    same, different = [], []
    for word, (sense_a, sense_b) in SENSES.items():
        a = [_vector(backend, s, word) for s in sense_a]
        b = [_vector(backend, s, word) for s in sense_b]
        same += [_cos(x, y) for group in (a, b) for x, y in combinations(group, 2)]
        different += [_cos(x, y) for x, y in product(a, b)]
    assert np.mean(same) > np.mean(different), (np.mean(same), np.mean(different))
