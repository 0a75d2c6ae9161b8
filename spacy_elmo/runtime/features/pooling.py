"""Pool token vectors into one fixed-size vector: the one pooling of the spaCy and scikit-learn front ends (and Dask's,
the hub's)."""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np

POOLINGS = ("mean", "max", "mean+max")
NORMS = ("l2", "l1")  # and None: the pooled rows as they are (scikit-learn's TfidfVectorizer's ``norm``)


def check_pooling(pooling: str) -> str:
    """``pooling`` when it is one of ``POOLINGS`` (the one check of the setting, beside the pooling itself); else
    ``ValueError``."""
    if pooling not in POOLINGS:
        raise ValueError(f"pooling={pooling!r}: expected one of {', '.join(map(repr, POOLINGS))}")
    return pooling


def pooling_parts(pooling: str) -> list[str]:
    """The pooled blocks in output order, e.g. ``["mean", "max"]`` for ``"mean+max"``."""
    return check_pooling(pooling).split("+")


def pooled_dim(dim: int, pooling: str) -> int:
    return dim * len(pooling_parts(pooling))


def check_norm(norm: Optional[str]) -> Optional[str]:
    """``norm`` when it is None or one of ``NORMS``; else ``ValueError`` (the one check of the setting)."""
    if norm is not None and (not isinstance(norm, str) or norm not in NORMS):
        raise ValueError(f"norm={norm!r}: expected one of {', '.join(map(repr, NORMS))} or None")
    return norm


def normalized_rows(rows: np.ndarray, norm: Optional[str]) -> np.ndarray:
    """``rows`` (float32 ``(n, width)``) each scaled to unit ``norm`` ("l2": Euclidean, "l1": sum of absolute values)
    over the whole row, as ``sklearn.preprocessing.normalize`` scales them (a row of zeros stays zeros); None: as
    they are. The norms are summed in float64."""
    if norm is None or not len(rows):
        return rows
    wide = rows.astype(np.float64)
    lengths = np.sqrt((wide * wide).sum(axis=1)) if norm == "l2" else np.abs(wide).sum(axis=1)
    lengths[lengths == 0.0] = 1.0
    return (wide / lengths[:, None]).astype(np.float32)


def pool(vectors: np.ndarray, pooling: str = "mean") -> np.ndarray:
    """Pool ``(n_tokens, dim)`` to float32 ``(pooled_dim,)``; zero tokens give a zero vector. The mean is summed in
    float64, as a long text's windows are: the one pooling of every front end (``ElmoVectorizer``'s and Dask's rows,
    the hub's ``default``, spaCy's ``doc.vector`` and ``span.vector``)."""
    parts = pooling_parts(pooling)
    n_tokens, dim = vectors.shape
    if n_tokens == 0:
        return np.zeros(dim * len(parts), dtype=np.float32)
    blocks = [vectors.mean(axis=0, dtype=np.float64) if part == "mean" else vectors.max(axis=0) for part in parts]
    return np.concatenate(blocks).astype(np.float32, copy=False)


class PoolSink:
    """One pooled row from token vectors that come in pieces (a window at a time), as :func:`pool` gives for all at
    once.

    Mean, max and mean+max compose: sums (in float64) and maxima of the pieces combine into those
    of the whole, so a text of any length needs the memory of one piece, never its full layers.
    A segment of one piece is pooled by :func:`pool` itself (the same bits as before).
    ``to_vectors`` turns a piece's layers ``(n_layers + 1, t, dim)`` into ``(t, dim)`` token vectors
    (a layer mix); it is a :class:`spacy_elmo.runtime.embedding.windows.Sink`.
    """

    def __init__(
        self, shape: tuple[int, int, int], windows: int, pooling: str, to_vectors: Callable[[np.ndarray], np.ndarray]
    ) -> None:
        self.parts = pooling_parts(pooling)
        self.pooling = pooling
        self.to_vectors = to_vectors
        self.windows = windows
        self.dim = shape[2]
        self.count = 0
        self.total: Optional[np.ndarray] = None
        self.maximum: Optional[np.ndarray] = None
        self.row: Optional[np.ndarray] = None

    def add(self, start: int, layers: np.ndarray) -> None:
        vectors = self.to_vectors(layers)
        if self.windows == 1:
            self.row = pool(vectors, self.pooling)
            return
        if not len(vectors):
            return
        self.count += len(vectors)
        total = vectors.sum(axis=0, dtype=np.float64)
        maximum = vectors.max(axis=0)
        self.total = total if self.total is None else self.total + total
        self.maximum = maximum if self.maximum is None else np.maximum(self.maximum, maximum)

    def result(self) -> np.ndarray:
        if self.row is not None:
            return self.row
        if self.count == 0 or self.total is None or self.maximum is None:
            return np.zeros(self.dim * len(self.parts), dtype=np.float32)
        blocks = [
            (self.total / self.count).astype(np.float32) if part == "mean" else self.maximum for part in self.parts
        ]
        return np.concatenate(blocks).astype(np.float32, copy=False)
