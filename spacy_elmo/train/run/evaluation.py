"""Perplexity of a biLM on text: forward, backward and their mean (geometric: exp of the mean NLL)."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

import torch

from ...bilm.exact import exact_float32
from ...groundwork.file_names import LEGACY_SOFTMAX, METRICS, VOCAB
from ..corpus.batching import (
    BOS_TOKEN,
    EOS_TOKEN,
    UNK_TOKEN,
    CharCache,
    Vocabulary,
    bucket_batches,
    ordered_sentences,
    tensorize,
)
from ..corpus.sentences import PathLike, Source


def perplexity(mean_nll: float) -> float:
    """exp(mean NLL per token); inf where that overflows (a diverged model) instead of an OverflowError."""
    try:
        return math.exp(mean_nll)
    except OverflowError:
        return math.inf


@dataclass(frozen=True)
class TextBatches:
    """How evaluation reads text into batches: the words per batch (``token_budget``), the longest sentence kept
    whole (``max_length``), the characters' id cache and the width tokens' characters are cut to
    (``crop_width``; None: the model's widest filter)."""

    token_budget: int = 4096
    max_length: int = 100
    char_cache: Optional[CharCache] = None
    crop_width: Optional[int] = None


def perplexity_on(
    model,
    vocab: Vocabulary,
    sources: Sequence[Source],
    token_budget: int = 4096,
    max_length: int = 100,
    char_cache: Optional[CharCache] = None,
    crop_width: Optional[int] = None,
    counted_words: Optional[Collection[str]] = None,
) -> dict[str, float]:
    """Perplexity per predicted token (each word and one ``</S>`` / ``<S>`` per sentence), stateless per sentence.

    ``counted_words``: count only the predictions of these words (and of the sentence markers), as
    :func:`counted_ids` says.
    """
    counted = None if counted_words is None else counted_ids(vocab, counted_words)
    batches = TextBatches(token_budget, max_length, char_cache, crop_width)
    sums = nll_sums(model, vocab, sources, batches, counted=counted)
    return perplexities(sums)


def counted_ids(vocab: Vocabulary, words: Collection[str]) -> torch.Tensor:
    """A bool per id of ``vocab``: its word is in ``words``, or is a sentence marker; never ``<UNK>``.

    Two models with different vocabularies give comparable perplexities on the predictions of the words both
    know (``words``: the other model's vocabulary), each normalised over its own vocabulary; a word either one
    does not know is still read as context, but its prediction is not counted.
    """
    known = set(words)
    return torch.tensor([w in known or w in (BOS_TOKEN, EOS_TOKEN) for w in vocab.words]) & (
        torch.arange(len(vocab)) != vocab.id(UNK_TOKEN)
    )


def nll_sums(
    model,
    vocab: Vocabulary,
    sources: Sequence[Source],
    batches: TextBatches = TextBatches(),
    part: tuple[int, int] = (0, 1),
    counted: Optional[torch.Tensor] = None,
) -> dict[str, float]:
    """Summed forward and backward NLL and the counts behind them; ``part=(k, n)``: only every n-th batch from the k-th.

    The parts of ``n`` processes, summed, are the whole (to float rounding): see :mod:`.distributed`.
    ``counted``: only the predictions of these vocabulary ids (:func:`counted_ids`). Runs where ``model`` is.
    """
    index, parts = part
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    crop_width = batches.crop_width
    if crop_width is None:
        crop_width = max(w for w, _ in model.options.filters)
    nll_f = nll_b = 0.0
    n = 0
    words = sentences = 0
    with torch.inference_mode(), exact_float32(device):  # no TF32 on a GPU (bilm/exact.py)
        bucketed = bucket_batches(ordered_sentences(sources, batches.max_length), batches.token_budget)
        for batch_sentences in itertools.islice(bucketed, index, None, parts):
            batch = tensorize(batch_sentences, vocab, batches.char_cache, crop_width).to(device)
            extra = {} if counted is None else {"counted": counted.to(device)}
            f, b, count = model(batch.chars, batch.token_index, batch.word_ids, batch.lengths, **extra)
            nll_f += float(f)
            nll_b += float(b)
            n += count
            words += batch.n_words
            sentences += len(batch_sentences)
    model.train(was_training)
    return {"nll_forward": nll_f, "nll_backward": nll_b, "predictions": n, "words": words, "sentences": sentences}


def perplexities(sums: dict[str, float]) -> dict[str, float]:
    """Forward, backward and mean perplexity from :func:`nll_sums` (a ValueError when there was no text)."""
    n = int(sums["predictions"])
    if n == 0:
        raise ValueError("no text to evaluate on: the files hold no tokens")
    nll_f, nll_b = sums["nll_forward"], sums["nll_backward"]
    return {
        "forward": perplexity(nll_f / n),
        "backward": perplexity(nll_b / n),
        "mean": perplexity((nll_f + nll_b) / (2 * n)),
        "predictions": n,
        "words": int(sums["words"]),
        "sentences": int(sums["sentences"]),
    }


def load_language_model(model_dir: PathLike, lstm_impl: str = "auto"):
    """The biLM in ``model_dir`` with its trained softmax, ready for perplexity; returns (model, vocab)."""
    from ...bilm.weights import load_model
    from ...sources.model_paths import resolve_model_files
    from ..network.language_model import LanguageModel
    from ..output_folder.storage import SOFTMAX, load_softmax, load_softmax_into, require_file

    options_path, weights_path = resolve_model_files(model_dir)
    directory = options_path.parent
    vocab_path = _vocab_file(directory)
    try:
        softmax_path = require_file(directory, SOFTMAX, LEGACY_SOFTMAX, "the model's softmax")
    except FileNotFoundError as err:
        raise _not_a_trained_model(directory, SOFTMAX) from err
    bilm = load_model(options_path, weights_path)
    vocab = Vocabulary.load(vocab_path)
    softmax = load_softmax(softmax_path)
    softmax.check_fits(softmax_path, len(vocab), bilm.options.projection_dim)
    model = LanguageModel(bilm.options, len(vocab), softmax.cutoffs, softmax.div_value, 0.0, lstm_impl)
    model.load_bilm_weights(bilm)
    load_softmax_into(model.softmax, softmax, softmax_path)
    return model.eval(), vocab


def _vocab_file(directory: Path) -> Path:
    """The softmax vocabulary file of the trained model in ``directory``; an error naming it when missing."""
    if not (directory / VOCAB).is_file():
        raise _not_a_trained_model(directory, VOCAB)
    return directory / VOCAB


def _not_a_trained_model(directory: Path, name: str) -> Exception:
    """The error for a model directory without the softmax or vocabulary that perplexity needs."""
    from ...bilm.weights import WeightFileError

    return WeightFileError(
        f"model directory {directory} has no {name}: perplexity needs the softmax and vocabulary "
        f"that `spacy-elmo train` writes (released ELMo files ship only the biLM)"
    )


def trained_max_length(model_dir: PathLike, fallback: int = 100) -> int:
    """The sentence length cap the model in ``model_dir`` was trained with (``fallback`` if unknown)."""
    from ...sources.model_paths import resolve_model_files
    from ..output_folder.stages import read_metrics

    path = resolve_model_files(model_dir)[0].parent / METRICS
    if path.is_file():
        config = read_metrics(path, "correct it, or give --max-length").get("config", {})
        return int(config.get("max_length") or fallback)
    return fallback


def evaluate(
    model_dir: PathLike,
    paths: Sequence[PathLike],
    *,
    format: str = "lines",
    tokenizer: str = "whitespace",
    token_budget: int = 4096,
    max_length: Optional[int] = None,
    shared_with: Sequence[PathLike] = (),
    device: Union[str, torch.device, None] = None,
) -> dict[str, float]:
    """Forward, backward and mean perplexity of the model in ``model_dir`` on text files.

    ``max_length`` defaults to the one the model was trained with (from its ``metrics.json``), else 100.
    ``shared_with``: other trained models; only the predictions of words in every one's vocabulary count
    (:func:`counted_ids`), so models with different vocabularies compare on the same predictions.
    ``device``: "cpu" (the default), "cuda", "cuda:N" or "auto", as ``spacy-elmo evaluate --device``.
    """
    from ..corpus.sentences import make_sources
    from ..distributed import training_device

    where = training_device(device)  # a GPU that is not there: said before the model is read
    model, vocab = load_language_model(model_dir)
    model.to(where)
    if max_length is None:
        max_length = trained_max_length(model_dir)
    sources = make_sources(paths, format, tokenizer)
    counted_words: Optional[set[str]] = None
    for other in shared_with:
        words = set(trained_vocabulary(other).words)
        counted_words = words if counted_words is None else counted_words & words
    return perplexity_on(model, vocab, sources, token_budget, max_length, counted_words=counted_words)


def evaluate_files(
    model_dir: PathLike,
    paths: Sequence[PathLike],
    *,
    format: str,
    tokenizer: str,
    max_length: Optional[int],
    shared_with: Sequence[PathLike],
    device: Union[str, torch.device, None],
    record: Optional[str] = None,
) -> dict[str, float]:
    """``spacy-elmo evaluate``: :func:`evaluate` of the models the command names ("default": the bundled model, any
    other name a path), after ``record``'s name and the model's ``metrics.json`` are checked (:func:`check_record`:
    a bad one is said before the evaluation, and changes nothing)."""
    if record:
        check_record(model_dir, record)
    return evaluate(
        _model_name(model_dir),
        paths,
        format=format,
        tokenizer=tokenizer,
        max_length=max_length,
        shared_with=[_model_name(other) for other in shared_with],
        device=device,
    )


def write_result(path: PathLike, result: dict[str, float]) -> None:
    """``spacy-elmo evaluate --output``: the result as indented JSON at ``path``, written whole (never a half-written
    file)."""
    from ...groundwork.atomic_write import write_text_atomically

    write_text_atomically(path, json.dumps(result, indent=2) + "\n")


def _model_name(path: PathLike) -> PathLike:
    """A model the command line names: "default" (the bundled model) as that name, any other as its path."""
    return "default" if str(path) == "default" else path


def trained_vocabulary(model_dir: PathLike) -> Vocabulary:
    """The softmax vocabulary (``vocab.txt``) of the trained model in ``model_dir``."""
    from ...sources.model_paths import resolve_model_files

    return Vocabulary.load(_vocab_file(resolve_model_files(model_dir)[0].parent))


__all__ = ["check_record", "evaluate", "load_language_model", "perplexity_on", "record_result", "write_result"]


def check_record(model_dir: PathLike, name: str) -> Path:
    """Whether a result can be recorded under ``name`` for the model in ``model_dir``, checked before anything is
    computed or changed: the name (one line of text), the model's ``metrics.json`` (a JSON object whose values the
    card can show) and that no run holds the folder. Returns the model's folder; a ValueError naming the problem
    otherwise."""
    from ...sources.model_paths import resolve_model_files
    from ..output_folder.folder_lock import folder_claimed
    from ..output_folder.model_card import check_card_metrics, read_metrics

    if not isinstance(name, str) or not name.strip() or any(not c.isprintable() for c in name):
        raise ValueError(f"--record {name!r}: a record name is one line of printable text (e.g. the test file's name)")
    directory = resolve_model_files(model_dir)[0].parent
    path = directory / METRICS
    if path.is_file():
        metrics = read_metrics(path)
        if not isinstance(metrics.get("test", {}), dict):
            raise ValueError(f"{path}: test is {json.dumps(metrics['test'])}, not an object of recorded results")
        check_card_metrics(metrics, path)
    with folder_claimed(directory):  # a run writing the folder now refuses the record: say so before evaluating
        pass
    return directory


def record_result(model_dir: PathLike, name: str, result: dict[str, float]) -> None:
    """Add a perplexity result to the model's ``metrics.json`` under ``test`` and refresh its ``README.md`` card
    (keeping the card's title and notes).

    Everything is checked first (:func:`check_record`, the result's perplexities numbers) and the card rendered
    before either file changes; both are then replaced together, so metrics and card never disagree. The folder is
    held meanwhile (:mod:`.folder_lock`): a training run writing it refuses the record.
    """
    from ...groundwork.atomic_write import atomic_paths, reported_as
    from ...groundwork.file_names import MODEL_CARD
    from ..output_folder.folder_lock import folder_claimed
    from ..output_folder.model_card import read_metrics, refreshed_card
    from .outputs import jsonable

    directory = check_record(model_dir, name)
    for key in ("forward", "backward"):
        value = result.get(key) if isinstance(result, dict) else None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"the result to record under {name!r} has no number {key!r} (it has {value!r})")
    with folder_claimed(directory):
        path = directory / METRICS
        metrics = read_metrics(path) if path.is_file() else {}
        recorded = {k: round(v, 3) if isinstance(v, float) else v for k, v in result.items()}
        metrics = {**metrics, "test": {**metrics.get("test", {}), name: recorded}}
        card = refreshed_card(directory, metrics) if "config" in metrics else None  # checks what it shows
        targets = [path] if card is None else [path, directory / MODEL_CARD]
        with atomic_paths(*targets) as temporaries:
            with reported_as(path):
                temporaries[0].write_text(json.dumps(jsonable(metrics), indent=2) + "\n", encoding="utf-8")
            if card is not None:
                with reported_as(directory / MODEL_CARD):
                    temporaries[1].write_text(card, encoding="utf-8")
