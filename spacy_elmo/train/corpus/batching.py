"""Output vocabulary, a seeded mix of sources, length-bucketed batches and their tensors."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from ...bilm.chars import BOS_TOKEN, EOS_TOKEN, MAX_CHARS_PER_TOKEN, token_to_char_ids
from ...groundwork.atomic_write import write_text_atomically
from ...runtime.embedding.windows import length_batches
from .sentences import PathLike, Source, read_sentences

UNK_TOKEN = "<UNK>"
SPECIALS = (BOS_TOKEN, EOS_TOKEN, UNK_TOKEN)


class Vocabulary:
    """The softmax's words: ``<S>``, ``</S>``, ``<UNK>`` then words by falling frequency (bilm-tf's vocab file)."""

    def __init__(self, words: Sequence[str]) -> None:
        if tuple(words[:3]) != SPECIALS:
            raise ValueError(f"a vocabulary must start with {SPECIALS}, got {tuple(words[:3])}")
        self.words = list(words)
        self.index: dict[str, int] = {w: i for i, w in enumerate(self.words)}
        if len(self.index) != len(self.words):
            raise ValueError("the vocabulary has duplicate words")

    def __len__(self) -> int:
        return len(self.words)

    def id(self, word: str) -> int:
        return self.index.get(word, 2)

    @classmethod
    def build(cls, counts: Counter, max_size: Optional[int] = None, min_count: int = 1) -> Vocabulary:
        """The ``max_size`` most frequent words with count >= ``min_count`` (ties broken alphabetically)."""
        ranked = sorted(
            (w for w, c in counts.items() if c >= min_count and w not in SPECIALS), key=lambda w: (-counts[w], w)
        )
        if max_size is not None:
            ranked = ranked[: max(0, max_size - len(SPECIALS))]
        return cls(list(SPECIALS) + ranked)

    def save(self, path: PathLike) -> None:
        """Write the words, one a line (atomically)."""
        write_text_atomically(path, "\n".join(self.words) + "\n")

    @classmethod
    def load(cls, path: PathLike) -> Vocabulary:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"vocabulary file not found: {path}")
        return cls([w for w in path.read_text(encoding="utf-8").split("\n") if w])


def count_words(sources: Sequence[Source], max_length: int = 100) -> Counter:
    """Word counts over all sources (one streaming pass)."""
    counts: Counter = Counter()
    for source in sources:
        for sentence in read_sentences(source, max_length):
            counts.update(sentence)
    return counts


def mixed_sentences(sources: Sequence[Source], seed: int, max_length: int = 100) -> Iterator[list[str]]:
    """All sentences of all sources, interleaved at random in proportion to file size (seeded)."""
    rng = random.Random(seed)
    streams = [read_sentences(s, max_length) for s in sources]
    weights = [max(1, s.path.stat().st_size) for s in sources]
    live = list(range(len(streams)))
    while live:
        k = rng.choices(range(len(live)), weights=[weights[i] for i in live])[0]
        try:
            yield next(streams[live[k]])
        except StopIteration:
            live.pop(k)


def ordered_sentences(sources: Sequence[Source], max_length: int = 100) -> Iterator[list[str]]:
    """All sentences of all sources, in file order (evaluation)."""
    for source in sources:
        yield from read_sentences(source, max_length)


def bucket_batches(
    sentences: Iterable[list[str]], token_budget: int, buffer_size: int = 20000, rng: Optional[random.Random] = None
) -> Iterator[list[list[str]]]:
    """Group sentences of similar length so that rows x (longest + 2) <= ``token_budget``.

    Holds ``buffer_size`` sentences at a time (the corpus is streamed); with ``rng`` the batches
    of each buffer come out in random order, without it in length order.
    """
    buffer: list[list[str]] = []
    for sentence in sentences:
        buffer.append(sentence)
        if len(buffer) >= buffer_size:
            yield from _flush(buffer, token_budget, rng)
            buffer = []
    if buffer:
        yield from _flush(buffer, token_budget, rng)


def _flush(buffer: list[list[str]], token_budget: int, rng: Optional[random.Random]) -> Iterator[list[list[str]]]:
    """The buffer's batches (:func:`~spacy_elmo.runtime.embedding.windows.length_batches`, each row counting its two
    markers), shuffled with ``rng``."""
    batches = [[buffer[i] for i in batch] for batch in length_batches([len(s) + 2 for s in buffer], None, token_budget)]
    if rng is not None:
        rng.shuffle(batches)
    yield from batches


@dataclass
class Batch:
    """Tensors for one batch; every row is ``<S> w1 .. wn </S>`` (``lengths`` count both markers).

    ``chars`` holds the character ids of each distinct token once; ``token_index`` points each
    position at its row of ``chars``; ``word_ids`` are the softmax targets (0 at padding).
    """

    chars: torch.Tensor  # (n_unique, 50) int64
    token_index: torch.Tensor  # (batch, time) int64
    word_ids: torch.Tensor  # (batch, time) int64
    lengths: torch.Tensor  # (batch,) int64
    n_words: int  # real tokens (without the markers)

    @property
    def n_predictions(self) -> int:
        """Predicted tokens per direction: each word plus one boundary token per sentence."""
        return self.n_words + int(self.lengths.numel())

    def to(self, device: torch.device) -> Batch:
        """This batch's tensors on ``device`` (itself on the device it is on)."""
        if self.lengths.device == device:
            return self
        return Batch(
            self.chars.to(device),
            self.token_index.to(device),
            self.word_ids.to(device),
            self.lengths.to(device),
            self.n_words,
        )


