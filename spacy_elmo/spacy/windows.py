"""Long documents: cut a doc into sentences or overlapping windows for the biLM, and stitch the results.

ELMo was trained on sentences, so a doc with sentence boundaries is embedded one sentence at a
time; otherwise (and for sentences longer than ``max_length``) the tokens are cut into windows
of at most ``max_length`` tokens overlapping by ``overlap``. In the overlap each token takes its
vectors from the window in which it sits further from the edge (the first half from the earlier
window, the rest from the later one). Whitespace tokens are never fed to the biLM.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Sequence, Tuple

from spacy.tokens import Doc


@dataclass(frozen=True)
class Segment:
    """One biLM input: the doc positions it reads, and which of its outputs (``keep``) go back to the doc."""

    positions: Tuple[int, ...]  # token indices in the doc, in order
    keep_start: int  # outputs [keep_start, keep_end) of this segment are written to the doc
    keep_end: int


def window_bounds(n: int, max_length: int, overlap: int) -> List[Tuple[int, int, int, int]]:
    """``(start, end, keep_start, keep_end)`` windows covering ``range(n)``; keeps tile it exactly once."""
    check_window_config(max_length, overlap)
    if n <= max_length:
        return [(0, n, 0, n)] if n else []
    step = max_length - overlap
    starts = list(range(0, n - max_length, step)) + [n - max_length]
    bounds = []
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


def split_positions(positions: Sequence[int], max_length: int, overlap: int) -> List[Segment]:
    """Windows over ``positions`` (already free of whitespace tokens)."""
    positions = tuple(positions)
    return [
        Segment(positions[start:end], keep_start - start, keep_end - start)
        for start, end, keep_start, keep_end in window_bounds(len(positions), max_length, overlap)
    ]


def doc_segments(doc: Doc, max_length: int, overlap: int, use_sentences: bool = True) -> List[Segment]:
    """The biLM inputs for ``doc``: its sentences when it has boundaries (and ``use_sentences``), else windows."""
    if use_sentences and len(doc) and doc.has_annotation("SENT_START"):
        groups = [range(sent.start, sent.end) for sent in doc.sents]
    else:
        groups = [range(len(doc))]
    segments: List[Segment] = []
    for group in groups:
        positions = [i for i in group if not doc[i].is_space]
        segments.extend(split_positions(positions, max_length, overlap))
    return segments
