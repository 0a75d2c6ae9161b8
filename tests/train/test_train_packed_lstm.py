"""The training biLSTM's hand-written recurrence computes torch.nn.LSTM's function and gradients."""

import pytest
import torch
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence

from spacy_elmo.bilm.engine import onednn
from spacy_elmo.bilm.lstm import run_directions
from spacy_elmo.train.network.language_model import FusedBiLSTM
from spacy_elmo.train.network.packed_lstm import packed_bilstm_layer
from tests.numerics import assert_recomputed_close


def _lstms(input_dim: int, cell: int, proj: int, seed: int) -> list[torch.nn.LSTM]:
    torch.manual_seed(seed)
    lstms = [torch.nn.LSTM(input_dim, cell, proj_size=proj, batch_first=True) for _ in range(2)]
    for lstm in lstms:
        for param in lstm.parameters():
            torch.nn.init.uniform_(param, -0.5, 0.5)  # larger than training's init: saturating gates are covered
    return lstms


def _stacked(lstms: list[torch.nn.LSTM], name: str) -> torch.Tensor:
    return torch.stack([getattr(lstm, name) for lstm in lstms])


@pytest.mark.parametrize("lengths", [[5, 3, 7, 1, 7], [4], [2, 2, 2]])
def test_one_layer_matches_torch_lstm_outputs_and_every_gradient(lengths):
    lstms = _lstms(6, 10, 4, seed=len(lengths))
    lengths_t = torch.tensor(lengths)
    x = torch.randn(2, len(lengths), max(lengths), 6, requires_grad=True)
    packs = [pack_padded_sequence(x[d], lengths_t, batch_first=True, enforce_sorted=False) for d in range(2)]
    expected = torch.stack([lstm(pack)[0].data for lstm, pack in zip(lstms, packs)])
    upstream = torch.randn_like(expected)
    expected_grads = torch.autograd.grad(
        (expected * upstream).sum(), [x, *lstms[0].parameters(), *lstms[1].parameters()]
    )

    names = ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0", "weight_hr_l0")
    weights = {name: _stacked(lstms, name) for name in names}
    packs = [pack_padded_sequence(x[d], lengths_t, batch_first=True, enforce_sorted=False) for d in range(2)]
    actual = packed_bilstm_layer(
        torch.stack([p.data for p in packs]),
        weights["weight_ih_l0"],
        weights["weight_hh_l0"],
        weights["bias_ih_l0"] + weights["bias_hh_l0"],
        weights["weight_hr_l0"],
        packs[0].batch_sizes.tolist(),
    )
    assert_recomputed_close(actual, expected)
    actual_grads = torch.autograd.grad((actual * upstream).sum(), [x, *lstms[0].parameters(), *lstms[1].parameters()])
    for got, want in zip(actual_grads, expected_grads):
        assert_recomputed_close(got, want)


def _reference_fused(module: FusedBiLSTM, inputs: torch.Tensor, lengths: torch.Tensor):
    """The fused biLSTM as it ran before the hand-written recurrence: torch.nn.LSTM on each direction's packed data."""

    def run(direction: int, packed: PackedSequence) -> list[torch.Tensor]:
        data, outputs = packed.data, []
        for index, lstm in enumerate((module.forward_layers, module.backward_layers)[direction]):
            out = lstm(PackedSequence(data, packed.batch_sizes, packed.sorted_indices, packed.unsorted_indices))[0].data
            data = out + data if module.use_skip_connections and index > 0 else out
            outputs.append(data)
        return outputs

    return run_directions(inputs, lengths, run)


