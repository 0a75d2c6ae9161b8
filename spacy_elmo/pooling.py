"""Pool token vectors into one fixed-size vector; shared by the spaCy and scikit-learn front ends."""
from __future__ import annotations

from typing import List

import numpy as np

POOLINGS = ("mean", "max", "mean+max")


def check_pooling(pooling: str) -> str:
    if pooling not in POOLINGS:
        raise ValueError(f"pooling={pooling!r}: expected one of {', '.join(map(repr, POOLINGS))}")
    return pooling


def pooling_parts(pooling: str) -> List[str]:
    """The pooled blocks in output order, e.g. ``["mean", "max"]`` for ``"mean+max"``."""
    return check_pooling(pooling).split("+")


def pooled_dim(dim: int, pooling: str) -> int:
    return dim * len(pooling_parts(pooling))


def pool(vectors: np.ndarray, pooling: str = "mean") -> np.ndarray:
    """Pool ``(n_tokens, dim)`` to float32 ``(pooled_dim,)``; zero tokens give a zero vector."""
    parts = pooling_parts(pooling)
    n_tokens, dim = vectors.shape
    if n_tokens == 0:
        return np.zeros(dim * len(parts), dtype=np.float32)
    blocks = [vectors.mean(axis=0) if part == "mean" else vectors.max(axis=0) for part in parts]
    return np.concatenate(blocks).astype(np.float32, copy=False)
