"""Context-independent token encoder: char embedding -> CNN -> highway -> projection.

``CharCNNEncoder.forward`` is the reference path (``conv1d``, plain products; autograd and
training use it). The inference path (:func:`.inference.token_vectors_without_autograd`) reuses the same steps
with faster kernels (:meth:`CharCNNEncoder.convolve_as_matmul`, MKL pre-packed highway products);
:class:`~.model.BiLM` chooses between them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Callable, Optional, cast

import numpy as np
import torch
from torch import nn

from .chars import BOS_TOKEN, EOS_TOKEN, tokens_to_char_ids

BUCKET_ROWS = 256  # tokens per length bucket in large char-CNN batches
MATMUL_CONV_ELEMENTS = 1 << 23  # largest (rows x columns x filters) block of window scores at once (32 MB)


class Highway(nn.Module):
    """One bilm-tf highway layer: ``g * f(x W_t + b_t) + (1 - g) * x`` with ``g = sigmoid(x W_c + b_c)``."""

    def __init__(self, dim: int, activation: str = "relu") -> None:
        super().__init__()
        self.transform = nn.Linear(dim, dim)
        self.carry = nn.Linear(dim, dim)
        self.activation = _activation(activation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.combine(x, self.carry(x), self.transform(x))

    def combine(self, x: torch.Tensor, carry: torch.Tensor, transform: torch.Tensor) -> torch.Tensor:
        """The layer's output from its input and its two products ``carry(x)`` and ``transform(x)``."""
        gate = torch.sigmoid(carry)
        return gate * self.activation(transform) + (1 - gate) * x


