"""DeviceOps: thinc ops whose arrays are not numpy's, on the CPU, so code that mixes them with numpy is caught.

Under ``CupyOps`` (``spacy.require_gpu()``, ``spacy train --gpu-id 0``) a layer's arrays are CuPy arrays, and
CuPy refuses to combine them with numpy arrays. A machine without a GPU cannot run CupyOps, so these ops stand
in for them: every array they make (``alloc*``, ``asarray*``, ``xp.*``) is a :class:`DeviceArray`, an ndarray
subclass that, as CuPy does, refuses a plain numpy array in an operation, as a value assigned into it, or in a
numpy function. Code that builds an array with bare ``numpy`` (or with ``torch2xp`` without ``ops=``, which
gives numpy for a tensor on the CPU) where the ops' array type is needed fails here as it would on a GPU.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from thinc.api import NumpyOps, get_current_ops, set_current_ops


class MixedArraysError(TypeError):
    """A host numpy array met an array of the ops (CuPy raises a TypeError here too)."""


def _is_host(value: Any) -> bool:
    """A numpy array of floats: data. Integer and boolean ones pass, as CuPy takes them as indices (split points,
    positions)."""
    return isinstance(value, np.ndarray) and not isinstance(value, DeviceArray) and value.dtype.kind in "fc"


def _refuse_host(values: Any, what: str) -> None:
    for value in values:
        if isinstance(value, (list, tuple)):
            _refuse_host(value, what)
        elif _is_host(value):
            raise MixedArraysError(
                f"{what}: a numpy array (shape {value.shape}) mixed with the ops' arrays; make it with model.ops"
            )


def _plain(value: Any) -> Any:
    if isinstance(value, DeviceArray):
        return value.view(np.ndarray)
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    return value


def to_device(value: Any) -> Any:
    """``value`` with every ndarray in it as a DeviceArray (what the ops hand out)."""
    if isinstance(value, np.ndarray) and not isinstance(value, DeviceArray):
        return value.view(DeviceArray)
    if isinstance(value, (list, tuple)):
        return type(value)(to_device(v) for v in value)
    return value


class DeviceArray(np.ndarray):
    """An array of :class:`DeviceOps`: numpy's values, CuPy's refusal to mix with numpy arrays."""

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, out: Any = None, **kwargs: Any) -> Any:
        _refuse_host(inputs, f"numpy.{ufunc.__name__}")
        if out is not None:
            _refuse_host(out, f"numpy.{ufunc.__name__}(out=...)")
            kwargs["out"] = _plain(out)
        return to_device(getattr(ufunc, method)(*_plain(inputs), **kwargs))

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        _refuse_host(args, f"numpy.{func.__name__}")
        _refuse_host(kwargs.values(), f"numpy.{func.__name__}")
        return to_device(func(*_plain(args), **{k: _plain(v) for k, v in kwargs.items()}))

    def __setitem__(self, key: Any, value: Any) -> None:
        _refuse_host([value], "assignment into an array of the ops")
        super().__setitem__(key, _plain(value))


class _DeviceNumpy:
    """``ops.xp``: numpy, whose functions hand out DeviceArrays (as ``cupy.zeros`` hands out CuPy arrays)."""

    def __getattr__(self, name: str) -> Any:
        value = getattr(np, name)
        if not callable(value) or isinstance(value, type):
            return value  # dtypes, classes (ndarray, float32), submodules, constants

        def device_function(*args: Any, **kwargs: Any) -> Any:
            return to_device(value(*args, **kwargs))

        return device_function


class DeviceOps(NumpyOps):
    """Thinc's NumpyOps with :class:`DeviceArray` arrays: a stand-in for CupyOps on a machine without a GPU."""

    name = "device"
    xp = _DeviceNumpy()

    def asarray(self, data: Any, dtype: Any = None) -> Any:
        return to_device(super().asarray(_plain(data), dtype=dtype))

    def alloc(self, shape: Any, *, dtype: Any = "float32", zeros: bool = True) -> Any:
        return to_device(np.zeros(shape, dtype=dtype) if zeros else np.empty(shape, dtype=dtype))

    def to_numpy(self, data: Any, *, byte_order: Any = None) -> np.ndarray:
        return np.array(_plain(data), dtype=np.dtype(data.dtype).newbyteorder(byte_order) if byte_order else None)


def _device_method(method: Any) -> Any:
    def on_device(self: DeviceOps, *args: Any, **kwargs: Any) -> Any:
        return to_device(method(self, *args, **kwargs))

    return on_device


# Thinc's own kernels (gemm, maxout, reductions...) hand out DeviceArrays too: they are CupyOps' on a GPU, correct
# there; only the code under test is meant to meet the refusal.
for _name in dir(NumpyOps):
    if not _name.startswith("_") and _name not in DeviceOps.__dict__ and callable(getattr(NumpyOps, _name)):
        setattr(DeviceOps, _name, _device_method(getattr(NumpyOps, _name)))


@contextmanager
def device_ops() -> Iterator[DeviceOps]:
    """Thinc's current ops are :class:`DeviceOps` inside the block (models built there use them)."""
    before = get_current_ops()
    ops = DeviceOps()
    set_current_ops(ops)
    try:
        yield ops
    finally:
        set_current_ops(before)
