"""Texts -> unique token sequences -> layers: the steps ``ElmoVectorizer`` and ``spacy_elmo.dask`` share.

A column of samples (strings, token lists, or spaCy ``Doc`` objects: one kind per column) becomes
a map from each unique token sequence to the rows that hold it (:func:`token_rows`), so identical
samples are embedded once; whitespace tokens are dropped (``tokenize.is_whitespace``). The unique
sequences then go through ``windows.embed_segments`` (or ``fold_segments``), longest first
(:func:`embedded_rows`, :func:`folded_rows`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from functools import partial
from typing import Any, Callable, Optional, TypeVar, Union

import numpy as np
from spacy.tokens import Doc
from tqdm import tqdm

from .tokenize import TokenizerSpec, is_whitespace, resolve_tokenizer
from .windows import SentenceEmbedder, Sink, embed_segments, fold_segments

Tokens = tuple[str, ...]
Rows = dict[Tokens, list[int]]  # unique token sequence -> the rows (sample indices) that hold it
T = TypeVar("T")

TEXT, TOKENS, DOC = "text", "tokens", "doc"
_KIND_NAMES = {TEXT: "a string", TOKENS: "a token list", DOC: "a spaCy Doc"}


def sample_kind(samples: Sequence[Any]) -> str:
    """The one kind (``"text"``, ``"tokens"``, ``"doc"``) of all samples; ``TypeError`` names the first that breaks it.

    An empty column is ``"text"``.
    """
    first: Optional[str] = None
    for i, sample in enumerate(samples):
        kind = _kind(sample)
        if kind is None:
            hint = " (a missing value: fill it, e.g. with '')" if _is_missing(sample) else ""
            raise TypeError(
                f"sample {i} is {type(sample).__name__} ({sample!r}){hint}: expected a string, "
                "a list of token strings or a spaCy Doc"
            )
        if first is None:
            first = kind
        elif kind != first:
            raise TypeError(
                f"sample {i} is {_KIND_NAMES[kind]} ({type(sample).__name__}) but sample 0 is "
                f"{_KIND_NAMES[first]}: all samples must be of one kind (texts, token lists or Docs)"
            )
    return first or TEXT


def token_rows(samples: Sequence[Any], kind: str, tokenizer: TokenizerSpec = None) -> Rows:
    """Each unique token sequence of strings (``kind="text"``, split by ``tokenizer``) or token lists, and its rows.

    Each distinct string is tokenized once. A sample with no tokens maps to ``()``.
    """
    pending: Rows = {}
    if kind == TEXT:
        split = resolve_tokenizer(tokenizer)
        tokenized: dict[str, Tokens] = {}
        for i, text in enumerate(samples):
            text = str(text)  # numpy.str_ -> str, which spaCy's tokenizer requires
            if text not in tokenized:
                tokenized[text] = clean_tokens(split_text(split, text, i), i)
            pending.setdefault(tokenized[text], []).append(i)
    else:
        for i, tokens in enumerate(samples):
            pending.setdefault(clean_tokens(tokens, i), []).append(i)
    return pending


def row_tokens(rows: Rows, n_samples: int) -> list[Tokens]:
    """The token sequence of each of ``n_samples`` rows, in row order (the inverse of :func:`token_rows`)."""
    sequences: list[Tokens] = [()] * n_samples
    for tokens, where in rows.items():
        for i in where:
            sequences[i] = tokens
    return sequences


def embedded_rows(
    rows: Union[Rows, Iterable[Tokens]],
    backend: SentenceEmbedder,
    *,
    max_length: Optional[int],
    overlap: int,
    batch_size: Optional[int] = None,
    verbose: Union[bool, int] = 0,
) -> Iterator[tuple[Tokens, np.ndarray]]:
    """All layers of each unique non-empty token sequence, embedded once, longest first (``windows.embed_segments``)."""
    return folded_rows(
        rows, backend, embed_segments, max_length=max_length, overlap=overlap, batch_size=batch_size, verbose=verbose
    )


def pooled_rows(
    rows: Union[Rows, Iterable[Tokens]],
    backend: SentenceEmbedder,
    new_sink: Callable[[tuple[int, int, int], int], Sink[T]],
    *,
    max_length: Optional[int],
    overlap: int,
    batch_size: Optional[int] = None,
    verbose: Union[bool, int] = 0,
) -> Iterator[tuple[Tokens, T]]:
    """Each unique non-empty token sequence folded window by window into ``new_sink`` (``windows.fold_segments``)."""
    embed = partial(fold_segments, new_sink=new_sink)
    return folded_rows(
        rows, backend, embed, max_length=max_length, overlap=overlap, batch_size=batch_size, verbose=verbose
    )


def folded_rows(
    rows: Union[Rows, Iterable[Tokens]],
    backend: SentenceEmbedder,
    embed: Callable[..., Iterator[tuple[Tokens, T]]],
    *,
    max_length: Optional[int],
    overlap: int,
    batch_size: Optional[int] = None,
    verbose: Union[bool, int] = 0,
) -> Iterator[tuple[Tokens, T]]:
    """``embed``'s result for each unique non-empty token sequence, longest first, with a tqdm bar when ``verbose``.

    ``embed`` is ``windows.embed_segments`` or ``fold_segments`` (with its sink bound); it gets
    ``max_length``, ``overlap`` and ``batch_size``.
    """
    unique = sorted((tokens for tokens in rows if tokens), key=len, reverse=True)
    segments = ((tokens, tokens) for tokens in unique)
    with tqdm(total=len(unique), unit="text", desc="ELMo", disable=not verbose) as bar:
        for tokens, result in embed(backend, segments, max_length=max_length, overlap=overlap, batch_size=batch_size):
            yield tokens, result
            bar.update(1)


def clean_tokens(tokens: Iterable[Any], index: int) -> Tokens:
    """Token texts without whitespace-only tokens; ``TypeError`` names the sample and token."""
    texts = []
    for j, token in enumerate(tokens):
        text = token if isinstance(token, str) else getattr(token, "text", None)
        if not isinstance(text, str):
            raise TypeError(
                f"sample {index}, token {j}: expected a string (or spaCy token), got {type(token).__name__} ({token!r})"
            )
        if not is_whitespace(text):
            texts.append(str(text))
    return tuple(texts)


def split_text(split: Callable[[str], Iterable[Any]], text: str, row: int) -> Iterable[Any]:
    """``split(text)``, with a lone surrogate (which spaCy's string store cannot encode) named by row and position."""
    try:
        return split(text)
    except UnicodeEncodeError as err:
        raise ValueError(
            f"text {row}: {text[err.start : err.end]!r} at position {err.start} is a lone surrogate, not Unicode text, "
            "and the tokenizer cannot take it; decode the bytes with errors='replace' or pass token lists"
        ) from err


def _kind(sample: Any) -> Optional[str]:
    if isinstance(sample, str):
        return TEXT
    if isinstance(sample, Doc):
        return DOC
    if isinstance(sample, (list, tuple)) or (isinstance(sample, np.ndarray) and sample.ndim == 1):
        return TOKENS
    return None


def _is_missing(value: Any) -> bool:
    if value is None or type(value).__name__ in ("NAType", "NaTType"):  # None, pandas.NA, pandas.NaT
        return True
    return isinstance(value, float) and math.isnan(value)
