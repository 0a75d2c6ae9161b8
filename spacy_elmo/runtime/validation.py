"""Checks of user-given settings and inputs shared by the front ends and the backend (one copy of each)."""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Sequence
from typing import Any


def positive_int(value: Any, name: str) -> int:
    """``value`` as an ``int`` when it is an integer >= 1 (numpy integers too, booleans not); else ``ValueError``
    naming it."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name}={value!r}: expected a positive integer")
    return int(value)


_STR_ONLY = {str}


def validate_sentences(sentences: Iterable[Sequence[str]]) -> list[Sequence[str]]:
    """Materialise ``sentences`` as a list, raising ``TypeError`` that names the bad sentence/token.

    The one check of tokenized input: the backend's ``embed``, AllenNLP's ``batch_to_ids`` /
    ``ElmoEmbedder`` and simple_elmo's ``ElmoModel`` all call it, so a plain string where a token
    list belongs (which would be split into characters) or a token that is not a ``str`` gets the
    same message everywhere.
    """
    if isinstance(sentences, (str, bytes)) or not _is_iterable(sentences):
        raise TypeError(f"sentences must be an iterable of token sequences, not {type(sentences).__name__}")
    checked: list[Sequence[str]] = []
    for i, sentence in enumerate(sentences):
        if isinstance(sentence, (str, bytes)) or not _is_iterable(sentence):
            raise TypeError(
                f"sentence {i} is a {type(sentence).__name__}, not a sequence of token strings "
                f"(tokenize text first, e.g. text.split())"
            )
        tokens = list(sentence)
        if not set(map(type, tokens)) <= _STR_ONLY:  # fast path for plain str; subclasses checked below
            for j, token in enumerate(tokens):
                if not isinstance(token, str):
                    raise TypeError(f"sentence {i}, token {j}: expected str, got {type(token).__name__} ({token!r})")
        checked.append(tokens)
    return checked


def _is_iterable(value: object) -> bool:
    try:
        iter(value)  # type: ignore[call-overload]
    except TypeError:
        return False
    return True
