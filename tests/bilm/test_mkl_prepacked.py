"""MKL pre-packed weights (spacy_elmo.bilm.engine.mkl): the activations of the plain products, to rounding.

The real models' big matrices are packed automatically; the fixture and test models are small,
so these tests lower ``MIN_ELEMENTS`` to pack every eligible matrix, and count the packed
products so that a silently unused path fails.
"""

import json
import os
import subprocess
import sys
import weakref

import h5py
import numpy as np
import pytest
import torch

from spacy_elmo.bilm import BiLM, batch_to_char_ids, load_model
from spacy_elmo.bilm import threads as threads_module
from spacy_elmo.bilm.encoder import Highway
from spacy_elmo.bilm.engine import contract, engine_of, mkl, onednn
from tests.bilm.test_inference_path import _options, _random_batch, _random_state
from tests.numerics import TWO_FORMULAS_SCALE_ATOL, assert_recomputed_close

pytestmark = pytest.mark.skipif(not mkl.available(), reason="this torch has no MKL packed GEMM")


@pytest.fixture
def count_packed(monkeypatch):
    """Pack every matrix, and count the packed products by the weight they used."""
    monkeypatch.setattr(mkl, "MIN_ELEMENTS", 0)
    monkeypatch.setattr(mkl, "ENABLED", True)
    monkeypatch.setattr(onednn, "float32_kernels", lambda: "mkl")  # the MKL engine, whatever this CPU prefers
    counts = {}
    mkl_linear = torch.ops.mkl._mkl_linear  # every packed product calls it, from Python or the compiled loop

    def counting(rows, pack, out_in, bias, batch):
        key = tuple(out_in.shape)
        counts[key] = counts.get(key, 0) + 1
        return mkl_linear(rows, pack, out_in, bias, batch)

    monkeypatch.setattr(torch.ops.mkl, "_mkl_linear", counting)
    return counts


