"""The inference path (spacy_elmo.bilm.inference) against the autograd reference path, and the token-vector LRU."""

import random

import numpy as np
import pytest
import torch

from spacy_elmo import load_bilm
from spacy_elmo.bilm import BiLM, BiLMOptions, batch_to_char_ids, cpu_support, engine, inference, load_model
from spacy_elmo.bilm import threads as threads_module
from spacy_elmo.bilm.model import bilstm_outputs
from spacy_elmo.bilm.vocab_cache import TokenVectorCache, batch_token_vectors
from tests.numerics import TWO_FORMULAS_SCALE_ATOL, assert_recomputed_close

needs_float16 = pytest.mark.skipif(
    not cpu_support.float16_products(), reason="this torch has no float16 products on the CPU (torch 2.1)"
)


def _options(**kw):
    base = dict(
        filters=((1, 4), (2, 8), (3, 8)),
        char_embed_dim=4,
        n_characters=262,
        max_chars=50,
        n_highway=1,
        activation="relu",
        cell_dim=24,
        projection_dim=8,
        n_layers=2,
        cell_clip=3.0,
        proj_clip=3.0,
        use_skip_connections=True,
    )
    base.update(kw)
    return BiLMOptions(**base)


def _random_batch(seed, n=9, longest=13):
    rng = random.Random(seed)
    vocab = ["the", "of", "bank", "river", "approved", ",", ".", "Zürich", "x" * 60, "1965"]
    lengths = [rng.randint(1, longest) for _ in range(n)]
    lengths[rng.randrange(n)] = longest
    return [[rng.choice(vocab) for _ in range(k)] for k in lengths]


def _random_state(model, batch, seed):
    g = torch.Generator().manual_seed(seed)
    o = model.options
    return [
        [
            (torch.randn(batch, o.projection_dim, generator=g), torch.randn(batch, o.cell_dim, generator=g))
            for _ in range(2)
        ]
        for _ in range(o.n_layers)
    ]


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"use_skip_connections": False, "n_layers": 3},
        {"cell_clip": None, "proj_clip": None, "n_layers": 1},
        {"cell_dim": 300},  # the split-sigmoid branch (cell_dim >= 256)
    ],
)
@pytest.mark.parametrize("stateful", [False, True])
@pytest.mark.parametrize("direction_threads", [False, True])
def test_inference_path_equals_reference_path(kw, stateful, direction_threads, monkeypatch):
    if direction_threads:  # force the two-thread branch (one thread per direction) on this tiny model
        monkeypatch.setattr(threads_module, "DIRECTION_THREADS_MIN_MACS", 0)
        saved_threads = torch.get_num_threads()
        torch.set_num_threads(2)
        monkeypatch.setattr(threads_module, "_pool", threads_module._new_pool())  # new threads, after the count below
    torch.manual_seed(1)
    model = BiLM(_options(**kw)).eval()
    for p in model.parameters():  # realistic spread, so the clips are hit
        torch.nn.init.uniform_(p, -0.5, 0.5)
    sentences = _random_batch(seed=len(kw) + stateful)
    ids = torch.as_tensor(batch_to_char_ids(sentences))
    state = _random_state(model, len(sentences), 3) if stateful else None
    ref_acts, ref_mask, ref_state = model(ids, state)  # parameters require grad: the reference path
    assert ref_acts.requires_grad
    with torch.inference_mode():
        acts, mask, final = model(ids, state)
    assert torch.equal(mask, ref_mask)
    assert_recomputed_close(acts, ref_acts, scale_atol=TWO_FORMULAS_SCALE_ATOL)
    for layer in range(model.n_layers):
        for d in range(2):
            for ours, ref in zip(final[layer][d], ref_state[layer][d]):
                assert_recomputed_close(ours, ref, scale_atol=TWO_FORMULAS_SCALE_ATOL)
    # the per-direction outputs of the inference path (what lstm_outputs gives without autograd)
    tokens = model.encode_tokens(ids).detach()
    lengths = mask.sum(dim=1)
    with torch.no_grad():
        f_fast, b_fast, _ = bilstm_outputs(model.lstm, tokens, lengths, state)
    f_ref, b_ref, _ = model.lstm(tokens, lengths, state)  # parameters require grad: the reference path
    assert f_ref[0].requires_grad and not f_fast[0].requires_grad
    for ours, ref in zip(f_fast + b_fast, f_ref + b_ref):
        assert_recomputed_close(ours, ref, scale_atol=TWO_FORMULAS_SCALE_ATOL)
    if direction_threads:
        assert torch.get_num_threads() == 2  # the caller's setting survives the pool threads
        torch.set_num_threads(saved_threads)


