"""What this CPU and this torch build run natively, probed once per process (the engines ask; they choose).

A probe, not a chooser of products: which product takes which kernel is each engine family's choice
(:mod:`.engine`). What is decided here is what this CPU's kernels can do: which quantized engine serves each
int8 role without saturating, whether bf16 and fp16 are native.

x86 CPUs differ in what their int8 and bfloat16 kernels do, not only in how fast they are:

- **int8** products multiply unsigned 8-bit activations by signed 8-bit weights. With VNNI
  (AVX-512 VNNI, AVX-VNNI, AMX) the pairs are summed in int32. Without it (AVX2-only CPUs such as
  AMD Zen 2/3 and older Intel) fbgemm and oneDNN use ``vpmaddubsw``, which adds each pair of
  products into int16 *with saturation*: large activations times large weights are silently cut.
  ``reduce_range=True`` (activations quantized to 7 bits) keeps every pair sum within int16.
  Rather than guess from CPU flags, :func:`int8_kernels` multiplies a probe built to saturate
  (every activation and weight at its largest) through each engine, and uses ``reduce_range``
  exactly where the probe comes back wrong. The engine's own dispatch (``ONEDNN_MAX_CPU_ISA``,
  ``FBGEMM_ENABLE_INSTRUCTIONS``) is respected because the probe runs the real kernels.
- **bfloat16** products have native oneDNN kernels with AVX-512 (BW/VL/DQ), AVX-512 BF16, AMX or
  AVX-NE-CONVERT; elsewhere torch falls back to scalar bf16 arithmetic, far slower than float32
  (benchmarks/RESULTS.md). oneDNN's own answer (``torch.ops.mkldnn._is_mkldnn_bf16_supported``, which follows
  ``ONEDNN_MAX_CPU_ISA``) decides.
- **float16** on CPU is native only with AVX-512 FP16 / AMX-FP16 (``_is_mkldnn_fp16_supported``).
- **float32** products have two exact kernel families on x86 builds: MKL's GEMM and oneDNN's pre-packed
  products. Which is faster depends on the CPU's maker: on AMD EPYC (Zen 4, Zen 5, and with every library
  capped to AVX2 as on Zen 3) oneDNN's are up to 2-4x MKL's at the biLM's shapes, while on Intel MKL is at
  home (benchmarks/RESULTS.md). :func:`float32_kernels` decides from the CPU's vendor, so every process on a
  machine takes the same kernels (a resumed training run repeats the bits of an uninterrupted one), after a
  probe that oneDNN's products are exact to float32 here;
  ``SPACY_ELMO_FLOAT32_KERNELS=onednn|mkl|auto`` forces either (for debugging and A/B measurements).

:func:`slow_precision_reason` says why a requested precision would run emulated (the backend warns
once with it); :func:`auto_dtype` picks the fastest precision that holds its documented error bound on every
input (float32: no low precision does on a trained model);
:func:`summary` is what ``spacy-elmo info`` and the logs show. Measured speed and error per CPU
family: docs/precision.md and ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import functools
import logging
import os
import platform
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch

from .int8_weights import prepack, quantize_weight  # the model's own: the probe multiplies what the model will
from .probe import feature

logger = logging.getLogger("spacy_elmo")

# measured choices (benchmarks/RESULTS.md, "Precision on every CPU"):
INT8_ENGINE = "fbgemm"  # one compact pack; faster than oneDNN on AVX2, close to it with AVX-512 VNNI
INT8_AMX_ENGINE = "onednn"  # with AMX tiles its int8 GEMM beats fbgemm's (its pack holds 2 int8 copies)
INT8_FEW_ROWS_ENGINE = "fbgemm"  # the LSTM's step products: faster than oneDNN for 1-4 rows (batch 1), one int8 copy
FLOAT32_KERNELS_ENV = "SPACY_ELMO_FLOAT32_KERNELS"  # onednn | mkl | auto (the default)
FLOAT32_KERNEL_CHOICES = ("onednn", "mkl", "auto")
# CPU vendors whose float32 products run faster on oneDNN's pre-packed kernels than on MKL's GEMM (measured:
# benchmarks/RESULTS.md, "float32 through oneDNN"); elsewhere (Intel, unknown) MKL's, as before
ONEDNN_FLOAT32_VENDORS = ("AuthenticAMD",)
_PROBE_WIDTH = 256  # inner dimension of the saturation probe: 128 pairs, each 2 x 255 x 127 > int16's 32767


class SlowPrecisionWarning(RuntimeWarning):
    """A requested precision has no native kernels on this CPU: it runs correctly but emulated, slower than float32."""


@dataclass(frozen=True)
class Int8Kernel:
    """How int8 products run for one role: the quantized ``engine`` that packs the weights, and whether
    activations are quantized to 7 bits (``reduce_range``) because the engine's kernels saturate here."""

    engine: str
    reduce_range: bool


