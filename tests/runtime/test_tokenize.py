"""The one tokenizer resolver and the one whitespace test (spacy_elmo/runtime/features/tokenize.py), shared by every
front end and training."""

import pytest
import spacy
from spacy.tokens import Doc

from spacy_elmo.runtime.features.tokenize import is_whitespace, resolve_tokenizer, spacy_tokenizer
from spacy_elmo.train.corpus.sentences import Source, read_sentences

TEXT = "Dr. Smith's bank,\n\n  by the river\u2003costs $3.50!"


def test_whitespace_test_is_spacys_is_space_on_spacy_tokens():
    nlp = spacy.blank("en")
    doc = Doc(nlp.vocab, words=["a", " ", "\n", "\u2003", "\u00a0", "\u200b", "b\n", "\t\r"], spaces=[False] * 8)
    assert [is_whitespace(t.text) for t in doc] == [t.is_space for t in doc]
    assert [is_whitespace(t.text) for t in nlp(TEXT)] == [t.is_space for t in nlp(TEXT)]
    assert (
        is_whitespace("") and is_whitespace(" \n") and not is_whitespace("\u200b")
    )  # empty counts; a zero-width space is text


def test_resolver_names_and_callables():
    assert resolve_tokenizer("whitespace") is str.split
    english = resolve_tokenizer(None)
    assert resolve_tokenizer("spacy") is english is resolve_tokenizer("en") is spacy_tokenizer("en")  # built once
    assert english(TEXT) == [t.text for t in spacy.blank("en")(TEXT) if not t.is_space]
    assert resolve_tokenizer(str.upper) is str.upper
    assert resolve_tokenizer("de")("Das Haus.") == ["Das", "Haus", "."]
    with pytest.raises(ValueError, match="tokenizer='zz'"):
        resolve_tokenizer("zz")
    with pytest.raises(TypeError, match="tokenizer=3"):
        resolve_tokenizer(3)


@pytest.mark.parametrize(
    "name, suggested",
    [("whitspace", "'whitespace'"), ("Spacy", "'spacy'"), ("WHITESPACE", "'whitespace'"), ("EN", "'en'")],
)
def test_a_misspelled_name_is_answered_with_the_closest_valid_names(name, suggested):
    with pytest.raises(ValueError) as err:
        resolve_tokenizer(name)
    message = str(err.value)
    assert message.startswith(f"tokenizer={name!r}: not a spaCy language code, 'whitespace' or 'spacy'")
    assert message.endswith(f"; did you mean {suggested}?") and "\n" not in message
    with pytest.raises(ValueError) as err:
        resolve_tokenizer("xx-nope")  # nothing close: no guess
    assert "did you mean" not in str(err.value)


def test_training_reads_with_the_same_tokenizers(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text(TEXT.replace("\n", " ") + "\n", encoding="utf-8")
    assert [w for s in read_sentences(Source(path, "lines", "spacy")) for w in s] == resolve_tokenizer("spacy")(TEXT)
    assert [w for s in read_sentences(Source(path, "lines", "whitespace")) for w in s] == TEXT.split()


def test_a_tokenizer_name_is_checked_without_importing_spacy():
    """`embed --tokenizer bogus` was said only once the model had loaded and spaCy had been imported."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from spacy_elmo.runtime.features.tokenize import check_tokenizer\n"
        "for good in ('whitespace', 'spacy', 'de', 'xx', None, str.split):\n"
        "    check_tokenizer(good)\n"
        "for bad in ('bogus', '../en', 'en/../../x'):\n"
        "    try:\n"
        "        check_tokenizer(bad)\n"
        "    except ValueError as err:\n"
        "        assert str(err).startswith(f'tokenizer={bad!r}: not a spaCy language code'), err\n"
        "    else:\n"
        "        raise AssertionError(bad)\n"
        "assert not {'spacy', 'torch'} & set(sys.modules), sorted({'spacy', 'torch'} & set(sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    with pytest.raises(ValueError, match="tokenizer='bogus': not a spaCy language code"):
        resolve_tokenizer("bogus")  # the same message, where front ends resolve it