def test_fused_bilstm_gives_torch_lstms_outputs_and_gradients_in_float32():
    torch.manual_seed(3)
    module = FusedBiLSTM(dim=8, cell_dim=12, n_layers=2, use_skip_connections=True)
    inputs = torch.randn(4, 9, 8, requires_grad=True)
    lengths = torch.tensor([9, 2, 6, 9])
    params = [inputs, *module.parameters()]
    expected_f, expected_b = _reference_fused(module, inputs, lengths)
    upstream = [torch.randn_like(t) for t in (*expected_f, *expected_b)]
    loss = sum((t * u).sum() for t, u in zip((*expected_f, *expected_b), upstream))
    expected_grads = torch.autograd.grad(loss, params)
    actual_f, actual_b = module(inputs, lengths)
    for got, want in zip((*actual_f, *actual_b), (*expected_f, *expected_b)):
        assert_recomputed_close(got, want)
        assert not got[1, 2:].any()  # padding stays zero
    loss = sum((t * u).sum() for t, u in zip((*actual_f, *actual_b), upstream))
    for got, want in zip(torch.autograd.grad(loss, params), expected_grads):
        assert_recomputed_close(got, want)


def test_bfloat16_products_stay_close_to_float32():
    """bfloat16 keeps 8 significant bits: each operand is rounded by at most 2^-9 relative. Outputs and gradients of a
    7-step layer stay within 2% of their largest float32 magnitude (measured: under 1%); a wrong gate or missing term
    moves them by tens of percent."""
    lstms = _lstms(6, 10, 4, seed=11)
    lengths = [7, 5, 3, 3, 1]
    x = torch.randn(2, sum(lengths), 6)
    batch_sizes = [sum(1 for n in lengths if n > t) for t in range(max(lengths))]
    weights = [_stacked(lstms, n).detach().requires_grad_() for n in ("weight_ih_l0", "weight_hh_l0", "weight_hr_l0")]
    bias = (_stacked(lstms, "bias_ih_l0") + _stacked(lstms, "bias_hh_l0")).detach().requires_grad_()
    upstream = torch.randn(2, sum(lengths), 4)
    results = []
    for dtype in (torch.float32, torch.bfloat16):
        xg = x.clone().requires_grad_()
        out = packed_bilstm_layer(xg, weights[0], weights[1], bias, weights[2], batch_sizes, dtype)
        assert out.dtype == torch.float32
        grads = torch.autograd.grad((out * upstream).sum(), [xg, *weights, bias])
        assert all(g.dtype == torch.float32 for g in grads)
        results.append([out, *grads])
    for low, high in zip(results[1], results[0]):
        scale = float(high.detach().abs().max())
        assert float((low - high).detach().abs().max()) <= 0.02 * scale
        assert float((low - high).detach().abs().max()) > 0  # the products really ran in bfloat16


def test_bad_arguments_are_refused():
    x = torch.zeros(2, 3, 4)
    w_ih, w_hh, bias, w_hr = torch.zeros(2, 8, 4), torch.zeros(2, 8, 4), torch.zeros(2, 8), torch.zeros(2, 4, 2)
    with pytest.raises(ValueError, match="compute_dtype"):
        packed_bilstm_layer(x, w_ih, w_hh, bias, w_hr, [2, 1], torch.float16)
    with pytest.raises(ValueError, match="add up to 4 rows, the input has 3"):
        packed_bilstm_layer(x, w_ih, w_hh, bias, w_hr, [2, 2])


