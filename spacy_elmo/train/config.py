"""Every training option in one place: :class:`TrainConfig` (each option's default and command-line help) and
:func:`check_config` (its check)."""

from __future__ import annotations

import math
from dataclasses import Field, dataclass, field, fields
from typing import Any, Callable, Optional

from ..bilm.engine.precisions import training_precisions
from ..groundwork.excerpt import excerpt
from ..groundwork.number_checks import finite_number, whole_number

LSTM_IMPLS = ("auto", "fused", "exact")
LR_SCHEDULES = ("linear", "constant")
DEFAULT_SHARD_SENTENCES = 2000  # sentences per shard of a prepared corpus (spacy-elmo prepare-corpus)
PRECISIONS = training_precisions()  # "auto" and the precision table's rows that train (train/network/precision.py)


def _option(help: str, *flags: str) -> dict[str, Any]:
    """A field's command-line option: its help text and, when they are not ``--field-name``, its flags."""
    return {"help": help, "flags": flags}


@dataclass
class TrainConfig:
    """Every training option; stored in the checkpoint and in ``metrics.json``.

    Each field with an option (its ``metadata``: help text, flags) is a ``spacy-elmo train`` option with
    this default, so the command line and the Python API train the same model from the same text: a new
    option is one field here and its one-line parameter in the command (``cli.train``, which takes flags,
    help and default from the field; a test checks that every field has its option). ``train``, ``valid``
    and ``corpus`` come from the command's own ``--train``/``--raw``, ``--valid`` and ``--corpus`` (text
    files become sources).
    """

    train: list[dict[str, str]]  # Source.to_json() of each training file (none when training on corpus)
    valid: list[dict[str, str]] = field(default_factory=list)
    architecture: Any = field(
        default="small",
        metadata=_option("Preset (tiny, small, original) or an options.json-style JSON file", "--arch", "-a"),
    )  # preset name, JSON path, or an options dict
    vocab_size: int = field(default=50000, metadata=_option("Most softmax words (<S>, </S>, <UNK> included)"))
    min_count: int = field(
        default=3, metadata=_option("Leave words seen fewer times out of the softmax vocabulary (they become <UNK>)")
    )
    epochs: float = field(default=1.0, metadata=_option("Passes over the training text (a fraction is allowed)"))
    token_budget: int = field(default=4096, metadata=_option("Padded tokens per batch"))
    lr: float = field(default=2e-3, metadata=_option("Adam learning rate"))
    lr_schedule: str = field(
        default="linear", metadata=_option("linear (decay over --epochs or --max-minutes) or constant")
    )
    min_lr_ratio: float = field(
        default=0.05, metadata=_option("The linear schedule decays to lr x this (in [0, 1]) at its end")
    )
    warmup_steps: int = field(default=100, metadata=_option("Steps of linear learning-rate warm-up"))
    clip_norm: float = field(default=1.0, metadata=_option("Gradient norm clipping (0: off)"))
    dropout: float = field(default=0.0, metadata=_option("Dropout between LSTM layers and before the softmax"))
    seed: int = field(
        default=0,
        metadata=_option("Random seed: the same seed and data give the same model (bit-exact with --threads 1)"),
    )
    max_length: int = field(default=100, metadata=_option("Cut sentences longer than this many tokens"))
    cutoffs: tuple[int, ...] = field(
        default=(2000, 10000), metadata=_option("Adaptive softmax cluster boundaries (word ranks)")
    )
    div_value: float = field(
        default=2.0, metadata=_option("Adaptive softmax: each tail cluster's width shrinks by this factor")
    )
    eval_every: int = field(default=0, metadata=_option("Also validate (and export if better) every N steps"))
    checkpoint_every: int = field(default=200, metadata=_option("Save checkpoint.safetensors every N steps"))
    max_steps: Optional[int] = field(default=None, metadata=_option("Stop after this many steps"))
    max_minutes: Optional[float] = field(
        default=None,
        metadata=_option(
            "Stop after this much wall time in all, a resumed run's earlier time included (the lr schedule ends there)"
        ),
    )
    # recorded only: the CLI sets torch's (process-wide) thread count, never the library
    threads: Optional[int] = field(
        default=None,
        metadata=_option(
            "torch CPU threads per training process (default: with several processes the machine's cores / "
            "processes on it; else as in the resumed run, else torch's choice)"
        ),
    )
    lstm_impl: str = field(
        default="auto", metadata=_option("auto, fused (torch.nn.LSTM, no clipping) or exact (the ELMo cell, clipping)")
    )  # one of LSTM_IMPLS
    init_from: Optional[str] = field(
        default=None,
        metadata=_option("Fine-tune this biLM directory (options.json + *.hdf5; its softmax too if present)"),
    )
    buffer_size: int = field(
        default=20000,
        metadata=_option("Sentences held at once for length bucketing (a prepared corpus: per shard group)"),
    )
    corpus: list[str] = field(default_factory=list)  # prepared corpus directories (spacy-elmo prepare-corpus)
    precision: str = field(
        default="auto",
        metadata=_option(
            "auto (bfloat16 mixed precision where the CPU has native bfloat16 kernels, else float32), float32 "
            "(exact, reproducible) or bfloat16"
        ),
    )  # one of PRECISIONS (train/network/precision.py)
    continue_corpus: bool = field(
        default=False,
        metadata=_option(
            "With --init-from and --corpus: start at the batch after the last one the --init-from model's last stage "
            "trained on (the same corpus, --seed, --token-budget and --max-length), so stages read the corpus once",
            "--continue-corpus",
        ),
    )


