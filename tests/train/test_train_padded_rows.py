"""Rounded row counts (spacy_elmo/train/network/padded_rows.py): few sizes, little padding, and no change to any
result."""

from __future__ import annotations

import pytest
import torch

from spacy_elmo.sources.model_paths import DEFAULT_MODEL_DIR
from spacy_elmo.train.corpus.batching import tensorize
from spacy_elmo.train.network import padded_rows as padded_rows_module
from spacy_elmo.train.network.padded_rows import pad_rows, padded_rows, row_rounding
from spacy_elmo.train.network.precision import autocast
from spacy_elmo.train.run.evaluation import load_language_model


def test_row_counts_round_up_to_sixteen_sizes_per_power_of_two():
    # hand-computed: below 128 a multiple of 8; 512..1023 of 32; 2048..4095 of 128; 4096..8191 of 256
    assert [padded_rows(n) for n in (0, 1, 8, 9, 100, 512, 513, 572, 4000, 4096, 4097, 7856)] == [
        0, 8, 8, 16, 104, 512, 544, 576, 4096, 4096, 4352, 7936,
    ]  # fmt: skip
    sizes = {padded_rows(n) for n in range(4097, 8193)}
    assert len(sizes) == 16
    for n in range(1, 20_000):
        rounded = padded_rows(n)
        assert n <= rounded <= max(n + 7, n * 17 / 16)
        assert padded_rows(rounded) == rounded


def test_only_bfloat16_products_are_rounded():
    assert row_rounding(torch.bfloat16)(100) == 104
    assert row_rounding(torch.float32)(100) == 100  # float32 (MKL) compiles nothing per shape: the exact path


def test_pad_rows_appends_rows_of_the_value_along_a_dimension():
    x = torch.arange(6.0).view(2, 3)
    padded = pad_rows(x, 5, dim=1, value=-1)
    assert padded.tolist() == [[0, 1, 2, -1, -1], [3, 4, 5, -1, -1]]
    assert pad_rows(x, 2) is x
    with pytest.raises(ValueError, match="cannot pad 3 rows to 2"):
        pad_rows(x, 2, dim=1)
    with pytest.raises(ValueError, match=">= 0"):
        padded_rows(-1)


def _step(model, batch):
    """The bfloat16 step's summed NLL of both directions and every parameter's gradient."""
    model.zero_grad()
    with autocast(torch.bfloat16):
        nll_f, nll_b, n = model(batch.chars, batch.token_index, batch.word_ids, batch.lengths)
    ((nll_f + nll_b) / (2 * n)).backward()
    return float(nll_f.detach()), float(nll_b.detach()), [p.grad.clone() for p in model.parameters()]


def test_padding_changes_no_loss_or_gradient_of_a_bfloat16_step(data_dir, monkeypatch):
    """The bundled model on 23 WikiText-2 sentences (odd row counts everywhere: tokens, predictions, each softmax
    cluster, the LSTM's packed rows), a bfloat16 step with and without the rounding: the padding rows are zeros
    or repeats that no result reads, so the loss and every gradient agree to float32 accumulation order, up to
    one bfloat16 rounding of a product's output (2**-7 relative at most); they would move by whole percent if a padding
    row reached a loss or a weight's gradient."""
    model, vocab = load_language_model(DEFAULT_MODEL_DIR)
    model.train()
    lines = (data_dir / "wikitext-2" / "valid.txt").read_text(encoding="utf-8").splitlines()
    sentences = [line.split()[:37] for line in lines if len(line.split()) > 5][:23]
    batch = tensorize(sentences, vocab, crop_width=max(w for w, _ in model.options.filters))
    padded = _step(model, batch)
    monkeypatch.setattr(padded_rows_module, "padded_rows", lambda rows: rows)
    exact = _step(model, batch)
    assert padded[:2] == pytest.approx(exact[:2], rel=1e-5)
    for with_padding, without in zip(padded[2], exact[2]):
        scale = float(without.abs().max())
        torch.testing.assert_close(with_padding, without, rtol=2**-7, atol=1e-4 * scale + 1e-12)
