"""The int8 family: quantize, the int8 kernel of each role, its packs, the engine (every product through int8
weights, the steps in the compiled loop).

Opt-in, for inference on CPU (``load_bilm(..., precision="int8")``; ``"auto"`` is float32). :func:`quantize` marks a
model: the LSTM input, state and projection products, the highway layers and the token projection multiply int8
weights, symmetric per output channel (scale = max |w| / 127 of each row, :func:`quantize_weight`), by activations
that torch quantizes per call (``quantized::linear_dynamic``: 8-bit, or 7-bit where this CPU's kernels saturate at
full range; per tensor, its own range); the products come back float32, and the rest (gates, cell, clipping, char
CNN) stays float32.

The kernels (:func:`int8_kernels`, chosen once per process): each weight is packed once (:func:`prepack`) by the
quantized engine of its role. The LSTM's step weights (state and projection: a few rows per product, one at batch
1) take fbgemm (fastest at batch 1's single rows; one int8 copy); every other weight (input projections, token
layers: whole chunks of rows) fbgemm too (one compact pack; faster than oneDNN on AVX2, close to it with AVX-512
VNNI), or oneDNN where AMX tiles serve int8 (:func:`..cpu_support.amx_int8`; faster there, its pack holds a
second int8 copy). One int8 copy per weight: a second pack of the step weights for the AMX kernel would add a third
of the int8 model again for products of at most a batch of rows. Measured: benchmarks/RESULTS.md, "Precision on
every CPU".

x86 CPUs differ in what their int8 kernels do, not only in how fast they are: products multiply unsigned 8-bit
activations by signed 8-bit weights. With VNNI (AVX-512 VNNI, AVX-VNNI, AMX) the pairs are summed in int32.
Without it (AVX2-only CPUs such as AMD Zen 2/3 and older Intel) fbgemm and oneDNN use ``vpmaddubsw``, which adds
each pair of products into int16 *with saturation*: large activations times large weights are silently cut.
``reduce_range=True`` (activations quantized to 7 bits) keeps every pair sum within int16. Rather than guess from
CPU flags, :func:`int8_kernels` multiplies a probe built to saturate (every activation and weight at its largest)
through each quantized engine, and uses ``reduce_range`` exactly where the probe comes back wrong. The engine's
own dispatch (``ONEDNN_MAX_CPU_ISA``, ``FBGEMM_ENABLE_INSTRUCTIONS``) is respected because the probe runs the
real kernels, packed as the model's weights are.
This family's cost model: :attr:`Int8Engine.gate_chunk_elements` (smaller chunks of input projections).

By default :func:`quantize` packs every weight at once and *releases* the float32 matrices (their
parameters become meta tensors of the same shape), so an int8 model holds int8 weights, not a
float32 copy beside them; such a model cannot take gradients or change its weights (a clear error
says so). ``keep_float32=True`` keeps the parameters: the engine then makes packs on first use
and remakes them whenever a parameter changes (a new ``(data_ptr, _version)``: an optimizer step, an
in-place edit under ``torch.no_grad()``). A weight with no pack takes the plain float32 product.
The result is an approximation of the float32 model, not a rounding of it: see
``tests/bilm/test_precision.py`` for the measured and allowed error per CPU family. Not batch-invariant to
float32 rounding: a sentence's activations may take other activation ranges in another batch; they agree
within the tolerance. On CUDA int8 is refused.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import logging
import platform
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn

from .. import cpu_support
from ..lstm import ProjectedLSTMCell
from ..threads import ForkSafeLock
from .contract import M, Target, WeightPacks, state_of
from .plain import PlainEngine
from .step_loop import LayerSpec, LayerSteps, StepProduct, StepWeight, loop_kind

logger = logging.getLogger(__name__)  # a child of the "spacy_elmo" logger

# the kernel of each role, as measured (benchmarks/RESULTS.md, "Precision on every CPU"):
INT8_ENGINE = "fbgemm"  # one compact pack; faster than oneDNN on AVX2, close to it with AVX-512 VNNI
INT8_AMX_ENGINE = "onednn"  # with AMX tiles its int8 GEMM beats fbgemm's (its pack holds a second int8 copy)
INT8_FEW_ROWS_ENGINE = "fbgemm"  # the LSTM's step products at batch 1: faster than oneDNN, one int8 copy
_PROBE_WIDTH = 256  # inner dimension of the saturation probe: 128 pairs, each 2 x 255 x 127 > int16's 32767
_engine_lock = ForkSafeLock()  # held while torch's process-wide quantized engine is switched for one pack


# -- the two kernel primitives: quantize a weight, pack it for one quantized engine ----------------------------


def quantize_weight(out_in: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-output-channel int8: ``(int8 weight (out, in), float32 scales (out,))``, ``w ~ q * scale``."""
    w = out_in.detach().float()
    scale = (w.abs().amax(dim=1) / 127.0).clamp_min(torch.finfo(torch.float32).tiny)
    return torch.round(w / scale[:, None]).clamp_(-127, 127).to(torch.int8), scale


