"""Context-independent token encoder: char embedding -> CNN -> highway -> projection."""
from __future__ import annotations

from typing import Sequence, Tuple

import torch
from torch import nn


class Highway(nn.Module):
    """One bilm-tf highway layer: ``g * f(x W_t + b_t) + (1 - g) * x`` with ``g = sigmoid(x W_c + b_c)``."""

    def __init__(self, dim: int, activation: str = "relu") -> None:
        super().__init__()
        self.transform = nn.Linear(dim, dim)
        self.carry = nn.Linear(dim, dim)
        self.activation = _activation(activation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = torch.sigmoid(self.carry(x))
        return gate * self.activation(self.transform(x)) + (1 - gate) * x


class CharCNNEncoder(nn.Module):
    """Maps character ids ``(n_tokens, max_chars)`` to token vectors ``(n_tokens, projection_dim)``.

    Char id 0 (a padding token) embeds to a zero vector, as in AllenNLP.
    """

    def __init__(
        self,
        filters: Sequence[Tuple[int, int]],
        char_embed_dim: int,
        n_characters: int,
        n_highway: int,
        projection_dim: int,
        activation: str = "relu",
        max_chars: int = 50,
    ) -> None:
        super().__init__()
        self.filters = [(int(w), int(n)) for w, n in filters]
        self.max_chars = max_chars
        self.char_embed = nn.Embedding(n_characters, char_embed_dim, padding_idx=0)
        self.convs = nn.ModuleList(nn.Conv1d(char_embed_dim, n, kernel_size=w) for w, n in self.filters)
        n_filters = sum(n for _, n in self.filters)
        self.highways = nn.ModuleList(Highway(n_filters, "relu") for _ in range(n_highway))
        self.projection = nn.Linear(n_filters, projection_dim)
        self.activation = _activation(activation)
        self.n_filters = n_filters
        self.projection_dim = projection_dim

    def forward(self, char_ids: torch.Tensor) -> torch.Tensor:
        chars = self.char_embed(char_ids).transpose(1, 2)  # (n, char_dim, max_chars)
        pooled = [self.activation(conv(chars).max(dim=-1).values) for conv in self.convs]
        x = torch.cat(pooled, dim=-1)
        for highway in self.highways:
            x = highway(x)
        return self.projection(x)


def _activation(name: str) -> nn.Module:
    if name == "relu":
        return nn.ReLU()
    if name == "tanh":
        return nn.Tanh()
    raise ValueError(f"unknown char_cnn activation {name!r}: expected 'relu' or 'tanh'")
