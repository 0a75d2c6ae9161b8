"""The spaCy front end under thinc's ops: ElmoScalarMix, ElmoFineTune and the elmo component with the arrays of
the model's ops (CuPy's under ``spacy.require_gpu()``), never a numpy array mixed in, and the same numbers.

On the CPU, ``device_ops.DeviceOps`` stands in for CupyOps (its arrays refuse numpy ones, as CuPy's do); the tests
marked ``gpu`` run the same checks under thinc's real CupyOps on a CUDA device, against NumpyOps on the CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

import numpy as np
import pytest

pytest.importorskip("spacy", reason="spaCy is not installed (pip install spacy)")

import spacy
import torch
from spacy.util import registry
from thinc.api import use_ops

from spacy_elmo.spacy.architectures import component_device
from tests.device_ops import DeviceArray, MixedArraysError, device_ops
from tests.spacy.test_spacy_fine_tune import TEXTS, fine_tune_node, textcat_nlp

OpsContext = Callable[[], AbstractContextManager]
DOCS = [text for text, _ in TEXTS]  # a whitespace token among them (its row stays zero)
GPU_TOLERANCE = 1e-5  # of each array's largest magnitude: float32 summed in another order, never TF32's 1e-3


def numpy_ops() -> AbstractContextManager:
    return use_ops("numpy")


def run_fine_tune(fixture_dir, ops: OpsContext, **elmo: object) -> dict[str, list[np.ndarray]]:
    """ElmoFineTune ("top" trainable) built, initialized, run forward and backward under ``ops``: its outputs, the
    gradients of its trained arrays and of its mix, and the arrays themselves, as they are (the ops' type)."""
    with ops():
        nlp = textcat_nlp(fixture_dir, "top", **elmo)
        nlp.get_pipe("elmo").find_listeners(nlp.get_pipe("textcat"))  # what nlp.initialize links first
        node = fine_tune_node(nlp)
        docs = [nlp.make_doc(text) for text in DOCS]
        node.initialize(X=docs)
        outputs, backprop = node.begin_update(docs)
        rng = np.random.default_rng(0)
        backprop([node.ops.asarray2f(rng.normal(size=y.shape).astype(np.float32)) for y in outputs])
        mix = node.layers[0]
        return {
            "outputs": list(outputs),
            "predicted": list(node.predict(docs)),
            "params": [node.get_param(name) for name in sorted(node.param_names)],
            "grads": [node.get_grad(name) for name in sorted(node.param_names)] + [mix.get_grad("s")],
            "mix grads": [mix.get_grad("gamma")],
        }


def run_scalar_mix(fixture_dir, ops: OpsContext, **options: object) -> dict[str, list[np.ndarray]]:
    """ElmoScalarMix.v2 under ``ops``, linked to an elmo component: docs the component annotated and bare docs (it
    embeds those itself), forward and backward."""
    nlp = spacy.blank("en")
    elmo = nlp.add_pipe("elmo", config={"model": str(fixture_dir)})
    annotated = list(nlp.pipe(DOCS))
    bare = [nlp.make_doc(text) for text in DOCS]
    with ops():
        mix = registry.architectures.get("spacy_elmo.ElmoScalarMix.v2")(dropout=0.0, **options)
        elmo.add_listener(mix, "textcat")
        mix.initialize(X=annotated)
        mix.set_param("s", mix.ops.asarray1f([0.3, -1.0, 2.0]))
        outputs, backprop = mix.begin_update(annotated)
        rng = np.random.default_rng(0)
        backprop([mix.ops.asarray2f(rng.normal(size=y.shape).astype(np.float32)) for y in outputs])
        return {
            "outputs": list(outputs),
            "predicted": list(mix.predict(bare)),
            "params": [mix.get_param("s"), mix.get_param("gamma")],
            "grads": [mix.get_grad(name) for name in ("s", "gamma") if mix.has_grad(name)],
        }


def assert_same_numbers(got: dict, want: dict, to_numpy: Callable, tolerance: float) -> None:
    """Every array of ``got`` equals ``want``'s within ``tolerance`` of that array's largest magnitude."""
    assert got.keys() == want.keys()
    for key in want:
        assert len(got[key]) == len(want[key]), key
        for a, b in zip(got[key], want[key]):
            a, b = to_numpy(a), np.asarray(b)
            assert a.shape == b.shape, key
            np.testing.assert_allclose(a, b, rtol=0, atol=tolerance * float(np.abs(b).max(initial=1e-30)), err_msg=key)


def assert_all_of_the_ops(arrays: dict, array_type: type) -> None:
    for key, values in arrays.items():
        for value in values:
            assert isinstance(value, array_type), f"{key}: a {type(value).__name__}, not the ops' {array_type.__name__}"


# -- on the CPU: DeviceOps, whose arrays refuse numpy's as CuPy's do ----------------------------------------------


def test_device_ops_refuse_what_cupy_refuses():
    """The stand-in is strict where it must be (else the tests below could not fail) and lets the rest through."""
    with device_ops() as ops:
        a = ops.alloc2f(2, 3)
        with pytest.raises(MixedArraysError):
            a[0] = np.ones(3, dtype=np.float32)
        with pytest.raises(MixedArraysError):
            a + np.ones(3, dtype=np.float32)
        with pytest.raises(MixedArraysError):
            np.tensordot(np.ones(2, dtype=np.float32), a, axes=(0, 0))
        a[:, np.array([0, 2])] = ops.asarray2f([[1.0, 2.0], [3.0, 4.0]])  # numpy indices pass, as in CuPy
        assert isinstance(a * 2 + ops.xp.zeros_like(a), DeviceArray)
        assert type(ops.to_numpy(a)) is np.ndarray and ops.to_numpy(a)[1, 2] == 4.0


def test_fine_tune_keeps_to_the_ops_arrays(fixture_dir):
    """ElmoFineTune under ops other than numpy's: its params, outputs and gradients are the ops' arrays (a biLM on the
    CPU under CupyOps gave numpy arrays that CuPy refuses), with the numbers NumpyOps gives."""
    got = run_fine_tune(fixture_dir, device_ops)
    assert_all_of_the_ops(got, DeviceArray)
    want = run_fine_tune(fixture_dir, numpy_ops)
    assert_same_numbers(got, want, np.asarray, tolerance=0.0)  # the same kernels on the same CPU: the same bits


def test_fine_tune_with_windows_keeps_to_the_ops_arrays(fixture_dir):
    got = run_fine_tune(fixture_dir, device_ops, max_length=4, window_overlap=2)
    assert_all_of_the_ops(got, DeviceArray)
    assert_same_numbers(got, run_fine_tune(fixture_dir, numpy_ops, max_length=4, window_overlap=2), np.asarray, 0.0)


@pytest.mark.parametrize("options", [{}, {"do_layer_norm": True}, {"layers": "top"}], ids=["mix", "norm", "top"])
def test_scalar_mix_keeps_to_the_ops_arrays(fixture_dir, options):
    got = run_scalar_mix(fixture_dir, device_ops, **options)
    assert_all_of_the_ops(got, DeviceArray)
    assert_same_numbers(got, run_scalar_mix(fixture_dir, numpy_ops, **options), np.asarray, 0.0)


# -- the elmo component's device: None follows thinc's ops ---------------------------------------------------------


def test_device_none_follows_thinc_ops(monkeypatch):
    """None is the CPU under numpy's ops, and the GPU thinc would hand torch under CupyOps (``require_gpu(1)`` makes
    device 1 current for CuPy and torch alike); a device that is set stays."""
    assert component_device(None) is None
    assert component_device("cpu") == "cpu"
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)  # what require_gpu(1) leaves torch with
    with use_ops("cupy"):
        assert component_device(None) == "cuda:1"
        assert component_device("cpu") == "cpu"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error a machine without CUDA gives")
