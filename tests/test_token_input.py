"""Every public API that takes token lists refuses the same hostile input with one ``TypeError`` naming it.

docs/guarantees.md ("Any token") promises a ``TypeError`` naming the sentence and the token for a token that is not
a ``str`` and for a plain string where a token list belongs, in every API that takes token lists. ``ENTRIES`` is the
one table of those APIs; each is fed every input of ``HOSTILE``. ``test_the_table_holds_every_public_token_argument``
scans the public API for arguments named as token input take (``sentences``, ``tokens``, ``batch``, ``texts``...), so
that a new entry cannot skip the check, and ``test_the_guarantee_lists_every_entry`` holds the guarantee's list of
APIs to the table.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

from tests.conftest import FIXTURE_DIR

OPTIONS, WEIGHTS = str(FIXTURE_DIR / "options.json"), str(FIXTURE_DIR / "lm_weights.hdf5")
GUARANTEES = Path(__file__).resolve().parents[1] / "docs" / "guarantees.md"

# what a token-list argument may be: a batch of sentences, one sentence (or vocabulary), or a column of samples that
# may also be texts (ElmoVectorizer, Dask: a plain string there is a text, not a token list)
BATCH, SENTENCE, SAMPLES = "batch", "sentence", "samples"


@dataclass(frozen=True)
class Hostile:
    """One hostile batch and what the ``TypeError`` must say about it (a regular expression)."""

    batch: Any
    says: str


HOSTILE = [
    Hostile([[b"The", "cat"]], r"token 0: expected (str|a string).*got bytes \(b'The'\)"),
    Hostile([[None]], r"token 0: expected (str|a string).*got NoneType"),
    Hostile([[3]], r"token 0: expected (str|a string).*got int \(3\)"),
    Hostile(["the cat sat"], r"sentence 0 is a str, not a sequence of token strings"),  # where a token list belongs
    Hostile("the cat sat", r"must be (an iterable|a list-like|a dask Bag)"),  # a plain string where a batch belongs
    Hostile([["ok", 3.5]], r"token 1: expected (str|a string).*got float \(3.5\)"),
    Hostile([[["nested"]]], r"token 0: expected (str|a string).*got list \(\['nested'\]\)"),
]


@dataclass(frozen=True)
class Entry:
    """A public API that takes token lists: ``module:Qualname.method(argument)``, what the argument holds, and how
    to call it with one value for that argument (the models are the small fixture's)."""

    name: str
    kind: str
    call: Callable[[Any], Any]
    named: str = ""  # what the error calls the argument, where it is not the argument's name

    @property
    def argument(self) -> str:
        return self.name.rsplit("(", 1)[1].rstrip(")")

    @property
    def label(self) -> str:
        """How docs/guarantees.md names it: ``Class.method``, a function's name, ``Class(argument=...)``."""
        qualname = self.name.split(":")[1].split("(")[0]
        owner, _, method = qualname.rpartition(".")
        return f"{owner}({self.argument}=...)" if method == "__init__" else qualname


def _backend():
    import spacy_elmo

    return spacy_elmo.load_bilm(FIXTURE_DIR)


def _hub():
    from spacy_elmo import hub

    return hub.HubModule(_backend())


def _lengths(batch: Any) -> list[int]:
    """TF-Hub's ``sequence_len`` for a batch (each row whole)."""
    return [len(row) if hasattr(row, "__len__") else 1 for row in batch] if isinstance(batch, list) else [1]


def _embedder(**kwargs: Any):
    from spacy_elmo.compat.allennlp import ElmoEmbedder

    return ElmoEmbedder(OPTIONS, WEIGHTS, **kwargs)


def _manylangs():
    from spacy_elmo.compat.elmoformanylangs import Embedder

    return Embedder(FIXTURE_DIR)


def _simple_elmo():
    from spacy_elmo.compat.simple_elmo import ElmoModel

    model = ElmoModel()
    model.load(FIXTURE_DIR)
    return model


def _vectorizer():
    from spacy_elmo import ElmoVectorizer

    return ElmoVectorizer(model=str(FIXTURE_DIR))


def _bag(texts: Any) -> Any:
    """A list as a one-partition dask Bag; anything else as it is (what a caller would wrongly pass)."""
    import dask.bag as db

    return db.from_sequence(texts, npartitions=1) if isinstance(texts, list) else texts


def _dask(function: str) -> Callable[[Any], Any]:
    def call(texts: Any) -> Any:
        import spacy_elmo.dask as elmo_dask

        return getattr(elmo_dask, function)(_bag(texts), model=FIXTURE_DIR).compute(scheduler="sync")

    return call


def _allennlp(name: str) -> Any:
    return getattr(importlib.import_module("spacy_elmo.compat.allennlp"), name)


ALLENNLP, HUB = "spacy_elmo.compat.allennlp", "spacy_elmo.hub"
ENTRIES = [
    Entry("spacy_elmo:ElmoBackend.embed(sentences)", BATCH, lambda x: _backend().embed(x)),
    Entry(f"{HUB}:HubModule.tokens(tokens)", BATCH, lambda x: _hub().tokens(tokens=x, sequence_len=_lengths(x))),
    Entry(
        f"{HUB}:HubModule.__call__(inputs)",  # its "tokens" signature: the dict's tokens
        BATCH,
        lambda x: _hub()({"tokens": x, "sequence_len": _lengths(x)}, signature="tokens"),
        named="tokens",
    ),
    Entry(f"{ALLENNLP}:batch_to_ids(batch)", BATCH, lambda x: _allennlp("batch_to_ids")(x)),
    Entry(f"{ALLENNLP}:ElmoEmbedder.embed_batch(batch)", BATCH, lambda x: _embedder().embed_batch(x)),
    Entry(f"{ALLENNLP}:ElmoEmbedder.batch_to_embeddings(batch)", BATCH, lambda x: _embedder().batch_to_embeddings(x)),
    Entry(
        f"{ALLENNLP}:ElmoEmbedder.embed_sentences(sentences)",
        BATCH,
        lambda x: list(_embedder(stateful=False).embed_sentences(x)),
    ),
    Entry(f"{ALLENNLP}:ElmoEmbedder.embed_sentence(sentence)", SENTENCE, lambda x: _embedder().embed_sentence(x)),
    Entry(
        f"{ALLENNLP}:Elmo.__init__(vocab_to_cache)",
        SENTENCE,
        lambda x: _allennlp("Elmo")(OPTIONS, WEIGHTS, 1, vocab_to_cache=x),
    ),
    Entry(
        f"{ALLENNLP}:ElmoTokenEmbedder.__init__(vocab_to_cache)",
        SENTENCE,
        lambda x: _allennlp("ElmoTokenEmbedder")(OPTIONS, WEIGHTS, vocab_to_cache=x),
    ),
    Entry(
        f"{ALLENNLP}:_ElmoBiLm.__init__(vocab_to_cache)",
        SENTENCE,
        lambda x: _allennlp("_ElmoBiLm")(OPTIONS, WEIGHTS, vocab_to_cache=x),
    ),
    Entry(
        f"{ALLENNLP}:_ElmoBiLm.create_cached_cnn_embeddings(tokens)",
        SENTENCE,
        lambda x: _allennlp("_ElmoBiLm")(OPTIONS, WEIGHTS).create_cached_cnn_embeddings(x),
    ),
    Entry(
        f"{ALLENNLP}:_ElmoCharacterEncoder.token_vectors(tokens)",
        SENTENCE,
        lambda x: _allennlp("_ElmoCharacterEncoder")(OPTIONS, WEIGHTS).token_vectors(x),
    ),
    Entry("spacy_elmo.compat.elmoformanylangs:Embedder.sents2elmo(sents)", BATCH, lambda x: _manylangs().sents2elmo(x)),
    Entry(
        "spacy_elmo.compat.simple_elmo:ElmoModel.get_elmo_vectors(texts)",
        BATCH,
        lambda x: _simple_elmo().get_elmo_vectors(x),
    ),
    Entry(
        "spacy_elmo.compat.simple_elmo:ElmoModel.get_elmo_vector_average(texts)",
        BATCH,
        lambda x: _simple_elmo().get_elmo_vector_average(x),
    ),
    Entry("spacy_elmo:ElmoVectorizer.fit(X)", SAMPLES, lambda x: _vectorizer().fit(x)),
    Entry("spacy_elmo:ElmoVectorizer.transform(X)", SAMPLES, lambda x: _vectorizer().transform(x)),
    Entry("spacy_elmo:ElmoVectorizer.fit_transform(X)", SAMPLES, lambda x: _vectorizer().fit_transform(x)),
    Entry("spacy_elmo.dask:embed_texts(texts)", SAMPLES, _dask("embed_texts")),
    Entry("spacy_elmo.dask:embed_tokens(texts)", SAMPLES, _dask("embed_tokens")),
]

# arguments named as token input that take something else, and why
NOT_TOKEN_LISTS = {
    "spacy_elmo.similarity:word_similarity(sentence_a)": "a text, split on spaces (TF-Hub's rule)",
    "spacy_elmo.similarity:word_similarity(sentence_b)": "a text, split on spaces (TF-Hub's rule)",
    "spacy_elmo.similarity:WordSimilarity.__init__(tokens)": "a result: the tokens word_similarity split",
    "spacy_elmo.compat.allennlp:add_sentence_boundary_token_ids(sentence_begin_token)": "a tensor of char ids",
    "spacy_elmo.compat.allennlp:add_sentence_boundary_token_ids(sentence_end_token)": "a tensor of char ids",
    "spacy_elmo.spacy:ElmoComponent.__init__(vocab)": "spaCy's Vocab (the component takes Docs)",
}


def _inputs(entry: Entry) -> Iterator[tuple[Any, str]]:
    """Each hostile value for ``entry``'s argument and what its error must say."""
    for hostile in HOSTILE:
        batch = hostile.batch
        if entry.kind == SENTENCE:  # the batch's one sentence; a plain string is one where a token list belongs
            if isinstance(batch, list):
                yield batch[0], hostile.says.replace("sentence 0 is a str", "is a str")
        elif entry.kind == SAMPLES and batch == ["the cat sat"]:
            continue  # a text: what these take as well as token lists
        else:
            yield batch, hostile.says


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda entry: entry.name)
def test_every_token_list_api_refuses_the_same_hostile_input(entry):
    for value, says in _inputs(entry):
        with pytest.raises(TypeError) as raised:
            entry.call(value)
        message = str(raised.value)
        assert re.search(says, message), f"{entry.name} given {value!r}: {message}"
        assert "\n" not in message, f"{entry.name} given {value!r}: not one line: {message}"
        if entry.kind != SAMPLES:  # the shared check names the API's own argument
            assert message.startswith(entry.named or entry.argument), f"{entry.name} given {value!r}: {message}"


