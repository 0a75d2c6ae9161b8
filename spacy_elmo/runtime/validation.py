"""Checks of user-given settings and inputs shared by the front ends and the backend (one copy of each).

Each returns the value in plain types or raises ``ValueError`` (``TypeError`` for input of the wrong
kind) naming the setting: :func:`positive_int` (batch sizes and other counts), :func:`check_window_config`
and :func:`optional_windows` (``max_length`` and ``window_overlap``), :func:`check_dtype` (a precision's
name), :func:`resolve_device` (a torch device), :func:`validate_sentences` (token-list input). The mix's
settings are checked in ``mix.py`` (``check_layer_spec``, ``check_gamma``) and pooling's in ``pooling.py``
(``check_pooling``): each belongs to the one computation that reads it.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Optional, Union

import numpy as np

from ..sources.bundled_versions import PRECISION_NAMES
from ..sources.bundled_versions import VECTOR_PRECISIONS as VECTOR_PRECISIONS  # vectors_precision's names

if TYPE_CHECKING:
    import torch
# torch is imported where a check needs it, not here: the CLI checks its arguments (a precision's name, a count)
# through this module before anything imports torch (docs/cli.md)

AUTO = "auto"  # the fastest precision that holds its bound on every input: float32 (bilm/cpu_support.auto_dtype)
DTYPE_NAMES = [*PRECISION_NAMES, AUTO]


def vectors_precision(dtype: str, device: Union[str, torch.device]) -> str:
    """The name in :data:`VECTOR_PRECISIONS` of the vectors ``dtype`` (a name in :data:`PRECISION_NAMES`) gives on
    ``device``."""
    if dtype not in ("bfloat16", "float16"):
        return dtype
    import torch

    if torch.device(device).type == "cuda":
        return f"{dtype}-cuda"
    return dtype


_DTYPE_ALIASES = {"half": "float16", "fp16": "float16", "bf16": "bfloat16", "float": "float32", "qint8": "int8"}


def positive_int(value: Any, name: str) -> int:
    """``value`` as an ``int`` when it is an integer >= 1 (numpy integers too, booleans not); else ``ValueError``
    naming it."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name}={value!r}: expected a positive integer")
    return int(value)


def check_window_config(max_length: int, overlap: int) -> tuple[int, int]:
    """``(max_length, overlap)`` as ints; ``ValueError`` unless ``max_length >= 1`` and
    ``0 <= overlap < max_length``."""
    max_length = positive_int(max_length, "max_length")
    if isinstance(overlap, bool) or not isinstance(overlap, (int, np.integer)) or not 0 <= overlap < max_length:
        raise ValueError(
            f"window_overlap={overlap!r}: expected an int with 0 <= window_overlap < max_length ({max_length})"
        )
    return max_length, int(overlap)


def optional_windows(max_length: Optional[int], overlap: int) -> tuple[Optional[int], int]:
    """``(max_length, overlap)`` checked as :func:`check_window_config` does; ``max_length=None`` means no windows."""
    if max_length is None:
        return None, overlap
    return check_window_config(max_length, overlap)


def check_dtype(dtype: Union[str, torch.dtype, None]) -> str:
    """The name of the precision ``dtype`` asks for: one of ``DTYPE_NAMES`` (``None``: "float32"; aliases such as
    "half" or "bf16" and ``torch`` dtypes by their name); else ``ValueError`` listing them."""
    if dtype is None:
        return "float32"
    if isinstance(dtype, str):
        name = _DTYPE_ALIASES.get(dtype, dtype)
    else:
        import torch

        name = str(dtype).replace("torch.", "") if isinstance(dtype, torch.dtype) else str(dtype)
    if name not in DTYPE_NAMES:
        raise ValueError(f"dtype must be one of {DTYPE_NAMES}, not {dtype!r}")
    return name


def resolve_device(device: Union[str, torch.device, None] = None) -> torch.device:
    """``None`` means CPU; a CUDA device that is not available is an error, not a silent fallback."""
    import torch

    try:
        resolved = torch.device("cpu" if device is None else device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(
            f"device={device!r} is not a torch device: use None or 'cpu', 'cuda', 'cuda:N' (or another torch "
            f"device such as 'mps' or 'xpu') ({err})"
        ) from err
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device={str(device)!r} requested but CUDA is not available")
        if resolved.index is None:
            resolved = torch.device("cuda", torch.cuda.current_device())
    return resolved


_STR_ONLY = {str}


def validate_sentences(sentences: Iterable[Sequence[str]]) -> list[Sequence[str]]:
    """Materialise ``sentences`` as a list, raising ``TypeError`` that names the bad sentence/token.

    The one check of tokenized input: the backend's ``embed``, AllenNLP's ``batch_to_ids`` /
    ``ElmoEmbedder`` and simple_elmo's ``ElmoModel`` all call it, so a plain string where a token
    list belongs (which would be split into characters) or a token that is not a ``str`` gets the
    same message everywhere.
    """
    if isinstance(sentences, (str, bytes)) or not _is_iterable(sentences):
        raise TypeError(f"sentences must be an iterable of token sequences, not {type(sentences).__name__}")
    checked: list[Sequence[str]] = []
    for i, sentence in enumerate(sentences):
        if isinstance(sentence, (str, bytes)) or not _is_iterable(sentence):
            raise TypeError(
                f"sentence {i} is a {type(sentence).__name__}, not a sequence of token strings "
                f"(tokenize text first, e.g. text.split())"
            )
        tokens = list(sentence)
        if not set(map(type, tokens)) <= _STR_ONLY:  # fast path for plain str; subclasses checked below
            for j, token in enumerate(tokens):
                if not isinstance(token, str):
                    raise TypeError(f"sentence {i}, token {j}: expected str, got {type(token).__name__} ({token!r})")
        checked.append(tokens)
    return checked


def _is_iterable(value: object) -> bool:
    try:
        iter(value)  # type: ignore[call-overload]
    except TypeError:
        return False
    return True
