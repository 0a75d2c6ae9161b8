"""The one cosine similarity of the package (the spaCy ``.similarity`` hooks, the similarity demo)."""

from __future__ import annotations

import numpy as np


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity of two vectors of one shape, computed in float64; 0.0 when either is a zero vector."""
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    norm = float(np.linalg.norm(x) * np.linalg.norm(y))
    return 0.0 if norm == 0.0 else float(x @ y / norm)
