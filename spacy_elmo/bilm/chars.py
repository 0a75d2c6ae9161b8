"""Token -> character ids, exactly as ELMo (bilm-tf) and AllenNLP encode them.

Each token becomes 50 ids: begin-of-word, its UTF-8 bytes (cut to 48) and
end-of-word, padded with the padding char. All ids are shifted by +1 so that
0 can mean "no token here" (a padding token is 50 zeros).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

MAX_CHARS_PER_TOKEN = 50
BEGIN_OF_SENTENCE = 257
END_OF_SENTENCE = 258
BEGIN_OF_WORD = 259
END_OF_WORD = 260
PADDING_CHAR = 261
BOS_TOKEN = "<S>"
EOS_TOKEN = "</S>"


def _marker_ids(marker: int) -> np.ndarray:
    ids = np.full(MAX_CHARS_PER_TOKEN, PADDING_CHAR, dtype=np.int64)
    ids[0], ids[1], ids[2] = BEGIN_OF_WORD, marker, END_OF_WORD
    return ids


BOS_CHAR_IDS = _marker_ids(BEGIN_OF_SENTENCE)
EOS_CHAR_IDS = _marker_ids(END_OF_SENTENCE)


def token_to_char_ids(token: str) -> np.ndarray:
    """The 50 character ids of one token (``<S>``/``</S>`` map to the sentence markers)."""
    if token == BOS_TOKEN:
        return BOS_CHAR_IDS.copy()
    if token == EOS_TOKEN:
        return EOS_CHAR_IDS.copy()
    word = token.encode("utf-8", "ignore")[: MAX_CHARS_PER_TOKEN - 2]
    ids = np.full(MAX_CHARS_PER_TOKEN, PADDING_CHAR, dtype=np.int64)
    ids[0] = BEGIN_OF_WORD
    ids[1 : len(word) + 1] = np.frombuffer(word, dtype=np.uint8).astype(np.int64) + 1
    ids[len(word) + 1] = END_OF_WORD
    return ids


def tokens_to_char_ids(tokens: Sequence[str]) -> np.ndarray:
    """Character ids of a token sequence, shape ``(len(tokens), 50)``; same as :func:`token_to_char_ids` per token.

    Vectorised (one numpy scatter for all bytes): this runs for every new token on the
    embedding hot path.
    """
    n = len(tokens)
    ids = np.full((n, MAX_CHARS_PER_TOKEN), PADDING_CHAR, dtype=np.int64)
    if not n:
        return ids
    words = [t.encode("utf-8", "ignore")[: MAX_CHARS_PER_TOKEN - 2] for t in tokens]
    lengths = np.fromiter(map(len, words), dtype=np.int64, count=n)
    rows = np.arange(n)
    ids[:, 0] = BEGIN_OF_WORD
    if lengths.any():
        starts = np.cumsum(lengths) - lengths
        columns = np.arange(int(lengths.sum())) - np.repeat(starts, lengths) + 1
        ids[np.repeat(rows, lengths), columns] = np.frombuffer(b"".join(words), dtype=np.uint8).astype(np.int64) + 1
    ids[rows, lengths + 1] = END_OF_WORD
    for row, token in enumerate(tokens):
        if token in (BOS_TOKEN, EOS_TOKEN):
            ids[row] = BOS_CHAR_IDS if token == BOS_TOKEN else EOS_CHAR_IDS
    return ids


def batch_to_char_ids(sentences: Sequence[Sequence[str]]) -> np.ndarray:
    """Right-padded ids for a batch, shape ``(n_sentences, max_len, 50)``; padding tokens are all zeros."""
    max_len = max((len(s) for s in sentences), default=0)
    out = np.zeros((len(sentences), max_len, MAX_CHARS_PER_TOKEN), dtype=np.int64)
    for row, tokens in enumerate(sentences):
        if tokens:
            out[row, : len(tokens)] = tokens_to_char_ids(tokens)
    return out
