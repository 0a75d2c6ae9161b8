"""Checks of user-given settings and inputs shared by the front ends and the backend (one copy of each).

Each returns the value in plain types or raises ``ValueError`` (``TypeError`` for input of the wrong
kind) naming the setting: :func:`positive_int` (batch sizes and other counts), :func:`check_window_config`
and :func:`optional_windows` (``max_length`` and ``window_overlap``), :func:`check_dtype` (a precision's
name), :func:`resolve_device` (a torch device this machine has), :func:`validate_sentences` (token-list input).
Every number a user gives goes through one of :func:`integer_in`, :func:`finite_in`, :func:`memory_mb`,
:func:`disk_mb` and :func:`process_count` (``positive_int`` is ``integer_in`` from 1), bounded by what this machine
has where a number sizes something on it.
The mix's settings are checked in ``mix.py`` (``check_layer_spec``, ``check_gamma``) and pooling's in
``pooling.py`` (``check_pooling``): each belongs to the one computation that reads it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Optional, Union

from ...bilm.engine.precisions import ALIASES, AUTO, PRECISION_NAMES, precision
from ...groundwork.excerpt import excerpt
from ...groundwork.machine import memory_bytes, usable_cores
from ...groundwork.number_checks import MAX_COUNT, finite_number, whole_number
from ...groundwork.probe import feature

if TYPE_CHECKING:
    import torch
# torch is imported where a check needs it, not here: the CLI checks its arguments (a precision's name, a count)
# through this module before anything imports torch (docs/cli.md)

# what a dtype may name: a precision of the table (bilm/engine/precisions.py), or "auto" (float32: auto_precision)
DTYPE_NAMES = [*PRECISION_NAMES, AUTO]


def vectors_precision(dtype: str, device: Union[str, torch.device]) -> str:
    """The name in :data:`~spacy_elmo.bilm.engine.precisions.VECTOR_PRECISIONS` of the vectors ``dtype`` (a name in
    :data:`PRECISION_NAMES`) gives on ``device``: its row's
    :meth:`~spacy_elmo.bilm.engine.precisions.Precision.vectors_on`."""
    row = precision(dtype) if dtype in PRECISION_NAMES else None
    if row is None or row.cuda_vectors is None:  # one name on every device: no torch
        return dtype
    import torch

    return row.vectors_on(torch.device(device).type)


def positive_int(value: Any, name: str) -> int:
    """``value`` as an ``int`` when it is an integer in ``[1, MAX_COUNT]`` (numpy integers too, booleans not); else
    ``ValueError`` naming it (:func:`integer_in`)."""
    return integer_in(value, name, 1)


def check_window_config(max_length: int, overlap: int) -> tuple[int, int]:
    """``(max_length, overlap)`` as ints; ``ValueError`` unless ``max_length >= 1`` and
    ``0 <= overlap < max_length``."""
    max_length = positive_int(max_length, "max_length")
    return max_length, integer_in(overlap, "window_overlap", 0, max_length - 1, f" (below max_length={max_length})")


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
        name = ALIASES.get(dtype, dtype)
    else:
        import torch

        name = str(dtype).replace("torch.", "") if isinstance(dtype, torch.dtype) else str(dtype)
    if name not in DTYPE_NAMES:
        raise ValueError(f"dtype must be one of {DTYPE_NAMES}, not {dtype!r}")
    return name


def resolve_device(
    device: Union[str, int, torch.device, None] = None, name: str = "device", *, cpu: object = "cpu"
) -> torch.device:
    """The torch device ``device`` names, checked to exist on this machine: the one check of a device, which every
    front end runs before a model is put on one.

    ``None`` means the CPU; an ``int`` N, ``"cuda:N"`` (AllenNLP's ``cuda_device``); ``"cuda"`` (no index), torch's
    current CUDA device. Else a ``ValueError`` naming the setting ``name`` and what to give instead (``cpu``: how the
    setting spells the CPU), never torch's error at the first tensor: a string torch does not read as a device
    ("gpu", "cuda:x"); a device type whose backend this torch lacks or this machine does not have (CUDA, Apple's
    MPS, Intel's XPU, any other); an index beyond the devices there are; the meta device, which holds no values.
    """
    import torch

    given = f"{name}={excerpt(device)}"
    use_cpu = f"use {cpu!r} (the CPU)"
    spelled = f"cuda:{int(device)}" if isinstance(device, numbers.Integral) and not isinstance(device, bool) else device
    try:
        resolved = torch.device("cpu" if spelled is None else spelled)  # type: ignore[arg-type]
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(
            f"{given} is not a torch device: {use_cpu}, 'cuda', 'cuda:N' (or another torch device such as 'mps')"
        ) from None
    kind = resolved.type
    if kind == "cpu":
        return resolved
    if kind == "meta":
        raise ValueError(
            f"{given}: the meta device holds shapes but no values, so nothing can be computed on it; {use_cpu}"
        )
    count = _device_count(kind)
    backend = _BACKEND_NAMES.get(kind, kind.upper())
    if count == 0:
        build = f" (torch {torch.__version__}, built for CUDA {torch.version.cuda or 'none'})" if kind == "cuda" else ""
        raise ValueError(f"{given}: {backend} is not available on this machine{build}; {use_cpu}{_others(kind)}")
    if resolved.index is not None and resolved.index >= count:
        there = f"{kind}:0" if count == 1 else f"{kind}:0 .. {kind}:{count - 1}"
        raise ValueError(
            f"{given}: this machine has {count} {backend} device{'s' if count > 1 else ''} ({there}); "
            f"{use_cpu} or one of those"
        )
    if kind == "cuda" and resolved.index is None:
        resolved = torch.device("cuda", torch.cuda.current_device())
    return resolved


_BACKEND_NAMES = {"cuda": "CUDA", "mps": "MPS (Apple's GPU)", "xpu": "XPU (Intel's GPU)", "mtia": "MTIA"}


def _device_count(kind: str) -> int:
    """How many devices of type ``kind`` this machine has for torch: 0 where its backend is missing or sees none.

    torch's module of that name answers (``torch.cuda``, ``torch.mps``, ``torch.xpu``...: ``is_available``,
    ``device_count``); a type without one (``hpu``, ``xla``, ``vulkan``...) is not available to this torch alone.
    """
    import torch

    if kind == "mps":  # torch.backends.mps answers in every torch this package takes (torch.mps only in newer ones)
        return int(torch.backends.mps.is_available())
    module = feature(torch, kind)  # torch.xpu, torch.mtia: newer torch only
    is_available = feature(module, "is_available")
    if not callable(is_available) or not is_available():
        return 0
    count = feature(module, "device_count")
    return max(1, int(count())) if callable(count) else 1


def _others(kind: str) -> str:
    """``" or 'cuda'"`` when this machine has another kind of device than ``kind`` (its fix may be that one)."""
    present = [other for other in _BACKEND_NAMES if other != kind and _device_count(other)]
    return "".join(f" or {other!r}" for other in present)


_STR_ONLY = {str}


def validate_sentences(sentences: Iterable[Sequence[str]], name: str = "sentences") -> list[list[str]]:
    """Materialise ``sentences`` (a batch of token sequences) as a list of token lists, or raise ``TypeError``.

    The one check of tokenized input, which every API that takes token lists runs before anything converts its
    input (``str()``, ``list()``, numpy, padding): the backend's ``embed``, the TF-Hub module's ``tokens``
    signature, AllenNLP's ``batch_to_ids`` and ``ElmoEmbedder``, ELMoForManyLangs' ``sents2elmo`` and simple_elmo's
    ``ElmoModel``. A plain string where the batch or a token list belongs (which would be split into characters)
    and a token that is not a ``str`` (``bytes``, ``None``, a number, a nested list) get the same one-line message
    everywhere, naming the API's argument ``name``, the sentence and the token.
    """
    check_batch(sentences, name)
    return [check_tokens(sentence, f"{name}: sentence {i}") for i, sentence in enumerate(sentences)]


def check_batch(sentences: object, name: str = "sentences") -> None:
    """``TypeError`` naming the argument ``name`` unless ``sentences`` may be a batch of token sequences: an
    iterable that is not a plain string (which would be read as one sentence per character). Reads nothing of it,
    so an API that reads its sentences lazily (AllenNLP's ``embed_sentences``) refuses a string at the call."""
    if isinstance(sentences, (str, bytes)) or not _is_iterable(sentences):
        raise TypeError(
            f"{name} must be an iterable of token sequences (lists of token strings), not a "
            f"{type(sentences).__name__} ({excerpt(sentences)})"
        )


def check_tokens(sentence: Sequence[str], where: str = "tokens") -> list[str]:
    """``sentence`` (one token sequence: a sentence, a vocabulary) as a list of its tokens, or a ``TypeError`` that
    starts with ``where``.

    ``where`` says which input this is in the API's words: the argument's name for a lone token list (AllenNLP's
    ``embed_sentence(sentence)``, ``vocab_to_cache``), ``"sentences: sentence 3"`` for one of a batch
    (:func:`validate_sentences`; an API that reads its sentences lazily, such as AllenNLP's ``embed_sentences``,
    calls this one per sentence with the same words). A plain string is refused, not split into characters; every
    token must be a ``str`` (subclasses, such as ``numpy.str_``, too).
    """
    if isinstance(sentence, (str, bytes)) or not _is_iterable(sentence):
        raise TypeError(
            f"{where} is a {type(sentence).__name__}, not a sequence of token strings "
            f"(tokenize text first, e.g. text.split())"
        )
    tokens = list(sentence)
    if not set(map(type, tokens)) <= _STR_ONLY:  # fast path for plain str; subclasses checked below
        for j, token in enumerate(tokens):
            if not isinstance(token, str):
                raise _not_a_token(token, f"{where}, token {j}", "str")
    return tokens


def token_text(token: object, where: str) -> str:
    """The text of a token in a column of samples (``ElmoVectorizer``'s, Dask's), which may also hold spaCy tokens:
    a ``str``, or a spaCy token's ``.text``; else the ``TypeError`` of :func:`check_tokens`, starting with ``where``
    (``"sample 3, token 0"``)."""
    text = token if isinstance(token, str) else getattr(token, "text", None)
    if not isinstance(text, str):
        raise _not_a_token(token, where, "a string (or spaCy token)")
    return text


def _not_a_token(token: object, where: str, expected: str) -> TypeError:
    """The one message for a token that is not text: where it is, what was expected, what it is (bounded)."""
    hint = " (decode bytes first, e.g. token.decode('utf-8'))" if isinstance(token, bytes) else ""
    return TypeError(f"{where}: expected {expected}, got {type(token).__name__} ({excerpt(token)}){hint}")


def _is_iterable(value: object) -> bool:
    try:
        iter(value)  # type: ignore[call-overload]
    except TypeError:
        return False
    return True


# -- the numbers a user gives ---------------------------------------------------------------------------------------
# Every number a user gives (an argument, a config key, an environment variable, a command-line option) goes through
# one of these, named as the user spelled it: an integer in a range, a finite number in a range, a size in MiB
# bounded by this machine's memory (or by what the disk cache can count), a count of processes bounded by the
# cores. NaN, infinities, booleans and text are refused with the setting's name, never an OverflowError later.

MAX_DISK_MB = float(2**43)  # the disk cache counts its bytes in sqlite's 64-bit integers: 2**63 bytes is 2**43 MiB


def integer_in(value: Any, name: str, low: int, high: int = MAX_COUNT, bound: str = "") -> int:
    """``value`` as an ``int`` when it is an integer (numpy integers too, booleans not) in ``[low, high]``; else a
    ``ValueError`` naming the setting ``name`` and the range (``bound``: why ``high``, said after it)."""
    checked = whole_number(value, low, high)
    if checked is None:
        if high != MAX_COUNT:
            wanted = f"a positive integer up to {high}{bound}" if low == 1 else f"an integer in [{low}, {high}]{bound}"
        else:
            wanted = "a positive integer" if low == 1 else f"an integer >= {low}"
            if isinstance(value, numbers.Integral) and not isinstance(value, bool) and int(value) > high:
                wanted += f" up to 2**63 - 1{bound}"
        raise ValueError(f"{name}={excerpt(value)}: expected {wanted}")
    return checked


def finite_in(
    value: Any,
    name: str,
    low: float,
    high: float = math.inf,
    what: str = "number",
    bound: str = "",
    *,
    above: bool = False,
) -> float:
    """``value`` as a ``float`` when it is a finite real number (numpy's too, booleans not) from ``low`` (``above``:
    greater than ``low``) up to ``high``; else a ``ValueError`` naming the setting ``name`` and the range (``what``:
    the number's words; ``bound``: why ``high``, said after it)."""
    number = finite_number(value)
    if number is None or not (low < number if above else low <= number) or not number <= high:
        wanted = f"a finite {what}" if low == -math.inf else f"a finite {what} {'>' if above else '>='} {_shown(low)}"
        if high != math.inf:
            wanted += f" and <= {_shown(high)}{bound}"
        raise ValueError(f"{name}={excerpt(value)}: expected {wanted}")
    return number


def _shown(bound: float) -> str:
    """A range's end as a message says it: a whole number in full (``8796093022208``), else ``repr``-like."""
    return str(int(bound)) if float(bound).is_integer() else f"{bound:g}"


def memory_mb(value: Any, name: str) -> float:
    """A size in MiB of something kept in memory (``cache_mb``): a finite number from 0 (off) up to this machine's
    physical memory (:func:`~spacy_elmo.groundwork.machine.memory_bytes`; where the system does not say, what the disk
    cache's bound allows); else a ``ValueError`` naming ``name``."""
    total = memory_bytes()
    if total is None:
        return finite_in(value, name, 0, MAX_DISK_MB, "number of MiB")
    return finite_in(value, name, 0, math.floor(total / 2**20), "number of MiB", " (this machine's memory)")


def disk_mb(value: Any, name: str) -> float:
    """A size in MiB of the disk cache (``disk_cache_mb``, ``SPACY_ELMO_CACHE_MB``): a finite number above 0 up to
    :data:`MAX_DISK_MB` (what sqlite's 64-bit byte count holds); else a ``ValueError`` naming ``name``."""
    return finite_in(
        value, name, 0, MAX_DISK_MB, "number of MiB", " (2**63 bytes: what the disk cache can count)", above=True
    )


def process_count(value: Any, name: str) -> int:
    """A number of processes to start on this machine (``--processes``, ``local:N`` workers): an integer from 1 up to
    the cores this process may use (:func:`~spacy_elmo.groundwork.machine.usable_cores`: more would only share cores and
    memory); else a ``ValueError`` naming ``name`` and the bound."""
    cores = usable_cores()
    return integer_in(value, name, 1, cores, f" (the {cores} CPU core{'s' if cores > 1 else ''} this process may use)")
