"""The trainable biLM: ELMo's token encoder and biLSTM plus one adaptive softmax shared by both directions.

Two LSTM implementations compute the same function:

- ``fused``: the parameters of one ``torch.nn.LSTM(proj_size=...)`` per layer and direction (no
  clipping), run by :func:`~.packed_lstm.packed_bilstm_layer` (both directions at once, one autograd
  node per layer; under bfloat16 autocast its products take bfloat16 operands).
  :meth:`LanguageModel.to_bilm` maps its weights onto the bilm-tf layout.
- ``exact``: the core :class:`~spacy_elmo.bilm.lstm.ElmoBiLSTM` (a Python loop per time step, with
  cell/projection clipping), used when a model with clipping is fine-tuned.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional, Union, cast

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from ...bilm.file_formats import softmax_widths
from ...bilm.lstm import FORGET_BIAS, ElmoBiLSTM, _gather_time, _reverse_index
from ...bilm.model import BiLM, bilstm_outputs, run_token_encoder
from ...bilm.options import BiLMOptions
from ...groundwork.probe import feature
from ..config import LSTM_IMPLS
from .packed_lstm import packed_bilstm_layer
from .padded_rows import pad_rows, row_rounding
from .target_log_prob import target_log_prob


def _tf_order(torch_blocks: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """Reorder gate blocks from torch (i, f, g, o) to TF (i, j=g, f, o) along ``dim``."""
    i, f, g, o = torch_blocks.chunk(4, dim=dim)
    return torch.cat([i, g, f, o], dim=dim)


def _torch_order(tf_blocks: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """Reorder gate blocks from TF (i, j, f, o) to torch (i, f, g=j, o) along ``dim``."""
    i, j, f, o = tf_blocks.chunk(4, dim=dim)
    return torch.cat([i, f, j, o], dim=dim)


class FusedBiLSTM(nn.Module):
    """ELMo's separate forward/backward projected LSTM stacks on ``torch.nn.LSTM`` (no clipping)."""

    def __init__(
        self, dim: int, cell_dim: int, n_layers: int, use_skip_connections: bool, dropout: float = 0.0
    ) -> None:
        super().__init__()
        self.n_layers, self.cell_dim, self.proj_dim = n_layers, cell_dim, dim
        self.use_skip_connections = use_skip_connections
        self.dropout = dropout

        def stack() -> nn.ModuleList:
            return nn.ModuleList(nn.LSTM(dim, cell_dim, proj_size=dim, batch_first=True) for _ in range(n_layers))

        self.forward_layers = stack()
        self.backward_layers = stack()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Uniform(+-1/sqrt(cell)) weights, zero biases but +1 on the forget gate (what TF adds at run time)."""
        bound = 1.0 / self.cell_dim**0.5
        for lstm in (*self.forward_layers, *self.backward_layers):
            for name, param in lstm.named_parameters():
                if name.startswith("weight"):
                    nn.init.uniform_(param, -bound, bound)
                else:
                    nn.init.zeros_(param)
            with torch.no_grad():
                lstm.bias_ih_l0[self.cell_dim : 2 * self.cell_dim] = FORGET_BIAS

    def forward(self, inputs: torch.Tensor, lengths: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Per-layer forward and backward outputs ``(batch, time, dim)`` in natural time order.

        Both directions of a layer run together (:func:`~.packed_lstm.packed_bilstm_layer`, on this
        module's ``torch.nn.LSTM`` parameters); under bfloat16 autocast of the inputs' device (CPU or CUDA)
        its GEMMs take bfloat16 operands.
        """
        time = inputs.shape[1]
        lengths_cpu = lengths.to("cpu", torch.int64)
        reverse_index = _reverse_index(lengths_cpu, time).to(inputs.device)
        packs = [
            pack_padded_sequence(x, lengths_cpu, batch_first=True, enforce_sorted=False)
            for x in (inputs, _gather_time(inputs, reverse_index))
        ]
        first = packs[0]
        batch_sizes = first.batch_sizes.tolist()
        compute_dtype = _compute_dtype(inputs.device)
        data = torch.stack([packs[0].data, packs[1].data]).float()
        outputs: list[torch.Tensor] = []
        for index, pair in enumerate(zip(self.forward_layers, self.backward_layers)):
            layer_in = F.dropout(data, self.dropout, self.training) if self.dropout else data
            out = packed_bilstm_layer(
                layer_in,
                _stacked(pair, "weight_ih_l0"),
                _stacked(pair, "weight_hh_l0"),
                _stacked(pair, "bias_ih_l0") + _stacked(pair, "bias_hh_l0"),
                _stacked(pair, "weight_hr_l0"),
                batch_sizes,
                compute_dtype,
            )
            if self.use_skip_connections and index > 0:
                out = out + data
            data = out
            outputs.append(out)
        directions: list[list[torch.Tensor]] = [[], []]
        for out in outputs:
            for direction in range(2):
                padded, _ = pad_packed_sequence(
                    PackedSequence(out[direction], first.batch_sizes, first.sorted_indices, first.unsorted_indices),
                    batch_first=True,
                    total_length=time,
                )
                directions[direction].append(padded if direction == 0 else _gather_time(padded, reverse_index))
        return directions[0], directions[1]

    def export_to(self, target: ElmoBiLSTM) -> None:
        """Copy weights into a core :class:`ElmoBiLSTM` (bilm-tf layout, forget bias 1.0 taken out)."""
        with torch.no_grad():
            for ours, theirs in zip(
                (*self.forward_layers, *self.backward_layers), (*target.forward_layers, *target.backward_layers)
            ):
                theirs.input_weight.copy_(_tf_order(ours.weight_ih_l0).T)
                theirs.state_weight.copy_(_tf_order(ours.weight_hh_l0).T)
                bias = _tf_order(ours.bias_ih_l0 + ours.bias_hh_l0).clone()
                bias[2 * self.cell_dim : 3 * self.cell_dim] -= FORGET_BIAS
                theirs.bias.copy_(bias)
                theirs.projection.copy_(ours.weight_hr_l0.T)

    def import_from(self, source: ElmoBiLSTM) -> None:
        """Copy weights from a core :class:`ElmoBiLSTM` (its clipping, if any, is not reproduced)."""
        with torch.no_grad():
            for ours, theirs in zip(
                (*self.forward_layers, *self.backward_layers), (*source.forward_layers, *source.backward_layers)
            ):
                ours.weight_ih_l0.copy_(_torch_order(theirs.input_weight.T))
                ours.weight_hh_l0.copy_(_torch_order(theirs.state_weight.T))
                bias = theirs.bias.clone()
                bias[2 * self.cell_dim : 3 * self.cell_dim] += FORGET_BIAS
                ours.bias_ih_l0.copy_(_torch_order(bias))
                ours.bias_hh_l0.zero_()
                ours.weight_hr_l0.copy_(theirs.projection.T)