@dataclass(frozen=True)
class Int8Kernels:
    """The int8 kernels chosen for this process: products of many rows (input projections, token layers), and the
    LSTM's step products (``few_rows``: one row at batch 1, at most a batch), each weight packed by its role's alone."""

    many_rows: Int8Kernel
    few_rows: Int8Kernel


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


def float32_kernels_forced() -> Optional[str]:
    """``"onednn"`` or ``"mkl"`` where ``SPACY_ELMO_FLOAT32_KERNELS`` forces one; None for ``auto`` or unset.

    Any other value raises ``ValueError`` naming the variable and the values it takes."""
    value = os.environ.get(FLOAT32_KERNELS_ENV, "auto").strip().lower() or "auto"
    if value not in FLOAT32_KERNEL_CHOICES:
        raise ValueError(
            f"{FLOAT32_KERNELS_ENV}={value!r} is not one of {', '.join(FLOAT32_KERNEL_CHOICES)}: "
            f"unset it or set one of those"
        )
    return None if value == "auto" else value


@functools.cache
def float32_kernels() -> str:
    """Which float32 products the float32 engine runs in this process: ``"onednn"`` (oneDNN's pre-packed kernels)
    or ``"mkl"`` (MKL's GEMM and its packs). Decided once per process, never per product, and alike in every
    process on one machine.

    Forced by ``SPACY_ELMO_FLOAT32_KERNELS``; else oneDNN on the CPUs of :data:`ONEDNN_FLOAT32_VENDORS` where its
    pre-packed products are exact to float32 (:func:`onednn_float32_available`), MKL's elsewhere.
    """
    forced = float32_kernels_forced()
    if forced == "onednn" and not onednn_float32_available():
        logger.info("%s=onednn: this torch has no oneDNN pre-packed float32 products; MKL's run", FLOAT32_KERNELS_ENV)
        return "mkl"
    if forced is not None:
        return forced
    if cpu_vendor() in ONEDNN_FLOAT32_VENDORS and onednn_float32_available():
        return "onednn"
    return "mkl"


@functools.cache
def onednn_float32_available() -> bool:
    """Whether this torch has oneDNN's pre-packed float32 products and they are exact to float32 here (a probe
    against float64, rows 1, 3 and 64, under the package's full-float32 guard)."""
    from .exact import exact_float32

    try:
        if not torch.backends.mkldnn.is_available():
            return False
        generator = torch.Generator().manual_seed(0)
        weight = torch.randn(96, 128, generator=generator)
        with exact_float32("cpu"):
            pack = torch.ops.mkldnn._reorder_linear_weight(weight, 32)
            for rows in (1, 3, 64):
                x = torch.randn(rows, 128, generator=generator)
                got = torch.ops.mkldnn._linear_pointwise(x, pack, None, "none", [], "")
                expected = x.double() @ weight.double().t()
                scale = float((x.abs().double() @ weight.abs().double().t()).max())
                if got.shape != expected.shape or float((got.double() - expected).abs().max()) > 1e-5 * scale:
                    return False
    except (AttributeError, RuntimeError, TypeError):  # torch without oneDNN or these ops
        return False
    return True


