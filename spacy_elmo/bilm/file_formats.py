"""One schema per file format the package reads, declared once: the keys each reader relies on, their JSON types,
which are required, and their bounds (finite numbers; sizes bounded as options.json's are).

:data:`SCHEMAS` maps each file name of :mod:`~spacy_elmo.groundwork.file_names` that holds JSON (a file, or the
JSON part of a safetensors header) or TSV to its schema (a module that names its own folder's files maps them in its
``FILE_SCHEMAS``: the spaCy component's save); :mod:`~spacy_elmo.groundwork.schema_check` reads a file through one
and turns any violation into one error naming the file and the field. Every schema keeps the keys it does not
declare (a newer version may add some) and takes each declared one in JSON's own types only (``"4"`` is not a number,
``true`` not an integer, ``4.0`` not an integer); a number field refuses NaN and infinity.

``options.json`` (and a ``train --arch`` file) is checked by its own table in :mod:`.weights` (its messages, its
defaults; the same rules), ``counts.tsv`` by :data:`COUNTS_LINE`, a line at a time (it may hold millions of lines).
Lives in ``bilm/`` beside the bounds it shares with :mod:`.weights`, so that every reader (``sources/``, ``train/``,
``spacy/``) may import it.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from ..groundwork.file_names import (
    CHECKPOINT,
    CORPUS_COUNTS,
    CORPUS_MANIFEST,
    METRICS,
    OPTIONS,
    SOFTMAX,
    SOURCE_INFO,
)
from .weights import MAX_PARAMETERS, MAX_WIDTH, options_from_dict

MAX_COUNT = 10**15  # words, sentences, steps: far above any corpus (a trillion words is 10**12)
MAX_SECONDS = 10.0**10  # about 300 years
MAX_CLASSES = 100_000_000  # a softmax's vocabulary
MAX_LENGTH = 1_000_000  # a sentence's tokens (config.max_length)

Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
Seconds = Annotated[float, Field(ge=0, le=MAX_SECONDS)]
Positive = Annotated[float, Field(ge=0, le=1e300)]  # perplexities, epochs, rates: finite and not negative
Text = Annotated[str, Field(max_length=1_000_000)]


class Record(BaseModel):
    """A JSON object of a file: declared keys strictly typed, finite numbers only, other keys kept."""

    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)


# -- metrics.json: what `spacy-elmo train` recorded of a model (train/run/outputs.py writes it) -----------------------


class TrainingSource(Record):
    path: Text


class MetricsCorpus(Record):
    train: Optional[list[TrainingSource]] = None
    prepared: Optional[list[Text]] = None
    words: Count = 0
    distinct_words: Count = 0


class Parameters(Record):
    bilm: Count = 0
    softmax: Count = 0


class Evaluation(Record):
    """One evaluation (``evaluations``, ``epochs``, ``best``): step, epoch, words and perplexities."""

    step: Optional[Count] = None
    epoch: Optional[Positive] = None
    words_seen: Optional[Count] = None
    tokens_per_s: Optional[Positive] = None
    train_ppl_forward: Optional[Positive] = None
    train_ppl_backward: Optional[Positive] = None
    valid_ppl_forward: Optional[Positive] = None
    valid_ppl_backward: Optional[Positive] = None
    valid_ppl_mean: Optional[Positive] = None


class TestResult(Record):
    """A perplexity ``spacy-elmo evaluate --record`` recorded under ``test``."""

    forward: Positive
    backward: Positive
    mean: Optional[Positive] = None


class Stage(Record):
    """One run of a model's training history (``stages``, oldest first)."""

    command: Optional[Text] = None
    started_from: Optional[Text] = None
    sources: list[dict[str, Any]] = []
    words_seen: Optional[Count] = None
    steps: Optional[Count] = None
    wall_time_s: Optional[Seconds] = None
    train_seconds: Optional[Seconds] = None
    valid_perplexity: Optional[dict[str, Positive]] = None