# arguments that hold token input by their name: a batch of sentences, one sentence, a column of samples, a vocabulary
TOKEN_ARGUMENT = re.compile(r"^(sentences?(_\w+)?|sents|tokens|batch|texts|X|vocab(_to_cache)?|words)$")
SCANNED = [
    "spacy_elmo",
    "spacy_elmo.hub",
    "spacy_elmo.compat.allennlp",
    "spacy_elmo.compat.elmoformanylangs",
    "spacy_elmo.compat.simple_elmo",
    "spacy_elmo.dask",
    "spacy_elmo.similarity",
    "spacy_elmo.spacy",
    "spacy_elmo.output.embed_file",
]


def _public_arguments() -> Iterator[str]:
    """``module:Qualname(argument)`` of every argument of the public callables of ``SCANNED`` (each module's
    ``__all__``, else the public names it defines; classes: their own public methods, ``__init__`` and
    ``__call__``)."""
    for module_name in SCANNED:
        module = importlib.import_module(module_name)
        names = getattr(module, "__all__", None) or [
            name
            for name, value in vars(module).items()
            if not name.startswith("_") and getattr(value, "__module__", "") == module_name
        ]
        for name in names:
            value = getattr(module, name)
            if inspect.isclass(value):
                functions = [
                    (f"{name}.{attr}", raw)
                    for attr, raw in vars(value).items()
                    if (not attr.startswith("_") or attr in ("__init__", "__call__"))
                    and callable(inspect.unwrap(getattr(raw, "__func__", raw)))
                    and not inspect.isclass(raw)
                ]
            elif callable(value) and not inspect.isclass(value):
                functions = [(name, value)]
            else:
                continue
            for qualname, function in functions:
                function = getattr(function, "__func__", function)
                try:
                    parameters = inspect.signature(function).parameters
                except (TypeError, ValueError):
                    continue
                for parameter in parameters:
                    yield f"{module_name}:{qualname}({parameter})"