class CharCNNEncoder(nn.Module):
    """Maps character ids ``(n_tokens, max_chars)`` to token vectors ``(n_tokens, projection_dim)``.

    Char id 0 (a padding token) embeds to a zero vector, as in AllenNLP. The encoder also says how
    its input is spelled: :meth:`token_ids` (tokens -> id rows, 0 = no token) and the sentence
    markers ``bos_token`` / ``eos_token`` that the biLM puts around each sentence. Another token
    format (:class:`~.manylangs.ManyLangsTokenEncoder`) overrides these and the two hooks
    :meth:`char_columns` and :meth:`projection_input`; both computation paths go through them.
    """

    bos_token = BOS_TOKEN
    eos_token = EOS_TOKEN

    def __init__(
        self,
        filters: Sequence[tuple[int, int]],
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
        self.max_width = max(w for w, _ in self.filters)
        self.projection_dim = projection_dim

    def token_ids(self, tokens: Sequence[str]) -> np.ndarray:
        """The id rows of ``tokens`` ``(len(tokens), columns)``, what :meth:`forward` takes: ELMo's char ids."""
        return tokens_to_char_ids(tokens)

    def char_columns(self, ids: torch.Tensor) -> torch.Tensor:
        """The char ids the CNN reads from id rows (here the rows themselves)."""
        return ids

    def projection_input(self, ids: torch.Tensor, highway_out: torch.Tensor) -> torch.Tensor:
        """What the projection reads: here the highway output alone."""
        return highway_out

    def forward(self, char_ids: torch.Tensor) -> torch.Tensor:
        """Token vectors ``(n_tokens, projection_dim)``: the reference path (``conv1d``, autograd)."""
        x = self.pooled_features(self.char_columns(char_ids))
        for highway in self.highways:
            x = highway(x)
        return self.projection(self.projection_input(char_ids, x))

    def pooled_features(
        self, char_ids: torch.Tensor, convolve: Optional[Callable[[torch.Tensor], torch.Tensor]] = None
    ) -> torch.Tensor:
        """The CNN's max-pooled filter outputs ``(n_tokens, n_filters)``, after the activation.

        Large batches are convolved in buckets of similar word length, each cut to its own
        longest word (:func:`trim_padding`), so short words do not pay for long ones.
        ``convolve`` computes the pooled outputs of trimmed ids (default :meth:`convolve`; the
        inference path passes :meth:`convolve_as_matmul`).
        """
        convolve = convolve or self.convolve
        if char_ids.shape[0] < 2 * BUCKET_ROWS:
            return convolve(trim_padding(char_ids, self.max_width))
        order = torch.argsort(content_lengths(char_ids), stable=True)
        parts = [
            convolve(trim_padding(char_ids.index_select(0, rows), self.max_width)) for rows in order.split(BUCKET_ROWS)
        ]
        restore = torch.empty_like(order)
        restore[order] = torch.arange(len(order), device=order.device)
        return torch.cat(parts).index_select(0, restore)

    def convolve(self, char_ids: torch.Tensor) -> torch.Tensor:
        """Each filter by ``conv1d``, max over positions, activation: pooled outputs ``(n_tokens, n_filters)``."""
        chars = self.char_embed(char_ids).transpose(1, 2)
        return torch.cat([self.activation(conv(chars).amax(dim=-1)) for conv in self.convs], dim=-1)

    def convolve_as_matmul(self, char_ids: torch.Tensor) -> torch.Tensor:
        """:meth:`convolve` as one matmul over windows of the widest filter: faster, for inference (no autograd).

        One product of all filters' weights instead of one ``conv1d`` per filter width, which is what
        makes it faster (benchmarks/RESULTS.md, "What was tried": the char CNN as one matmul).

        Narrower filters get zero weights for the window's extra columns and take their max
        only over their own valid positions; the bias is added after the max (the same value,
        as rounding is monotonic). The window sums are added in another order than ``conv1d``'s,
        so the two agree to float32 rounding.
        """
        width = self.max_width
        n_rows, n_cols = char_ids.shape
        if n_rows == 0:
            return self.char_embed.weight.new_zeros(0, self.n_filters)
        chars = nn.functional.pad(self.char_embed(char_ids), (0, 0, 0, width - 1))  # (n, cols + width - 1, dim)
        dim = chars.shape[-1]
        # (width * dim, n_filters): row k * dim + c holds each filter's weight at offset k, channel c
        convs = cast(Sequence[nn.Conv1d], self.convs)  # nn.ModuleList is typed as holding plain Modules
        weight = torch.cat([_window_weight(conv, width) for conv in convs], dim=1)
        bias = torch.cat([cast(torch.Tensor, conv.bias) for conv in convs])  # every conv has a bias
        pooled = []
        step = max(1, MATMUL_CONV_ELEMENTS // (n_cols * self.n_filters))
        for start in range(0, n_rows, step):
            part = chars[start : start + step]
            windows = part.unfold(1, width, 1).transpose(2, 3).reshape(-1, width * dim)  # (rows * cols, width * dim)
            out = (windows @ weight).view(len(part), n_cols, self.n_filters)
            column, maxima = 0, []
            for conv in convs:
                valid = n_cols - conv.kernel_size[0] + 1
                maxima.append(out[:, :valid, column : column + conv.out_channels].amax(dim=1))
                column += conv.out_channels
            pooled.append(torch.cat(maxima, dim=1))
        return self.activation(torch.cat(pooled).add_(bias))


def _window_weight(conv: nn.Conv1d, width: int) -> torch.Tensor:
    """``conv``'s weight ``(out, dim, k)`` as ``(width * dim, out)`` rows, zero for offsets ``k..width-1``."""
    kernel = conv.weight.permute(2, 1, 0).reshape(-1, conv.out_channels)  # row k * dim + c
    return nn.functional.pad(kernel, (0, 0, 0, (width - conv.kernel_size[0]) * conv.in_channels))


def content_lengths(char_ids: torch.Tensor) -> torch.Tensor:
    """Per row, the number of columns before its trailing run of one repeated (padding) id."""
    varying = char_ids != char_ids[:, -1:]
    columns = torch.arange(1, char_ids.shape[1] + 1, device=char_ids.device)
    return (varying * columns).amax(dim=1)


def trim_padding(char_ids: torch.Tensor, max_width: int) -> torch.Tensor:
    """Cut the trailing padding columns, keeping ``max_width`` of them: the CNN's max-pool is unchanged.

    Every row ends in a run of one repeated id (its padding). A window inside that run
    gives the same value wherever it sits, and every window that overlaps it partly still
    fits, so the set of window values (hence each filter's max) stays the same, up to float32
    rounding: a convolution or matmul kernel may add a window's terms in another order for
    another input width.
    Most words are far shorter than 50 bytes, so this saves most of the convolution work.
    """
    n_rows, n_cols = char_ids.shape
    if n_rows == 0 or n_cols <= max_width + 1:
        return char_ids
    content = int(content_lengths(char_ids).max())
    keep = min(n_cols, content + max_width)
    return char_ids[:, :keep] if keep < n_cols else char_ids


def _activation(name: str) -> nn.Module:
    if name == "relu":
        return nn.ReLU()
    if name == "tanh":
        return nn.Tanh()
    raise ValueError(f"unknown char_cnn activation {name!r}: expected 'relu' or 'tanh'")