def prepack(q: torch.Tensor, scale: torch.Tensor, engine: str) -> Optional[object]:
    """The int8 weight ``q`` with per-row ``scale`` packed by the quantized ``engine`` (None where this torch lacks it).

    torch reads the engine from process-wide state (``torch.backends.quantized.engine``), only when packing;
    each pack then runs its own engine's kernels whatever the setting. torch 2.13 has no engine-specific
    pack for dynamic int8 products (``quantized::linear_prepack`` and its legacy form read the setting;
    ``onednn::qlinear_prepack`` and ``_wrapped_linear_prepack`` make static-quantization weights, which
    ``quantized::linear_dynamic`` does not take), so the switch cannot be avoided. It is made only where
    the setting differs, for this call alone, under this module's lock (the one place the package touches
    the setting: ``tests/architecture/``), and always put back. (The saturation probe packs through here too, so
    that it multiplies exactly what the model will.)
    """
    if engine not in torch.backends.quantized.supported_engines:
        return None
    with warnings.catch_warnings():  # torch 2.10+ flags quantized tensor *creation* as deprecated
        warnings.simplefilter("ignore", UserWarning)
        qweight = torch._make_per_channel_quantized_tensor(
            q, scale.double(), torch.zeros_like(scale, dtype=torch.long), 0
        )
    with _engine_lock:
        before = torch.backends.quantized.engine
        if before == engine:  # already the process's engine: nothing to switch
            return torch.ops.quantized.linear_prepack(qweight, None)
        try:
            torch.backends.quantized.engine = engine
            return torch.ops.quantized.linear_prepack(qweight, None)
        finally:
            torch.backends.quantized.engine = before


# -- the kernel of each role, chosen once per process --------------------------------------------------------


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
        INT8_AMX_ENGINE
        if (cpu_support.amx_int8() and INT8_AMX_ENGINE in exact) or INT8_ENGINE not in exact
        else INT8_ENGINE
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
            "int8: products saturate at full range on this CPU (%s): activations quantized to 7 bits",
            cpu_support.isa_flags(),
        )
    logger.debug("int8 kernels: %s", kernels)
    return kernels


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


def kernels_summary() -> str:
    """The int8 line of ``spacy-elmo info``: whether its kernels are vector ones here, and each role's."""
    kernels = int8_kernels()
    if kernels is None:
        return "unavailable"
    fast = "fast" if cpu_support.vector_kernels() else "emulated"
    return (
        f"{fast}; many rows: {kernels.many_rows.engine}"
        f"{' (7-bit activations)' if kernels.many_rows.reduce_range else ''}, few rows: {kernels.few_rows.engine}"
        f"{' (7-bit activations)' if kernels.few_rows.reduce_range else ''}"
    )


# -- the weights: quantized, packed by their role's kernel ---------------------------------------------------

# the parameters each marked module multiplies, as (name, whether its (out, in) view is the transpose)
_INT8_WEIGHTS = {
    ProjectedLSTMCell: (("input_weight", True), ("state_weight", True), ("projection", True)),
    nn.Linear: (("weight", False),),
}
# the LSTM's step weights: their products have a few rows (one at batch 1, at most a batch), so the step kernel
# (Int8Kernels.few_rows) packs them; input projections and token layers multiply whole chunks of rows
STEP_WEIGHTS = ("state_weight", "projection")


