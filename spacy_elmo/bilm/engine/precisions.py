"""The precisions the biLM computes in, in one ordered table that every place naming, checking or serving one reads.

Each row (:class:`Precision`) says what a precision is called (``precision="int8"``, the command line's
``--precision``) and its other spellings, the torch dtype that stands for it, the names of the vectors it gives
(cache keys, fingerprints, saved pipelines: :data:`VECTOR_PRECISIONS`, :meth:`Precision.fingerprint`), its words in
the load log and in the ``--precision`` help, which probe of :mod:`..cpu_support` says whether this CPU runs it
natively (and the warning when it does not) or whether this torch runs it at all, whether its vectors are checked
for overflow, the engines that serve it, in the order they are asked (:data:`.registry.ENGINES` is built from them,
the plain engine last), and whether ``spacy-elmo train --precision`` takes it.

What a user passes (``"bf16"``, ``torch.bfloat16``, a row, None) becomes a row once, at the edge
(:func:`resolve`), and the row travels: ``runtime/configuration/validation.py`` (the names a precision takes),
``runtime/embedding/backend.py`` (the torch dtype, the load log, the overflow guard, the refusal),
``sources/pinned_model.py`` (the vectors' names), :mod:`.registry` (the engines, the emulated warning, what ``info``
lists), ``train/config.py`` (``--precision``) and the command line's help. A torch dtype is named in one place
(:func:`torch_dtype_name`).

Adding a precision is one row here and its engine family's file in ``bilm/engine/`` (its ``serves``, products,
step products, ``load`` and ``tolerance``), which ``tests/bilm/test_engines.py`` holds to float32 and
``tests/bilm/test_new_precision.py`` shows to be enough. The table is torch-free (the command line checks a
precision before torch is imported): a row names torch's dtype by its attribute, read by :meth:`Precision.dtype`
where torch is imported anyway.
"""

from __future__ import annotations

import hashlib
import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Union

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Precision:
    """One precision: its names, its torch dtype, how it is described, probed, warned about and served."""

    name: str  # what load_bilm, the front ends and --precision take, and the name of its vectors on a CPU
    torch_name: str  # torch's attribute for it (torch.int8 stands for the int8 path: int8 weights, float32 rest)
    aliases: tuple[str, ...]  # other spellings a dtype may take ("half", "bf16")
    description: str  # the load log's words (INFO)
    gist: str  # the --precision help's words
    # the name of its vectors on a GPU where torch's CUDA kernels round otherwise than the CPU's (far beyond float32's
    # rounding), so that they are cached apart; None: the same vectors (float32), or a precision only the CPU runs
    cuda_vectors: Optional[str]
    # the cpu_support probe that says this CPU runs it natively, and the warning when it does not ({flags}: the CPU's
    # flags, {aten}: ATen's vector ISA); None: native wherever it runs
    native: Optional[str]
    emulated: str
    engines: tuple[str, ...]  # "module.Class" in bilm/engine, asked in this order (the plain engine serves the rest)
    trains: bool  # whether training computes in it (spacy-elmo train --precision)
    # whether its vectors are checked for inf / nan (a range narrower than float32's, or rounding that can overflow)
    overflow_guard: bool = False
    # the cpu_support probe without which this torch cannot run it on a CPU at all, and the refusal then ({torch}:
    # torch's version); None: every torch the package takes runs it
    cpu_requires: Optional[str] = None
    refused: str = ""

    @property
    def vector_names(self) -> tuple[str, ...]:
        """The names of the vectors it gives: on a CPU, and on a GPU where they differ."""
        return (self.name,) if self.cuda_vectors is None else (self.name, self.cuda_vectors)

    def vectors_on(self, device_type: str) -> str:
        """The name of the vectors it gives on a device of type ``device_type`` ("cpu", "cuda")."""
        return self.cuda_vectors if device_type == "cuda" and self.cuda_vectors is not None else self.name

    def dtype(self) -> torch.dtype:
        """The torch dtype that stands for it (imports torch)."""
        import torch

        dtype: torch.dtype = getattr(torch, self.torch_name)
        return dtype

    def fingerprint(self, files_fingerprint: str, device_type: str = "cpu") -> str:
        """The identity of the vectors it gives from files with ``files_fingerprint`` on a device of type
        ``device_type``: :func:`vectors_fingerprint` of its vectors' name there."""
        return vectors_fingerprint(files_fingerprint, self.vectors_on(device_type))

    def engine_classes(self) -> tuple[type, ...]:
        """The engine classes serving it, in the order they are asked (imports their files, and torch):
        :data:`.registry.ENGINES` checks that each is an engine."""
        return tuple(_engine_class(path) for path in self.engines)

    def emulated_reason(self, device_type: str) -> Optional[str]:
        """Why it would run emulated (slower than float32) on a device of type ``device_type``, with what to pick
        instead, or None: its probe (:attr:`native`, a fact of :mod:`..cpu_support`) says this CPU has no native
        kernels for it."""
        if device_type != "cpu" or self.native is None or _probe(self.native):
            return None
        from .. import cpu_support

        return self.emulated.format(flags=cpu_support.isa_flags(), aten=cpu_support.aten_capability())

    def support(self) -> str:
        """What this CPU does with it, for ``spacy-elmo info``: "native" or "emulated (slow)" by its probe."""
        return "native" if self.native is None or _probe(self.native) else "emulated (slow)"

    def refusal(self, device_type: str) -> Optional[str]:
        """Why this torch cannot run it on a device of type ``device_type`` at all (:attr:`cpu_requires`), or None."""
        if device_type != "cpu" or self.cpu_requires is None or _probe(self.cpu_requires):
            return None
        import torch

        return self.refused.format(torch=torch.__version__)