def int8_engines() -> tuple[str, ...]:
    """The quantized engines of this torch that serve the int8 path (both on x86 builds)."""
    engines = torch.backends.quantized.supported_engines
    return tuple(e for e in (INT8_ENGINE, INT8_AMX_ENGINE) if e in engines)


def int8_available() -> bool:
    """Whether this torch has a quantized engine the int8 path can use (fbgemm or oneDNN: x86 CPU builds)."""
    return bool(int8_engines())


@functools.cache
def int8_kernels() -> Optional[Int8Kernels]:
    """The int8 kernel of each role, probed once per process; None where this torch has no int8 engine.

    Many rows: fbgemm (one int8 copy per weight; faster than oneDNN on AVX2), oneDNN where AMX tiles serve
    int8 (faster there, at the cost of a second int8 copy inside its pack). The LSTM's step products: fbgemm
    (fastest at batch 1's single rows; one copy). Each role keeps
    its engine and turns ``reduce_range`` on only where that engine's full-range product fails the saturation
    probe; the other engine is used if it is exact at full range and the preferred one is not.
    """
    if not int8_available():
        return None
    exact = {engine: _saturation_free(engine) for engine in int8_engines()}
    many_rows = (
        INT8_AMX_ENGINE if (amx_int8() and INT8_AMX_ENGINE in exact) or INT8_ENGINE not in exact else INT8_ENGINE
    )

    def choose(preferred: str) -> Int8Kernel:
        if exact.get(preferred):
            return Int8Kernel(preferred, False)
        other = next((e for e, ok in exact.items() if ok and e != preferred), None)
        return Int8Kernel(other, False) if other else Int8Kernel(preferred, True)

    kernels = Int8Kernels(
        choose(many_rows), choose(INT8_FEW_ROWS_ENGINE if INT8_FEW_ROWS_ENGINE in exact else many_rows)
    )
    if kernels.many_rows.reduce_range or kernels.few_rows.reduce_range:
        logger.info(
            "int8: products saturate at full range on this CPU (%s): activations quantized to 7 bits", isa_flags()
        )
    logger.debug("int8 kernels: %s", kernels)
    return kernels


def amx_int8() -> bool:
    """Whether oneDNN can use AMX int8 tiles here: the CPU has them and ``ONEDNN_MAX_CPU_ISA`` does not cap them."""
    cap = (os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or "ALL").upper()
    return "amx_int8" in cpu_flags() and (cap == "ALL" or "AMX" in cap)


def _saturation_free(engine: str) -> bool:
    """Whether ``engine``'s full-range dynamic int8 product is exact on a probe that saturates int16 pair sums.

    Activations all 1.0 quantize to 255, weights all 1.0 to 127: every pair of products sums to 64770, twice
    int16's range. An exact kernel returns ``_PROBE_WIDTH`` in every output; a saturating one about half.
    Rows 1, 4 and 64 cover the kernels engines use for few and many rows.
    """
    try:
        q, scale = quantize_weight(torch.ones(64, _PROBE_WIDTH))
        packed = prepack(q, scale, engine)
        if packed is None:
            return False
        for rows in (1, 4, 64):
            out = torch.ops.quantized.linear_dynamic(torch.ones(rows, _PROBE_WIDTH), packed, False)
            if not torch.allclose(out, torch.full_like(out, float(_PROBE_WIDTH)), rtol=1e-3):
                return False
    except (AttributeError, RuntimeError, TypeError):
        return False
    return True


def int8_fast() -> bool:
    """Whether int8 products have vector kernels here: at least AVX2 (fbgemm's minimum; below it they are emulated)."""
    if not int8_available():
        return False
    return aten_capability() not in ("DEFAULT", "unknown") or platform.machine().lower() not in (
        "x86_64",
        "amd64",
        "i386",
        "i686",
    )