class PreviousRun(Record):
    """``init_from``: the run a fine-tuning run started from, and the one before it."""

    model: Optional[Text] = None
    command: Optional[Text] = None
    steps: Optional[Count] = None
    words_seen: Optional[Count] = None
    wall_time_s: Optional[Seconds] = None
    best: Optional[Evaluation] = None
    init_from: Optional[PreviousRun] = None


class MetricsConfig(Record):
    """The training options (``config``); only those read back are declared."""

    max_length: Optional[Annotated[int, Field(ge=1, le=MAX_LENGTH)]] = None
    cutoffs: Optional[list[Count]] = None
    div_value: Optional[Positive] = None


class Metrics(Record):
    """``metrics.json``."""

    command: Optional[Text] = None
    config: MetricsConfig = MetricsConfig()
    corpus: MetricsCorpus = MetricsCorpus()
    vocab_size: Count = 0
    parameters: Parameters = Parameters()
    evaluations: list[Evaluation] = []
    epochs: list[Evaluation] = []
    best: Optional[Evaluation] = None
    init_from: Optional[PreviousRun] = None
    stages: Optional[list[Stage]] = None
    total_words_seen: Optional[Count] = None
    wall_time_s: Seconds = 0.0
    train_seconds: Optional[Seconds] = None
    words_seen: Count = 0
    steps: Optional[Count] = None
    test: dict[str, TestResult] = {}


# -- softmax.safetensors: the adaptive softmax's settings (its header's JSON part; train/output_folder/storage.py) -----


class SoftmaxHeader(Record):
    """The settings ``torch.nn.AdaptiveLogSoftmaxWithLoss`` is rebuilt from, bounded so that the module it builds
    is one this package could have trained: cutoffs rising within the vocabulary, every projection at most
    :data:`~.weights.MAX_WIDTH` wide, at most :data:`~.weights.MAX_PARAMETERS` parameters."""

    n_classes: Annotated[int, Field(ge=2, le=MAX_CLASSES)]
    in_features: Annotated[int, Field(ge=1, le=MAX_WIDTH)]
    cutoffs: Annotated[list[Annotated[int, Field(ge=1, le=MAX_CLASSES)]], Field(min_length=1, max_length=64)]
    div_value: Annotated[float, Field(gt=0)]

    @field_validator("cutoffs")
    @classmethod
    def _rising_within_the_vocabulary(cls, cutoffs: list[int], info: ValidationInfo) -> list[int]:
        n_classes = info.data.get("n_classes")
        if any(b <= a for a, b in zip(cutoffs, cutoffs[1:])):
            raise ValueError(f"must rise, one value to the next ({cutoffs[:8]})")
        if n_classes is not None and cutoffs[-1] >= n_classes:
            raise ValueError(f"must each be below n_classes ({n_classes}), not {cutoffs[-1]}")
        return cutoffs

    @field_validator("div_value")
    @classmethod
    def _projections_bounded(cls, div_value: float, info: ValidationInfo) -> float:
        in_features, cutoffs = info.data.get("in_features"), info.data.get("cutoffs")
        if in_features is not None and cutoffs is not None:
            softmax_widths(in_features, div_value, len(cutoffs))
        return div_value

    @model_validator(mode="after")
    def _parameters_bounded(self) -> SoftmaxHeader:
        widths = softmax_widths(self.in_features, self.div_value, len(self.cutoffs))
        sizes = [*self.cutoffs, self.n_classes]
        parameters = self.in_features * (self.cutoffs[0] + len(self.cutoffs) + 1)
        parameters += sum(w * (self.in_features + high - low) for w, low, high in zip(widths, sizes, sizes[1:]))
        if parameters > MAX_PARAMETERS:
            raise ValueError(
                f"the softmax would have {parameters:,} parameters, more than the {MAX_PARAMETERS:,} allowed"
            )
        return self


