"""Feature probes hold on the torch versions pyproject.toml takes: the one helper (groundwork/probe.py) answers the
default whatever an older torch raises for a missing attribute, and every probe of the package is tested on both sides:
the older torch (the attribute missing, or raising as torch 2.1 does) and the newer one (the attribute there and
used). The CI's floor pass runs the same code on the oldest torch for real."""

import contextlib
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from spacy_elmo import load_bilm
from spacy_elmo.bilm import cpu_support, exact
from spacy_elmo.bilm.engine import mkl
from spacy_elmo.groundwork.probe import feature, has_feature
from spacy_elmo.runtime.configuration import validation
from spacy_elmo.train.network import language_model, packed_lstm

ROOT = Path(__file__).resolve().parents[2]


class Raising:
    """An object whose every unknown attribute raises ``error``, as older torch's objects do: torch 2.1-2.8's
    ``torch.backends.cuda.matmul`` an AssertionError, an older ``torch.ops`` namespace a RuntimeError."""

    def __init__(self, error: type[Exception], **present: object) -> None:
        self.__dict__.update(present)
        self._error = error

    def __getattr__(self, name: str) -> object:
        raise self._error(f"Unknown attribute {name}")


# -- the helper ----------------------------------------------------------------------------------------------------


def test_feature_follows_a_dotted_path():
    assert feature(torch, "cuda.OutOfMemoryError") is torch.cuda.OutOfMemoryError
    assert has_feature(torch, "backends.cpu") and has_feature(SimpleNamespace(a=SimpleNamespace(b=0)), "a.b")
    assert feature(SimpleNamespace(a=SimpleNamespace(b=None)), "a.b", "default") is None  # a value of None is found


@pytest.mark.parametrize("error", [AttributeError, AssertionError, RuntimeError, ImportError])
def test_a_missing_attribute_is_the_default_whatever_its_owner_raises(error):
    old = Raising(error, allow_tf32=False)
    assert feature(old, "fp32_precision", "old") == "old" and not has_feature(old, "fp32_precision")
    assert feature(SimpleNamespace(matmul=old), "matmul.fp32_precision.x") is None  # a step missing mid-path
    assert feature(old, "allow_tf32") is False


def test_a_missing_owner_is_the_default():
    assert feature(None, "is_available") is None and not has_feature(None, "is_available")


# -- exact.py: torch 2.9's per-backend fp32_precision settings -------------------------------------------------------


def _backends(**kinds: object) -> SimpleNamespace:
    return SimpleNamespace(**{k: SimpleNamespace(**v) if isinstance(v, dict) else v for k, v in kinds.items()})


def test_exact_takes_the_per_backend_settings_where_torch_has_them():
    precision = SimpleNamespace(fp32_precision="ieee")
    newer = _backends(
        cuda={"matmul": precision}, cudnn={"conv": precision}, mkldnn={"matmul": precision, "conv": precision}
    )
    assert exact.per_backend_settings(newer) == (True, True)
    expected = torch.__version__ >= "2.9"  # a TorchVersion compares with strings
    assert exact.per_backend_settings(torch.backends) == (expected, expected)


def test_exact_takes_the_global_flags_on_a_torch_whose_settings_raise_assertion_error(monkeypatch):
    """torch 2.1-2.8: ``torch.backends.cuda.matmul`` raises AssertionError for ``fp32_precision``; no oneDNN
    ``matmul`` settings at all."""
    older = _backends(
        cuda={"matmul": Raising(AssertionError, allow_tf32=False)},
        cudnn=SimpleNamespace(allow_tf32=True),
        mkldnn=SimpleNamespace(),
    )
    assert exact.per_backend_settings(older) == (False, False)


def test_exact_imports_on_torch_2_1():
    """The import itself (the probe runs at import): under a torch whose cuBLAS settings object raises
    AssertionError as torch 2.1's does, ``spacy_elmo.bilm.exact`` imports and takes the global flags."""
    code = (
        "import torch\n"
        "class Torch21Matmul:\n"
        "    allow_tf32 = False\n"
        "    def __getattr__(self, name):\n"
        "        raise AssertionError('Unknown attribute ' + name)\n"
        "torch.backends.cuda.matmul = Torch21Matmul()\n"
        "from spacy_elmo.bilm import exact\n"
        "print(exact._PER_BACKEND, exact._SWITCH.exact)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["False", "(False,", "False)"]


# -- runtime/configuration/validation.py: a device backend newer torch has (torch.xpu, torch.mtia) --------------------


def test_a_device_backend_this_torch_lacks_counts_no_device(monkeypatch):
    monkeypatch.delattr(torch, "xpu", raising=False)  # torch 2.1 has no torch.xpu
    assert validation._device_count("xpu") == 0


def test_a_device_backend_this_torch_has_counts_its_devices(monkeypatch):
    monkeypatch.setattr(torch, "xpu", SimpleNamespace(is_available=lambda: True, device_count=lambda: 3), raising=False)
    assert validation._device_count("xpu") == 3


# -- train/network/packed_lstm.py: torch.amp.is_autocast_available (torch 2.4+) ----------------------------------------


def test_without_is_autocast_available_cpu_and_cuda_have_autocast(monkeypatch):
    monkeypatch.delattr(torch.amp, "is_autocast_available", raising=False)
    assert isinstance(packed_lstm._without_autocast(torch.device("cpu")), torch.autocast)
    assert isinstance(packed_lstm._without_autocast(torch.device("meta")), contextlib.nullcontext)


def test_is_autocast_available_answers_where_torch_has_it(monkeypatch):
    asked = []
    monkeypatch.setattr(torch.amp, "is_autocast_available", lambda kind: asked.append(kind) or False, raising=False)
    assert isinstance(packed_lstm._without_autocast(torch.device("cpu")), contextlib.nullcontext)
    assert asked == ["cpu"]


# -- bilm/cpu_support.py: ATen's capability and oneDNN's native-precision queries -------------------------------------


def test_aten_capability_is_unknown_where_torch_cannot_say(monkeypatch):
    monkeypatch.delattr(torch.backends.cpu, "get_cpu_capability", raising=False)
    assert cpu_support.aten_capability() == "unknown"


def test_aten_capability_is_torchs_answer(monkeypatch):
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512", raising=False)
    assert cpu_support.aten_capability() == "AVX512"


def test_a_onednn_query_this_torch_lacks_is_false(monkeypatch):
    monkeypatch.setattr(torch.ops, "mkldnn", Raising(RuntimeError), raising=False)  # "No such operator"
    assert cpu_support._mkldnn_query("_is_mkldnn_bf16_supported") is False


def test_a_onednn_query_this_torch_has_is_asked(monkeypatch):
    monkeypatch.setattr(torch.ops, "mkldnn", SimpleNamespace(_is_mkldnn_bf16_supported=lambda: True), raising=False)
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: True)
    assert cpu_support._mkldnn_query("_is_mkldnn_bf16_supported") is True