@pytest.mark.parametrize("compute_dtype", [torch.float32, torch.bfloat16])
def test_each_step_is_the_reference_cell_arithmetic(compute_dtype):
    """The hand-written recurrence's forward pass is lstm.cell_step, the one reference of the cell's arithmetic, on
    torch.nn.LSTM's parameters (gates i, f, g, o, read as TF's i, j = g, f, o) with a shrinking batch; bfloat16
    rounds the products' operands only (the cell stays float32)."""
    from spacy_elmo.bilm.lstm import cell_step

    torch.manual_seed(3)
    cell, proj, width, batch_sizes = 6, 4, 5, [4, 4, 3, 1]
    x = torch.randn(2, sum(batch_sizes), width)
    w_ih, w_hh = torch.randn(2, 4 * cell, width), torch.randn(2, 4 * cell, proj)
    bias, w_hr = torch.randn(2, 4 * cell), torch.randn(2, proj, cell)
    rounded = (lambda t: t.to(compute_dtype).float()) if compute_dtype == torch.bfloat16 else (lambda t: t)
    want = []
    for d in range(2):
        h, c, start = torch.zeros(batch_sizes[0], proj), torch.zeros(batch_sizes[0], cell), 0
        for n in batch_sizes:
            h, c = h[:n], c[:n]
            gates = rounded(x[d, start : start + n]) @ rounded(w_ih[d]).T + rounded(h) @ rounded(w_hh[d]).T
            i, f, g, o = (gates + rounded(bias[d])).split(cell, dim=1)
            hidden, c = cell_step(torch.cat([i, g, f, o], 1), c, None)
            h = rounded(hidden) @ rounded(w_hr[d]).T
            want.append((d, start, h))
            start += n
    got = packed_bilstm_layer(x, w_ih, w_hh, bias, w_hr, batch_sizes, compute_dtype)
    for d, start, h in want:
        torch.testing.assert_close(
            got[d, start : start + len(h)],
            h,
            atol=2e-5 if compute_dtype == torch.float32 else 0.05,
            rtol=1e-4 if compute_dtype == torch.float32 else 0.02,
        )


_ONEDNN_LINEAR = onednn.linear


def _layer_results(monkeypatch, kernels: str, calls: list[int]):
    """Output and every gradient of one layer at the default architecture's widths (its state products are big
    enough for oneDNN packs), with ``kernels`` as the process's float32 choice; ``calls`` counts oneDNN products."""
    monkeypatch.setattr(onednn, "float32_kernels", lambda: kernels)

    def counted(*args):
        calls.append(1)
        return _ONEDNN_LINEAR(*args)

    monkeypatch.setattr(onednn, "linear", counted)
    torch.manual_seed(5)
    cell, proj, width, lengths = 512, 128, 128, [6, 4, 4, 1]
    batch_sizes = [sum(1 for n in lengths if n > t) for t in range(max(lengths))]
    x = torch.randn(2, sum(lengths), width, requires_grad=True)
    w_ih = (torch.randn(2, 4 * cell, width) * 0.1).requires_grad_()
    w_hh = (torch.randn(2, 4 * cell, proj) * 0.1).requires_grad_()
    bias = (torch.randn(2, 4 * cell) * 0.1).requires_grad_()
    w_hr = (torch.randn(2, proj, cell) * 0.1).requires_grad_()
    out = packed_bilstm_layer(x, w_ih, w_hh, bias, w_hr, batch_sizes)
    upstream = torch.randn_like(out)
    return [out.detach(), *torch.autograd.grad((out * upstream).sum(), [x, w_ih, w_hh, bias, w_hr])]


@pytest.mark.skipif(not onednn.onednn_float32_available(), reason="this torch has no oneDNN float32 packs")
def test_onednn_step_products_agree_with_mkl_and_repeat_bit_for_bit(monkeypatch):
    """Where the process's float32 choice is oneDNN, the per-step state products (forward and backward) run on its
    packs: float32 rounding away from MKL's bmm, and the same bits on a rerun (resumed training repeats itself)."""
    with monkeypatch.context() as patch:
        mkl_calls: list[int] = []
        expected = _layer_results(patch, "mkl", mkl_calls)
    onednn_calls: list[int] = []
    actual = _layer_results(monkeypatch, "onednn", onednn_calls)
    again = _layer_results(monkeypatch, "onednn", [])
    assert not mkl_calls
    assert len(onednn_calls) == 2 * (6 + 5)  # both directions: 6 steps forward, 5 backward (none before the first)
    for got, want, repeat in zip(actual, expected, again):
        assert_recomputed_close(got, want)
        assert torch.equal(got, repeat)