@dataclass(frozen=True)
class Int8Pack:
    """int8 packed params of one quantized engine (the weight's only int8 copy); ``reduce_range``: whether its
    products quantize activations to 7 bits (:class:`Int8Kernel`). float32 out."""

    packed: object
    reduce_range: bool = False

    def multiply(self, rows: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
        """``rows @ out_in.T (+ bias)``."""
        out = torch.ops.quantized.linear_dynamic(rows.contiguous(), self.packed, self.reduce_range)
        return out if bias is None else out.add_(bias)

    def step_weight(self) -> StepWeight:
        """This pack as the step loop takes it."""
        return StepWeight(None, int8=self.packed, int8_reduce_range=self.reduce_range)


def make_pack(out_in: torch.Tensor, step: bool = False) -> Optional[Int8Pack]:
    """``out_in`` (an ``(out, in)`` weight) quantized and packed by the kernel of its role (``step``: an LSTM step
    weight, the step kernel; else the many-rows kernel), the other role's where that engine is missing; None
    where the kernels cannot."""
    try:
        kernels = int8_kernels()
        if kernels is None:
            return None
        q, scale = quantize_weight(out_in)
        roles = (kernels.few_rows, kernels.many_rows) if step else (kernels.many_rows, kernels.few_rows)
        for kernel in roles:
            packed = prepack(q, scale, kernel.engine)
            if packed is not None:
                return Int8Pack(packed, kernel.reduce_range)
        return None
    except (AttributeError, RuntimeError, TypeError):  # torch without these ops
        return None


def is_step_weight(module: nn.Module, name: str) -> bool:
    """Whether ``module.<name>`` is an LSTM step weight (:data:`STEP_WEIGHTS`), packed by the step kernel."""
    return isinstance(module, ProjectedLSTMCell) and name in STEP_WEIGHTS


# -- a model marked for int8 ----------------------------------------------------------------------


def quantize(model: M, keep_float32: bool = False) -> M:
    """Mark ``model``'s LSTM cells and linear layers for int8 products on the inference path; returns ``model``.

    By default every weight is packed now and its float32 matrix released (a meta tensor of the same
    shape takes its place): the model then holds int8 weights only and serves inference alone.
    ``keep_float32=True`` keeps the parameters and packs each weight on first use (and again after it changes).
    """
    for module in model.modules():  # the mark lives with each module: the engine of the LSTM or encoder reads it
        state_of(module).int8 = True
    marked = [m for m in model.modules() if isinstance(m, (ProjectedLSTMCell, nn.Linear))]
    if keep_float32:
        return model
    if int8_kernels() is None:  # no int8 kernels in this torch (the backend refuses int8 first)
        return model
    for module in marked:  # one weight at a time: its float32 pages are reused by the next one (a lower peak)
        for name, out_in in _int8_weights(module):
            pack = make_pack(out_in.detach(), step=is_step_weight(module, name))
            if pack is None:  # never a half-released model that computes anything
                raise RuntimeError(
                    f"int8: torch's quantized kernels could not pack {type(module).__name__}.{name} "
                    f"{tuple(out_in.shape)}; load the model with precision='float32'"
                )
            param = getattr(module, name)
            state_of(module).released[name] = pack  # the pack lives with its module: it *is* the weight now
            setattr(
                module,
                name,
                nn.Parameter(torch.empty(param.shape, device="meta", dtype=param.dtype), requires_grad=False),
            )
            del param, out_in
    return_freed_memory()
    return model


def return_freed_memory() -> None:
    """Give the released float32 matrices' pages back to the system (glibc keeps freed heap memory otherwise).

    ``malloc_trim`` changes no setting: it only unmaps free pages. A no-op where glibc is absent.
    """
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)


def released_packs(module: nn.Module) -> dict[str, Int8Pack]:
    """The int8 packs that replace ``module``'s released float32 weights, by parameter name (empty if none)."""
    return state_of(module).released


