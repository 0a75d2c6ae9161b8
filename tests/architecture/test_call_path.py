"""The modules ``nlp("text")`` passes through are the ones ARCHITECTURE.md lists, no more and no fewer.

A call that wanders (a read-back of what it has just written, a helper in a room of its own for one line) shows up
here as a module the map does not name; a map that overclaims shows up as a module it names that the call skips.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

spacy = pytest.importorskip("spacy")

ROOT = Path(__file__).resolve().parents[2]
# the engine families: which one serves a model depends on the CPU (and dtype), so the map names them together
FAMILIES = {f"spacy_elmo.bilm.engine.{name}" for name in ("onednn", "mkl", "plain", "int8")}


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


def mapped_path() -> set[str]:
    """The modules ARCHITECTURE.md's "The modules nlp("text") passes through" lists, as module names."""
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    section = text.split('### The modules `nlp("text")` passes through', 1)[1]
    block = section.split("```", 2)[1]
    paths = re.findall(r"^(\S+)\.py\s", block, flags=re.MULTILINE)
    return {"spacy_elmo." + path.replace("/", ".") for path in paths}


@pytest.fixture(scope="module")
def nlp():
    pipeline = spacy.blank("en")
    pipeline.add_pipe("elmo")
    pipeline("The bank of the river .")  # loaded, and these words' token vectors cached
    return pipeline


def test_the_map_names_the_path_of_a_new_sentence_of_known_words(nlp):
    entered = entered_modules(lambda: nlp("The river bank"))
    families = set(entered) & FAMILIES
    assert len(families) in (1, 2), f"no engine family, or more than one with its base: {sorted(families)}"
    assert set(entered) - FAMILIES == mapped_path(), "update ARCHITECTURE.md's path, or the code that left it"


def test_new_words_add_only_the_token_encoder_and_a_cached_sentence_stops_early(nlp):
    known = set(entered_modules(lambda: nlp("The river bank .")))
    new = set(entered_modules(lambda: nlp("Zyxwv quorbles .")))
    assert new - known == {"spacy_elmo.bilm.encoder", "spacy_elmo.bilm.chars"}
    repeated = set(entered_modules(lambda: nlp("The river bank .")))
    assert not repeated & ({"spacy_elmo.bilm.inference", "spacy_elmo.bilm.engine.registry"} | FAMILIES)