def test_under_cupy_ops_without_cuda_the_component_says_so(fixture_dir):
    """Under CupyOps the component no longer loads its biLM on the CPU behind the user's back: with no CUDA device
    for torch, it says so and how to choose the CPU."""
    nlp = spacy.blank("en")
    elmo = nlp.add_pipe("elmo", config={"model": str(fixture_dir)})
    with use_ops("cupy"), pytest.raises(ValueError, match=r"CupyOps .* torch sees no CUDA device.*device = \"cpu\""):
        elmo.backend
    nlp = spacy.blank("en")
    elmo = nlp.add_pipe("elmo", config={"model": str(fixture_dir), "device": "cpu"})
    with use_ops("cupy"):
        assert elmo.backend.device == torch.device("cpu")


# -- on a GPU: thinc's CupyOps against NumpyOps on the CPU ---------------------------------------------------------


def cupy_to_numpy(array) -> np.ndarray:
    return array.get() if hasattr(array, "get") else np.asarray(array)


@pytest.fixture
def cupy():
    cupy = pytest.importorskip("cupy", reason="thinc's CupyOps need CuPy")
    return cupy


@pytest.mark.gpu
@pytest.mark.parametrize(
    "ops_name, device",
    [("cupy", None), ("cupy", "cpu"), ("numpy", "cuda:0")],
    ids=["cupy-ops-biLM-follows", "cupy-ops-biLM-on-cpu", "numpy-ops-biLM-on-cuda"],
)
def test_fine_tune_on_the_gpu_equals_the_cpu(fixture_dir, cupy, ops_name, device):
    """Whichever of the ops and the biLM is on the GPU, the layer's arrays are the ops' and its numbers the CPU's."""
    got = run_fine_tune(fixture_dir, lambda: use_ops(ops_name), device=device)
    assert_all_of_the_ops(got, cupy.ndarray if ops_name == "cupy" else np.ndarray)
    assert_same_numbers(got, run_fine_tune(fixture_dir, numpy_ops, device="cpu"), cupy_to_numpy, GPU_TOLERANCE)


@pytest.mark.gpu
@pytest.mark.parametrize("options", [{}, {"do_layer_norm": True}], ids=["mix", "norm"])
def test_scalar_mix_on_the_gpu_equals_the_cpu(fixture_dir, cupy, options):
    got = run_scalar_mix(fixture_dir, lambda: use_ops("cupy"), **options)
    assert_all_of_the_ops(got, cupy.ndarray)
    assert_same_numbers(got, run_scalar_mix(fixture_dir, numpy_ops, **options), cupy_to_numpy, GPU_TOLERANCE)


@pytest.mark.gpu
def test_component_under_require_gpu_embeds_on_the_gpu_as_on_the_cpu(fixture_dir, cupy):
    """``spacy.require_gpu()`` (as ``spacy train --gpu-id 0``): device None puts the biLM on that GPU, and the layers
    equal the CPU's."""
    cpu = spacy.blank("en")
    cpu.add_pipe("elmo", config={"model": str(fixture_dir), "device": "cpu"})
    want = [doc._.elmo_layers for doc in cpu.pipe(DOCS)]
    try:
        spacy.require_gpu(0)
        nlp = spacy.blank("en")
        elmo = nlp.add_pipe("elmo", config={"model": str(fixture_dir)})
        got = [doc._.elmo_layers for doc in nlp.pipe(DOCS)]
        assert elmo.backend.device == torch.device("cuda", 0)
    finally:
        spacy.require_cpu()
    assert_same_numbers({"layers": got}, {"layers": want}, np.asarray, GPU_TOLERANCE)
