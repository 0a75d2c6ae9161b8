"""spacy_elmo.ElmoScalarMix.v1: the learnable scalar mix as a tok2vec layer for trainable components."""
import numpy as np
import pytest
import spacy
from spacy.training import Example
from spacy.util import registry

from spacy_elmo import mix_layers

from numerics import assert_recomputed_close

TRAIN = [
    ("The bank approved the loan .", "MONEY"),
    ("I paid cash at the bank .", "MONEY"),
    ("The loan has a high rate .", "MONEY"),
    ("We sat by the river bank .", "RIVER"),
    ("The river was cold and wide .", "RIVER"),
    ("Fish swim in the river .", "RIVER"),
]


@pytest.fixture(scope="module")
def nlp(fixture_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": str(fixture_dir)})
    return nlp


def mix_model(**kwargs):
    model = registry.architectures.get("spacy_elmo.ElmoScalarMix.v1")(width=32, n_layers=2, **kwargs)
    model.initialize()
    return model


def reference_loss(layers_list, R_list, s, gamma):
    """sum(R * gamma * sum_j softmax(s)_j h_j) in float64, written out independently of the layer."""
    w = np.exp(s - s.max())
    w /= w.sum()
    return sum(float((R * gamma * np.einsum("l,lnd->nd", w, X.astype(np.float64))).sum()) for X, R in zip(layers_list, R_list))


def test_forward_equals_mix_layers(nlp):
    docs = list(nlp.pipe(["The bank approved the loan .", "", "Fish swim ."]))
    model = mix_model(gamma=0.7)
    s = np.array([0.3, -1.0, 2.0], dtype=np.float32)
    model.set_param("s", s)
    outputs = model.predict(docs)
    for doc, Y in zip(docs, outputs):
        assert Y.shape == (len(doc), 32) and Y.dtype == np.float32
        assert_recomputed_close(Y, mix_layers(doc._.elmo_layers, list(s), gamma=0.7))


def test_gradients_match_finite_differences(nlp):
    docs = list(nlp.pipe(["The bank approved the loan .", "Fish swim in the river ."]))
    rng = np.random.default_rng(0)
    R = [rng.normal(size=(len(d), 32)) for d in docs]
    s0, gamma0 = np.array([0.2, -0.5, 0.9]), 1.3
    model = mix_model(gamma=gamma0)
    model.set_param("s", s0.astype(np.float32))
    _, backprop = model.begin_update(docs)
    assert backprop([r.astype(np.float32) for r in R]) == []
    layers = [d._.elmo_layers for d in docs]
    eps = 1e-6
    for j in range(3):
        step = np.eye(3)[j] * eps
        numeric = (reference_loss(layers, R, s0 + step, gamma0) - reference_loss(layers, R, s0 - step, gamma0)) / (2 * eps)
        assert model.get_grad("s")[j] == pytest.approx(numeric, rel=1e-3, abs=1e-3)
    numeric = (reference_loss(layers, R, s0, gamma0 + eps) - reference_loss(layers, R, s0, gamma0 - eps)) / (2 * eps)
    assert model.get_grad("gamma")[0] == pytest.approx(numeric, rel=1e-3)


def test_missing_or_mismatched_layers(nlp):
    model = mix_model()
    bare = spacy.blank("en")("no elmo here")
    assert not model.predict([bare])[0].any()  # shape inference in nlp.initialize() sees docs like this
    with pytest.raises(ValueError, match="annotating_components"):
        model.begin_update([bare])
    wrong = registry.architectures.get("spacy_elmo.ElmoScalarMix.v1")(width=32, n_layers=1)
    wrong.initialize()
    with pytest.raises(ValueError, match="set n_layers=2, width=32"):
        wrong.predict([nlp("a b")])


def test_textcat_learns_on_elmo_features(fixture_dir, tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": str(fixture_dir)})
    tok2vec = {"@architectures": "spacy_elmo.ElmoScalarMix.v1", "width": 32, "n_layers": 2}
    textcat_model = {
        "@architectures": "spacy.TextCatReduce.v1", "exclusive_classes": True, "tok2vec": tok2vec,
        "use_reduce_first": False, "use_reduce_last": False, "use_reduce_max": True, "use_reduce_mean": True,
    }
    nlp.add_pipe("textcat", config={"model": textcat_model})
    examples = [Example.from_dict(nlp.make_doc(t), {"cats": {"MONEY": c == "MONEY", "RIVER": c == "RIVER"}}) for t, c in TRAIN]
    optimizer = nlp.initialize(lambda: examples)
    optimizer.learn_rate = 0.01
    losses = []
    for _ in range(25):
        step = {}
        nlp.update(examples, sgd=optimizer, losses=step, annotates=["elmo"])
        losses.append(step["textcat"])
    assert losses[-1] < 0.5 * losses[0]
    mix = nlp.get_pipe("textcat").model.get_ref("tok2vec")
    assert np.abs(mix.get_param("s")).max() > 1e-4 and mix.get_param("gamma")[0] != 1.0  # the mix was trained
    predicted = [nlp(t).cats for t, _ in TRAIN]
    assert sum(max(p, key=p.get) == c for p, (_, c) in zip(predicted, TRAIN)) >= 5
    nlp.to_disk(tmp_path / "p")
    loaded = spacy.load(tmp_path / "p")
    for (text, _), cats in zip(TRAIN, predicted):
        assert loaded(text).cats == pytest.approx(cats, abs=1e-6)


@pytest.mark.slow
def test_spacy_train_with_the_example_config(fixture_dir, tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    from spacy.tokens import DocBin

    blank = spacy.blank("en")
    for name in ("train", "dev"):
        docs = []
        for text, cat in TRAIN:
            doc = blank.make_doc(text)
            doc.cats = {"MONEY": float(cat == "MONEY"), "RIVER": float(cat == "RIVER")}
            docs.append(doc)
        DocBin(docs=docs).to_disk(tmp_path / f"{name}.spacy")
    config = Path(__file__).resolve().parents[1] / "examples" / "train_textcat.cfg"
    command = [
        sys.executable, "-m", "spacy", "train", str(config), "--output", str(tmp_path / "out"),
        "--paths.train", str(tmp_path / "train.spacy"), "--paths.dev", str(tmp_path / "dev.spacy"),
        "--paths.elmo", str(fixture_dir), "--components.textcat.model.tok2vec.width", "32",
        "--training.max_steps", "30", "--training.eval_frequency", "10", "--training.optimizer.learn_rate", "0.01",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    nlp = spacy.load(tmp_path / "out" / "model-best")
    assert nlp.pipe_names == ["elmo", "textcat"]
    cats = nlp("The bank approved the loan .").cats
    assert set(cats) == {"MONEY", "RIVER"} and sum(cats.values()) == pytest.approx(1.0, abs=1e-5)
    mix = nlp.get_pipe("textcat").model.get_ref("tok2vec")
    assert np.abs(mix.get_param("s")).max() > 1e-4  # the scalar mix was trained and saved
