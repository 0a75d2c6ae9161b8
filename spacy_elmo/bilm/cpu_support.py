"""What this CPU and this torch build run natively, probed once per process: facts the engines ask, never a choice.

A probe, not a chooser: which kernel library serves which product is each engine family's choice, in its own file
(:mod:`.engine`: the int8 kernel of each role in ``engine/int8.py``, float32's oneDNN or MKL in
``engine/onednn.py``), and what each precision needs natively is a row of the precision table
(:mod:`.engine.precisions`). What is reported here is what this CPU and this torch have:

- the CPU's vendor and feature flags (:func:`cpu_vendor`, :func:`cpu_flags`, :func:`isa_flags`, with any
  environment variable that caps the kernels below them), ATen's vector ISA (:func:`aten_capability`) and whether
  ATen has vector kernels at all (:func:`vector_kernels`: int8's native probe: fbgemm needs at least AVX2);
  whether oneDNN may use AMX int8 tiles (:func:`amx_int8`).
- **bfloat16** products have native oneDNN kernels with AVX-512 (BW/VL/DQ), AVX-512 BF16, AMX or
  AVX-NE-CONVERT; elsewhere torch falls back to scalar bf16 arithmetic, far slower than float32
  (benchmarks/RESULTS.md). oneDNN's own answer (``torch.ops.mkldnn._is_mkldnn_bf16_supported``, which follows
  ``ONEDNN_MAX_CPU_ISA``) decides (:func:`bf16_native`).
- **float16** on CPU is native only with AVX-512 FP16 / AMX-FP16 (:func:`fp16_native`); torch 2.1's CPU has no
  float16 matrix product at all (:func:`float16_products`).

:class:`SlowPrecisionWarning` is what a precision without native kernels here warns with (once per process:
:func:`.engine.registry.warn_if_slow`); :func:`facts` is this module's part of what ``spacy-elmo info`` and the
logs show. Measured speed and error per CPU family: docs/precision.md and ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import functools
import os
import platform
from pathlib import Path
from typing import Optional

import torch

from ..groundwork.probe import feature


class SlowPrecisionWarning(RuntimeWarning):
    """A requested precision has no native kernels on this CPU: it runs correctly but emulated, slower than float32."""


@functools.cache
def _cpuinfo_field(*keys: str) -> Optional[str]:
    """The value of the first ``/proc/cpuinfo`` line starting with one of ``keys`` (Linux); None elsewhere."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return None
    return next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith(keys)), None)


@functools.cache
def cpu_vendor() -> str:
    """The CPU's vendor string (``"AuthenticAMD"``, ``"GenuineIntel"``), from ``/proc/cpuinfo`` on Linux or
    ``platform.processor()`` elsewhere (Windows names it there); ``""`` where neither says."""
    reported = _cpuinfo_field("vendor_id")
    if reported is not None:
        return reported
    described = platform.processor()
    return next((vendor for vendor in ("AuthenticAMD", "GenuineIntel") if vendor in described), "")


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as Linux reports them (``/proc/cpuinfo``); empty elsewhere. For messages and reports."""
    return frozenset((_cpuinfo_field("flags", "Features") or "").split())


# environment variables that cap the kernels' instruction sets below what the CPU has (CI's second pass sets them)
ISA_CAPS = (
    "ATEN_CPU_CAPABILITY",
    "ONEDNN_MAX_CPU_ISA",
    "DNNL_MAX_CPU_ISA",
    "FBGEMM_ENABLE_INSTRUCTIONS",
    "MKL_ENABLE_INSTRUCTIONS",
)


def isa_flags() -> str:
    """The flags that decide the precision kernels, e.g. ``"avx2 fma avx512f avx512_vnni avx512_bf16 amx_int8"``,
    and any environment variable that caps the kernels below them."""
    wanted = (
        "avx2",
        "fma",
        "avx512f",
        "avx512bw",
        "avx512_vnni",
        "avx_vnni",
        "avx512_bf16",
        "avx512_fp16",
        "amx_int8",
        "amx_bf16",
        "amx_fp16",
        "avx_ne_convert",
        "asimd",
        "sve",
        "bf16",
        "i8mm",
    )
    flags = cpu_flags()
    text = " ".join(f for f in wanted if f in flags) or platform.machine()
    caps = [f"{name}={os.environ[name]}" for name in ISA_CAPS if os.environ.get(name)]
    return f"{text}; capped by {' '.join(caps)}" if caps else text


def aten_capability() -> str:
    """ATen's vector ISA in use (``"AVX512"``, ``"AVX2"``, ``"DEFAULT"``...; follows ``ATEN_CPU_CAPABILITY``)."""
    capability = feature(torch, "backends.cpu.get_cpu_capability")
    if not callable(capability):
        return "unknown"
    try:
        return str(capability())
    except RuntimeError:
        return "unknown"


@functools.cache
def bf16_native() -> bool:
    """Whether oneDNN has native bfloat16 kernels on this CPU (false on AVX2-only CPUs, or when capped below AVX-512);
    asked once per process (every bf16 product checks it)."""
    return _mkldnn_query("_is_mkldnn_bf16_supported")


@functools.cache
def fp16_native() -> bool:
    """Whether oneDNN has native float16 kernels on this CPU (AVX-512 FP16 / AMX-FP16 only)."""
    return _mkldnn_query("_is_mkldnn_fp16_supported")


@functools.cache
def float16_products() -> bool:
    """Whether this torch multiplies float16 matrices on the CPU at all (natively or emulated): torch 2.1's CPU has no
    float16 matrix product ("addmm_impl_cpu_" not implemented for 'Half'). Asked once per process, of torch itself."""
    half = torch.ones(2, 2, dtype=torch.float16)
    try:
        torch.nn.functional.linear(half, half, half[0])
    except RuntimeError:
        return False
    return True


def _mkldnn_query(name: str) -> bool:
    query = feature(torch, f"ops.mkldnn.{name}")
    if query is None:
        return False
    try:
        return bool(query()) and torch.backends.mkldnn.is_available()
    except RuntimeError:
        return False


def amx_int8() -> bool:
    """Whether oneDNN can use AMX int8 tiles here: the CPU has them and ``ONEDNN_MAX_CPU_ISA`` does not cap them."""
    cap = (os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or "ALL").upper()
    return "amx_int8" in cpu_flags() and (cap == "ALL" or "AMX" in cap)


def vector_kernels() -> bool:
    """Whether ATen runs vector kernels here: on x86 at least AVX2 (also fbgemm's minimum: below it int8 products are
    emulated, the int8 row's probe in :mod:`.engine.precisions`); on any other machine, yes."""
    return aten_capability() not in ("DEFAULT", "unknown") or platform.machine().lower() not in (
        "x86_64",
        "amd64",
        "i386",
        "i686",
    )


def facts() -> dict[str, str]:
    """What this CPU and torch run natively, for ``spacy-elmo info`` and bug reports (with each engine family's
    choices: :func:`.engine.registry.summary`)."""
    return {
        "cpu vendor": cpu_vendor() or "unknown",
        "cpu flags": isa_flags(),
        "aten capability": aten_capability(),
        "bfloat16": "native" if bf16_native() else "emulated (slow)",
        "float16": "native" if fp16_native() else "emulated (slow)",
    }