class CharCache:
    """Character ids per token string, computed once (bounded, so a streamed corpus cannot blow it up)."""

    def __init__(self, max_size: int = 500_000) -> None:
        self.max_size = max_size
        self.cache: dict[str, np.ndarray] = {}

    def __call__(self, token: str) -> np.ndarray:
        ids = self.cache.get(token)
        if ids is None:
            ids = token_to_char_ids(token)
            if len(self.cache) < self.max_size:
                self.cache[token] = ids
        return ids


def tensorize(
    sentences: Sequence[Sequence[str]], vocab: Vocabulary, char_cache: Optional[CharCache] = None, crop_width: int = 0
) -> Batch:
    """The :class:`Batch` for token lists (each non-empty).

    With ``crop_width`` (the widest CNN filter) the char ids are cut to the longest token + markers +
    ``crop_width`` columns: every window that touches a character and one all-padding window survive,
    so the CNN's max-pooled output is exactly that of the full 50 columns, at a fraction of the cost.
    """
    char_cache = char_cache or CharCache()
    time = max(len(s) for s in sentences) + 2
    unique: dict[str, int] = {BOS_TOKEN: 0, EOS_TOKEN: 1}
    token_index = np.zeros((len(sentences), time), dtype=np.int64)
    word_ids = np.zeros((len(sentences), time), dtype=np.int64)
    lengths = np.zeros(len(sentences), dtype=np.int64)
    n_words = 0
    for row, sentence in enumerate(sentences):
        tokens = [BOS_TOKEN, *sentence, EOS_TOKEN]
        lengths[row] = len(tokens)
        n_words += len(sentence)
        for col, token in enumerate(tokens):
            token_index[row, col] = unique.setdefault(token, len(unique))
            word_ids[row, col] = vocab.id(token)
    chars = np.empty((len(unique), MAX_CHARS_PER_TOKEN), dtype=np.int64)
    for token, i in unique.items():
        chars[i] = char_cache(token)
    if crop_width:
        longest = max(len(t.encode("utf-8", "ignore")) for t in unique)
        chars = chars[:, : min(MAX_CHARS_PER_TOKEN, longest + 2 + crop_width)]
    return Batch(
        torch.from_numpy(chars),
        torch.from_numpy(token_index),
        torch.from_numpy(word_ids),
        torch.from_numpy(lengths),
        n_words,
    )
