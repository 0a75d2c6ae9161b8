import pickle
import shutil
import threading

import numpy as np
import pytest
import torch

import spacy_elmo
import spacy_elmo.sources.model_paths
from spacy_elmo import WeightFileError, load_bilm
from tests.numerics import assert_recomputed_close


def test_same_object_for_same_files_and_device(fixture_dir, backend):
    assert load_bilm(fixture_dir) is backend
    assert load_bilm(str(fixture_dir), device="cpu") is backend
    assert load_bilm(options=fixture_dir / "options.json", weights=fixture_dir / "lm_weights.hdf5") is backend
    assert pickle.loads(pickle.dumps(backend)) is backend


def test_concurrent_loads_share_one_backend(fixture_dir, tmp_path):
    shutil.copytree(fixture_dir, tmp_path / "m")  # a fresh path, so nothing is cached yet
    results = []
    threads = [threading.Thread(target=lambda: results.append(load_bilm(tmp_path / "m"))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4 and all(r is results[0] for r in results)


def test_attributes_and_fingerprint(fixture_dir, backend, tmp_path):
    assert (backend.n_layers, backend.dim) == (2, 32)
    shutil.copytree(fixture_dir, tmp_path / "copy")
    copy = load_bilm(tmp_path / "copy")
    assert copy is not backend and copy.fingerprint == backend.fingerprint
    import h5py

    with h5py.File(tmp_path / "copy" / "lm_weights.hdf5", "a") as f:
        f["CNN_proj/b_proj"][0] += 1.0
    changed = load_bilm(tmp_path / "copy")  # rewritten file: not the stale cached backend
    assert changed is not copy and changed.fingerprint != backend.fingerprint


def test_embed_shapes_order_and_empty(backend, fixture_sentences):
    sentences = [fixture_sentences[3], [], fixture_sentences[0], ["one"]]
    out = backend.embed(sentences)
    assert [a.shape for a in out] == [(3, len(s), 32) for s in sentences]
    assert all(a.dtype == np.float32 for a in out)
    alone = backend.embed([fixture_sentences[0]])[0]
    assert_recomputed_close(out[2], alone)
    assert backend.embed([]) == []


def test_batch_invariance(backend, fixture_sentences):
    """A sentence's vectors do not depend on its batch, padding, or earlier calls."""
    sentences = fixture_sentences * 3  # 90 sentences, 3..53 tokens
    backend.clear_cache()  # compute every pass afresh, not from the embedding caches
    one_at_a_time = [backend.embed([s])[0] for s in sentences]
    backend.clear_cache()
    batched = backend.embed(sentences[:30], batch_size=64)
    worst = max(float(np.abs(a - b).max()) for a, b in zip(one_at_a_time, batched))
    print(f"batch-invariance max abs diff: {worst:.3g}")
    for a, b in zip(one_at_a_time, batched):
        assert_recomputed_close(b, a)
    backend.clear_cache()
    again = backend.embed(list(reversed(sentences[:30])), batch_size=7)[::-1]
    for a, b in zip(again, batched):
        assert_recomputed_close(a, b)


def test_token_budget_splits_long_batches(backend, fixture_sentences):
    budget = backend.token_budget
    try:
        backend.token_budget = 60
        backend.clear_cache()
        small = backend.embed(fixture_sentences[:10])
    finally:
        backend.token_budget = budget
    full = backend.embed(fixture_sentences[:10])
    for a, b in zip(small, full):
        assert_recomputed_close(a, b)


def test_bad_input_names_sentence_and_token(backend):
    with pytest.raises(TypeError, match="sentence 1, token 2: expected str, got int"):
        backend.embed([["a"], ["b", "c", 3]])
    with pytest.raises(TypeError, match="sentence 0 is a str"):
        backend.embed(["not tokenized"])
    with pytest.raises(TypeError, match="iterable of token sequences"):
        backend.embed(42)
    with pytest.raises(TypeError, match="sentence 1 is a NoneType"):
        backend.embed([["a"], None])
    with pytest.raises(ValueError, match="batch_size"):
        backend.embed([["a"]], batch_size=0)


def test_model_resolution_errors(tmp_path, fixture_dir):
    with pytest.raises(WeightFileError, match="not found"):
        load_bilm(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(WeightFileError, match=r"no options\.json"):
        load_bilm(tmp_path / "empty")
    (tmp_path / "two").mkdir()
    shutil.copy(fixture_dir / "options.json", tmp_path / "two")
    for name in ("a.hdf5", "b.hdf5"):
        shutil.copy(fixture_dir / "lm_weights.hdf5", tmp_path / "two" / name)
    with pytest.raises(WeightFileError, match=r"several \.hdf5 files"):
        load_bilm(tmp_path / "two")
    with pytest.raises(ValueError, match=r"CUDA is not available|cuda"):
        if not __import__("torch").cuda.is_available():
            load_bilm(fixture_dir, device="cuda")
        else:
            raise ValueError("cuda present: nothing to check")


def test_default_model_missing_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(spacy_elmo.sources.model_paths, "DEFAULT_MODEL_DIR", tmp_path / "nothing")
    with pytest.raises(WeightFileError, match="bundled default ELMo model"):
        load_bilm()


def test_out_of_memory_retries_in_halves(backend, fixture_sentences, monkeypatch):
    sentences = fixture_sentences[:16]
    backend.clear_cache()
    expected = backend.embed(sentences, batch_size=16)
    real = backend.model.contextualize_vectors
    rows = []

    def tight_memory(tokens, lengths, initial_state=None, **kw):
        rows.append(tokens.shape[0])
        if tokens.shape[0] > 3:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(tokens, lengths, initial_state, **kw)

    monkeypatch.setattr(backend.model, "contextualize_vectors", tight_memory)
    monkeypatch.setattr(backend, "_warned_oom", False)
    backend.clear_cache()
    with pytest.warns(ResourceWarning, match="retrying in halves"):
        got = backend.embed(sentences, batch_size=16)
    assert rows[0] == 16 and max(r for r in rows[1:] if r <= 3) <= 3
    for a, b in zip(got, expected):
        assert_recomputed_close(a, b)

    def no_memory(tokens, lengths, initial_state=None, **kw):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory")

    monkeypatch.setattr(backend.model, "contextualize_vectors", no_memory)
    backend.clear_cache()
    with pytest.raises(MemoryError, match="one sentence of 5 tokens"):
        backend.embed([["a", "b", "c", "d", "e"]])

    def other_error(tokens, lengths, initial_state=None, **kw):
        raise RuntimeError("shape mismatch")

    monkeypatch.setattr(backend.model, "contextualize_vectors", other_error)
    with pytest.raises(RuntimeError, match="shape mismatch"):
        backend.embed([["x", "y"]])


def test_on_progress_counts_cached_then_each_batch(fixture_dir, tmp_path, fixture_sentences):
    shutil.copytree(fixture_dir, tmp_path / "m")  # a backend of its own, with an empty cache
    backend = load_bilm(tmp_path / "m")
    backend.embed(fixture_sentences[:3])  # now in the memory cache
    steps = []
    out = backend.embed(fixture_sentences[:10], batch_size=3, on_progress=steps.append)
    assert len(out) == 10 and steps[0] == 3 and sum(steps) == 10 and len(steps) == 1 + 3  # 7 new: batches of 3, 3, 1
