"""Training text -> sentences of tokens, streamed: line files, raw text, sentence splitting.

Tokens come from ``spacy_elmo.runtime.features.tokenize.resolve_tokenizer`` (``"whitespace"`` or ``"spacy"``), as in the
front ends.

Two kinds of source:

- ``lines``: one sentence (or paragraph) per line, e.g. WikiText. Blank lines are skipped.
- ``raw``: running text (e.g. Project Gutenberg books); paragraphs are separated by blank lines,
  hard line wraps are joined, and each paragraph is tokenized and split into sentences.

Sentences are split after ``.``, ``!`` or ``?`` tokens (closing quotes and brackets that follow stay
with the sentence), and sentences longer than ``max_length`` tokens are cut into pieces, so that a
WikiText paragraph becomes its sentences and no batch holds a 500-token row.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ...runtime.features.tokenize import SPACY, WHITESPACE, resolve_tokenizer
from .layouts import PathLike, text_blocks

SENTENCE_END = frozenset({".", "!", "?"})
CLOSERS = frozenset({'"', "'", "''", ")", "]", "}", "”", "’", "»"})
TOKENIZERS = (WHITESPACE, SPACY)
FORMATS = ("lines", "raw")


@dataclass(frozen=True)
class Source:
    """One training/evaluation text file and how to read it."""

    path: Path
    format: str = "lines"  # "lines" or "raw"
    tokenizer: str = "whitespace"  # "whitespace" or "spacy"

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"unknown text format {self.format!r} for {self.path}: expected one of {FORMATS}")
        if self.tokenizer not in TOKENIZERS:
            raise ValueError(f"unknown tokenizer {self.tokenizer!r} for {self.path}: expected one of {TOKENIZERS}")

    def to_json(self) -> dict:
        return {"path": str(self.path), "format": self.format, "tokenizer": self.tokenizer}


def make_sources(paths: Sequence[PathLike], format: str = "lines", tokenizer: str = "whitespace") -> list[Source]:
    """Sources for existing files (a directory stands for its ``*.txt`` files), with a clear error otherwise."""
    sources: list[Source] = []
    for raw in paths:
        path = Path(raw).expanduser()
        if path.is_dir():
            files = sorted(p for p in path.glob("*.txt") if p.is_file())
            if not files:
                raise FileNotFoundError(f"text directory {path} has no *.txt files")
            sources.extend(Source(p.resolve(), format, tokenizer) for p in files)
        elif path.is_file():
            sources.append(Source(path.resolve(), format, tokenizer))
        else:
            raise FileNotFoundError(f"text file not found: {path}")
    return sources


def sha256_of(path: PathLike) -> str:
    """The file's sha256, read in 1 MiB pieces (memory bounded whatever its size): what identifies a text file in a
    checkpoint, ``metrics.json`` and a prepared corpus's manifest."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for piece in iter(lambda: handle.read(1 << 20), b""):
            digest.update(piece)
    return digest.hexdigest()


def split_sentences(tokens: Sequence[str], max_length: int) -> Iterator[list[str]]:
    """Split a token sequence after sentence-final punctuation, then into pieces of <= ``max_length``."""
    current: list[str] = []
    ended = False
    for token in tokens:
        if ended and token not in CLOSERS:
            yield from _chop(current, max_length)
            current, ended = [], False
        current.append(token)
        if token in SENTENCE_END:
            ended = True
    if current:
        yield from _chop(current, max_length)


def _chop(tokens: list[str], max_length: int) -> Iterator[list[str]]:
    for start in range(0, len(tokens), max_length):
        yield tokens[start : start + max_length]


def read_sentences(source: Source, max_length: int = 100, split: bool = True) -> Iterator[list[str]]:
    """Stream the token lists of one source (no sentence is ever empty)."""
    tokenize = resolve_tokenizer(source.tokenizer)
    for block in _blocks(source):
        tokens = tokenize(block)
        if not tokens:
            continue
        if split:
            yield from split_sentences(tokens, max_length)
        else:
            yield from _chop(tokens, max_length)


def _blocks(source: Source) -> Iterator[str]:
    """Lines (``lines``) or blank-line separated paragraphs with wraps joined (``raw``): :mod:`.layouts`."""
    return text_blocks(source.path, source.format)


def has_tokens(sources: Sequence[Source], max_length: int = 100) -> bool:
    """Whether any source holds at least one token (reads only up to the first one)."""
    return any(next(read_sentences(source, max_length), None) is not None for source in sources)
