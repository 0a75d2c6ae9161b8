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

from ..windows import check_window_config, window_bounds

__all__ = ["Segment", "check_window_config", "doc_segments", "split_positions", "window_bounds"]


@dataclass(frozen=True)
class Segment:
    """One biLM input: the doc positions it reads, and which of its outputs (``keep``) go back to the doc."""

    positions: Tuple[int, ...]  # token indices in the doc, in order
    keep_start: int  # outputs [keep_start, keep_end) of this segment are written to the doc
    keep_end: int


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
