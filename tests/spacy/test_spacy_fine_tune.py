"""spacy_elmo.ElmoFineTune.v1: which biLM parts learn, the frozen backend untouched, saving, `spacy train`, errors."""

import hashlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import spacy
from spacy.training import Example
from thinc.api import Adam

from spacy_elmo import load_bilm
from spacy_elmo.spacy import learned_mix
from spacy_elmo.spacy.fine_tune import BASE, FINE_TUNE_NAME, trainable_names
from tests.numerics import assert_recomputed_close
from tests.spacy.conftest import textcat_reduce


def fine_tuned_fingerprint(model):
    """The identity of an ElmoFineTune node's biLM weights, to compare two nodes: the base model's files fingerprint
    and every trained array, hashed (None before initialize). Another fingerprint means other vectors."""
    if model.attrs.get(BASE) is None:
        return None
    digest = hashlib.sha256(str(model.attrs[BASE]).encode())
    for name in sorted(n for n in model.param_names if model.has_param(n)):
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(model.ops.to_numpy(model.get_param(name)), dtype=np.float32).tobytes())
    return digest.hexdigest()[:32]


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TEXTS = [
    ("The bank approved the loan .", "MONEY"),
    ("I paid cash at the bank .", "MONEY"),
    ("We sat by the river bank .", "RIVER"),
    ("Fish swim in the  river .", "RIVER"),  # a whitespace token: its row stays zero
]


def textcat_nlp(
    model_dir: Path,
    trainable: str,
    grad_factor: float = 1.0,
    precision: str = "float32",
    learn_rate_factor: float = 0.05,
    **elmo: object,
):
    """elmo + textcat whose tok2vec is ElmoFineTune.v1 -> Maxout -> the textcat head."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": str(model_dir), "precision": precision, **elmo})
    features = {
        "@architectures": "spacy_elmo.ElmoFineTune.v1",
        "trainable": trainable,
        "grad_factor": grad_factor,
        "learn_rate_factor": learn_rate_factor,
        "dropout": 0.0,
    }
    tok2vec = {
        "@architectures": "spacy.Tok2Vec.v2",
        "embed": {
            "@layers": "chain.v1",
            "*": {
                "features": features,
                "project": {"@layers": "with_array.v1", "layer": {"@layers": "Maxout.v1", "nO": 16, "nP": 2}},
            },
        },
        "encode": {
            "@architectures": "spacy.MaxoutWindowEncoder.v2",
            "width": 16,
            "depth": 1,
            "window_size": 1,
            "maxout_pieces": 2,
        },
    }
    nlp.add_pipe("textcat", config={"model": textcat_reduce(tok2vec, nO=None)})
    return nlp


def examples(nlp):
    out = []
    for text, cat in TEXTS:
        doc = nlp.make_doc(text)
        out.append(Example.from_dict(doc, {"cats": {"MONEY": float(cat == "MONEY"), "RIVER": float(cat == "RIVER")}}))
    return out


def fine_tune_node(nlp):
    return fine_tune_node_of(nlp, "textcat")


def own_bilm(node):
    return node.attrs["bilm"].bilm


def vectors(nlp, texts=tuple(t for t, _ in TEXTS)):
    """The fine-tune layer's output for each text (prediction mode)."""
    node = fine_tune_node(nlp)
    return node.predict([nlp.make_doc(t) for t in texts])


@pytest.mark.parametrize("trainable", ["none", "top", "lstm", "all"])
def test_gradients_reach_exactly_the_parts_named_by_trainable(fixture_dir, trainable):
    nlp = textcat_nlp(fixture_dir, trainable)
    egs = examples(nlp)
    nlp.initialize(lambda: egs)
    node = fine_tune_node(nlp)
    bilm = own_bilm(node)
    before = {name: p.detach().clone() for name, p in bilm.named_parameters()}
    optimizer = Adam(0.01)
    for _ in range(2):  # the textcat head starts at zero: its first update sends no gradient down
        nlp.update(egs, sgd=optimizer)
    moved = {
        name
        for name, p in bilm.named_parameters()
        if node.has_param(name) and not np.array_equal(node.get_param(name), before[name].numpy())
    }
    n_layers = bilm.n_layers
    expected = {
        "none": set(),
        "top": {
            n
            for n in before
            if n.startswith((f"lstm.forward_layers.{n_layers - 1}.", f"lstm.backward_layers.{n_layers - 1}."))
        },
        "lstm": {n for n in before if n.startswith("lstm.")},
        "all": set(before),
    }[trainable]
    assert set(trainable_names(bilm, trainable)) == expected
    assert moved == expected  # every trained part moved, nothing else is even a param
    assert set(node.param_names) == expected
    for name, p in bilm.named_parameters():  # the frozen parts keep the pre-trained values
        if name not in expected:
            assert torch_equal(p, before[name]), name