def test_the_table_holds_every_public_token_argument():
    arguments = set(_public_arguments())
    token_arguments = {a for a in arguments if TOKEN_ARGUMENT.match(a.rsplit("(", 1)[1].rstrip(")"))}
    covered = {entry.name for entry in ENTRIES} | set(NOT_TOKEN_LISTS)
    assert sorted(token_arguments - covered) == [], "public token-list arguments missing from ENTRIES"
    assert sorted(covered - arguments) == [], "ENTRIES or NOT_TOKEN_LISTS name arguments the public API lacks"


def test_the_guarantee_lists_every_entry():
    text = GUARANTEES.read_text(encoding="utf-8")
    paragraph = text[text.index("- **Any token**") :]
    paragraph = paragraph[: paragraph.index("\n- **")]
    listed = set(re.findall(r"`([^`]+)`", paragraph))
    assert sorted({entry.label for entry in ENTRIES} - listed) == []


@pytest.mark.parametrize(
    "name",
    [
        "spacy_elmo:ElmoBackend.embed(sentences)",
        f"{ALLENNLP}:batch_to_ids(batch)",
        "spacy_elmo:ElmoVectorizer.fit(X)",
    ],
)
def test_a_huge_hostile_token_is_named_in_a_short_line(name):
    (entry,) = [entry for entry in ENTRIES if entry.name == name]
    """The message echoes a bounded excerpt of the token (``groundwork.excerpt``), not a megabyte of its repr."""
    with pytest.raises(TypeError) as raised:
        entry.call([["fine", b"x" * 1_000_000]])
    message = str(raised.value)
    assert "token 1: expected" in message and "1,000,000 bytes" in message and len(message) < 300, message[:300]
