"""The spaCy "elmo" component against the backend's own numbers (AllenNLP test model in tests/fixtures)."""

import inspect
import io
import logging
import os
import signal
import subprocess
import sys
import typing
import warnings
from pathlib import Path

import numpy as np
import pytest
import spacy
import torch
from spacy.tokens import Doc
from spacy.util import registry

from spacy_elmo import WeightFileError, load_bilm
from spacy_elmo.runtime.embedding import windows
from spacy_elmo.spacy import ElmoComponent
from spacy_elmo.spacy.hooks import EmptyVectorWarning
from tests.numerics import assert_recomputed_close


def test_registered_functions_carry_evaluated_annotations():
    """spaCy 3.7's confection builds a pydantic model from each registered function's annotations as they stand: a
    string (what ``from __future__ import annotations`` leaves) is a ForwardRef there, and ``add_pipe("elmo")``
    fails with 'field "nlp" not yet prepared so type is still a ForwardRef'. Newer confection resolves strings,
    so this checks the cause on every spaCy: the factory and each registered function of the package carry
    evaluated types (the floor pass of .ci/run makes the pipeline on spaCy 3.7.0 itself)."""
    import spacy_elmo.spacy  # noqa: F401  # registers the factory and the functions

    functions = {
        name: function
        for table in (registry.architectures, registry.misc)
        for name, function in table.get_all().items()
        if name.startswith("spacy_elmo.")
    }
    functions["elmo"] = registry.factories.get("elmo")
    assert {"elmo", "spacy_elmo.ElmoBiLM.v1", "spacy_elmo.ElmoScalarMix.v2", "spacy_elmo.sentence_positions.v1"} <= set(
        functions
    )
    unevaluated = {
        name: [
            p.name
            for p in inspect.signature(function).parameters.values()
            if isinstance(p.annotation, (str, typing.ForwardRef))
        ]
        for name, function in functions.items()
    }
    assert not any(unevaluated.values()), {name: params for name, params in unevaluated.items() if params}


def make_nlp(fixture_dir, **config):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": str(fixture_dir), **config})
    return nlp


@pytest.fixture(scope="module")
def nlp(fixture_dir):
    return make_nlp(fixture_dir)


def words_of(doc):
    return [t.text for t in doc if not t.is_space]