def torch_equal(a, b) -> bool:
    return bool((a.detach() == b.detach()).all())


@pytest.mark.parametrize(
    "windows", [{}, {"max_length": 4, "window_overlap": 2}, {"max_length": None}], ids=["whole", "windows", "none"]
)
def test_before_training_it_gives_the_frozen_mix_vectors(fixture_dir, windows):
    """Initialized, not yet trained: the same vectors as the layers the shared backend computes, mixed (the
    component's windows too: sentences longer than max_length are cut and stitched the same way)."""
    nlp = textcat_nlp(fixture_dir, "top", **windows)
    egs = examples(nlp)
    nlp.initialize(lambda: egs)
    docs = [nlp.make_doc(t) for t, _ in TEXTS]
    layers = nlp.get_pipe("elmo").predict(docs)  # the shared backend's inference path
    mix = learned_mix(nlp.get_pipe("textcat"))
    for got, array in zip(vectors(nlp), layers):
        expected = mix.gamma * np.tensordot(np.asarray(mix.weights, dtype=np.float32), array, axes=(0, 0))
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    assert not vectors(nlp)[3][4].any()  # the whitespace token


def test_training_never_changes_the_shared_backend_or_a_frozen_pipeline(fixture_dir):
    frozen = spacy.blank("en")
    frozen.add_pipe("elmo", config={"model": str(fixture_dir)})
    texts = [t for t, _ in TEXTS]
    before = [doc._.elmo_layers.copy() for doc in frozen.pipe(texts)]
    backend = load_bilm(fixture_dir)
    weights = {name: p.detach().clone() for name, p in backend.model.named_parameters()}
    backend.clear_cache()
    nlp = textcat_nlp(fixture_dir, "all")
    egs = examples(nlp)
    optimizer = nlp.initialize(lambda: egs)
    for _ in range(3):
        nlp.update(egs, sgd=optimizer)
    assert fine_tune_node(nlp).attrs["bilm"].bilm is not backend.model
    for name, p in backend.model.named_parameters():
        assert torch_equal(p, weights[name]), name
    tuned = own_bilm(fine_tune_node(nlp))
    assert any(not torch_equal(p, weights[n]) for n, p in tuned.named_parameters())  # while its own copy moved
    backend.clear_cache()  # recomputed from the backend's weights, not read back from its cache
    after = [doc._.elmo_layers for doc in frozen.pipe(texts)]
    for a, b in zip(before, after):  # the same weights: equal up to float32 summation order (other GEMM kernels)
        assert_recomputed_close(b, a)


