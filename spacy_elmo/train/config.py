"""Every training option in one place: :class:`TrainConfig` (its defaults are the CLI's) and :func:`check_config`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

LSTM_IMPLS = ("auto", "fused", "exact")
LR_SCHEDULES = ("linear", "constant")
DEFAULT_SHARD_SENTENCES = 2000  # sentences per shard of a prepared corpus (spacy-elmo prepare-corpus)
PRECISIONS = ("auto", "float32", "bfloat16")  # see train/precision.py


@dataclass
class TrainConfig:
    """Every training option; stored in the checkpoint and in ``metrics.json``.

    ``spacy-elmo train`` takes its defaults from here, so the command line and the Python API
    train the same model from the same text.
    """

    train: list[dict[str, str]]  # Source.to_json() of each training file (none when training on corpus)
    valid: list[dict[str, str]] = field(default_factory=list)
    architecture: Any = "small"  # preset name, JSON path, or an options dict
    vocab_size: int = 50000  # softmax words, the three markers included
    min_count: int = 3  # words seen fewer times become <UNK>
    epochs: float = 1.0
    token_budget: int = 4096  # padded tokens per batch
    lr: float = 2e-3
    lr_schedule: str = "linear"  # "linear" decay to lr * min_lr_ratio over the planned epochs, or "constant"
    min_lr_ratio: float = 0.05
    warmup_steps: int = 100
    clip_norm: float = 1.0
    dropout: float = 0.0
    seed: int = 0
    max_length: int = 100
    cutoffs: tuple[int, ...] = (2000, 10000)
    div_value: float = 2.0
    eval_every: int = 0  # also validate every N steps (0: only at the end of each epoch)
    checkpoint_every: int = 200  # steps between checkpoints
    max_steps: Optional[int] = None
    max_minutes: Optional[float] = None  # stop (after a validation and an export) after this much wall time
    threads: Optional[int] = None  # recorded only: the CLI sets torch's (process-wide) thread count, never the library
    lstm_impl: str = "auto"  # one of LSTM_IMPLS
    init_from: Optional[str] = None
    buffer_size: int = 20000  # sentences held at once for length bucketing (a prepared corpus: per shard group)
    corpus: list[str] = field(default_factory=list)  # prepared corpus directories (spacy-elmo prepare-corpus)
    precision: str = "auto"  # one of PRECISIONS: auto = bfloat16 where the CPU has native kernels, else float32
    # with init_from and corpus: start where the init_from model's last stage stopped reading the same corpus
    continue_corpus: bool = False


# (field, option, test, requirement): values that would train nothing or fail later are refused up front
_RULES: tuple[tuple[str, str, Callable[[Any], bool], str], ...] = (
    ("epochs", "--epochs", lambda v: math.isfinite(v) and v > 0, "a number > 0"),
    ("max_length", "--max-length", lambda v: v >= 1, "at least 1"),
    ("token_budget", "--token-budget", lambda v: v >= 1, "at least 1"),
    ("lr", "--lr", lambda v: math.isfinite(v) and v > 0, "a number > 0"),
    ("lr_schedule", "--lr-schedule", lambda v: v in LR_SCHEDULES, " or ".join(LR_SCHEDULES)),
    ("min_lr_ratio", "min_lr_ratio", lambda v: 0 <= v <= 1, "in [0, 1]"),
    ("vocab_size", "--vocab-size", lambda v: v >= 4, "at least 4 (<S>, </S>, <UNK> and one word)"),
    ("min_count", "--min-count", lambda v: v >= 1, "at least 1"),
    ("warmup_steps", "--warmup-steps", lambda v: v >= 0, "0 or more"),
    ("clip_norm", "--clip-norm", lambda v: math.isfinite(v) and v >= 0, "0 (off) or a number > 0"),
    ("dropout", "--dropout", lambda v: 0 <= v < 1, "in [0, 1)"),
    ("div_value", "--div-value", lambda v: math.isfinite(v) and v > 0, "a number > 0"),
    ("eval_every", "--eval-every", lambda v: v >= 0, "0 (off) or more"),
    ("checkpoint_every", "--checkpoint-every", lambda v: v >= 0, "0 (only at the end of each epoch) or more"),
    ("max_steps", "--max-steps", lambda v: v is None or v >= 1, "at least 1"),
    ("max_minutes", "--max-minutes", lambda v: v is None or (math.isfinite(v) and v > 0), "a number > 0"),
    ("threads", "--threads", lambda v: v is None or v >= 1, "at least 1"),
    ("lstm_impl", "--lstm-impl", lambda v: v in LSTM_IMPLS, ", ".join(LSTM_IMPLS[:-1]) + " or " + LSTM_IMPLS[-1]),
    ("buffer_size", "buffer_size", lambda v: v >= 1, "at least 1"),
    ("precision", "--precision", lambda v: v in PRECISIONS, ", ".join(PRECISIONS[:-1]) + " or " + PRECISIONS[-1]),
)


def check_config(config: TrainConfig) -> None:
    """Refuse option values that would train nothing or crash later, before any work (ValueError naming the option)."""
    if config.continue_corpus and not (config.init_from and config.corpus):
        raise ValueError("--continue-corpus continues an --init-from model's reading of a prepared --corpus: give both")
    for name, option, test, requirement in _RULES:
        value = getattr(config, name)
        try:
            valid = test(value)
        except TypeError:  # e.g. a string where a number belongs
            valid = False
        if not valid:
            raise ValueError(f"{option} must be {requirement}, not {value!r}")


__all__ = ["DEFAULT_SHARD_SENTENCES", "LR_SCHEDULES", "LSTM_IMPLS", "PRECISIONS", "TrainConfig", "check_config"]
