"""Vectors are identified per device only where devices give other vectors: bfloat16 / float16 on a GPU."""

import dataclasses
import warnings

import numpy as np
import pytest
import torch

from spacy_elmo.bilm.engine.precisions import VECTOR_PRECISIONS
from spacy_elmo.runtime.configuration.validation import vectors_precision
from spacy_elmo.sources.bundled_versions import precision_fingerprint
from tests.bilm.test_inference_path import needs_float16


@pytest.mark.parametrize(
    ("dtype", "device", "expected"),
    [
        ("float32", "cpu", "float32"),
        ("float32", "cuda:1", "float32"),  # CPU and GPU agree to float32 rounding: one cache entry serves both
        ("int8", "cpu", "int8"),
        ("bfloat16", "cpu", "bfloat16"),
        ("bfloat16", "cuda", "bfloat16-cuda"),
        ("float16", torch.device("cuda", 0), "float16-cuda"),
    ],
)
def test_the_vectors_precision_names_the_device_only_for_low_precision_on_a_gpu(dtype, device, expected):
    assert vectors_precision(dtype, device) == expected
    assert expected in VECTOR_PRECISIONS


def test_gpu_low_precision_vectors_never_share_a_cache_entry_with_the_cpus(backend):
    files = backend.files_fingerprint
    assert backend.fingerprint == precision_fingerprint(files, vectors_precision("float32", backend.device))
    keys = {
        precision_fingerprint(files, vectors_precision(d, dev))
        for d in ("bfloat16", "float16")
        for dev in ("cpu", "cuda")
    }
    assert len(keys) == 4 and files not in keys


@pytest.mark.gpu
def test_a_cuda_backend_keys_bfloat16_apart_and_float32_together(fixture_dir):
    from spacy_elmo import load_bilm

    assert load_bilm(fixture_dir, device="cuda").fingerprint == load_bilm(fixture_dir).fingerprint
    assert (
        load_bilm(fixture_dir, device="cuda", dtype="bfloat16").fingerprint
        != load_bilm(fixture_dir, dtype="bfloat16").fingerprint
    )


@needs_float16
def test_float16_that_overflows_is_refused_not_handed_out(tmp_path, fixture_sentences):
    """A model whose values pass float16's largest (65504) gives an error naming the fix, never inf / nan vectors."""
    from spacy_elmo import load_bilm
    from spacy_elmo.bilm import BiLM
    from spacy_elmo.bilm.weights import save_model
    from tests.bilm.test_inference_path import _options

    torch.manual_seed(0)
    model = BiLM(dataclasses.replace(_options(), cell_clip=None, proj_clip=None))
    with torch.no_grad():
        model.token_encoder.projection.weight.mul_(1e6)  # token vectors far beyond 65504
    folder = save_model(model, tmp_path / "loud")
    assert all(np.isfinite(a).all() for a in load_bilm(folder, cache_mb=0).embed(fixture_sentences[:3]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # float16 is emulated on most CPUs: the backend says so once per process
        backend = load_bilm(folder, dtype="float16", cache_mb=0)
    with pytest.raises(FloatingPointError, match=r"dtype='float16' overflowed .* no cell clip"):
        backend.embed(fixture_sentences[:3])