def test_chunked_input_projection_gives_the_whole_projection(monkeypatch):
    model = BiLM(_options()).eval()
    sentences = _random_batch(seed=5, n=6, longest=20)
    ids = torch.as_tensor(batch_to_char_ids(sentences))
    with torch.inference_mode():
        whole, _, _ = model(ids)
        monkeypatch.setattr(engine.Engine, "gate_chunk_elements", 4 * 24 * 7)  # 7 step-ordered rows per chunk
        chunked, _, _ = model(ids)
    assert_recomputed_close(chunked, whole)  # other row counts, other GEMM blocking


@pytest.mark.parametrize("sigmoid_tanh", [False, True], ids=["tanh", "tanh as sigmoid"])
@pytest.mark.parametrize("cell_clip", [0.0, 0.5], ids=["no clip", "clip"])
def test_the_inference_cell_update_is_the_reference_cell_arithmetic(sigmoid_tanh, cell_clip):
    """step_loop.cell_update (in place, 2-D or direction-stacked 3-D, tanh in either form) computes lstm.cell_step,
    the one reference of the cell's arithmetic; gates large enough to saturate and a clip that bites are covered."""
    from spacy_elmo.bilm.engine.step_loop import cell_update
    from spacy_elmo.bilm.lstm import cell_step

    torch.manual_seed(0)
    gates, c = torch.randn(2, 5, 4 * 7) * 4, torch.randn(2, 5, 7)
    want = [cell_step(gates[d], c[d], cell_clip or None) for d in range(2)]
    assert cell_clip == 0.0 or any((w[1].abs() == cell_clip).any() for w in want)  # the clip bites
    stacked = cell_update(gates.clone(), c.clone(), cell_clip, sigmoid_tanh)
    for d in range(2):
        one = cell_update(gates[d].clone(), c[d].clone(), cell_clip, sigmoid_tanh)
        for got in (one, (stacked[0][d], stacked[1][d])):
            torch.testing.assert_close(got[0], want[d][0], atol=2e-7, rtol=1e-6)  # hidden: o * tanh(c')
            torch.testing.assert_close(got[1], want[d][1], atol=2e-7, rtol=1e-6)  # the new cell