def cosine(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_layers_equal_backend_embed(nlp, backend):
    doc = nlp("The bank will approve your loan.")
    expected = backend.embed([[t.text for t in doc]])[0]
    assert doc._.elmo_layers.dtype == np.float32 and doc._.elmo_layers.shape == (3, 7, 32)
    assert_recomputed_close(doc._.elmo_layers, expected)
    assert doc._.elmo_model == backend.fingerprint
    assert nlp.get_pipe("elmo").backend is backend  # one shared backend
    mixed = expected.mean(axis=0)  # "average": equal weights, gamma 1
    assert_recomputed_close(doc._.elmo, mixed)
    assert_recomputed_close(doc[1]._.elmo, mixed[1])
    assert_recomputed_close(doc[2:5]._.elmo, mixed[2:5])
    assert doc._.elmo.dtype == doc[1]._.elmo.dtype == doc[2:5]._.elmo.dtype == np.float32


def test_components_share_one_backend(fixture_dir, backend):
    one, two = make_nlp(fixture_dir), make_nlp(fixture_dir, layers="top")
    assert one.get_pipe("elmo").backend is two.get_pipe("elmo").backend is load_bilm(fixture_dir) is backend


@pytest.mark.parametrize(
    "config,weights",
    [
        ({"layers": "top"}, [0.0, 0.0, 1.0]),
        ({"layers": 0}, [1.0, 0.0, 0.0]),
        ({"layers": -2}, [0.0, 1.0, 0.0]),
        ({"layers": "average", "gamma": 2.0}, [2 / 3, 2 / 3, 2 / 3]),
        # softmax([0, 1, 2]) by hand: e^k / (1 + e + e^2), times gamma 0.5
        ({"layers": [0, 1, 2], "gamma": 0.5}, [0.5 * np.exp(k) / (1 + np.e + np.e**2) for k in range(3)]),
    ],
)
def test_layer_options(fixture_dir, backend, config, weights):
    doc = make_nlp(fixture_dir, **config)("A river bank at dawn .")
    raw = backend.embed([[t.text for t in doc]])[0].astype(np.float64)
    expected = sum(w * raw[j] for j, w in enumerate(weights))
    assert_recomputed_close(doc._.elmo, expected)
    assert_recomputed_close(doc[3].vector, expected[3])
    assert_recomputed_close(doc._.elmo_layers, raw)  # raw layers do not depend on the mix
    # doc.tensor is mixed by the component from the layers in hand; the getters mix the stored ones: same bits
    np.testing.assert_array_equal(doc.tensor, doc._.elmo)


def test_bad_config_is_named(fixture_dir, tmp_path):
    with pytest.raises(ValueError, match="layers='middle'"):
        make_nlp(fixture_dir, layers="middle")
    with pytest.raises(ValueError, match="window_overlap=8"):
        make_nlp(fixture_dir, max_length=8, window_overlap=8)
    with pytest.raises(ValueError, match="batch_size=0"):
        make_nlp(fixture_dir, batch_size=0)
    wrong_count = make_nlp(fixture_dir, layers=[1.0, 2.0])
    with pytest.raises(ValueError, match="need exactly 3 weights"):
        wrong_count("a b")
    too_high = make_nlp(fixture_dir, layers=3)
    with pytest.raises(ValueError, match="this model has 3 layers"):
        too_high.initialize()
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            make_nlp(fixture_dir, device="cuda:0")("a b")
    missing = spacy.blank("en")
    missing.add_pipe("elmo", config={"model": str(tmp_path / "nowhere")})  # loaded lazily (spacy.load needs that)
    with pytest.raises(WeightFileError, match="nowhere"):
        missing("a b")


def test_a_folder_holding_no_model_is_refused_at_add_pipe(fixture_dir, tmp_path):
    """A folder that is there but holds no model fails at add_pipe, in one line naming it and what a model folder
    holds; a model folder still loads on first use (nothing read at add_pipe)."""
    empty = tmp_path / "some" / "folder"
    empty.mkdir(parents=True)
    (empty / "notes.txt").write_text("not a model", encoding="utf-8")
    nlp = spacy.blank("en")
    with pytest.raises(WeightFileError) as raised:
        nlp.add_pipe("elmo", config={"model": str(empty)})
    message = str(raised.value)
    assert "\n" not in message and str(empty) in message
    assert "options.json" in message and ".hdf5" in message and "config.json" in message  # what a model folder holds
    lazy = spacy.blank("en").add_pipe("elmo", config={"model": str(fixture_dir)})
    assert lazy.loaded_backend is None


class Terminal(io.StringIO):
    """What a terminal's stderr says of itself."""

    def isatty(self) -> bool:
        return True


def test_long_work_shows_a_progress_bar_on_a_terminal_only(fixture_dir, monkeypatch):
    """nlp.pipe over many docs and one very long doc: a bar on a terminal when the work takes a while (here:
    every piece of work, the delay set to nothing), none off a terminal, none for short work."""
    from spacy_elmo.runtime.features import progress

    nlp = make_nlp(fixture_dir, max_length=8, window_overlap=2)
    texts = ["The bank approved the loan .", "We sat by the river bank ."] * 3
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    for run in (lambda: list(nlp.pipe(texts, batch_size=2)), lambda: nlp(" ".join(texts * 5))):
        terminal = Terminal()
        monkeypatch.setattr(sys, "stderr", terminal)
        run()
        assert "elmo:" in terminal.getvalue() and "token" in terminal.getvalue()
        piped = io.StringIO()  # a log, a pipe, a test's captured stderr
        monkeypatch.setattr(sys, "stderr", piped)
        run()
        assert piped.getvalue() == ""
    monkeypatch.setattr(progress, "DELAY_S", 60.0)
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    list(nlp.pipe(texts))
    assert terminal.getvalue() == ""


def test_initialize_says_it_embeds_the_training_docs_and_shows_a_bar(fixture_dir, monkeypatch, caplog):
    """What spacy train and spacy debug data wait on: said in spaCy's log first, then a bar over the tokens."""
    from spacy.training import Example

    from spacy_elmo.runtime.features import progress
    from spacy_elmo.spacy import pipeline_component

    nlp = make_nlp(fixture_dir)
    elmo = nlp.get_pipe("elmo")
    monkeypatch.setattr(pipeline_component, "is_cached_reader", lambda layer: True)  # a listening ElmoScalarMix
    elmo.listener_map = {"textcat": [object()]}
    texts = ["The bank approved the loan .", "We sat by the river bank ."]
    examples = [Example(nlp.make_doc(text), nlp.make_doc(text)) for text in texts]
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    with caplog.at_level(logging.INFO, logger="spacy"):
        elmo.initialize(lambda: examples, nlp=nlp)
    assert "elmo: embedding 2 training docs (13 tokens)" in caplog.text
    assert "elmo: training docs" in terminal.getvalue() and "13/13" in terminal.getvalue()


def test_whitespace_tokens_are_skipped_and_zero(nlp, backend):
    doc = nlp("Hello  world \n\n again")
    spaces = [t.i for t in doc if t.is_space]
    assert spaces and len(doc) == 3 + len(spaces)
    expected = backend.embed([["Hello", "world", "again"]])[0]
    words = [t.i for t in doc if not t.is_space]
    assert_recomputed_close(doc._.elmo_layers[:, words], expected)
    assert not doc._.elmo_layers[:, spaces].any()
    for i in spaces:
        assert not doc[i].has_vector and not doc[i].vector.any() and doc[i].similarity(doc[0]) == 0.0
    assert_recomputed_close(doc.vector, expected.mean(axis=0).mean(axis=0))  # spaces left out


def test_doc_vector_is_the_vectorizers_mean_row(nlp, fixture_dir):
    """``doc.vector`` goes through the vectorizer's pooling (``runtime/features/pooling.py``): the same numbers as
    ``ElmoVectorizer(pooling="mean")``'s row of the same text, given as text or as the Doc (its stored layers)."""
    pytest.importorskip("sklearn")
    from spacy_elmo import ElmoVectorizer

    text = "Hello  world \n\n again . The bank of the river ."
    doc = nlp(text)
    vectorizer = ElmoVectorizer(model=str(fixture_dir), pooling="mean")
    np.testing.assert_array_equal(vectorizer.fit_transform([doc])[0], doc.vector)
    np.testing.assert_array_equal(vectorizer.transform([text])[0], doc.vector)


@pytest.mark.parametrize("text", ["", "   ", "\n\n"])
def test_empty_and_whitespace_only_docs(nlp, text):
    doc = nlp(text)
    assert doc._.elmo_layers.shape == (3, len(doc), 32) and not doc._.elmo_layers.any()
    assert doc._.elmo.shape == (len(doc), 32)
    assert doc.vector.shape == (32,) and not doc.vector.any() and not doc.has_vector
    assert doc.similarity(nlp("bank")) == 0.0
    zero_tokens = Doc(nlp.vocab, words=[])
    assert nlp.get_pipe("elmo")(zero_tokens)._.elmo_layers.shape == (3, 0, 32)
    assert next(iter(nlp.pipe([text, "", "a"])))._.elmo_layers.shape == (3, len(doc), 32)


def test_similarity_with_an_empty_doc_warns_once(nlp):
    hello, empty, spaces = nlp("hello"), nlp(""), nlp("a  b")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")  # Python's own filter: each warning once per place it is raised from
        assert empty.similarity(hello) == 0.0 and hello.similarity(empty) == 0.0  # the value stays as documented
        assert spaces[1].similarity(hello) == 0.0  # a whitespace token
        assert 0.0 < spaces[0].similarity(hello) < 1.0 and hello.similarity(hello) == pytest.approx(1.0)
    (warning,) = [w for w in caught if issubclass(w.category, EmptyVectorWarning)]
    assert "no ELMo vector" in str(warning.message) and "0.0" in str(warning.message)
    with warnings.catch_warnings():
        warnings.simplefilter("error", EmptyVectorWarning)
        spaces[0].similarity(hello)  # two real vectors: nothing to say
        spaces[0:1].similarity(hello[0:1])


def test_hooks_vectors_and_similarity(nlp):
    river = nlp("They sat on the bank of the river.")
    money = nlp("The bank will approve your loan.")
    bank_r, bank_m = river[4], money[1]
    np.testing.assert_array_equal(bank_r.vector, bank_r._.elmo)
    assert bank_r.has_vector and river.has_vector and river[2:5].has_vector
    # the two "bank"s have different vectors; spaCy's same-word shortcut (similarity 1.0) is not used
    assert 0.0 < bank_r.similarity(bank_m) < 0.9999
    assert bank_r.similarity(bank_m) == pytest.approx(cosine(bank_r._.elmo, bank_m._.elmo), abs=1e-6)
    assert_recomputed_close(river[2:5].vector, river[2:5]._.elmo.mean(axis=0))
    assert_recomputed_close(river.vector, river._.elmo.mean(axis=0))
    assert river.similarity(money) == pytest.approx(cosine(river._.elmo.mean(0), money._.elmo.mean(0)), abs=1e-6)
    assert river[3:5].similarity(money) == pytest.approx(cosine(river[3:5]._.elmo.mean(0), money.vector), abs=1e-6)
    assert bank_r.similarity(money[0:2]) == pytest.approx(cosine(bank_r.vector, money[0:2].vector), abs=1e-6)
    assert river.similarity(river) == pytest.approx(1.0)


def test_set_vectors_false_leaves_spacy_vectors(fixture_dir):
    doc = make_nlp(fixture_dir, set_vectors=False)("The bank will approve your loan.")
    assert doc._.elmo.shape == (7, 32) and not doc.user_hooks and not doc.user_token_hooks
    assert doc[1].vector.shape == (0,) and not doc[1].has_vector


def test_static_vectors_stay_reachable(fixture_dir, backend):
    nlp = make_nlp(fixture_dir)
    static = np.arange(5, dtype=np.float32) + 1
    nlp.vocab.set_vector("bank", static)
    doc = nlp("The bank will approve your loan.")
    assert doc[1].vector.shape == (32,)  # ELMo through the hook
    np.testing.assert_array_equal(doc[1].lex.vector, static)  # the vocab's static vector
    np.testing.assert_array_equal(nlp.vocab.get_vector("bank"), static)


def test_pipe_batches_across_docs_and_equals_per_doc(fixture_dir, backend, monkeypatch):
    nlp = make_nlp(fixture_dir)
    texts = [
        "The bank will approve your loan.",
        "",
        "Hi",
        "They sat on the bank of the river. It was cold.",
        " x  y ",
    ] * 3
    single = [nlp(t)._.elmo_layers for t in texts]
    calls = []
    embed = type(backend).embed
    monkeypatch.setattr(type(backend), "embed", lambda self, s, **kw: calls.append(len(s)) or embed(self, s, **kw))
    docs = list(nlp.pipe(texts, batch_size=8))
    assert calls == [6, 6]  # the non-empty docs of each batch (8 docs, then 7) embedded in one call
    for doc, expected in zip(docs, single):
        assert_recomputed_close(doc._.elmo_layers, expected)
        assert doc[0:].vector.shape == (32,) if len(doc) else True


N_PROCESS_SCRIPT = """
import sys, numpy as np, spacy
sys.path.insert(0, sys.argv[2])
from tests.numerics import assert_recomputed_close
from spacy_elmo.spacy import set_hooks
nlp = spacy.blank("en")
nlp.add_pipe("elmo", config={"model": sys.argv[1]})
long = " ".join(["The bank approved the loan ."] * 24)  # big enough for torch's multi-threaded kernels
texts = ["The bank will approve your loan.", "They sat on the bank of the river.", "", "One more."] + [long] * 12
expected = [nlp(t) for t in texts]  # the parent has used torch's OpenMP pool before forking
docs = list(nlp.pipe(texts, n_process=2, batch_size=8))
assert len(docs) == len(texts)
for doc, exp in zip(docs, expected):
    assert_recomputed_close(doc._.elmo_layers, exp._.elmo_layers)
    assert_recomputed_close(doc._.elmo, exp._.elmo)
    assert doc._.elmo_model == exp._.elmo_model and doc._.elmo_mix == exp._.elmo_mix
# spaCy never serialises hooks; doc.tensor (the mix) came back with the bytes: no call needed
for doc, exp in zip(docs, expected):
    assert_recomputed_close(doc.tensor, exp._.elmo)
    for token, exp_token in zip(doc, exp):
        assert token.has_vector
        assert_recomputed_close(token.vector, exp_token.vector)
    if len(doc):
        assert doc.has_vector and doc[0:2].has_vector
        assert_recomputed_close(doc.vector, exp.vector)
        assert_recomputed_close(doc[0:2].vector, exp[0:2].vector)
        assert abs(doc[0].similarity(doc[1]) - exp[0].similarity(exp[1])) < 1e-5
assert not docs[2].has_vector  # the empty text
set_hooks(docs)  # still puts the hooks back (whitespace tokens then have no vector again)
assert_recomputed_close(docs[0][1].vector, expected[0][1].vector)
print("n_process ok")
"""


@pytest.mark.slow
def test_pipe_n_process_keeps_vectors(fixture_dir):
    """In a subprocess, with the main thread forking: a deadlocked torch in the workers fails here, not hangs CI."""
    process = subprocess.Popen(
        [sys.executable, "-c", N_PROCESS_SCRIPT, str(fixture_dir), str(Path(__file__).resolve().parents[2])],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        pytest.fail("nlp.pipe(n_process=2) hung: torch deadlocked in the forked workers")
    assert process.returncode == 0 and "n_process ok" in out, err


def test_sentences_are_embedded_one_by_one(fixture_dir, backend):
    nlp = make_nlp(fixture_dir)
    nlp.add_pipe("sentencizer", first=True)
    doc = nlp("The bank will approve your loan. They sat on the bank of the river! Is it cold?")
    sents = list(doc.sents)
    assert len(sents) == 3
    expected = backend.embed([[t.text for t in s] for s in sents])
    assert_recomputed_close(doc._.elmo_layers, np.concatenate(expected, axis=1))
    whole = backend.embed([[t.text for t in doc]])[0]
    assert (
        np.abs(doc._.elmo_layers[:, sents[1].start :] - whole[:, sents[1].start :]).max() > 1e-3
    )  # not the same thing
    flat = make_nlp(fixture_dir, use_sentences=False)
    assert_recomputed_close(flat.get_pipe("elmo")(doc)._.elmo_layers, whole)


def expected_windows(backend, words, max_length, overlap):
    """Stitch by hand: each token from the window where it is furthest from an edge (ties: the later window)."""
    step = max_length - overlap
    starts = sorted({*range(0, max(len(words) - max_length, 0) + 1, step), max(len(words) - max_length, 0)})
    windows = [(s, min(s + max_length, len(words))) for s in starts]
    acts = backend.embed([words[s:e] for s, e in windows])
    out = np.zeros((3, len(words), 32), dtype=np.float32)
    for i in range(len(words)):
        best = max(range(len(windows)), key=lambda k: (min(i - windows[k][0], windows[k][1] - 1 - i), k))
        out[:, i] = acts[best][:, i - windows[best][0]]
    return out


def test_long_docs_are_windowed_and_stitched(fixture_dir, backend, fixture_sentences):
    words = [w for s in fixture_sentences[:6] for w in s]
    assert len(words) > 60
    nlp = make_nlp(fixture_dir, max_length=16, window_overlap=5)
    doc = nlp.get_pipe("elmo")(Doc(nlp.vocab, words=words))
    assert_recomputed_close(doc._.elmo_layers, expected_windows(backend, words, 16, 5))
    # a sentence longer than max_length is windowed the same way inside its sentence
    sent_starts = [True] + [False] * (len(words) - 1)
    doc = nlp.get_pipe("elmo")(Doc(nlp.vocab, words=[*words, "Next", "."], sent_starts=[*sent_starts, True, False]))
    assert_recomputed_close(doc._.elmo_layers[:, : len(words)], expected_windows(backend, words, 16, 5))
    assert_recomputed_close(doc._.elmo_layers[:, len(words) :], backend.embed([["Next", "."]])[0])


@pytest.mark.slow
def test_huge_doc_bounded_batches(fixture_dir, backend, monkeypatch):
    words = ["The", "bank", "approved", "the", "loan", "for", "the", "river", "house", "."] * 10_000
    nlp = make_nlp(fixture_dir)
    doc = Doc(nlp.vocab, words=words)
    calls = []
    embed = type(backend).embed
    monkeypatch.setattr(
        type(backend), "embed", lambda self, s, **kw: calls.append(sum(map(len, s))) or embed(self, s, **kw)
    )
    doc = nlp.get_pipe("elmo")(doc)
    assert doc._.elmo_layers.shape == (3, 100_000, 32) and np.isfinite(doc._.elmo_layers).all()
    assert len(calls) > 1 and max(calls) <= windows.MAX_TOKENS_PER_CALL
    assert_recomputed_close(doc._.elmo_layers[:, :100], backend.embed([words[:128]])[0][:, :100])
    assert doc[50_000].has_vector and doc.vector.shape == (32,)


def test_retokenized_doc_is_an_error_not_garbage(nlp):
    doc = nlp("The river bank is wet.")
    with doc.retokenize() as retokenizer:
        retokenizer.merge(doc[1:3])
    with pytest.raises(ValueError, match="retokenized after the 'elmo' component"):
        doc[1].vector


def test_component_class_defaults(fixture_dir, nlp):
    component = ElmoComponent(nlp.vocab, str(fixture_dir))
    assert component.name == "elmo" and component.layers == "average" and component.max_length == 128
    assert nlp.get_pipe_meta("elmo").assigns == ["doc._.elmo_layers", "doc._.elmo_model", "doc._.elmo_mix"]


def test_component_settings_are_checked_and_kept_in_plain_types(fixture_dir, nlp):
    component = ElmoComponent(
        nlp.vocab,
        str(fixture_dir),
        layers=np.int64(1),
        gamma=np.float64(0.5),
        batch_size=np.int64(8),
        max_length=np.int64(16),
        window_overlap=np.int64(4),
        device="",
    )
    kept = [component.layers, component.gamma, component.batch_size, component.max_length, component.window_overlap]
    assert kept == [1, 0.5, 8, 16, 4] and [type(value) for value in kept] == [int, float, int, int, int]
    assert component.device is None and component.precision == "float32"
    for bad, match in (
        ({"batch_size": None}, "batch_size=None: expected a positive integer"),
        ({"device": "gpu"}, "device='gpu' is not a torch device"),
        ({"precision": "int4"}, "precision must be one of"),
        ({"max_length": 8, "window_overlap": 8}, "window_overlap=8"),
    ):
        with pytest.raises(ValueError, match=match):
            ElmoComponent(nlp.vocab, str(fixture_dir), **bad)


@spacy.registry.misc("test_spacy_elmo.word_by_word.v1")
def word_by_word_v1():
    """A position getter that embeds every non-space token alone (and ignores use_sentences)."""
    return lambda doc, use_sentences: [[t.i] for t in doc if not t.is_space]


def test_position_getter_from_the_config(fixture_dir, backend, tmp_path):
    default = make_nlp(fixture_dir)
    assert default.config["components"]["elmo"]["get_positions"] == {"@misc": "spacy_elmo.sentence_positions.v1"}
    nlp = make_nlp(fixture_dir, get_positions={"@misc": "test_spacy_elmo.word_by_word.v1"})
    doc = nlp("The bank \n by the river .")
    words = [t for t in doc if not t.is_space]
    for token in words:
        assert_recomputed_close(doc._.elmo_layers[:, token.i], backend.embed([[token.text]])[0][:, 0])
    assert not doc._.elmo_layers[:, 2].any()  # the newline token: in no group, zeros
    assert not np.allclose(doc._.elmo_layers, default(doc.text)._.elmo_layers)
    nlp.to_disk(tmp_path / "pipeline")  # the config names the getter, so a loaded pipeline uses it again
    loaded = spacy.load(tmp_path / "pipeline")
    assert_recomputed_close(
        loaded(doc.text)._.elmo_layers, nlp(doc.text)._.elmo_layers
    )  # another backend (the copied files)
    with pytest.raises(TypeError, match="get_positions=3"):
        ElmoComponent(nlp.vocab, str(fixture_dir), get_positions=3)


def test_all_layers_side_by_side_on_the_doc(fixture_dir, backend):
    """``layers="all"``: ``doc._.elmo`` (and the vectors) hold every layer side by side, as ``mix_layers`` and
    ``ElmoVectorizer(layers="all")`` do; the layers stored on the doc are the same raw layers."""
    doc = make_nlp(fixture_dir, layers="all")("The bank approved the loan .")
    layers = doc._.elmo_layers
    assert doc._.elmo.shape == (len(doc), (backend.n_layers + 1) * backend.dim)
    np.testing.assert_array_equal(doc[1]._.elmo, np.concatenate([layers[k, 1] for k in range(backend.n_layers + 1)]))
    assert doc._.elmo_mix["layers"] == "all" and doc.vector.shape == ((backend.n_layers + 1) * backend.dim,)
    np.testing.assert_array_equal(doc.tensor, doc._.elmo)  # the component's own mix equals the getter's


def test_dtype_in_a_config_is_the_deprecated_name_of_precision(fixture_dir, tmp_path):
    """``precision`` names the biLM's precision in the component's config; ``dtype``, its name up to 0.2.0 (a pipeline
    saved then has it in its config.cfg), still loads, with a FutureWarning, and gives the same vectors."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": str(fixture_dir), "precision": "float32"})
    assert nlp.get_pipe("elmo").precision == "float32" and nlp.config["components"]["elmo"]["dtype"] is None
    want = nlp("The cat sat on the mat .").tensor
    nlp.to_disk(tmp_path / "saved")
    config = tmp_path / "saved" / "config.cfg"
    text = config.read_text(encoding="utf-8")
    assert 'precision = "float32"' in text
    config.write_text(text.replace("dtype = null", 'dtype = "float32"'), encoding="utf-8")  # as 0.2.0 saved it
    with pytest.warns(FutureWarning, match=r"dtype= is deprecated .* use precision='float32'"):
        loaded = spacy.load(tmp_path / "saved")
    assert loaded.get_pipe("elmo").precision == "float32"
    assert_recomputed_close(loaded("The cat sat on the mat .").tensor, want)
    with pytest.raises(ValueError, match="disagree"), pytest.warns(FutureWarning):
        spacy.blank("en").add_pipe("elmo", config={"model": str(fixture_dir), "precision": "int8", "dtype": "float32"})


def test_load_bilm_takes_dtype_as_the_deprecated_name_of_precision(fixture_dir):
    backend = load_bilm(fixture_dir, precision="float32")
    with pytest.warns(FutureWarning, match=r"load_bilm: dtype= is deprecated"):
        assert load_bilm(fixture_dir, dtype="float32") is backend
    assert backend.precision.name == "float32" and backend.dtype is torch.float32
