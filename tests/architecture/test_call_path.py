"""What ``nlp(text)`` passes through, as the code runs it: a loaded pipeline's call stays in the rooms that embed
(spacy/, runtime/, bilm/ and the groundwork/ below them), touches no model file, never reads back the layers it
writes, and its caches work.

Each check is a property a user pays for when it breaks (a call that reads or resolves the model again, a read-back
of what it has just written, a cache that no longer saves the char CNN or the biLM), not a list of modules: a module
may split or move within those rooms freely.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable

import pytest

spacy = pytest.importorskip("spacy")

# the rooms a loaded pipeline's call may enter: its own front end, the shared runtime, the model, the ground floor
ROOMS = ("spacy_elmo.spacy", "spacy_elmo.runtime", "spacy_elmo.bilm", "spacy_elmo.groundwork")
# inside those, what only loading touches: the model's files, their schemas, whole-file writes (a call reads and
# writes no file; sources/, which resolves a model string, is outside the rooms already)
FILE_MODULES = {
    "spacy_elmo.bilm.weights",
    "spacy_elmo.bilm.manylangs_reader",
    "spacy_elmo.groundwork.schema_check",
    "spacy_elmo.bilm.file_formats",
    "spacy_elmo.groundwork.atomic_write",
}
# the doc's stored layers and their one reader: the component writes them and mixes the layers it holds
READ_BACK = "spacy_elmo.runtime.features.stored_layers"
TOKEN_ENCODER = {"spacy_elmo.bilm.encoder", "spacy_elmo.bilm.chars"}
# what computes a sentence's layers: past the memory cache
COMPUTING = ("spacy_elmo.bilm.inference", "spacy_elmo.bilm.engine", "spacy_elmo.bilm.vocab_cache")


def entered_modules(call: Callable[[], object]) -> list[str]:
    """The spacy_elmo modules whose functions ``call`` enters, in order of first entry."""
    seen: dict[str, None] = {}

    def profile(frame, event, arg):
        if event == "call":
            name = frame.f_globals.get("__name__", "")
            if name.startswith("spacy_elmo"):
                seen.setdefault(name, None)

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return list(seen)


def in_rooms(name: str, rooms: tuple[str, ...]) -> bool:
    return any(name == room or name.startswith(room + ".") for room in rooms)


KNOWN = "The bank of the river ."


@pytest.fixture(scope="module")
def nlp():
    pipeline = spacy.blank("en")
    pipeline.add_pipe("elmo")
    pipeline(KNOWN)  # loaded, and these words' token vectors cached
    return pipeline


_REPEATS = itertools.count(1)


def new_sentence_of_known_words(nlp) -> list[str]:
    """The modules a call on a sentence not embedded yet, of known words only, enters (a new one each time, so that
    no call is answered by the memory cache): checked to reach the biLM's engine, so no check passes on a cache hit."""
    words = KNOWN.split()
    text = " ".join(words[:-1] * next(_REPEATS))
    entered = entered_modules(lambda: nlp(text))
    assert any(name.startswith("spacy_elmo.bilm.engine.") for name in entered), f"{text!r} computed nothing"
    return entered


def test_the_trace_sees_the_call_down_to_an_engine(nlp):
    """Guards the checks below against passing because the trace sees nothing."""
    entered = new_sentence_of_known_words(nlp)
    assert "spacy_elmo.spacy.pipeline_component" in entered and "spacy_elmo.runtime.embedding.backend" in entered
    assert not in_rooms("spacy_elmo.train.run.trainer", ROOMS) and in_rooms("spacy_elmo.bilm.engine.contract", ROOMS)


def test_a_call_stays_in_the_embedding_rooms_and_touches_no_file(nlp):
    """A loaded pipeline's call never enters the training room, the command line, sources/ (what a model string
    means, downloads), output/ or another front end, nor the modules that read or write the model's files."""
    entered = new_sentence_of_known_words(nlp)
    outside = [name for name in entered if not in_rooms(name, ROOMS)]
    assert not outside, f"nlp(text) left spacy/, runtime/ and bilm/ for {outside}"
    files = sorted(FILE_MODULES.intersection(entered))
    assert not files, f"nlp(text) entered what reads or writes the model's files: {files}"


def test_a_call_never_reads_back_the_layers_it_writes(nlp):
    """The component mixes the layers it holds for doc.tensor and the vectors: the stored layers' reader, with its
    staleness checks, is for later readers of the doc, not for the call that wrote them."""
    assert READ_BACK not in new_sentence_of_known_words(nlp)


def test_known_words_skip_the_token_encoder_and_a_repeated_sentence_stops_at_the_memory_cache(nlp):
    """Token vectors of known words come from the token cache; new words, and only they, run the char CNN; a sentence
    embedded before is answered by the memory cache without reaching the biLM."""
    known = set(new_sentence_of_known_words(nlp))
    assert not known & TOKEN_ENCODER, "known words ran the char CNN: the token-vector cache missed"
    new = set(entered_modules(lambda: nlp("Zyxwv quorbles .")))
    assert new >= TOKEN_ENCODER, "new words did not reach the token encoder (the check sees nothing)"
    repeated = entered_modules(lambda: nlp("Zyxwv quorbles ."))
    computed = [name for name in repeated if in_rooms(name, COMPUTING)]
    assert not computed, f"a repeated sentence went past the memory cache into {computed}"
