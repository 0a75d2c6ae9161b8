"""Overlapping windows for sequences longer than the biLM should see at once, and stitching them back.

ELMo was trained on sentences; a longer token sequence is cut into windows of at most
``max_length`` tokens overlapping by ``overlap``. In the overlap each token takes its vectors
from the window in which it sits further from the edge (the first half from the earlier window,
the rest from the later one). Shared by the spaCy component and the scikit-learn transformer.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from .backend import ElmoBackend


def window_bounds(n: int, max_length: int, overlap: int) -> List[Tuple[int, int, int, int]]:
    """``(start, end, keep_start, keep_end)`` windows covering ``range(n)``; keeps tile it exactly once."""
    check_window_config(max_length, overlap)
    if n <= max_length:
        return [(0, n, 0, n)] if n else []
    step = max_length - overlap
    starts = list(range(0, n - max_length, step)) + [n - max_length]
    bounds: List[Tuple[int, int, int, int]] = []
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


def check_window_config(max_length: int, overlap: int) -> None:
    """Raise ``ValueError`` unless ``max_length >= 1`` and ``0 <= overlap < max_length``."""
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1:
        raise ValueError(f"max_length={max_length!r}: expected a positive number of tokens")
    if isinstance(overlap, bool) or not isinstance(overlap, int) or not 0 <= overlap < max_length:
        raise ValueError(f"window_overlap={overlap!r}: expected an int with 0 <= window_overlap < max_length ({max_length})")


def embed_in_windows(
    backend: "ElmoBackend",
    sequences: Sequence[Sequence[str]],
    max_length: Optional[int],
    overlap: int,
    batch_size: Optional[int] = None,
) -> List[np.ndarray]:
    """``backend.embed(sequences)``, but each sequence longer than ``max_length`` is embedded as windows and stitched.

    All windows of all sequences go to the backend in one call (so they are batched together);
    ``max_length=None`` embeds every sequence whole.
    """
    if max_length is None:
        return backend.embed(sequences, batch_size=batch_size)
    plans = [window_bounds(len(tokens), max_length, overlap) for tokens in sequences]
    pieces = [tuple(tokens[start:end]) for tokens, plan in zip(sequences, plans) for start, end, _, _ in plan]
    arrays = iter(backend.embed(pieces, batch_size=batch_size))
    out: List[np.ndarray] = []
    for tokens, plan in zip(sequences, plans):
        if len(plan) <= 1:
            out.append(next(arrays) if plan else np.zeros((backend.n_layers + 1, 0, backend.dim), dtype=np.float32))
            continue
        full = np.empty((backend.n_layers + 1, len(tokens), backend.dim), dtype=np.float32)
        for start, _, keep_start, keep_end in plan:
            full[:, keep_start:keep_end] = next(arrays)[:, keep_start - start : keep_end - start]
        out.append(full)
    return out