def test_autograd_still_flows_through_bilm():
    model = BiLM(_options()).train()
    ids = torch.as_tensor(batch_to_char_ids(_random_batch(seed=2)))
    acts, _mask, _ = model(ids)
    acts[1:].sum().backward()
    grads = [p.grad for p in model.lstm.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert all(g.abs().sum() > 0 for g in grads)
    assert model.token_encoder.projection.weight.grad.abs().sum() > 0


def test_step_layout_orders_rows_by_length():
    layout = inference.step_layout(torch.tensor([2, 4, 1, 4]), time=4, device=torch.device("cpu"))
    assert layout.step_sizes == [4, 3, 2, 2]
    assert layout.step_offsets == [0, 4, 7, 9]
    assert layout.sorted_rows.tolist() == [1, 3, 0, 2]  # stable: equal lengths keep their order
    # step 0 reads position 0 of rows 1, 3, 0, 2 forward; backward starts at each row's last token
    assert layout.forward_index[:4].tolist() == [4, 12, 0, 8]
    assert layout.backward_index[:4].tolist() == [7, 15, 1, 8]
    assert layout.last_index.tolist() == [9, 10, 4 + 2, 0 + 3]  # offset of the last step + sorted row
    with pytest.raises(ValueError, match="at least one position"):
        inference.step_layout(torch.tensor([3, 0]), time=3, device=torch.device("cpu"))


def test_step_layout_can_skip_each_directions_last_step():
    """Forward stops before each row's last position, backward before its first (row 0: 3, row 1: 5 long)."""
    layout = inference.step_layout(torch.tensor([3, 5]), time=5, device=torch.device("cpu"), skip_last=True)
    assert layout.step_sizes == [2, 2, 1, 1]
    assert layout.forward_index.tolist() == [5, 0, 6, 1, 7, 8]  # positions 0-3 of row 1, 0-1 of row 0
    assert layout.backward_index.tolist() == [9, 2, 8, 1, 7, 6]  # positions 4-1 of row 1, 2-1 of row 0
    with pytest.raises(ValueError, match="at least two positions"):
        inference.step_layout(torch.tensor([3, 1]), time=3, device=torch.device("cpu"), skip_last=True)


@pytest.mark.parametrize("threads", [1, 2])
def test_skipping_boundary_steps_changes_no_word_position(threads, monkeypatch):
    """``boundaries=False`` (what ElmoBackend.embed uses) equals the full computation on every word."""
    monkeypatch.setattr(threads_module, "DIRECTION_THREADS_MIN_MACS", 0 if threads == 2 else 10**12)
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        torch.manual_seed(7)
        model = BiLM(_options()).eval()
        for p in model.parameters():
            torch.nn.init.uniform_(p, -0.5, 0.5)
        sentences = [*_random_batch(seed=12, n=9, longest=14), ["one"]]
        ids = torch.as_tensor(batch_to_char_ids(sentences))
        mask = (ids > 0).any(dim=-1)
        with torch.inference_mode():
            with_bounds, lengths = model.add_boundaries(ids, mask)
            tokens = model.encode_tokens(with_bounds)
            full, state = model.contextualize_vectors(tokens, lengths)
            skipped, no_state = model.contextualize_vectors(tokens, lengths, boundaries=False)
    finally:
        torch.set_num_threads(saved)
    assert state is not None and no_state is None
    dim = model.options.projection_dim
    for row, sentence in enumerate(sentences):
        words = slice(1, len(sentence) + 1)
        # fewer rows at some steps can take another BLAS kernel
        assert_recomputed_close(skipped[:, row, words], full[:, row, words])
        last = len(sentence) + 1  # </S>: the backward half and the token layer are still there
        assert_recomputed_close(skipped[:, row, last, dim:], full[:, row, last, dim:])
        assert torch.equal(skipped[1:, row, last, :dim], torch.zeros_like(skipped[1:, row, last, :dim]))
        assert torch.equal(skipped[1:, row, 0, dim:], torch.zeros_like(skipped[1:, row, 0, dim:]))
    assert torch.equal(skipped[0], full[0])


def test_token_cache_gives_encoder_vectors_and_evicts(fixture_dir):
    model = load_model(fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5")
    cache = TokenVectorCache(model, max_tokens=5)
    with torch.inference_mode():
        words = ["a", "b", "c", "d"]
        direct = model.encode_tokens(torch.as_tensor(batch_to_char_ids([words])))[0]
        assert_recomputed_close(cache.vectors(words), direct)
        assert len(cache) == 4
        assert_recomputed_close(
            cache.vectors(["e", "f", "a"]),
            model.encode_tokens(torch.as_tensor(batch_to_char_ids([["e", "f", "a"]])))[0],
        )
        assert len(cache) == 5 and "a" in cache._slots  # "a" was used last, so "b" went first
        assert "b" not in cache._slots
        too_many = [f"w{i}" for i in range(7)]  # more than the cache holds: encoded directly
        assert cache.vectors(too_many).shape == (7, 16)
        assert len(cache) == 5
        tokens, lengths = batch_token_vectors(cache, [["a", "b"], ["c"]])
        assert lengths.tolist() == [4, 3] and tokens.shape == (2, 4, 16)
        bos = model.encode_tokens(torch.as_tensor(model.bos_ids)[None])[0]
        assert_recomputed_close(tokens[1, 0], bos)
        assert_recomputed_close(tokens[0, 1], direct[0])


def test_backend_embed_matches_plain_forward(backend, fixture_sentences):
    """The backend's cached, fused path gives what BiLM.forward gives, sentence by sentence."""
    backend.clear_cache()
    out = backend.embed(fixture_sentences[:12], batch_size=5)
    with torch.inference_mode():
        for sentence, ours in zip(fixture_sentences[:12], out):
            acts, _, _ = backend.model(torch.as_tensor(batch_to_char_ids([sentence])))
            assert_recomputed_close(ours, acts[:, 0])


@pytest.mark.parametrize("dtype, tolerance", [pytest.param("float16", 2e-3, marks=needs_float16), ("bfloat16", 1e-2)])
def test_half_precision_within_documented_tolerance(fixture_dir, fixture_sentences, backend, dtype, tolerance):
    half = load_bilm(fixture_dir, precision=dtype)
    assert half is not backend and half.fingerprint != backend.fingerprint
    assert half is load_bilm(fixture_dir, precision=dtype)
    ours = half.embed(fixture_sentences[:6])
    exact = backend.embed(fixture_sentences[:6])
    assert all(a.dtype == np.float32 for a in ours)
    worst = max(float(np.abs(a - b).max()) for a, b in zip(ours, exact))
    scale = max(float(np.abs(b).max()) for b in exact)
    print(f"{dtype}: max abs diff {worst:.3g} (activations up to {scale:.3g})")
    assert 0 < worst < tolerance * scale  # README: relative to the largest activation
    with pytest.raises(ValueError, match="precision must be one of"):
        load_bilm(fixture_dir, precision="int4")  # int8 is a precision since 0.2.0


@pytest.mark.gpu
def test_cuda_embed_and_training_step(fixture_dir, fixture_sentences, backend):
    gpu = load_bilm(fixture_dir, device="cuda")
    assert gpu.device.type == "cuda"
    for a, b in zip(gpu.embed(fixture_sentences[:8]), backend.embed(fixture_sentences[:8])):
        np.testing.assert_allclose(a, b, atol=1e-5)  # float32 on both: sums in another order, never TF32
    model = load_model(fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5").cuda().train()
    acts, _, _ = model(torch.as_tensor(batch_to_char_ids(fixture_sentences[:4])).cuda())
    acts.sum().backward()
    assert all(p.grad is not None for p in model.lstm.parameters())
    half = load_bilm(fixture_dir, device="cuda", precision="float16")
    assert len(half.embed(fixture_sentences[:4])) == 4


def test_token_cache_splits_big_batches_over_two_threads(fixture_dir, monkeypatch):
    model = load_model(fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5")
    words = [f"w{i}x" * (i % 5 + 1) for i in range(150)]  # 150 new tokens: more than SPLIT_TOKENS
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with torch.inference_mode():
            ours = TokenVectorCache(model, max_tokens=1000).vectors(words)
            direct = model.encode_tokens(torch.as_tensor(batch_to_char_ids([words])))[0]
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)
    assert_recomputed_close(ours, direct)


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork")
def test_direction_pool_is_renewed_in_a_forked_child():
    """The pool's threads do not survive fork; the child must get a new pool, not hang on the old one."""
    import os

    assert threads_module.two_thread_pool().submit(sum, [1, 2]).result() == 3  # the pool exists in this process
    pid = os.fork()
    if pid == 0:  # child: plain Python work through the pool (torch's OpenMP is another matter)
        code = 1
        try:
            code = 0 if threads_module.two_thread_pool().submit(sum, [3, 4]).result(timeout=20) == 7 else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