# -- bilm/engine/mkl.py: MKL's packed GEMM operators ------------------------------------------------------------------


def test_mkl_packs_are_unavailable_where_torch_lacks_the_operators(monkeypatch):
    monkeypatch.setattr(torch.ops, "mkl", Raising(RuntimeError), raising=False)
    assert mkl.available() is False


def test_mkl_packs_are_available_where_torch_has_the_operators(monkeypatch):
    ops = SimpleNamespace(_mkl_linear=object(), _mkl_reorder_linear_weight=object())
    monkeypatch.setattr(torch.ops, "mkl", ops, raising=False)
    monkeypatch.setattr(torch.backends.mkl, "is_available", lambda: True)
    assert mkl.available() is True


# -- bilm/cpu_support.py and runtime/embedding/backend.py: float16 products on the CPU (none in torch 2.1) ------------


def test_float16_products_where_torch_lacks_them(monkeypatch):
    def torch_2_1_linear(*args):
        raise RuntimeError("\"addmm_impl_cpu_\" not implemented for 'Half'")

    monkeypatch.setattr(torch.nn.functional, "linear", torch_2_1_linear)
    assert cpu_support.float16_products.__wrapped__() is False


def test_float16_products_where_torch_has_them():
    half = torch.ones(2, 2, dtype=torch.float16)
    try:
        expected = bool(torch.nn.functional.linear(half, half).eq(2).all())
    except RuntimeError:
        expected = False
    assert cpu_support.float16_products.__wrapped__() is expected


def test_float16_on_a_cpu_without_float16_products_is_refused_in_one_line(fixture_dir, monkeypatch):
    monkeypatch.setattr(cpu_support, "float16_products", lambda: False)
    with pytest.raises(
        ValueError, match=r"precision='float16': this torch \(.+\) has no float16 products on the CPU"
    ) as err:
        load_bilm(fixture_dir, dtype="float16")
    assert "\n" not in str(err.value) and "'bfloat16'" in str(err.value)
    assert load_bilm(fixture_dir, dtype="bfloat16").dtype is torch.bfloat16  # the other precisions still load


def test_float16_on_a_cpu_with_float16_products_loads(fixture_dir, monkeypatch):
    monkeypatch.setattr(cpu_support, "float16_products", lambda: True)
    assert load_bilm(fixture_dir, dtype="float16").dtype is torch.float16


# -- train/network/language_model.py: autocast's state per device type (torch 2.4+) or per device (torch 2.1-2.3) ------


def test_autocast_dtype_on_this_torch():
    assert language_model.autocast_dtype("cpu") is None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert language_model.autocast_dtype("cpu") is torch.bfloat16
        assert language_model.autocast_dtype("cuda") is None


def test_autocast_dtype_on_a_torch_without_per_device_type_functions(monkeypatch):
    """torch 2.1-2.3: no ``get_autocast_dtype``; ``is_autocast_enabled()`` takes no argument (it means CUDA)."""
    monkeypatch.delattr(torch, "get_autocast_dtype", raising=False)
    monkeypatch.setattr(torch, "is_autocast_enabled", lambda: False)
    monkeypatch.setattr(torch, "is_autocast_cpu_enabled", lambda: True, raising=False)
    monkeypatch.setattr(torch, "get_autocast_cpu_dtype", lambda: torch.bfloat16, raising=False)
    assert language_model.autocast_dtype("cpu") is torch.bfloat16 and language_model.autocast_dtype("cuda") is None


def test_autocast_dtype_on_a_torch_with_per_device_type_functions(monkeypatch):
    """torch 2.4+: ``is_autocast_enabled(kind)`` and ``get_autocast_dtype(kind)``."""
    monkeypatch.setattr(torch, "is_autocast_enabled", lambda kind: kind == "cuda")
    monkeypatch.setattr(torch, "get_autocast_dtype", lambda kind: torch.float16, raising=False)
    assert language_model.autocast_dtype("cuda") is torch.float16 and language_model.autocast_dtype("cpu") is None
