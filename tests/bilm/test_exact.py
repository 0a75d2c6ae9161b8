"""Full float32 on CUDA whatever the process set: exact_float32 turns TF32 off for the package's own products and
puts the process's settings back (the settings can be read and written without a GPU, so this runs on CPU)."""

from __future__ import annotations

import threading

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


def test_cpu_work_changes_nothing(tf32_allowed):
    with exact_float32("cpu"), exact_float32(None):
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