def softmax_widths(in_features: int, div_value: float, clusters: int) -> list[int]:
    """The width of each tail cluster's projection (``in_features // div_value ** (i + 1)``, as torch computes it); a
    ValueError when one would be wider than :data:`~.weights.MAX_WIDTH` (a ``div_value`` far below 1) or narrower
    than 1 (a ``div_value`` so large that torch builds empty layers, or an older torch fails to)."""
    widths = []
    for power in range(1, clusters + 1):
        exponent = power * math.log(div_value)
        if math.log(in_features) - exponent > math.log(MAX_WIDTH):
            raise ValueError(
                f"{div_value!r} makes tail cluster {power}'s projection wider than {MAX_WIDTH:,} "
                f"(in_features {in_features} / div_value ** {power}); the softmax needs a div_value that keeps it so"
            )
        width = 0 if exponent > 700 else int(in_features // (div_value**power))
        if width < 1:
            raise ValueError(
                f"div_value {div_value!r} leaves tail cluster {power}'s projection no width (in_features "
                f"{in_features} // div_value ** {power} is 0); the softmax needs a div_value that keeps it 1 or wider"
            )
        widths.append(width)
    return widths


# -- checkpoint.safetensors: a training run's state (its header's JSON part; train/output_folder/storage.py) -----------


class CheckpointState(Record):
    step: Count
    epoch: Count
    batch_in_epoch: Count
    words_seen: Count
    train_seconds: Seconds


class CheckpointMetrics(Record):
    corpus: dict[str, Any]
    evaluations: list[Any]
    epochs: list[Any]


class OptimizerState(Record):
    param_groups: list[dict[str, Any]]
    state: dict[Annotated[str, Field(pattern=r"^[0-9]{1,9}$")], dict[str, Any]]


class CheckpointHeader(Record):
    config: dict[str, Any]
    vocab: list[str]
    state: CheckpointState
    metrics: CheckpointMetrics
    best_valid: Optional[float]
    optimizer: OptimizerState


# -- corpus.json: a prepared corpus's manifest (train/corpus/prepare.py writes it, train/corpus/shards.py reads it) ----


class ShardEntry(Record):
    file: Annotated[str, Field(pattern=r"^[^/\\\x00]{1,255}$")]  # a file name in the corpus's folder, no path
    sentences: Count
    words: Count
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]

    @field_validator("file")
    @classmethod
    def _a_file_name(cls, file: str) -> str:
        if file in (".", ".."):
            raise ValueError(f"must name a file in the corpus's folder, not {file!r}")
        return file


class CorpusManifest(Record):
    """``corpus.json`` (its ``format`` and ``version`` are compared with what this package reads, by its reader)."""

    shards: list[ShardEntry]
    words: Count
    sentences: Count
    distinct_words: Count
    counts_sha256: Optional[Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]] = None
    sources: list[dict[str, Any]] = []


# counts.tsv, a line: a word, a tab, its count (decimal digits, at most 15: MAX_COUNT)
COUNTS_LINE = re.compile(r"([^\t\n]+)\t([0-9]{1,15})\n?")


# -- source-info.json: provenance beside a source's text (any keys: repository, commit, licence, ...) -------------


class SourceInfo(Record):
    """Any JSON object."""


# -- model.json: the spaCy component's save (spacy/saved_model.py) ------------------------------------------------


class ComponentModel(Record):
    source: Literal["default", "files", "remote"]
    model: Optional[Text] = None
    fingerprint: Optional[Text] = None
    files_fingerprint: Optional[Text] = None
    spacy_elmo_version: Optional[Text] = None


# the schema of each file the package reads (options.json: the check of weights.py's own table; counts.tsv: a line's)
SCHEMAS: dict[str, Any] = {
    OPTIONS: options_from_dict,
    METRICS: Metrics,
    SOFTMAX: SoftmaxHeader,
    CHECKPOINT: CheckpointHeader,
    CORPUS_MANIFEST: CorpusManifest,
    CORPUS_COUNTS: COUNTS_LINE,
    SOURCE_INFO: SourceInfo,
}

__all__ = [
    "COUNTS_LINE",
    "SCHEMAS",
    "CheckpointHeader",
    "ComponentModel",
    "CorpusManifest",
    "Metrics",
    "SoftmaxHeader",
    "SourceInfo",
    "softmax_widths",
]
