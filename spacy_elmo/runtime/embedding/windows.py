"""How token sequences reach the biLM, for every front end: windows, token-bounded calls, length batches.

ELMo was trained on sentences; a longer token sequence is cut into windows of at most
``max_length`` tokens overlapping by ``overlap``. In the overlap each token takes its vectors
from the window in which it sits further from the edge (the first half from the earlier window,
the rest from the later one).

:func:`embed_segments` is the one way the front ends (the spaCy component, ``ElmoVectorizer``,
``embed_file``) embed: a stream of segments in, each segment's stitched layers out, in order,
with at most ``max_tokens`` tokens handed to the backend at a time (flat memory on huge inputs).
What a segment is stays with the front end: the tokens of a sentence of a doc (the spaCy side
supplies their positions), a text, a line of a file. :func:`length_batches` groups sequences
by length inside the backend and for training.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from typing import Callable, Generic, Optional, Protocol, TypeVar

import numpy as np

from ..configuration.defaults import MAX_TOKENS_PER_CALL
from ..configuration.validation import check_window_config, optional_windows, positive_int

Key = TypeVar("Key")
Out = TypeVar("Out")
Out_co = TypeVar("Out_co", covariant=True)


class SentenceEmbedder(Protocol):
    """What :func:`embed_segments` needs of a backend (an :class:`~spacy_elmo.runtime.embedding.backend.ElmoBackend`):
    token sentences in, layers out (not :class:`spacy_elmo.compat.elmoformanylangs.Embedder`, the drop-in class)."""

    @property
    def n_layers(self) -> int: ...

    @property
    def dim(self) -> int: ...

    def embed(
        self,
        sentences: Iterable[Sequence[str]],
        *,
        batch_size: Optional[int] = None,
        on_progress: Optional[Callable[[int], object]] = None,
    ) -> list[np.ndarray]: ...


def window_bounds(n: int, max_length: Optional[int], overlap: int) -> list[tuple[int, int, int, int]]:
    """``(start, end, keep_start, keep_end)`` windows covering ``range(n)``; keeps tile it exactly once.
    ``max_length=None``: no windows, ``range(n)`` whole."""
    max_length, overlap = optional_windows(max_length, overlap)
    if max_length is None or n <= max_length:
        return [(0, n, 0, n)] if n else []
    return _bounds(n, max_length, overlap)


def _bounds(n: int, max_length: int, overlap: int) -> list[tuple[int, int, int, int]]:
    """:func:`window_bounds` of a sequence longer than ``max_length``, the settings checked already."""
    step = max_length - overlap
    starts = [*range(0, n - max_length, step), n - max_length]
    bounds: list[tuple[int, int, int, int]] = []
    for k, start in enumerate(starts):
        end = start + max_length
        keep_start = 0 if k == 0 else bounds[-1][3]
        if k + 1 < len(starts):
            nxt = starts[k + 1]
            keep_end = nxt + (end - nxt) // 2  # middle of the overlap with the next window
        else:
            keep_end = n
        bounds.append((start, end, keep_start, keep_end))
    return bounds


class Sink(Protocol[Out_co]):
    """Where a segment's windows go: the kept part of each (in any order), then one result for the segment."""

    def add(self, start: int, layers: np.ndarray) -> None:
        """The layers ``(n_layers + 1, t, dim)`` of the segment's tokens ``start .. start + t``."""

    def result(self) -> Out_co:
        """What the segment becomes once every token was added."""


class _Stitched:
    """The segment's full layers ``(n_layers + 1, n_tokens, dim)``; a lone window's array is used as it is."""

    __slots__ = ("layers", "shape")

    def __init__(self, shape: tuple[int, int, int], windows: int) -> None:
        self.shape = shape
        self.layers: Optional[np.ndarray] = np.empty(shape, dtype=np.float32) if windows > 1 else None

    def add(self, start: int, layers: np.ndarray) -> None:
        if self.layers is None:
            self.layers = layers
        else:
            self.layers[:, start : start + layers.shape[1]] = layers

    def result(self) -> np.ndarray:
        assert self.layers is not None
        return self.layers


class _Open(Generic[Key, Out]):
    """A segment whose windows are on their way through the backend."""

    __slots__ = ("key", "sink", "windows_left")

    def __init__(self, key: Key, sink: Sink[Out], windows: int) -> None:
        self.key = key
        self.sink = sink
        self.windows_left = windows


