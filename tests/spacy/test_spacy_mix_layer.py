"""spacy_elmo.ElmoScalarMix.v1/v2: the learnable scalar mix as a tok2vec layer for trainable components."""

import numpy as np
import pytest
import spacy
import srsly
from spacy.training import Example
from spacy.util import registry
from thinc.api import Adam

from spacy_elmo import mix_layers
from spacy_elmo.spacy import learned_mix
from tests.numerics import assert_recomputed_close
from tests.spacy.conftest import textcat_reduce

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
    return sum(
        float((R * gamma * np.einsum("l,lnd->nd", w, X.astype(np.float64))).sum()) for X, R in zip(layers_list, R_list)
    )


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
        numeric = (reference_loss(layers, R, s0 + step, gamma0) - reference_loss(layers, R, s0 - step, gamma0)) / (
            2 * eps
        )
        assert model.get_grad("s")[j] == pytest.approx(numeric, rel=1e-3, abs=1e-3)
    numeric = (reference_loss(layers, R, s0, gamma0 + eps) - reference_loss(layers, R, s0, gamma0 - eps)) / (2 * eps)
    assert model.get_grad("gamma")[0] == pytest.approx(numeric, rel=1e-3)


def test_missing_or_mismatched_layers(nlp):
    model = mix_model()  # not in a pipeline: nothing to fetch missing layers from
    bare = spacy.blank("en")("no elmo here")
    for run in (model.predict, model.begin_update):
        with pytest.raises(ValueError, match="no 'elmo' component is linked"):
            run([bare])
    wrong = registry.architectures.get("spacy_elmo.ElmoScalarMix.v1")(width=32, n_layers=1)
    wrong.initialize()
    with pytest.raises(ValueError, match=r"gives 3 layers of width 32, but .* for 2 layers of width 32"):
        wrong.predict([nlp("a b")])


def textcat_on_mix(width: int) -> dict:
    """A TextCatReduce model config reading the elmo component's two layers through ElmoScalarMix of ``width``."""
    return textcat_reduce({"@architectures": "spacy_elmo.ElmoScalarMix.v1", "width": width, "n_layers": 2})


def test_textcat_learns_on_elmo_features(fixture_dir, tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": str(fixture_dir)})
    textcat_model = textcat_on_mix(width=32)
    nlp.add_pipe("textcat", config={"model": textcat_model})
    examples = [
        Example.from_dict(nlp.make_doc(t), {"cats": {"MONEY": c == "MONEY", "RIVER": c == "RIVER"}}) for t, c in TRAIN
    ]
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


# -- v2: shape from the model, the paper's options, the link to the elmo component -------------------


def textcat_nlp(fixture_dir, **mix):
    """blank en + elmo (fixture) + textcat over ElmoScalarMix.v2 with ``mix`` options, not initialized."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": str(fixture_dir)})
    textcat_model = textcat_reduce({"@architectures": "spacy_elmo.ElmoScalarMix.v2", **mix})
    nlp.add_pipe("textcat", config={"model": textcat_model})
    return nlp


def examples_for(nlp):
    return [
        Example.from_dict(nlp.make_doc(t), {"cats": {"MONEY": c == "MONEY", "RIVER": c == "RIVER"}}) for t, c in TRAIN
    ]


def mix_of(nlp, name="textcat"):
    return nlp.get_pipe(name).model.get_ref("tok2vec")


def test_v2_takes_its_shape_from_the_elmo_component(fixture_dir):
    nlp = textcat_nlp(fixture_dir)
    assert nlp.get_pipe("elmo").listening_components == ["textcat"]
    mix = mix_of(nlp)
    assert mix.has_dim("nO") is None and mix.attrs["n_outputs"] is None  # nothing stated in the config
    nlp.initialize(lambda: examples_for(nlp))
    assert mix.get_dim("nO") == 32 and mix.attrs["n_outputs"] == 3
    assert learned_mix(nlp.get_pipe("textcat")) == ([pytest.approx(1 / 3)] * 3, 1.0)
    assert learned_mix(mix) == learned_mix(nlp.get_pipe("textcat").model)


def test_v2_fetches_layers_the_elmo_component_did_not_set(fixture_dir):
    nlp = textcat_nlp(fixture_dir, dropout=0.0)
    nlp.initialize(lambda: examples_for(nlp))
    texts = [t for t, _ in TRAIN]
    bare = [nlp.make_doc(t) for t in texts]  # as in training without annotating_components
    annotated = list(nlp.get_pipe("elmo").pipe(nlp.make_doc(t) for t in texts))
    assert all(doc._.elmo_layers is None for doc in bare)
    for is_train in (False, True):
        fetched, _ = mix_of(nlp)(bare, is_train=is_train)
        stored, _ = mix_of(nlp)(annotated, is_train=is_train)
        for a, b in zip(fetched, stored):
            assert_recomputed_close(a, b)  # embedded beside other batch-mates


def test_v2_without_an_elmo_component_is_an_error():
    model = registry.architectures.get("spacy_elmo.ElmoScalarMix.v2")()
    with pytest.raises(ValueError, match="put an 'elmo' component before this one"):
        model.initialize(X=[spacy.blank("en")("no layers")])


def test_v2_gradients_with_the_regulariser(nlp):
    docs = list(nlp.pipe(["The bank approved the loan .", "Fish swim in the river ."]))
    rng = np.random.default_rng(1)
    R = [rng.normal(size=(len(d), 32)) for d in docs]
    s0, gamma0, lam = np.array([0.4, -0.3, 0.1]), 0.8, 0.05
    model = registry.architectures.get("spacy_elmo.ElmoScalarMix.v2")(gamma=gamma0, dropout=0.0, l2_coef=lam)
    model.initialize(X=docs)  # shape from the docs' layers
    model.set_param("s", s0.astype(np.float32))
    _, backprop = model.begin_update(docs)
    backprop([r.astype(np.float32) for r in R])
    layers = [d._.elmo_layers for d in docs]

    def loss(s, gamma):
        return reference_loss(layers, R, s, gamma) + lam * float((s**2).sum())

    eps = 1e-6
    for j in range(3):
        step = np.eye(3)[j] * eps
        numeric = (loss(s0 + step, gamma0) - loss(s0 - step, gamma0)) / (2 * eps)
        assert model.get_grad("s")[j] == pytest.approx(numeric, rel=1e-3, abs=1e-3)
    numeric = (loss(s0, gamma0 + eps) - loss(s0, gamma0 - eps)) / (2 * eps)
    assert model.get_grad("gamma")[0] == pytest.approx(numeric, rel=1e-3)


@pytest.mark.parametrize(
    "layers,expected", [(0, "token layer"), ("top", "top"), (-2, "middle"), ("average", "average")]
)
def test_v2_fixed_layers(nlp, layers, expected):
    docs = list(nlp.pipe(["The bank approved the loan ."]))
    model = registry.architectures.get("spacy_elmo.ElmoScalarMix.v2")(layers=layers, gamma=2.0)
    model.initialize(X=docs)
    Y, backprop = model.begin_update(docs)
    chosen = {"token layer": [0], "top": [2], "middle": [1], "average": [0, 1, 2]}[expected]
    assert_recomputed_close(model.predict(docs)[0], 2.0 * docs[0]._.elmo_layers[chosen].mean(axis=0))
    backprop([np.ones_like(y) for y in Y])
    assert not model.has_grad("s") and model.get_grad("gamma")[0] != 0  # the layer choice is fixed, gamma learns
    assert learned_mix(model).weights == pytest.approx(np.eye(3)[chosen].mean(axis=0).tolist())
    with pytest.raises(ValueError, match="this model has 3 layers"):
        registry.architectures.get("spacy_elmo.ElmoScalarMix.v2")(layers=3).initialize(X=docs)


def test_v2_dropout_only_while_training(nlp):
    docs = list(nlp.pipe(["The bank approved the loan .", "Fish swim in the river ."]))
    model = registry.architectures.get("spacy_elmo.ElmoScalarMix.v2")(dropout=0.5)
    model.initialize(X=docs)
    plain = model.predict(docs)
    dropped, backprop = model.begin_update(docs)
    for y, p in zip(dropped, plain):
        kept = y != 0
        assert 0.3 < kept.mean() < 0.7
        assert_recomputed_close(y[kept], 2.0 * p[kept])  # inverted dropout: kept values scaled by 1 / (1 - 0.5)
    backprop([np.ones_like(y) for y in dropped])
    expected = sum(float((y).sum()) for y in dropped)  # d(sum Y)/d(gamma) = sum(Y) / gamma, gamma = 1
    assert model.get_grad("gamma")[0] == pytest.approx(expected, rel=1e-4)


def test_v2_layer_norm_per_doc(nlp):
    doc = nlp("The bank  approved the loan .")  # a double space: a whitespace token with zero layers
    assert doc[2].is_space
    model = registry.architectures.get("spacy_elmo.ElmoScalarMix.v2")(layers="average", do_layer_norm=True)
    model.initialize(X=[doc])
    keep = [i for i, t in enumerate(doc) if not t.is_space]
    X = doc._.elmo_layers[:, keep].astype(np.float64)
    normed = (X - X.mean(axis=(1, 2), keepdims=True)) / np.sqrt(X.var(axis=(1, 2), keepdims=True) + 1e-12)
    Y = model.predict([doc])[0]
    assert_recomputed_close(Y[keep], normed.mean(axis=0))
    assert not Y[2].any()
    alone = model.predict([doc])[0]
    with_others = model.predict([nlp("Something else entirely ."), doc])[1]
    np.testing.assert_array_equal(alone, with_others)  # per doc: the batch does not matter


@pytest.mark.parametrize("anchor_gamma", [True, False])
@pytest.mark.parametrize("weight_decay", [True, False])
def test_optimizer_l2_and_gamma(nlp, anchor_gamma, weight_decay):
    """With anchor_gamma, spaCy's generic L2 (either kind) leaves gamma where the task put it, not pulled to 0."""
    docs = list(nlp.pipe(["The bank approved the loan ."]))
    model = registry.architectures.get("spacy_elmo.ElmoScalarMix.v2")(gamma=1.5, anchor_gamma=anchor_gamma, l2_coef=0.0)
    model.initialize(X=docs)
    optimizer = Adam(learn_rate=0.05, L2=0.5, L2_is_weight_decay=weight_decay, grad_clip=1.0)
    for _ in range(20):
        Y, backprop = model.begin_update(docs)
        backprop([np.zeros_like(y) for y in Y])  # no task gradient: only the optimizer's L2 acts
        model.finish_update(optimizer)
    gamma = learned_mix(model).gamma
    if anchor_gamma:
        assert gamma == 1.5
    else:
        assert gamma < 1.4  # what spacy_elmo.ElmoScalarMix.v1 (and anchor_gamma = false) gets


def test_v2_textcat_learns_and_the_mix_survives_saving(fixture_dir, tmp_path):
    nlp = textcat_nlp(fixture_dir, l2_coef=0.0, dropout=0.0)
    examples = examples_for(nlp)
    optimizer = nlp.initialize(lambda: examples)
    optimizer.learn_rate = 0.01
    for _ in range(15):
        nlp.update(examples, sgd=optimizer)  # the elmo component does not annotate: the layer fetches
    trained = learned_mix(nlp.get_pipe("textcat"))
    assert max(abs(w - 1 / 3) for w in trained.weights) > 1e-4 and trained.gamma != 1.0
    nlp.to_disk(tmp_path / "p")
    loaded = spacy.load(tmp_path / "p")
    assert loaded.get_pipe("elmo").listening_components == ["textcat"]
    assert learned_mix(loaded.get_pipe("textcat")) == trained  # stored arrays: exact
    for text, _ in TRAIN:
        assert loaded(text).cats == pytest.approx(nlp(text).cats, abs=1e-6)


def test_a_stored_mix_and_another_model_is_a_clear_error(fixture_dir, tmp_path):
    nlp = textcat_nlp(fixture_dir)
    nlp.initialize(lambda: examples_for(nlp))
    nlp.to_disk(tmp_path / "p")
    srsly.write_json(tmp_path / "p" / "elmo" / "model" / "model.json", {"source": "default"})  # the 256-wide model
    with pytest.raises(
        ValueError, match=r"gives 3 layers of width 256, but this ElmoScalarMix .* 3 layers of width 32"
    ):
        spacy.load(tmp_path / "p")


def test_v1_with_a_wrong_width_fails_at_assembly(fixture_dir):
    """The first shape error, now raised when the pipeline is built, naming both shapes."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": str(fixture_dir)})
    textcat_model = textcat_on_mix(width=1024)
    with pytest.raises(ValueError, match=r"'elmo' gives 3 layers of width 32, but .* 3 layers of width 1024"):
        nlp.add_pipe("textcat", config={"model": textcat_model})