@pytest.mark.slow  # spacy package in a subprocess
def test_saved_fine_tuned_pipeline_reloads_with_identical_outputs(fixture_dir, tmp_path):
    nlp = textcat_nlp(fixture_dir, "top")
    egs = examples(nlp)
    optimizer = nlp.initialize(lambda: egs)
    fresh = vectors(nlp)
    for _ in range(3):
        nlp.update(egs, sgd=optimizer)
    trained = vectors(nlp)
    assert not all(np.allclose(a, b) for a, b in zip(fresh, trained))  # it did learn
    fingerprint = fine_tuned_fingerprint(fine_tune_node(nlp))
    nlp.to_disk(tmp_path / "pipeline")
    assert not list((tmp_path / "pipeline").rglob("*.pt")) and not list((tmp_path / "pipeline").rglob("*.pkl"))
    loaded = spacy.load(tmp_path / "pipeline")
    for a, b in zip(trained, vectors(loaded)):
        assert np.array_equal(a, b)
    assert fine_tuned_fingerprint(fine_tune_node(loaded)) == fingerprint
    text = TEXTS[0][0]
    assert loaded(text).cats == nlp(text).cats
    # ``spacy package`` copies the saved pipeline into an installable package (no build step here):
    # the package's copy loads with the same trained arrays
    (tmp_path / "packages").mkdir()
    package = ["package", str(tmp_path / "pipeline"), str(tmp_path / "packages"), "--name", "elmo_ft"]
    result = subprocess.run(
        [sys.executable, "-m", "spacy", *package, "--version", "0.0.1", "--build", "none"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (packaged,) = (tmp_path / "packages").glob("*/*/*/config.cfg")
    for a, b in zip(trained, vectors(spacy.load(packaged.parent))):
        assert np.array_equal(a, b)


def test_fingerprint_follows_the_trained_weights(fixture_dir):
    nlp = textcat_nlp(fixture_dir, "top")
    egs = examples(nlp)
    optimizer = nlp.initialize(lambda: egs)
    first = fine_tuned_fingerprint(fine_tune_node(nlp))
    other = textcat_nlp(fixture_dir, "top")
    other.initialize(lambda: examples(other))
    assert fine_tuned_fingerprint(fine_tune_node(other)) == first  # the same pre-trained weights
    for _ in range(2):
        nlp.update(egs, sgd=optimizer)
    assert fine_tuned_fingerprint(fine_tune_node(nlp)) != first


def test_grad_factor_zero_leaves_the_biLM_as_it_was(fixture_dir):
    nlp = textcat_nlp(fixture_dir, "top", grad_factor=0.0)
    egs = examples(nlp)
    nlp.initialize(lambda: egs)
    node = fine_tune_node(nlp)
    before = {n: node.get_param(n).copy() for n in node.param_names}
    optimizer = Adam(0.01)
    for _ in range(2):  # Adam with a zero gradient and no L2 moves nothing
        nlp.update(egs, sgd=optimizer)
    assert fine_tune_node(nlp).layers[0].get_param("gamma")[0] != 0  # while the mix above it learns
    for name, value in before.items():
        assert np.array_equal(node.get_param(name), value), name


def test_learn_rate_factor_scales_the_biLM_steps(fixture_dir):
    """Same data, same start: with a tenth of the learning rate the biLM's largest weight steps are a tenth (Adam)."""
    moves = {}
    for factor in (1.0, 0.1):
        spacy.util.fix_random_seed(0)
        nlp = textcat_nlp(fixture_dir, "top", learn_rate_factor=factor)
        egs = examples(nlp)
        nlp.initialize(lambda egs=egs: egs)
        bilm = own_bilm(fine_tune_node(nlp))
        vectors(nlp)  # the biLM's weights as the layer uses them
        before = {n: p.detach().clone() for n, p in bilm.named_parameters() if p.requires_grad}
        optimizer = Adam(0.01)
        for _ in range(2):  # the first update reaches only the zero-initialised head
            nlp.update(egs, sgd=optimizer)
        vectors(nlp)
        moves[factor] = {n: (p.detach() - before[n]).numpy() for n, p in bilm.named_parameters() if p.requires_grad}
    for name, move in moves[1.0].items():  # Adam's largest steps (large gradients, where eps does not count)
        ratio = np.abs(moves[0.1][name]).max() / np.abs(move).max()
        assert 0.09 < ratio < 0.102, (name, ratio)


def test_a_trainable_value_not_allowed_is_refused():
    from spacy_elmo.spacy.architectures import elmo_fine_tune_v1

    with pytest.raises(ValueError, match=r"trainable='bottom'.*'none', 'top', 'lstm', 'all'"):
        elmo_fine_tune_v1(trainable="bottom")
    with pytest.raises(ValueError, match="grad_factor"):
        elmo_fine_tune_v1(grad_factor=float("nan"))
    with pytest.raises(ValueError, match="learn_rate_factor=0"):
        elmo_fine_tune_v1(learn_rate_factor=0)


def test_a_low_precision_backend_is_refused_naming_float32(fixture_dir):
    nlp = textcat_nlp(fixture_dir, "top", precision="bfloat16")
    egs = examples(nlp)
    with pytest.raises(ValueError, match='precision = "float32"'):
        nlp.initialize(lambda: egs)


@pytest.mark.parametrize("name,component", [("textcat_elmo_finetune", "textcat"), ("ner_elmo_finetune_tok2vec", "ner")])
def test_spacy_train_fine_tunes_the_biLM_and_saves_it(fixture_dir, tmp_path, name, component):
    """`spacy train` on a shipped fine-tune config: the top LSTM layer learns, is saved, and reloads as trained."""
    from spacy_elmo.runtime.embedding.backend import load_model_files
    from tests.spacy.test_spacy_training import spacy_train

    nlp = spacy_train(EXAMPLES / "configs" / f"{name}.cfg", fixture_dir, tmp_path, component, max_steps=6)
    node = fine_tune_node_of(nlp, component)
    backend = load_bilm(fixture_dir)
    pretrained = dict(load_model_files(backend.options_path, backend.weights_path).named_parameters())
    assert node.param_names and all(
        n.startswith(("lstm.forward_layers.1.", "lstm.backward_layers.1.")) for n in node.param_names
    )
    assert any(not np.array_equal(node.get_param(n), pretrained[n].detach().numpy()) for n in node.param_names)
    again = spacy.load(tmp_path / "out" / "model-last")
    docs = [t for t, _ in TEXTS]
    for a, b in zip(
        node.predict([nlp.make_doc(t) for t in docs]),
        fine_tune_node_of(again, component).predict([again.make_doc(t) for t in docs]),
    ):
        assert np.array_equal(a, b)


def fine_tune_node_of(nlp, component):
    (node,) = [n for n in nlp.get_pipe(component).model.walk() if n.name == FINE_TUNE_NAME]
    return node