def test_packed_products_match_allennlp_reference_stateful(fixture_dir, count_packed):
    """All 10 reference batches of 3 sentences, state carried over: packed state, input and highway products."""
    model = load_model(fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5")
    groups = json.loads((fixture_dir / "sentences.json").read_text())
    files = [h5py.File(fixture_dir / f"lm_embeddings_{k}.hdf5", "r") for k in range(3)]
    state = None
    for i in range(10):
        sentences = [groups[k][i].split() for k in range(3)]
        with torch.inference_mode():
            acts, _, state = model(torch.as_tensor(batch_to_char_ids(sentences)), state)
        for row, f in enumerate(files):
            reference = np.concatenate(list(f[str(i)][...]), axis=-1)
            np.testing.assert_allclose(acts[2, row, : len(sentences[row])].numpy(), reference, atol=1e-6, rtol=1e-5)
    o = model.options
    lstm_products = count_packed.get((4 * o.cell_dim, o.projection_dim), 0)  # input and state weights
    assert lstm_products > 10 * 2 * o.n_layers  # more than one per layer, direction and batch
    assert count_packed.get((model.token_encoder.n_filters,) * 2, 0) > 0  # highway


@pytest.mark.parametrize("direction_threads", [False, True])
@pytest.mark.parametrize("stateful", [False, True])
def test_prepacked_inference_path_equals_reference_path(direction_threads, stateful, count_packed, monkeypatch):
    if direction_threads:  # one single-threaded pool thread per direction, as for big models
        monkeypatch.setattr(threads_module, "DIRECTION_THREADS_MIN_MACS", 0)
        threads = torch.get_num_threads()
        torch.set_num_threads(2)
    torch.manual_seed(4)
    model = BiLM(_options(cell_dim=64, projection_dim=16)).eval()
    for p in model.parameters():
        torch.nn.init.uniform_(p, -0.5, 0.5)
    sentences = _random_batch(seed=11, n=9, longest=15)
    ids = torch.as_tensor(batch_to_char_ids(sentences))
    state = _random_state(model, len(sentences), 5) if stateful else None
    try:
        ref_acts, _, ref_state = model(ids, state)  # parameters require grad: the reference path
        with torch.inference_mode():
            acts, _, final = model(ids, state)
    finally:
        if direction_threads:
            torch.set_num_threads(threads)
    assert count_packed.get((256, 16), 0) > 0  # the state / input products went through the packs
    assert_recomputed_close(acts, ref_acts, scale_atol=TWO_FORMULAS_SCALE_ATOL)
    for layer in range(model.n_layers):
        for d in range(2):
            for ours, ref in zip(final[layer][d], ref_state[layer][d]):
                assert_recomputed_close(ours, ref, scale_atol=TWO_FORMULAS_SCALE_ATOL)


def test_packs_follow_weight_updates(count_packed):
    """A weight changed in place (reload, optimizer step) gets a new pack, never a stale one."""
    torch.manual_seed(2)
    model = BiLM(_options(cell_dim=64, projection_dim=16)).eval()
    ids = torch.as_tensor(batch_to_char_ids(_random_batch(seed=3, n=8)))
    with torch.inference_mode():
        model(ids)
        cell = model.lstm.forward_layers[0]
        first = engine_of(model.lstm).pack(cell, "state_weight", cell.state_weight.t())
    with torch.no_grad():
        cell.state_weight.mul_(-1.5)
        model.token_encoder.highways[0].carry.weight.add_(0.25)
    with torch.inference_mode():
        assert engine_of(model.lstm).pack(cell, "state_weight", cell.state_weight.t()) is not first
        after, _, _ = model(ids)
        mkl.ENABLED = False
        plain, _, _ = model(ids)
    assert_recomputed_close(after, plain)


def test_a_pack_that_disagrees_is_not_used(monkeypatch):
    """If MKL's packed product ever differs from sgemm (the probe), the plain path runs instead."""
    monkeypatch.setattr(mkl, "MIN_ELEMENTS", 0)
    monkeypatch.setattr(onednn, "float32_kernels", lambda: "mkl")
    monkeypatch.setattr(mkl, "linear", lambda rows, out_in, bias, pack: torch.zeros(rows.shape[0], out_in.shape[0]))
    torch.manual_seed(6)
    model = BiLM(_options(cell_dim=64, projection_dim=16)).eval()
    ids = torch.as_tensor(batch_to_char_ids(_random_batch(seed=8, n=7)))
    cell = model.lstm.forward_layers[0]
    with torch.inference_mode():
        assert engine_of(model.lstm).pack(cell, "state_weight", cell.state_weight.t()) is None
        acts, _, _ = model(ids)
    reference, _, _ = model(ids)
    assert_recomputed_close(acts, reference, scale_atol=TWO_FORMULAS_SCALE_ATOL)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("rows", [1, 3, 20, 32, 64, 200])
def test_packed_highway_equals_plain(threads, rows, monkeypatch):
    monkeypatch.setattr(mkl, "MIN_ELEMENTS", 0)
    monkeypatch.setattr(onednn, "float32_kernels", lambda: "mkl")
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        torch.manual_seed(rows)
        layer = Highway(96)
        x = torch.randn(rows, 96)
        with torch.inference_mode():
            monkeypatch.setattr(mkl, "ENABLED", True)
            ours = layer(x)
            monkeypatch.setattr(mkl, "ENABLED", False)
            plain = layer(x)
    finally:
        torch.set_num_threads(saved)
    assert_recomputed_close(ours, plain)


def test_no_packs_under_autograd(count_packed):
    """Training needs gradients through the weights: the packed copies are for inference only."""
    model = BiLM(_options(cell_dim=64, projection_dim=16)).train()
    ids = torch.as_tensor(batch_to_char_ids(_random_batch(seed=1, n=6)))
    acts, _, _ = model(ids)
    acts.sum().backward()
    assert count_packed == {}
    assert model.token_encoder.highways[0].carry.weight.grad is not None


@pytest.mark.slow
def test_environment_variable_turns_packing_off():
    code = "from spacy_elmo.bilm.engine import mkl; print(mkl.ENABLED)"
    for value, expected in (("0", "False"), ("off", "False"), ("1", "True")):
        out = subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "SPACY_ELMO_PACKED_WEIGHTS": value},
            capture_output=True,
            text=True,
            check=True,
        )
        assert out.stdout.strip() == expected


def test_packs_are_freed_with_the_model(count_packed):
    import gc

    model = BiLM(_options(cell_dim=64, projection_dim=16)).eval()
    with torch.inference_mode():
        model(torch.as_tensor(batch_to_char_ids(_random_batch(seed=9, n=5))))
    held = [engine_of(model.lstm), engine_of(model.token_encoder)]  # the engines hold the packs
    assert len(held[0].packs) >= 4  # the cells' input and state weights, both directions
    gone = [weakref.ref(e) for e in held]
    del model, held
    gc.collect()
    assert all(ref() is None for ref in gone)  # the packs went with the model


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_fork_while_packing_does_not_deadlock_the_child(count_packed):
    import signal

    model = BiLM(_options(cell_dim=64, projection_dim=16)).eval()
    ids = torch.as_tensor(batch_to_char_ids(_random_batch(seed=4, n=6)))
    with contract._lock:  # as if another thread were packing at the moment of the fork
        pid = os.fork()
        if pid == 0:  # the child: make new packs, which needs the lock
            code = 1
            try:
                signal.alarm(30)  # a deadlock ends the child instead of the test run
                torch.set_num_threads(1)
                with torch.inference_mode():
                    model(ids)
                code = 0 if count_packed else 2
            finally:
                os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