def _probe(name: str) -> bool:
    """The answer of :mod:`..cpu_support`'s probe ``name`` (imports torch)."""
    from .. import cpu_support

    return bool(getattr(cpu_support, name)())


def _engine_class(path: str) -> type:
    """The class a row names: ``"onednn.Bf16Engine"``, class Bf16Engine of ``bilm/engine/onednn.py``."""
    module, _, name = path.rpartition(".")
    found = getattr(importlib.import_module(f"{__package__}.{module}"), name)
    if not isinstance(found, type):
        raise TypeError(f"the precision table names {path}, which is no class of bilm/engine")
    return found


# what the warning of an emulated bfloat16 or float16 advises instead
_ADVICE = "Use precision='int8' (faster, approximate) or 'float32' (exact), or precision='auto'"

PRECISIONS: tuple[Precision, ...] = (
    Precision(
        name="bfloat16",
        torch_name="bfloat16",
        aliases=("bf16",),
        description="bfloat16 weights and activations (approximate)",
        gist="approximate",
        cuda_vectors="bfloat16-cuda",
        native="bf16_native",
        emulated=(
            "precision='bfloat16' has no native kernels on this CPU (oneDNN needs AVX-512 BW/VL/DQ, AVX-512 BF16, AMX "
            "or AVX-NE-CONVERT; this CPU has: {flags}); it runs emulated, far slower than float32. " + _ADVICE
        ),
        engines=("onednn.Bf16Engine",),
        trains=True,
        overflow_guard=True,
    ),
    Precision(
        name="float16",
        torch_name="float16",
        aliases=("half", "fp16"),
        description="float16 weights and activations (approximate)",
        gist="approximate",
        cuda_vectors="float16-cuda",
        native="fp16_native",
        emulated=(
            "precision='float16' has no native kernels on this CPU (oneDNN needs AVX-512 FP16 or AMX-FP16; this CPU "
            "has: {flags}); it runs emulated, slower than float32. " + _ADVICE
        ),
        engines=(),
        trains=False,
        overflow_guard=True,
        cpu_requires="float16_products",
        refused=(
            "precision='float16': this torch ({torch}) has no float16 products on the CPU: use 'bfloat16' or "
            "'float32' there, float16 on a GPU, or a newer torch"
        ),
    ),
    Precision(
        name="float32",
        torch_name="float32",
        aliases=("float",),
        description="float32 (exact)",
        gist="exact",
        cuda_vectors=None,
        native=None,
        emulated="",
        engines=("onednn.Float32Engine", "mkl.MklEngine"),
        trains=True,
    ),
    Precision(
        name="int8",
        torch_name="int8",
        aliases=("qint8",),
        description="int8 weights per output channel, float32 activations (approximate)",
        gist="faster on CPU, approximate",
        cuda_vectors=None,
        native="vector_kernels",
        emulated=(
            "precision='int8' has no vector kernels on this CPU (they need at least AVX2; ATen reports {aten}, "
            "flags: {flags}); it runs emulated, slower than float32. Use precision='float32'"
        ),
        engines=("int8.Int8Engine",),
        trains=False,
    ),
)
PRECISION_NAMES = tuple(p.name for p in PRECISIONS)  # the precisions load_bilm takes by name
# the names vectors are identified by (cache keys, saved pipelines, Precision.fingerprint)
VECTOR_PRECISIONS = (*PRECISION_NAMES, *(p.cuda_vectors for p in PRECISIONS if p.cuda_vectors is not None))
AUTO = "auto"  # a precision that names no row: auto_precision's choice
CHOICES = (*PRECISION_NAMES, AUTO)  # what a precision setting takes by name (its aliases aside)
ALIASES = {alias: p.name for p in PRECISIONS for alias in p.aliases}
_BY_NAME = {p.name: p for p in PRECISIONS}
_BY_TORCH_NAME = {p.torch_name: p for p in PRECISIONS}
PrecisionLike = Union[str, "torch.dtype", Precision, None]  # what a user may pass for a precision