def embed_segments(
    backend: SentenceEmbedder,
    segments: Iterable[tuple[Key, Sequence[str]]],
    *,
    max_length: Optional[int] = None,
    overlap: int = 0,
    max_tokens: int = MAX_TOKENS_PER_CALL,
    batch_size: Optional[int] = None,
    on_progress: Optional[Callable[[int], object]] = None,
    on_tokens: Optional[Callable[[int], object]] = None,
) -> Iterator[tuple[Key, np.ndarray]]:
    """``(key, layers)`` for each ``(key, tokens)`` of ``segments``, in order, as soon as its windows are embedded.

    backend (SentenceEmbedder): the biLM, e.g. from :func:`spacy_elmo.load_bilm`.
    segments (iterable of (key, tokens)): read lazily; ``key`` is the caller's, handed back unchanged.
    max_length (int | None): a segment longer than this is embedded as overlapping windows and
        stitched (:func:`window_bounds`); None embeds every segment whole.
    overlap (int): tokens shared by neighbouring windows.
    max_tokens (int): tokens handed to the backend per call (at least one window; an empty
        segment counts as one token, so a stream of empty segments is bounded too).
    batch_size (int | None): sentences per biLM batch inside each call (the backend's default: None).
    on_progress (callable | None): the backend's, called with the number of windows done.
    on_tokens (callable | None): called after each backend call with the number of the segments' tokens it
        embedded (each token counted once, overlaps and all): a progress bar's ``update`` over tokens moves
        through a long segment's windows too (:mod:`..features.progress`).

    ``layers`` is float32 ``(n_layers + 1, len(tokens), dim)`` and the caller's own; an empty
    segment gives ``(n_layers + 1, 0, dim)``. Consecutive windows share backend calls, so their
    sentences are batched together.
    """
    return fold_segments(
        backend,
        segments,
        _Stitched,
        max_length=max_length,
        overlap=overlap,
        max_tokens=max_tokens,
        batch_size=batch_size,
        on_progress=on_progress,
        on_tokens=on_tokens,
    )


def fold_segments(
    backend: SentenceEmbedder,
    segments: Iterable[tuple[Key, Sequence[str]]],
    new_sink: Callable[[tuple[int, int, int], int], Sink[Out]],
    *,
    max_length: Optional[int] = None,
    overlap: int = 0,
    max_tokens: int = MAX_TOKENS_PER_CALL,
    batch_size: Optional[int] = None,
    on_progress: Optional[Callable[[int], object]] = None,
    on_tokens: Optional[Callable[[int], object]] = None,
) -> Iterator[tuple[Key, Out]]:
    """As :func:`embed_segments`, but each segment's windows go into ``new_sink(shape, n_windows)``; yields its result.

    A front end that needs only a pooled row per segment folds each window into it as it comes
    (``pooling.PoolSink``), so a segment of any length costs the memory of one backend call, not
    of its stitched ``(n_layers + 1, n_tokens, dim)`` layers.
    """
    if max_length is not None:
        max_length, overlap = check_window_config(max_length, overlap)
    max_tokens = positive_int(max_tokens, "max_tokens")
    waiting: deque[_Open[Key, Out]] = deque()  # segments not yet handed back, in input order
    windows: list[_Window] = []
    size = 0
    for key, tokens in segments:
        n = len(tokens)
        plan = [(0, n, 0, n)] if max_length is None or n <= max_length else _bounds(n, max_length, overlap)
        segment = _Open(key, new_sink((backend.n_layers + 1, n, backend.dim), len(plan)), len(plan))
        waiting.append(segment)
        for start, end, keep_start, keep_end in plan:
            cost = max(1, end - start)
            if windows and size + cost > max_tokens:
                _embed_windows(backend, windows, batch_size, on_progress, on_tokens)
                windows, size = [], 0
                yield from _finished(waiting)
            windows.append((segment, tokens[start:end] if len(plan) > 1 else tokens, start, keep_start, keep_end))
            size += cost
    if windows:
        _embed_windows(backend, windows, batch_size, on_progress, on_tokens)
    yield from _finished(waiting)


_Window = tuple[_Open, Sequence[str], int, int, int]  # (segment, tokens, start, keep_start, keep_end)


def _embed_windows(
    backend: SentenceEmbedder,
    windows: list[_Window],
    batch_size: Optional[int],
    on_progress: Optional[Callable[[int], object]],
    on_tokens: Optional[Callable[[int], object]] = None,
) -> None:
    """One backend call for ``windows``; each window's kept part goes into its segment's sink."""
    arrays = backend.embed([tokens for _, tokens, _, _, _ in windows], batch_size=batch_size, on_progress=on_progress)
    for (segment, _, start, keep_start, keep_end), array in zip(windows, arrays):
        whole = keep_start == start and keep_end - start == array.shape[1]
        segment.sink.add(keep_start, array if whole else array[:, keep_start - start : keep_end - start])
        segment.windows_left -= 1
    if on_tokens is not None:  # the kept parts tile each segment once
        on_tokens(sum(keep_end - keep_start for _, _, _, keep_start, keep_end in windows))


def _finished(waiting: deque[_Open[Key, Out]]) -> Iterator[tuple[Key, Out]]:
    """Hand back the leading segments whose windows are all embedded (the order stays the input's)."""
    while waiting and waiting[0].windows_left == 0:
        segment = waiting.popleft()
        yield segment.key, segment.sink.result()


def length_batches(lengths: Sequence[int], max_rows: Optional[int], token_budget: int) -> list[list[int]]:
    """Indices of the non-empty items, longest first (ties in input order), grouped so that rows x longest <= budget.

    lengths (sequence of int): each item's cost in padded positions (the training batches count the
        ``<S>``/``</S>`` markers in; the backend counts the words alone).
    max_rows (int | None): at most this many items per batch (None: only the budget bounds it).
    token_budget (int): rows x the batch's longest length stays within it, unless one item alone exceeds it.

    Every batch has at least one item. The backend (``ElmoBackend.embed``) and training
    (``train.corpus.batching.bucket_batches``) both batch this way.
    """
    order = sorted((i for i, n in enumerate(lengths) if n > 0), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        longest = lengths[current[0]] if current else lengths[i]
        if current and (
            (max_rows is not None and len(current) >= max_rows) or (len(current) + 1) * longest > token_budget
        ):
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches
