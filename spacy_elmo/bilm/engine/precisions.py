"""The precisions the biLM computes in, in one ordered table that every place naming, checking or serving one reads.

Each row (:class:`Precision`) says what a precision is called (``dtype="int8"``, the command line's ``--dtype``)
and its other spellings, the torch dtype that stands for it, the names of the vectors it gives (cache keys,
fingerprints, saved pipelines: :data:`VECTOR_PRECISIONS`), its words in the load log and in the ``--dtype`` help,
which probe of :mod:`..cpu_support` says whether this CPU runs it natively (and the warning when it does not), the
engines that serve it, in the order they are asked (:data:`.registry.ENGINES` is built from them, the plain engine
last), and whether ``spacy-elmo train --precision`` takes it. Its readers: ``runtime/configuration/validation.py``
(the names a ``dtype`` takes), ``runtime/embedding/backend.py`` (the torch dtype, the load log),
``sources/pinned_model.py`` (the vectors' names), :mod:`.registry` (the engines, the emulated warning),
``train/config.py`` (``--precision``) and the command line's help.

Adding a precision is one row here and its engine family's file in ``bilm/engine/`` (its ``serves``, products,
``load`` and ``tolerance``), which ``tests/bilm/test_engines.py`` holds to float32. The table is torch-free (the
command line checks a ``dtype`` before torch is imported): a row names torch's dtype by its attribute, read by
:meth:`Precision.dtype` where torch is imported anyway.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Precision:
    """One precision: its names, its torch dtype, how it is described, probed, warned about and served."""

    name: str  # what load_bilm, the front ends and --dtype take, and the name of its vectors on a CPU
    torch_name: str  # torch's attribute for it (torch.int8 stands for the int8 path: int8 weights, float32 rest)
    aliases: tuple[str, ...]  # other spellings a dtype may take ("half", "bf16")
    description: str  # the load log's words (INFO)
    gist: str  # the --dtype help's words
    # the name of its vectors on a GPU where torch's CUDA kernels round otherwise than the CPU's (far beyond float32's
    # rounding), so that they are cached apart; None: the same vectors (float32), or a precision only the CPU runs
    cuda_vectors: Optional[str]
    # the cpu_support probe that says this CPU runs it natively, and the warning when it does not ({flags}: the CPU's
    # flags, {aten}: ATen's vector ISA); None: native wherever it runs
    native: Optional[str]
    emulated: str
    engines: tuple[str, ...]  # "module.Class" in bilm/engine, asked in this order (the plain engine serves the rest)
    trains: bool  # whether training computes in it (spacy-elmo train --precision)

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


# what the warning of an emulated bfloat16 or float16 advises instead
_ADVICE = "Use dtype='int8' (faster, approximate) or 'float32' (exact), or dtype='auto'"

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
            "dtype='bfloat16' has no native kernels on this CPU (oneDNN needs AVX-512 BW/VL/DQ, AVX-512 BF16, AMX "
            "or AVX-NE-CONVERT; this CPU has: {flags}); it runs emulated, far slower than float32. " + _ADVICE
        ),
        engines=("onednn.Bf16Engine",),
        trains=True,
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
            "dtype='float16' has no native kernels on this CPU (oneDNN needs AVX-512 FP16 or AMX-FP16; this CPU "
            "has: {flags}); it runs emulated, slower than float32. " + _ADVICE
        ),
        engines=(),
        trains=False,
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
            "dtype='int8' has no vector kernels on this CPU (they need at least AVX2; ATen reports {aten}, flags: "
            "{flags}); it runs emulated, slower than float32. Use dtype='float32'"
        ),
        engines=("int8.Int8Engine",),
        trains=False,
    ),
)
PRECISION_NAMES = tuple(p.name for p in PRECISIONS)  # the precisions load_bilm takes by name
# the names vectors are identified by (cache keys, saved pipelines, bundled_versions.precision_fingerprint)
VECTOR_PRECISIONS = (*PRECISION_NAMES, *(p.cuda_vectors for p in PRECISIONS if p.cuda_vectors is not None))
AUTO = "auto"  # a dtype that names no row: auto_precision's choice
ALIASES = {alias: p.name for p in PRECISIONS for alias in p.aliases}
_BY_NAME = {p.name: p for p in PRECISIONS}


def precision(name: str) -> Precision:
    """The row of the precision named ``name`` (a name of :data:`PRECISION_NAMES`, or a torch dtype's name)."""
    return _BY_NAME[name]


def training_precisions() -> tuple[str, ...]:
    """What ``spacy-elmo train --precision`` takes: "auto", then the precisions training computes in."""
    return (AUTO, *(p.name for p in PRECISIONS if p.trains))


def dtype_help() -> str:
    """The ``--dtype`` help: every precision with its gist and the other spellings it takes (its aliases), and
    "auto"."""
    listed = ", ".join(
        f"{p.name} ({p.gist}{'; also ' + ', '.join(p.aliases) if p.aliases else ''})" for p in PRECISIONS
    )
    return f"precision: {listed} or {AUTO} (the fastest here that holds its bound on every input: float32)"


def auto_precision(device_type: str) -> str:
    """What ``dtype="auto"`` names on a device of type ``device_type``: the fastest precision that holds its documented
    error bound on every input, float32.

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
    "PRECISIONS",
    "PRECISION_NAMES",
    "VECTOR_PRECISIONS",
    "Precision",
    "auto_precision",
    "dtype_help",
    "precision",
    "training_precisions",
]
