"""excerpt: the bounded echo of a value in an error message."""

from pathlib import Path

import pytest

from spacy_elmo.groundwork.excerpt import EXCERPT_CHARS, excerpt


@pytest.mark.parametrize("value", ["mps", "cuda:x", 3.5, None, b"cpu", ["a", "b"]])
def test_a_short_value_is_its_repr(value):
    assert excerpt(value) == repr(value)


@pytest.mark.parametrize("size", [EXCERPT_CHARS + 10, 300, 1 << 20])
def test_a_long_string_keeps_its_head_and_tail_and_says_its_length(size):
    value = "h" + "x" * (size - 2) + "t"
    shown = excerpt(value)
    assert shown.startswith("'hxx") and "..." in shown and shown.endswith(f"xt' ({size:,} characters)"), shown
    assert len(shown) <= EXCERPT_CHARS + 30


def test_paths_bytes_and_other_objects_are_bounded_too():
    assert excerpt(Path("p" * 1000)).endswith("(1,000 characters)")
    assert excerpt(b"b" * 1000).endswith("(1,000 bytes)")
    assert len(excerpt(list(range(10_000)))) <= EXCERPT_CHARS
    assert len(excerpt(object(), limit=10)) <= 10
