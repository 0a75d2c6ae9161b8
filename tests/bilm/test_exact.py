"""Full float32 on CUDA whatever the process set: exact_float32 turns TF32 off for the package's own products and
puts the process's settings back (the settings can be read and written without a GPU, so this runs on CPU)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from spacy_elmo.bilm import exact
from spacy_elmo.bilm.exact import exact_float32


def _tf32_on() -> tuple[bool, bool]:
    matmul, conv = exact._SWITCH._read()
    return (matmul in ("tf32", True), conv in ("tf32", True))


def test_on_cuda_tf32_is_off_inside_and_the_process_setting_comes_back(tf32_allowed):
    assert _tf32_on() == (True, True)
    with exact_float32("cuda"):
        assert _tf32_on() == (False, False)
        with exact_float32(torch.device("cuda", 0)):  # re-entrant
            assert _tf32_on() == (False, False)
        assert _tf32_on() == (False, False)
    assert _tf32_on() == (True, True)
    assert torch.get_float32_matmul_precision() == "high"  # still readable: no legacy/new mix left behind


def test_cpu_work_changes_nothing_of_cudas_own_settings(tf32_allowed):
    with exact_float32("cpu"), exact_float32(None):
        if exact._MKLDNN_PER_BACKEND:  # torch 2.9+: oneDNN has settings of its own
            assert _tf32_on() == (True, True)
        else:  # older torch: one float32 matmul precision for every device, so CUDA's matmul follows while inside
            assert _tf32_on() == (False, True)
    assert _tf32_on() == (True, True)


def test_an_error_inside_still_puts_the_settings_back(tf32_allowed):
    with pytest.raises(RuntimeError), exact_float32("cuda"):
        raise RuntimeError("boom")
    assert _tf32_on() == (True, True)


def test_overlapping_threads_restore_only_when_the_last_leaves(tf32_allowed):
    inside, release = threading.Event(), threading.Event()

    def worker() -> None:
        with exact_float32("cuda"):
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=worker)
    thread.start()
    inside.wait(10)
    with exact_float32("cuda"):
        pass  # this caller leaves first: the worker is still inside
    assert _tf32_on() == (False, False)
    release.set()
    thread.join(10)
    assert _tf32_on() == (True, True)


def test_every_way_into_the_model_runs_under_the_guard(monkeypatch, backend, fixture_sentences):
    """run_token_encoder, bilstm_outputs and contextualize_vectors (inference and autograd paths) enter the guard with
    their tensors' device, so no product of the biLM runs outside it."""
    from spacy_elmo.bilm import model as model_module

    seen: list[str] = []
    real = model_module.exact_float32

    def recording(device):
        seen.append(torch.device(device).type)
        return real(device)

    monkeypatch.setattr(model_module, "exact_float32", recording)
    from spacy_elmo.bilm.chars import batch_to_char_ids

    bilm = backend.model
    ids = torch.from_numpy(batch_to_char_ids(fixture_sentences[:2]))
    with torch.inference_mode():
        bilm(ids)
    assert seen.count("cpu") >= 2  # the token encoder and the biLSTM
    seen.clear()
    with torch.enable_grad():
        from spacy_elmo.bilm.model import bilstm_outputs, run_token_encoder

        tokens = run_token_encoder(bilm.token_encoder, ids[0]).detach().requires_grad_(True)  # autograd from here on
        bilstm_outputs(bilm.lstm, tokens[None], torch.tensor([tokens.shape[0]]))
    assert seen.count("cpu") >= 2


@pytest.fixture
def cpu_reduced_precision_asked():
    """The process asked for reduced float32 precision on CPU (``set_float32_matmul_precision("medium")``: oneDNN
    may run float32 products in bf16); put back afterwards."""
    before = exact._CPU_SWITCH._read()
    torch.set_float32_matmul_precision("medium")
    if exact._MKLDNN_PER_BACKEND:
        torch.backends.mkldnn.conv.fp32_precision = "bf16"
    asked = exact._CPU_SWITCH._read()
    yield asked
    exact._CPU_SWITCH._put(before)
    torch.set_float32_matmul_precision("highest")


def test_on_cpu_onednn_runs_full_float32_inside_and_the_process_setting_comes_back(cpu_reduced_precision_asked):
    asked = cpu_reduced_precision_asked
    full = ("ieee", "ieee") if exact._MKLDNN_PER_BACKEND else ("highest",)
    assert asked != full
    with exact_float32("cpu"):
        assert exact._CPU_SWITCH._read() == full
        with exact_float32(torch.device("cpu")):  # re-entrant
            assert exact._CPU_SWITCH._read() == full
        assert exact._CPU_SWITCH._read() == full
    assert exact._CPU_SWITCH._read() == asked
    assert torch.get_float32_matmul_precision() == "medium"  # still readable: no legacy/new mix left behind


def test_a_process_asking_for_reduced_precision_gets_the_same_float32_vectors(
    fixture_dir, fixture_sentences, cpu_reduced_precision_asked
):
    """Bit for bit the vectors of a process that asked for nothing, through every engine's float32 products (the
    request would route the float32 products to oneDNN's bf16 mode, or at least through other kernels)."""
    from spacy_elmo import load_bilm

    backend = load_bilm(fixture_dir).configure_cache(cache_mb=0, token_cache_size=0)  # every call computes
    asked = cpu_reduced_precision_asked
    with_request = backend.embed(fixture_sentences)
    exact._CPU_SWITCH._put(("none", "none") if exact._MKLDNN_PER_BACKEND else ("highest",))
    torch.set_float32_matmul_precision("highest")
    default = backend.embed(fixture_sentences)
    assert all(np.array_equal(a, b) for a, b in zip(with_request, default))
    exact._CPU_SWITCH._put(asked)
