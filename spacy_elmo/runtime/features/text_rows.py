"""Texts -> unique token sequences -> layers -> rows: what ``ElmoVectorizer`` and ``spacy_elmo.dask`` compute.

A column of samples (strings, token lists, or spaCy ``Doc`` objects: one kind per column, found once where the column
enters: :func:`sample_column`) becomes a map from each unique token sequence to the rows that hold it
(:func:`token_rows`), so identical samples are embedded once; whitespace tokens are dropped
(``tokenize.is_whitespace``). The unique sequences then go through ``windows.embed_segments`` (or
``fold_segments``), longest first (:func:`embedded_rows`, :func:`folded_rows`). :func:`pooled_matrix` is the whole
trip for one column (the vectorizer's ``transform``, one Dask partition), :func:`token_records` its token-level
sibling (``embed_tokens``).
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Optional, TypeVar, Union

import numpy as np

from ..configuration.validation import token_text
from ..embedding.windows import SentenceEmbedder, Sink, embed_segments, fold_segments
from .front_settings import FrontSettings
from .mix import mix_layers
from .pooling import PoolSink, normalized_rows, pool
from .progress import Progress, show_of
from .stored_layers import fresh_layers, is_doc
from .tokenize import TokenizerSpec, is_whitespace, resolve_tokenizer

if TYPE_CHECKING:
    from ..embedding.backend import ElmoBackend

Tokens = tuple[str, ...]
Rows = dict[Tokens, list[int]]  # unique token sequence -> the rows (sample indices) that hold it
T = TypeVar("T")

TEXT, TOKENS, DOC = "text", "tokens", "doc"
_KIND_NAMES = {TEXT: "a string", TOKENS: "a token list", DOC: "a spaCy Doc"}
_SEVERAL_WORDS = re.compile(r"\S[ \t\n\r\f\v]+\S")  # ASCII whitespace between two characters of a token
_EXCERPT = 40  # characters of a text an error message echoes


class EmptyTextWarning(UserWarning):
    """Some samples had no tokens (empty or whitespace only): their rows are zeros, as documented, but a column of
    them usually means the wrong column or an unread file. Shown once per process (Python's default filter)."""


@dataclass(frozen=True)
class SampleColumn:
    """One column of samples and their one kind (``"text"``, ``"tokens"``, ``"doc"``), found once where the column
    enters (:func:`sample_column`)."""

    samples: Sequence[Any]
    kind: str


def sample_column(samples: Sequence[Any]) -> SampleColumn:
    """``samples`` and their kind (:func:`sample_kind`: a ``TypeError`` or ``ValueError`` names the first sample that
    breaks it)."""
    return SampleColumn(samples, sample_kind(samples))


def pooled_matrix(column: SampleColumn, backend: ElmoBackend, settings: FrontSettings) -> np.ndarray:
    """Float32 ``(len(column.samples), settings.width(...))``: each sample's mixed, pooled row, identical samples
    embedded once, long ones window by window (memory flat in a text's length; never stitched).

    ``settings`` are checked (:meth:`FrontSettings.checked`); ``layers`` is checked against the model's here, where
    the width is found (a ``ValueError`` naming it). A ``Doc`` whose ``doc._.elmo_layers`` this model made (same
    fingerprint and shape) is pooled from them, not recomputed. A sample with no tokens gives zeros and an
    :class:`EmptyTextWarning`. ``settings.norm`` ("l2", "l1") scales each whole row to unit norm last (zeros stay
    zeros).
    """
    samples, kind = column.samples, column.kind
    n_outputs = backend.n_layers + 1
    out = np.zeros((len(samples), settings.width(backend.n_layers, backend.dim)), dtype=np.float32)

    def pooled(activations: np.ndarray) -> np.ndarray:
        return pool(mix_layers(activations, settings.layers, settings.gamma), settings.pooling)

    empty = 0  # samples with no tokens
    if kind == DOC:
        pending: Rows = {}  # unique token sequence -> rows that need it
        for i, doc in enumerate(samples):
            keep = [token.i for token in doc if not is_whitespace(token.text)]
            empty += not keep
            stored = fresh_layers(doc, backend.fingerprint, (n_outputs, backend.dim))
            if stored is None:
                pending.setdefault(tuple(doc[j].text for j in keep), []).append(i)
            else:
                out[i] = pooled(stored[:, keep])
    else:
        pending = token_rows(samples, kind, settings.tokenizer)
        empty = len(pending.get((), []))
    if empty:
        warnings.warn(  # one message for every call, so that Python's default filter shows it once
            "spacy_elmo: ElmoVectorizer was given samples with no tokens (empty or whitespace only); "
            "their rows are zeros",
            EmptyTextWarning,
            stacklevel=1,
        )

    def new_sink(shape: tuple[int, int, int], windows: int) -> PoolSink:
        return PoolSink(
            shape, windows, settings.pooling, lambda layers: mix_layers(layers, settings.layers, settings.gamma)
        )

    rows = pooled_rows(
        pending,
        backend,
        new_sink,
        max_length=settings.max_length,
        overlap=settings.window_overlap,
        batch_size=settings.batch_size,
        verbose=settings.verbose,
    )
    for tokens, row in rows:
        out[pending[tokens]] = row
    # sequences with no tokens keep their zero rows (what pool() gives for zero tokens), normalized or not
    return normalized_rows(out, settings.norm)


def token_records(column: SampleColumn, backend: SentenceEmbedder, settings: FrontSettings) -> list[dict[str, Any]]:
    """``{"tokens": [str, ...], "vectors": float32 (n_tokens, width)}`` per sample: the tokens :func:`pooled_matrix`
    embeds and their mixed layers (the rows ``pooling="mean"`` would average); strings or token lists only."""
    samples, kind = column.samples, column.kind
    if kind == DOC:
        raise TypeError("embed_tokens takes strings or token lists, not spaCy Docs")
    rows = token_rows(samples, kind, settings.tokenizer)
    width = settings.mixed_width(backend.n_layers, backend.dim)
    vectors: dict[Tokens, np.ndarray] = {(): np.zeros((0, width), dtype=np.float32)}
    embedded = embedded_rows(
        rows, backend, max_length=settings.max_length, overlap=settings.window_overlap, batch_size=settings.batch_size
    )
    for tokens, layers in embedded:
        vectors[tokens] = np.ascontiguousarray(mix_layers(layers, settings.layers, settings.gamma), dtype=np.float32)
    return [{"tokens": list(tokens), "vectors": vectors[tokens].copy()} for tokens in row_tokens(rows, len(samples))]


def sample_kind(samples: Sequence[Any]) -> str:
    """The one kind (``"text"``, ``"tokens"``, ``"doc"``) of all samples; ``TypeError`` names the first that breaks it.

    An empty column is ``"text"``. A token list of one token with several words (``[["a great movie"], ...]``, what
    ``df[["text"]].values.tolist()`` gives) is a ``ValueError`` naming the sample.
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
        if kind == TOKENS:
            for j, token in enumerate(sample):  # found here, where the column enters (fit too), not first in transform
                if not isinstance(token, str):
                    token_text(token, f"sample {i}, token {j}")
            _check_one_text_row(sample, i)
        if first is None:
            first = kind
        elif kind != first:
            raise TypeError(
                f"sample {i} is {_KIND_NAMES[kind]} ({type(sample).__name__}) but sample 0 is "
                f"{_KIND_NAMES[first]}: all samples must be of one kind (texts, token lists or Docs)"
            )
    return first or TEXT


def _check_one_text_row(tokens: Sequence[Any], index: int) -> None:
    """``ValueError`` if sample ``index`` is a token list of one token with several words (ASCII whitespace between
    them): what each row of a one-column 2-D ``X`` given as lists is (``df[["text"]].values.tolist()``). Token lists
    are embedded as given, never split, so each text would silently be one token. A longer token list may hold a
    merged token (``"New York"``, as a retokenized ``Doc`` does) and is taken as given."""
    if len(tokens) == 1 and isinstance(tokens[0], str) and _SEVERAL_WORDS.search(tokens[0]):
        text = tokens[0]
        head = text if len(text) <= _EXCERPT else text[:_EXCERPT] + "..."
        raise ValueError(
            f"sample {index} is a token list of one token with several words ({head!r}), as each row of a "
            "one-column 2-D X (df[['text']].values.tolist()) is, and token lists are not split; pass the texts as "
            "strings (df['text'] or a flat list), which the tokenizer setting splits"
        )


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
    verbose: Optional[Union[bool, int]] = 0,
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
    verbose: Optional[Union[bool, int]] = 0,
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
    verbose: Optional[Union[bool, int]] = 0,
) -> Iterator[tuple[Tokens, T]]:
    """``embed``'s result for each unique non-empty token sequence, longest first, with a progress bar as ``verbose``
    asks (:func:`.progress.show_of`: None on a terminal for long work, 0 never, 1 always).

    ``embed`` is ``windows.embed_segments`` or ``fold_segments`` (with its sink bound); it gets
    ``max_length``, ``overlap`` and ``batch_size``.
    """
    unique = sorted((tokens for tokens in rows if tokens), key=len, reverse=True)
    segments = ((tokens, tokens) for tokens in unique)
    with Progress(len(unique), unit="text", desc="ELMo", show=show_of(verbose)) as bar:
        for tokens, result in embed(backend, segments, max_length=max_length, overlap=overlap, batch_size=batch_size):
            yield tokens, result
            bar.update(1)


def clean_tokens(tokens: Iterable[Any], index: int) -> Tokens:
    """Token texts without whitespace-only tokens; ``TypeError`` names the sample and token."""
    texts = []
    for j, token in enumerate(tokens):
        text = token if isinstance(token, str) else token_text(token, f"sample {index}, token {j}")
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
    if is_doc(sample):
        return DOC
    if isinstance(sample, (list, tuple)) or (isinstance(sample, np.ndarray) and sample.ndim == 1):
        return TOKENS
    return None


def _is_missing(value: Any) -> bool:
    if value is None or type(value).__name__ in ("NAType", "NaTType"):  # None, pandas.NA, pandas.NaT
        return True
    return isinstance(value, float) and math.isnan(value)
