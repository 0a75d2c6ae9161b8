"""Text -> tokens for every front end and for training: the one tokenizer resolver and the one whitespace test.

ELMo never saw whitespace: a token that is empty or whitespace only (spaCy's ``" "``,
``"\\n"`` SPACE tokens) is never fed to the biLM and gets zero vectors where a front end keeps
a row for it.
"""

from __future__ import annotations

import difflib
import functools
import importlib.metadata
import importlib.util
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Callable, Optional, Union, overload

from ...groundwork.excerpt import excerpt

Tokenizer = Callable[[str], list[str]]
TokenizerSpec = Union[None, str, Callable[[str], Iterable[Any]]]

WHITESPACE = "whitespace"  # the text is already tokenized: str.split
SPACY = "spacy"  # spaCy's English rules (the default)
DEFAULT_LANGUAGE = "en"


def split_on_spaces(text: str) -> list[str]:
    """Tokens as TF-Hub's ``default`` signature makes them: split on spaces (only), empty pieces dropped."""
    return [token for token in text.split(" ") if token]


def is_whitespace(text: str) -> bool:
    """Whether a token is empty or whitespace only (for spaCy tokens the same as ``token.is_space``)."""
    return not text.strip()


@overload
def resolve_tokenizer(spec: Optional[str] = None) -> Tokenizer: ...


@overload
def resolve_tokenizer(spec: Callable[[str], Iterable[Any]]) -> Callable[[str], Iterable[Any]]: ...


def resolve_tokenizer(spec: TokenizerSpec = None) -> Callable[[str], Iterable[Any]]:
    """A function text -> tokens for a tokenizer setting.

    spec (None | str | callable): ``"whitespace"`` (``str.split``); None or ``"spacy"`` (a blank
        English spaCy tokenizer); another string, a spaCy language code (``"de"``: that
        language's blank tokenizer); a callable (returned as it is, e.g. ``nlp.tokenizer``).

    The built-in tokenizers return token strings without whitespace tokens; a callable's tokens
    (strings or spaCy tokens) are the caller's to clean. ``ValueError`` names an unknown name and the valid names
    closest to it (``"whitspace"``: ``"whitespace"``).
    """
    if callable(spec):
        return spec
    check_tokenizer(spec)  # None or a str from here
    if spec == WHITESPACE:
        return str.split
    return spacy_tokenizer(DEFAULT_LANGUAGE if spec is None or spec == SPACY else str(spec))


def check_tokenizer(spec: TokenizerSpec) -> None:
    """Refuse, importing nothing, a tokenizer setting :func:`resolve_tokenizer` cannot resolve: a string that is
    neither ``"whitespace"``, ``"spacy"`` nor a language spaCy has (a folder of ``spacy.lang`` or a registered
    language), or a value of another type. So the command line says ``--tokenizer bogus`` before torch or spaCy is
    imported; a language whose own needs are missing (``ja`` without SudachiPy) is said when it loads."""
    if spec is None or callable(spec) or spec in (WHITESPACE, SPACY):
        return
    if not isinstance(spec, str):
        raise TypeError(
            f"tokenizer={spec!r}: expected None, {WHITESPACE!r}, {SPACY!r}, a spaCy language code or a callable"
        )
    if not _spacy_has_language(spec):
        raise ValueError(unknown_tokenizer(spec, _spacy_language_codes()))


def unknown_tokenizer(name: str, codes: list[str]) -> str:
    """The one message for a tokenizer name that names nothing, with the valid names closest to it (case ignored:
    ``"whitspace"``, ``"Spacy"``) among ``whitespace``, ``spacy`` and spaCy's language ``codes``."""
    close = difflib.get_close_matches(name.lower(), [WHITESPACE, SPACY, *codes], n=3)
    hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else " (en, de, fr, ...)"
    return f"tokenizer={excerpt(name)}: not a spaCy language code, {WHITESPACE!r} or {SPACY!r}{hint}"


def _spacy_has_language(code: str) -> bool:
    """Whether spaCy (not imported) has the language ``code``: its folder under ``spacy/lang``, or a language a
    package registers (the ``spacy_languages`` entry points). True when spaCy is not installed: loading says so."""
    try:
        spec = importlib.util.find_spec("spacy")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return True
    if code.isidentifier() and any(
        _is_file(Path(folder) / "lang" / code / "__init__.py") for folder in spec.submodule_search_locations
    ):
        return True
    # every distribution's entry points, not entry_points(group=...): Python 3.9's takes no argument
    return any(
        entry.group == "spacy_languages" and entry.name == code
        for distribution in importlib.metadata.distributions()
        for entry in distribution.entry_points
    )


@functools.cache
def spacy_tokenizer(lang: str) -> Tokenizer:
    """Token strings of a blank spaCy pipeline's tokenizer for ``lang``, whitespace tokens left out (built once per
    process)."""
    import spacy

    try:
        tokenizer = spacy.blank(lang).tokenizer
    except (ImportError, KeyError) as err:
        codes = _spacy_language_codes()
        if lang in codes:  # spaCy has the language, but it needs a package that is missing (e.g. "ja": sudachipy)
            raise ValueError(f"tokenizer={lang!r}: spaCy's tokenizer for it cannot be made ({err})") from err
        raise ValueError(unknown_tokenizer(lang, codes)) from err
    return lambda text: [token.text for token in tokenizer(text) if not is_whitespace(token.text)]


def _spacy_language_codes() -> list[str]:
    """The language codes of the installed spaCy's own languages (``spacy/lang``'s packages), importing nothing
    (so the command line can name them before torch or spaCy is imported); none when spaCy is not installed."""
    try:
        spec = importlib.util.find_spec("spacy")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return []
    folders = [Path(folder) / "lang" for folder in spec.submodule_search_locations]
    return sorted({path.parent.name for folder in folders if folder.is_dir() for path in folder.glob("*/__init__.py")})


def _is_file(path: Path) -> bool:
    """``path.is_file()``, False too for a path this system cannot hold (a name too long: ``ENAMETOOLONG``)."""
    try:
        return path.is_file()
    except OSError:
        return False