def slow_precision_reason(dtype: torch.dtype, device: torch.device) -> Optional[str]:
    """Why ``dtype`` would run emulated (slower than float32) on ``device``, with what to pick instead, or None."""
    if device.type != "cpu" or dtype == torch.float32:
        return None
    flags = isa_flags()
    if dtype == torch.bfloat16 and not bf16_native():
        return (
            f"dtype='bfloat16' has no native kernels on this CPU (oneDNN needs AVX-512 BW/VL/DQ, AVX-512 BF16, AMX "
            f"or AVX-NE-CONVERT; this CPU has: {flags}); it runs emulated, far slower than float32. "
            f"Use dtype='int8' (faster, approximate) or 'float32' (exact), or dtype='auto'"
        )
    if dtype == torch.float16 and not fp16_native():
        return (
            f"dtype='float16' has no native kernels on this CPU (oneDNN needs AVX-512 FP16 or AMX-FP16; this CPU "
            f"has: {flags}); it runs emulated, slower than float32. Use dtype='int8' (faster, approximate) or "
            f"'float32' (exact), or dtype='auto'"
        )
    if dtype == torch.int8 and not int8_fast():
        return (
            f"dtype='int8' has no vector kernels on this CPU (they need at least AVX2; ATen reports "
            f"{aten_capability()}, flags: {flags}); it runs emulated, slower than float32. Use dtype='float32'"
        )
    return None


_warned: dict[str, bool] = {}


def warn_if_slow(dtype: torch.dtype, device: torch.device, stacklevel: int = 3) -> None:
    """Warn once per process and precision (:class:`SlowPrecisionWarning`) when ``dtype`` runs emulated there."""
    reason = slow_precision_reason(dtype, device)
    if reason is None or _warned.get(str(dtype)):
        return
    _warned[str(dtype)] = True
    logger.info(reason)
    warnings.warn(reason, SlowPrecisionWarning, stacklevel=stacklevel)


def auto_dtype(device: torch.device) -> torch.dtype:
    """The fastest precision on ``device`` that holds its documented error bound on every input: float32.

    int8 (x86 CPUs), bfloat16 and float16 are faster, but none of them holds its bound on every input of a trained
    model, so "auto" never picks them: it must never be silently wrong. A trained biLM (the bundled one has no cell
    clip) carries their rounding along a run of repeated tokens instead of forgetting it, so their error grows with
    the run: measured on the bundled model, the worst layer's error over its scale is 0.13 for int8 on 50 ".", 1.3
    on 2,000 ".", 0.11 for bfloat16 on 200 "the", and int8 exceeds its 4e-2 on about one WikiText-2 sentence in
    five (benchmarks/RESULTS.md, "Low precision on the trained model"). Keeping the recurrent products in float32
    does not help enough (each 8-bit product alone moves a run of 500 "." by 0.05-0.16) and would cost int8 its
    speed at batch 1. Ask for a low precision explicitly where its measured error (docs/precision.md) is
    acceptable. ``device`` is where the model runs: the answer is the same on CPU and CUDA today.
    """
    return torch.float32


def summary() -> dict[str, object]:
    """What this process runs natively, for ``spacy-elmo info`` and bug reports."""
    kernels = int8_kernels()
    return {
        "cpu vendor": cpu_vendor() or "unknown",
        "cpu flags": isa_flags(),
        "aten capability": aten_capability(),
        "int8": "unavailable"
        if kernels is None
        else f"{'fast' if int8_fast() else 'emulated'}; many rows: {kernels.many_rows.engine}"
        f"{' (7-bit activations)' if kernels.many_rows.reduce_range else ''}, few rows: {kernels.few_rows.engine}"
        f"{' (7-bit activations)' if kernels.few_rows.reduce_range else ''}",
        "bfloat16": "native" if bf16_native() else "emulated (slow)",
        "float16": "native" if fp16_native() else "emulated (slow)",
        "float32 kernels": float32_kernels(),
        "auto (cpu)": str(auto_dtype(torch.device("cpu"))).replace("torch.", ""),
    }