def precision(name: str) -> Precision:
    """The row of the precision named ``name`` (a name of :data:`PRECISION_NAMES`)."""
    return _BY_NAME[name]


def torch_dtype_name(dtype: torch.dtype) -> str:
    """torch's attribute name of ``dtype`` (``torch.bfloat16`` -> "bfloat16"): the one place a dtype is spelled."""
    return str(dtype).replace("torch.", "")


def of_dtype(dtype: torch.dtype, int8: bool = False) -> Precision:
    """The row whose torch dtype is ``dtype`` (the int8 row where ``int8``: weights quantized, float32 elsewhere);
    ``ValueError`` for a dtype of no row."""
    name = "int8" if int8 else torch_dtype_name(dtype)
    row = _BY_TORCH_NAME.get(name)
    if row is None:
        raise ValueError(f"no precision computes in {dtype}: precision must be one of {list(CHOICES)}")
    return row


def check(value: PrecisionLike) -> str:
    """The name of the precision ``value`` asks for, one of :data:`CHOICES` (``None``: "float32"; an alias such as
    "half" or "bf16", a ``torch`` dtype by its name, a row); else ``ValueError`` listing them. Torch-free."""
    if value is None:
        return "float32"
    if isinstance(value, Precision):
        return value.name
    if isinstance(value, str):
        name = ALIASES.get(value, value)
    elif type(value).__name__ == "dtype" and type(value).__module__ == "torch":  # (torch need not be imported)
        torch_name = torch_dtype_name(value)
        row = _BY_TORCH_NAME.get(torch_name)
        name = row.name if row is not None else ALIASES.get(torch_name, torch_name)
    else:
        name = ""
    if name not in CHOICES:
        raise ValueError(f"precision must be one of {list(CHOICES)}, not {value!r}")
    return name


def resolve(value: PrecisionLike, device_type: str = "cpu") -> Precision:
    """The row ``value`` names (see :func:`check`); "auto": :func:`auto_precision`'s on a device of type
    ``device_type``. The edge where a user's value becomes a row."""
    name = check(value)
    return precision(auto_precision(device_type) if name == AUTO else name)


def vectors_fingerprint(files_fingerprint: str, vectors: str) -> str:
    """The identity of the vectors a model's files give in the precision whose vectors are named ``vectors`` (a name
    of :data:`VECTOR_PRECISIONS`): float32's is the files' own fingerprint; another precision gives other vectors,
    so a hash of both."""
    if vectors == "float32":
        return files_fingerprint
    return hashlib.sha256(f"{files_fingerprint}:torch.{vectors}".encode()).hexdigest()[:32]


def training_precisions() -> tuple[str, ...]:
    """What ``spacy-elmo train --precision`` takes: "auto", then the precisions training computes in."""
    return (AUTO, *(p.name for p in PRECISIONS if p.trains))


def precision_help() -> str:
    """The ``--precision`` help: every precision with its gist and the other spellings it takes (its aliases), and
    "auto"."""
    listed = ", ".join(
        f"{p.name} ({p.gist}{'; also ' + ', '.join(p.aliases) if p.aliases else ''})" for p in PRECISIONS
    )
    return f"precision: {listed} or {AUTO} (the fastest here that holds its bound on every input: float32)"


def auto_precision(device_type: str) -> str:
    """What ``precision="auto"`` names on a device of type ``device_type``: the fastest precision that holds its
    documented error bound on every input, float32.

    int8 (x86 CPUs), bfloat16 and float16 are faster, but none of them holds its bound on every input of a trained
    model, so "auto" never picks them: it must never be silently wrong. A trained biLM (the bundled one has no cell
    clip) carries their rounding along a run of repeated tokens instead of forgetting it, so their error grows with
    the run past their bounds, and int8 exceeds its bound on ordinary sentences too (benchmarks/RESULTS.md, "Low
    precision on the trained model"). Keeping the recurrent products in float32 does not help enough (every 8-bit
    product alone breaks the bound: the same section) and would cost int8 its speed at batch 1. Ask for a low
    precision explicitly where its measured error (docs/precision.md) is acceptable. The answer is the same on CPU
    and CUDA today.
    """
    return "float32"


__all__ = [
    "ALIASES",
    "AUTO",
    "CHOICES",
    "PRECISIONS",
    "PRECISION_NAMES",
    "VECTOR_PRECISIONS",
    "Precision",
    "PrecisionLike",
    "auto_precision",
    "check",
    "of_dtype",
    "precision",
    "precision_help",
    "resolve",
    "torch_dtype_name",
    "training_precisions",
    "vectors_fingerprint",
]