def option_flags(config_field: Field) -> tuple[str, ...]:
    """The command-line flags of a :class:`TrainConfig` field: its metadata's, else ``--field-name``."""
    return config_field.metadata.get("flags") or ("--" + config_field.name.replace("_", "-"),)


FLOAT32_MAX = 3.4028234663852886e38  # the largest float32: the optimizer's settings become float32 tensors
# (field, test, requirement): values that would train nothing or fail later are refused up front
_RULES: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    ("epochs", lambda v: math.isfinite(v) and v > 0, "a number > 0"),
    ("max_length", lambda v: v >= 1, "at least 1"),
    ("token_budget", lambda v: v >= 1, "at least 1"),
    ("lr", lambda v: 0 < v <= FLOAT32_MAX, "a number > 0 that float32 holds (at most 3.4e38)"),
    ("lr_schedule", lambda v: v in LR_SCHEDULES, " or ".join(LR_SCHEDULES)),
    ("min_lr_ratio", lambda v: 0 <= v <= 1, "in [0, 1]"),
    ("vocab_size", lambda v: v >= 4, "at least 4 (<S>, </S>, <UNK> and one word)"),
    ("min_count", lambda v: v >= 1, "at least 1"),
    ("warmup_steps", lambda v: v >= 0, "0 or more"),
    ("clip_norm", lambda v: 0 <= v <= FLOAT32_MAX, "0 (off) or a number > 0 that float32 holds (at most 3.4e38)"),
    ("dropout", lambda v: 0 <= v < 1, "in [0, 1)"),
    ("div_value", lambda v: math.isfinite(v) and v > 0, "a number > 0"),
    ("eval_every", lambda v: v >= 0, "0 (off) or more"),
    ("checkpoint_every", lambda v: v >= 0, "0 (only at the end of each epoch) or more"),
    ("max_steps", lambda v: v is None or v >= 1, "at least 1"),
    ("max_minutes", lambda v: v is None or (math.isfinite(v) and v > 0), "a number > 0"),
    ("threads", lambda v: v is None or v >= 1, "at least 1"),
    ("lstm_impl", lambda v: v in LSTM_IMPLS, ", ".join(LSTM_IMPLS[:-1]) + " or " + LSTM_IMPLS[-1]),
    ("buffer_size", lambda v: v >= 1, "at least 1"),
    ("precision", lambda v: v in PRECISIONS, ", ".join(PRECISIONS[:-1]) + " or " + PRECISIONS[-1]),
)
_FIELDS = {f.name: f for f in fields(TrainConfig)}


def check_config(config: TrainConfig) -> None:
    """Refuse option values that would train nothing or crash later, before any work (ValueError naming the option)."""
    if config.continue_corpus and not (config.init_from and config.corpus):
        raise ValueError("--continue-corpus continues an --init-from model's reading of a prepared --corpus: give both")
    for config_field in fields(TrainConfig):  # each number a number first (whole_number, finite_number: one test)
        _check_number(config_field, getattr(config, config_field.name))
    for name, test, requirement in _RULES:
        value = getattr(config, name)
        try:
            valid = test(value)
        except TypeError:  # e.g. a string where a number belongs
            valid = False
        if not valid:
            raise ValueError(f"{option_flags(_FIELDS[name])[0]} must be {requirement}, not {value!r}")


_NUMBER_TYPES = {"int": "an integer from -2**63 to 2**63 - 1", "float": "a finite number"}


def _check_number(config_field: Field, value: Any) -> None:
    """A field annotated ``int`` or ``float`` (or ``Optional`` of one) holds one: an integer of int64's range (not a
    boolean), a finite number; else a ``ValueError`` naming its option. Its range is :data:`_RULES`' to say."""
    kind = str(config_field.type).replace("Optional[", "").rstrip("]")
    if kind not in _NUMBER_TYPES or (value is None and str(config_field.type).startswith("Optional[")):
        return
    number = whole_number(value) if kind == "int" else finite_number(value)
    if number is None:
        raise ValueError(f"{option_flags(config_field)[0]} must be {_NUMBER_TYPES[kind]}, not {excerpt(value)}")


__all__ = [
    "DEFAULT_SHARD_SENTENCES",
    "LR_SCHEDULES",
    "LSTM_IMPLS",
    "PRECISIONS",
    "TrainConfig",
    "check_config",
    "option_flags",
]
