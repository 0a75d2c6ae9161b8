"""The biLM on a CUDA device (marker ``gpu``: skipped without one): float32 as exact as the CPU's whatever the
process set for TF32, bfloat16 / float16 within the documented bounds, and the reference (autograd) path too.

"Within 1e-5" is of each layer's largest activation: float32 sums in another order, never TF32's 1e-3.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spacy_elmo import load_bilm
from spacy_elmo.bilm import BiLM
from spacy_elmo.bilm.chars import batch_to_char_ids
from spacy_elmo.bilm.weights import load_model, save_model
from spacy_elmo.train import build_options
from tests.bilm.test_precision import ORDINARY, TOLERANCE, TRAINED_TEXT_TOLERANCE, layer_errors, sentence_errors

pytestmark = pytest.mark.gpu
FLOAT32_ON_CUDA = 1e-5


def _original_size_random(tmp_path_factory):
    """Random weights of the published "original" model's shapes (4096 cells, 512 projection, 2048 filters)."""
    folder = tmp_path_factory.mktemp("original-size")
    torch.manual_seed(0)
    model = BiLM(build_options("original"))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.05)
    return save_model(model, folder)


@pytest.fixture(scope="module")
def original_size(tmp_path_factory):
    return _original_size_random(tmp_path_factory)


def test_float32_on_cuda_matches_the_cpu_even_when_the_tf32_allowed(
    fixture_dir, fixture_sentences, backend, tf32_allowed
):
    gpu = load_bilm(fixture_dir, device="cuda", cache_mb=0)
    assert gpu.device.type == "cuda"
    assert (layer_errors(gpu.embed(fixture_sentences), backend.embed(fixture_sentences)) < FLOAT32_ON_CUDA).all()
    assert torch.get_float32_matmul_precision() == "high"  # the process's setting, put back


def test_the_reference_path_on_cuda_matches_the_cpu_forward_and_backward(fixture_dir, fixture_sentences, tf32_allowed):
    """Training and fine-tuning use the autograd path (the char CNN as a cuDNN convolution): no TF32 there either."""
    ids = torch.as_tensor(batch_to_char_ids(fixture_sentences[:4]))
    results = []
    for device in ("cpu", "cuda"):
        model = load_model(fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5").to(device).train()
        acts, _, _ = model(ids.to(device))
        acts.sum().backward()
        grads = [p.grad.detach().cpu() for p in model.token_encoder.parameters() if p.grad is not None]
        results.append((acts.detach().cpu().numpy(), grads))
    (cpu_acts, cpu_grads), (gpu_acts, gpu_grads) = results
    assert np.abs(gpu_acts - cpu_acts).max() < FLOAT32_ON_CUDA * np.abs(cpu_acts).max()
    assert len(cpu_grads) == len(gpu_grads) > 0
    for a, b in zip(gpu_grads, cpu_grads):  # sums of many more terms than an activation: 1e-4 of the largest
        assert (a - b).abs().max() <= 1e-4 * b.abs().max()


def test_float32_on_cuda_matches_the_cpu_with_original_size_weights(original_size, fixture_sentences):
    sentences = fixture_sentences[:6]
    cpu = load_bilm(original_size, cache_mb=0).embed(sentences)
    gpu = load_bilm(original_size, device="cuda", cache_mb=0).embed(sentences)
    assert (layer_errors(gpu, cpu) < FLOAT32_ON_CUDA).all()


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_low_precision_on_cuda_within_the_documented_bound(fixture_dir, fixture_sentences, backend, dtype):
    low = load_bilm(fixture_dir, device="cuda", precision=dtype, cache_mb=0)
    errors = layer_errors(low.embed(fixture_sentences), backend.embed(fixture_sentences))
    print(dtype, errors)
    assert (errors > 0).all() and (errors < TOLERANCE[dtype]).all()


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_low_precision_on_cuda_on_the_trained_model(dtype):
    """The bundled trained model (no cell clip) on ordinary sentences: the bound docs/precision.md states."""
    sentences = [s.split() for s in ORDINARY]
    exact_vectors = load_bilm("default", cache_mb=0).embed(sentences)
    low = load_bilm("default", device="cuda", precision=dtype, cache_mb=0).embed(sentences)
    assert all(np.isfinite(v).all() for v in low)
    errors = sentence_errors(low, exact_vectors)
    print(dtype, f"median {np.median(errors):.4f} max {errors.max():.4f}")
    assert errors.max() < TRAINED_TEXT_TOLERANCE["bfloat16"]