class ExactBiLSTM(nn.Module):
    """The core ELMo biLSTM (with clipping) behind the same interface as :class:`FusedBiLSTM`."""

    def __init__(self, core: ElmoBiLSTM, dropout: float = 0.0) -> None:
        super().__init__()
        self.core = core
        self.dropout = dropout

    def forward(self, inputs: torch.Tensor, lengths: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        # dropout on the token layer only: the core stack has no hook between layers
        x = F.dropout(inputs, self.dropout, self.training) if self.dropout else inputs
        forward_out, backward_out, _ = bilstm_outputs(self.core, x, lengths)  # the inference path when evaluating
        return forward_out, backward_out


class LanguageModel(nn.Module):
    """Char-CNN token encoder -> biLSTM -> shared adaptive softmax over the output vocabulary."""

    def __init__(
        self,
        options: BiLMOptions,
        vocab_size: int,
        cutoffs: Sequence[int] = (2000, 10000),
        div_value: float = 4.0,
        dropout: float = 0.0,
        lstm_impl: str = "auto",
    ) -> None:
        super().__init__()
        if lstm_impl not in LSTM_IMPLS:
            raise ValueError(f"unknown lstm_impl {lstm_impl!r}: expected one of {LSTM_IMPLS}")
        if lstm_impl == "auto":
            lstm_impl = "exact" if (options.cell_clip or options.proj_clip) else "fused"
        self.options = options
        self.lstm_impl = lstm_impl
        self.dropout = dropout
        template = BiLM(options)
        self.token_encoder = template.token_encoder
        if lstm_impl == "fused":
            self.lstm: Union[FusedBiLSTM, ExactBiLSTM] = FusedBiLSTM(
                options.projection_dim, options.cell_dim, options.n_layers, options.use_skip_connections, dropout
            )
        else:
            self.lstm = ExactBiLSTM(template.lstm, dropout)
        cutoffs = [c for c in cutoffs if 0 < c < vocab_size - 1] or [max(1, vocab_size // 2)]  # a tiny vocabulary
        softmax_widths(options.projection_dim, div_value, len(cutoffs))  # every cluster 1 to MAX_WIDTH wide, or said
        self.softmax = nn.AdaptiveLogSoftmaxWithLoss(options.projection_dim, vocab_size, cutoffs, div_value=div_value)

    def layers(self, chars: torch.Tensor, token_index: torch.Tensor, lengths: torch.Tensor):
        """Token vectors ``(batch, time, dim)`` and the per-layer forward/backward LSTM outputs."""
        # bfloat16: oneDNN compiles its kernels per shape, so the token count is rounded (padded_rows.py)
        rounded = row_rounding(_compute_dtype(chars.device))
        chars = pad_rows(chars, rounded(chars.shape[0]))  # rows of char id 0: never indexed
        tokens = run_token_encoder(self.token_encoder, chars)[token_index]  # the inference path when evaluating
        forward_out, backward_out = self.lstm(tokens, lengths)
        return tokens, forward_out, backward_out

    def forward(
        self,
        chars: torch.Tensor,
        token_index: torch.Tensor,
        word_ids: torch.Tensor,
        lengths: torch.Tensor,
        counted: Optional[torch.Tensor] = None,
    ) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Summed negative log-likelihood of the forward and backward LM and the number of predictions per direction.

        Rows are ``<S> w1 .. wn </S>``: the forward LM predicts ``w1 .. wn </S>`` from the outputs
        at ``<S> .. wn``, the backward LM predicts ``<S> w1 .. wn`` from the outputs at ``w1 .. </S>``.
        ``counted`` (evaluation): a bool per vocabulary id; only the predictions of those words are summed and
        counted (every word still conditions the others). With both sentence markers counted, each direction
        makes the same number of counted predictions.
        """
        _, forward_out, backward_out = self.layers(chars, token_index, lengths)
        time = token_index.shape[1]
        positions = torch.arange(time - 1, device=lengths.device)[None, :]
        predict = positions < (lengths[:, None] - 1)  # (batch, time - 1)
        top_f, top_b = forward_out[-1], backward_out[-1]
        if self.dropout and self.training:
            top_f, top_b = F.dropout(top_f, self.dropout, True), F.dropout(top_b, self.dropout, True)
        hidden_f, target_f = top_f[:, :-1][predict], word_ids[:, 1:][predict]
        hidden_b, target_b = top_b[:, 1:][predict], word_ids[:, :-1][predict]
        n = int(predict.sum())
        # one softmax call for both directions (shared weights, half the kernel launches)
        hidden, target = torch.cat([hidden_f, hidden_b]), torch.cat([target_f, target_b])
        logprob = adaptive_log_prob(self.softmax, hidden, target)
        if counted is not None:
            keep = counted[target]
            logprob = logprob * keep
            n = int(keep[:n].sum())
        return -logprob[: len(target_f)].sum(), -logprob[len(target_f) :].sum(), n

    def to_bilm(self) -> BiLM:
        """A standalone core :class:`BiLM` (eval mode) that computes the same activations."""
        options = self.options
        if self.lstm_impl == "fused":
            options = _without_clipping(options)
        bilm = BiLM(options)
        bilm.token_encoder.load_state_dict(self.token_encoder.state_dict())
        if isinstance(self.lstm, FusedBiLSTM):
            self.lstm.export_to(bilm.lstm)
        else:
            bilm.lstm.load_state_dict(self.lstm.core.state_dict())
        return bilm.eval()

    def load_bilm_weights(self, bilm: BiLM) -> None:
        """Start from a core :class:`BiLM`'s encoder and LSTM (fine-tuning); the softmax stays as it is."""
        self.token_encoder.load_state_dict(bilm.token_encoder.state_dict())
        if isinstance(self.lstm, FusedBiLSTM):
            self.lstm.import_from(bilm.lstm)
        else:
            self.lstm.core.load_state_dict(bilm.lstm.state_dict())


def adaptive_log_prob(
    softmax: nn.AdaptiveLogSoftmaxWithLoss, hidden: torch.Tensor, target: torch.Tensor
) -> torch.Tensor:
    """``softmax(hidden, target).output`` in float32 whatever the GEMMs' precision, with a lighter backward pass.

    The same computation as ``AdaptiveLogSoftmaxWithLoss.forward``, but each cluster's target
    log-probability is one autograd node (:func:`~.target_log_prob.target_log_prob`): it keeps only
    what the targets' gradient needs instead of a full log-softmax, a zero tensor for ``gather`` and a
    third for the gradient (in float32 too, so that both precisions take one path; on an AVX2 CPU the float32
    step's speed did not change measurably: benchmarks/RESULTS.md). Under bfloat16 autocast the module's
    own forward fails (it mixes a float32 output with bfloat16 log-probabilities), and a bfloat16
    log-softmax would round every word's log-probability to 3 significant digits; here each log-softmax
    runs on float32 logits.
    """
    rows = target.shape[0]
    # bfloat16: oneDNN compiles its kernels per shape (padded_rows.py)
    rounded = row_rounding(_compute_dtype(hidden.device))
    hidden, target = pad_rows(hidden, rounded(rows)), pad_rows(target, rounded(rows))  # word 0: the head
    output = hidden.new_zeros(target.shape[0], dtype=torch.promote_types(hidden.dtype, torch.float32))
    gather = target.new_empty(target.shape[0])
    bounds = [0, *softmax.cutoffs]
    for index in range(len(bounds) - 1):
        low, high = bounds[index], bounds[index + 1]
        in_cluster = (target >= low) & (target < high)
        cluster_rows = in_cluster.nonzero().squeeze(1)
        n = cluster_rows.numel()
        if n == 0:
            continue
        if index == 0:
            gather.index_copy_(0, cluster_rows, target[in_cluster])
        else:
            # padded: repeats of the cluster's first row, whose log-probabilities are dropped (no gradient)
            picked = pad_rows(cluster_rows, rounded(n), value=int(cluster_rows[0]))
            logits = softmax.tail[index - 1](hidden.index_select(0, picked))
            gather.index_fill_(0, cluster_rows, softmax.shortlist_size + index - 1)
            output.index_copy_(0, cluster_rows, target_log_prob(logits, target.index_select(0, picked) - low)[:n])
    return (output + target_log_prob(softmax.head(hidden), gather))[:rows]


def _stacked(lstms: Sequence[nn.Module], name: str) -> torch.Tensor:
    """One ``torch.nn.LSTM`` parameter of each direction, stacked (direction 0 = forward)."""
    return torch.stack([cast(torch.Tensor, getattr(lstm, name)) for lstm in lstms])


def _compute_dtype(device: torch.device) -> torch.dtype:
    """The products' operand type on ``device``: bfloat16 under that device type's autocast to bfloat16 (mixed-precision
    training: ``torch.autocast("cpu")`` or ``torch.autocast("cuda")``), else float32."""
    kind = device.type
    if kind in ("cpu", "cuda") and autocast_dtype(kind) == torch.bfloat16:
        return torch.bfloat16
    return torch.float32


def autocast_dtype(kind: str) -> Optional[torch.dtype]:
    """The dtype that device type ``kind``'s (``"cpu"``, ``"cuda"``) autocast runs products in; None where it is off.

    torch 2.4+ asks per device type (``is_autocast_enabled(kind)``, ``get_autocast_dtype(kind)``); torch 2.1-2.3 has a
    function per device (``is_autocast_cpu_enabled``, ``get_autocast_gpu_dtype``...) and an ``is_autocast_enabled``
    that takes no argument."""
    get_dtype = feature(torch, "get_autocast_dtype")
    if get_dtype is not None:  # torch 2.4+ (torch 2.1-2.3's stubs type is_autocast_enabled without an argument)
        return get_dtype(kind) if torch.is_autocast_enabled(kind) else None  # type: ignore[call-arg,unused-ignore]
    if kind == "cpu":
        return torch.get_autocast_cpu_dtype() if torch.is_autocast_cpu_enabled() else None
    return torch.get_autocast_gpu_dtype() if torch.is_autocast_enabled() else None


def _without_clipping(options: BiLMOptions) -> BiLMOptions:
    from dataclasses import replace

    return replace(options, cell_clip=None, proj_clip=None)


def count_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


__all__ = ["ExactBiLSTM", "FusedBiLSTM", "LanguageModel", "count_parameters"]