def _int8_weights(module: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, (out, in) view)`` of each weight ``module`` multiplies in int8."""
    for kind, weights in _INT8_WEIGHTS.items():
        if isinstance(module, kind):
            for name, transposed in weights:
                param = getattr(module, name)
                yield name, param.t() if transposed else param


# -- the engine ---------------------------------------------------------------------------------------


class Int8Engine(PlainEngine):
    """int8 weights per output channel, activations quantized per product (``quantized::linear_dynamic``).

    Serves the modules :func:`quantize` marked, on CPU, where this torch has int8 kernels. A released weight's
    pack is the one quantize made (it *is* the weight); a model that kept its float32 weights gets packs made
    here, once per version of each weight.
    """

    name = "int8"
    load_dtype = torch.int8
    tolerance = 4e-2
    # each input projection also allocates its own output and accumulators: smaller chunks keep the working
    # memory down at no measured cost in speed (benchmarks/RESULTS.md, "Precision on every CPU")
    gate_chunk_elements = 1 << 21

    def __init__(self, target: Target) -> None:
        super().__init__(target)
        self.packs: WeightPacks[Int8Pack] = WeightPacks(lambda out_in: make_pack(out_in))
        self.step_packs: WeightPacks[Int8Pack] = WeightPacks(lambda out_in: make_pack(out_in, step=True))

    @classmethod
    def serves(cls, target: Target) -> bool:
        return target.int8 and target.device.type == "cpu" and int8_kernels() is not None

    @classmethod
    def load(cls, model: M, device: torch.device, dtype: torch.dtype, keep_float32: bool = False) -> M:
        """float32 on ``device``, quantized (:func:`quantize`: float32 matrices released unless ``keep_float32``);
        ``ValueError`` on another device than the CPU, or where this torch has no quantized engine."""
        if device.type != "cpu":
            raise ValueError(
                f"precision='int8' runs on CPU only, not on device={str(device)!r} (use 'bfloat16' or 'float16' there)"
            )
        if not int8_available():
            raise ValueError(
                "precision='int8' needs torch's quantized engines (fbgemm or onednn: x86 builds), which this "
                "torch lacks"
            )
        return quantize(model.to(device=device, dtype=torch.float32).eval(), keep_float32=keep_float32)

    @classmethod
    def choices(cls) -> dict[str, str]:
        return {"int8": kernels_summary()}

    def describe(self) -> str:
        here = {**cpu_support.facts(), **self.choices()}
        return f"int8 products, {loop_kind()} LSTM time loop; this CPU: {here}"

    def pack(self, owner: nn.Module, name: str, out_in: torch.Tensor) -> Optional[Int8Pack]:
        """The int8 pack of parameter ``owner.<name>`` (``out_in``: its ``(out, in)`` view); None where it has none."""
        released = released_packs(owner).get(name)
        if released is not None:
            return released
        packs = self.step_packs if is_step_weight(owner, name) else self.packs
        return packs.get(owner, name, out_in)

    def linear(self, layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        pack = self.pack(layer, "weight", layer.weight)
        return layer(x) if pack is None else pack.multiply(x, layer.bias)

    def layer_steps(self, spec: LayerSpec) -> LayerSteps:
        cells = spec.cells
        packs = [
            [self.pack(cell, name, getattr(cell, name).t()) for name in ("input_weight", "state_weight", "projection")]
            for cell in cells
        ]
        if any(p is None for cell_packs in packs for p in cell_packs):  # a weight int8 cannot pack: float32 products
            return super().layer_steps(spec)
        inputs, states, projections = ([p for p in column if p is not None] for column in zip(*packs))
        bias = [cell.bias + cell.forget_offset for cell in cells]

        def input_projection(rows: torch.Tensor) -> list[torch.Tensor]:  # each direction's own product, no copy
            return [pack.multiply(rows[d], bias[d]) for d, pack in enumerate(inputs)]

        state = StepProduct([p.step_weight() for p in states])
        projection = StepProduct([p.step_weight() for p in projections])
        return LayerSteps(spec, input_projection, state, projection, precision=self.precision)
