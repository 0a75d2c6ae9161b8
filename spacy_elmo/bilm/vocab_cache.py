"""An LRU of char-CNN token vectors, so a token seen before skips the CNN (AllenNLP's vocab cache, automatic)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import torch

from .model import BiLM, run_token_encoder
from .threads import run_halves, split_tokens


class TokenVectorCache:
    """Token string -> its context-independent vector, for up to ``max_tokens`` tokens (0 disables).

    ``max_tokens`` has no default here: the backend passes its setting
    (``runtime.configuration.defaults.DEFAULT_TOKEN_CACHE``, the one home of that default; bilm/ imports nothing of the
    rest of the package).

    Vectors live in one slab tensor on the model's device; a batch gathers its rows with a
    single ``index_select``. Not thread-safe: the backend calls it under its own lock.
    """

    def __init__(self, model: BiLM, max_tokens: int) -> None:
        self.model = model
        self.max_tokens = max(0, int(max_tokens))
        self.clear()

    def clear(self) -> None:
        """Forget every cached vector (call after changing the model's weights)."""
        self._slots: OrderedDict[str, int] = OrderedDict()
        self._slab: torch.Tensor = torch.empty(0)
        self._free: list[int] = []

    def __len__(self) -> int:
        return len(self._slots)

    def _encode(self, tokens: Sequence[str]) -> torch.Tensor:
        encoder = self.model.token_encoder
        char_ids = torch.as_tensor(encoder.token_ids(tokens), device=encoder.char_embed.weight.device)
        if split_tokens(len(tokens), char_ids.device):  # two halves on two single-threaded workers
            return run_halves(lambda rows: run_token_encoder(encoder, rows), char_ids)
        return run_token_encoder(encoder, char_ids)

    def vectors(self, tokens: Sequence[str]) -> torch.Tensor:
        """Vectors ``(len(tokens), proj)`` of distinct ``tokens``, from the cache where possible."""
        if len(tokens) > self.max_tokens:  # cannot hold this batch: encode it directly
            return self._encode(tokens)
        slots, missing = [], []
        for token in tokens:
            slot = self._slots.get(token)
            if slot is None:
                missing.append(token)
            else:
                self._slots.move_to_end(token)
            slots.append(slot)
        if missing:
            fresh = self._encode(missing)
            new_slots = self._allocate(len(missing), set(tokens), fresh)
            self._slab.index_copy_(0, torch.as_tensor(new_slots, device=self._slab.device), fresh)
            it = iter(new_slots)
            for k, token in enumerate(tokens):
                if slots[k] is None:
                    slots[k] = self._slots[token] = next(it)
        return self._slab.index_select(0, torch.as_tensor(slots, device=self._slab.device))

    def _allocate(self, count: int, keep: set, like: torch.Tensor) -> list[int]:
        """``count`` free slots, growing the slab or evicting least recently used tokens not in ``keep``.

        Every slot of the slab is either a cached token's or in ``_free``: the free slots are ``_free``, no more.
        """
        capacity = self._slab.shape[0] if self._slab.dim() == 2 else 0
        if len(self._free) < count and capacity < self.max_tokens:
            size = min(self.max_tokens, max(1024, 2 * capacity, len(self._slots) + count))
            slab = like.new_zeros(size, like.shape[-1])
            if capacity:
                slab[:capacity] = self._slab
            self._free.extend(range(size - 1, capacity - 1, -1))
            self._slab = slab
        while len(self._free) < count:
            token = next(t for t in self._slots if t not in keep)
            self._free.append(self._slots.pop(token))
        return [self._free.pop() for _ in range(count)]


def batch_token_vectors(cache: TokenVectorCache, batch: Sequence[Sequence[str]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Token vectors ``(batch, longest + 2, proj)`` with the sentence markers added (``<S>``/``</S>``, or the
    token encoder's own), and the lengths (incl. both)."""
    encoder = cache.model.token_encoder
    index: dict[str, int] = {encoder.bos_token: 0, encoder.eos_token: 1}
    rows = []
    for tokens in batch:
        rows.append([0] + [index.setdefault(t, len(index)) for t in tokens] + [1])
    table = cache.vectors(list(index))
    time = max(len(r) for r in rows)
    positions = torch.zeros(len(rows), time, dtype=torch.int64)
    for r, row in enumerate(rows):
        positions[r, : len(row)] = torch.as_tensor(row)
    positions = positions.to(table.device)
    lengths = torch.as_tensor([len(r) for r in rows], device=table.device)
    return table[positions], lengths
