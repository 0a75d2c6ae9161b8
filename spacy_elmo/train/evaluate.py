"""Perplexity of a biLM on text: forward, backward and their mean (geometric: exp of the mean NLL)."""
from __future__ import annotations

import math
from typing import Dict, Optional, Sequence

import torch

from .batching import CharCache, Vocabulary, bucket_batches, ordered_sentences, tensorize
from .corpus import PathLike, Source


def perplexity_on(
    model,
    vocab: Vocabulary,
    sources: Sequence[Source],
    token_budget: int = 4096,
    max_length: int = 100,
    char_cache: Optional[CharCache] = None,
    crop_width: Optional[int] = None,
) -> Dict[str, float]:
    """Perplexity per predicted token (each word and one ``</S>`` / ``<S>`` per sentence), stateless per sentence."""
    was_training = model.training
    model.eval()
    if crop_width is None:
        crop_width = max(w for w, _ in model.options.filters)
    nll_f = nll_b = 0.0
    n = 0
    words = sentences = 0
    with torch.inference_mode():
        for batch_sentences in bucket_batches(ordered_sentences(sources, max_length), token_budget):
            batch = tensorize(batch_sentences, vocab, char_cache, crop_width)
            f, b, count = model(batch.chars, batch.token_index, batch.word_ids, batch.lengths)
            nll_f += float(f)
            nll_b += float(b)
            n += count
            words += batch.n_words
            sentences += len(batch_sentences)
    model.train(was_training)
    if n == 0:
        raise ValueError("no text to evaluate on: the files hold no tokens")
    return {
        "forward": math.exp(nll_f / n),
        "backward": math.exp(nll_b / n),
        "mean": math.exp((nll_f + nll_b) / (2 * n)),
        "predictions": n,
        "words": words,
        "sentences": sentences,
    }


def load_language_model(model_dir: PathLike, lstm_impl: str = "auto"):
    """The biLM in ``model_dir`` with its trained softmax, ready for perplexity; returns (model, vocab)."""
    from ..backend import resolve_model_files
    from ..bilm.weights import WeightFileError, load_model
    from .network import LanguageModel
    from .trainer import SOFTMAX, VOCAB

    options_path, weights_path = resolve_model_files(model_dir)
    directory = options_path.parent
    for name in (VOCAB, SOFTMAX):
        if not (directory / name).is_file():
            raise WeightFileError(
                f"model directory {directory} has no {name}: perplexity needs the softmax and vocabulary "
                f"that `spacy-elmo train` writes (released ELMo files ship only the biLM)"
            )
    bilm = load_model(options_path, weights_path)
    vocab = Vocabulary.load(directory / VOCAB)
    softmax = torch.load(directory / SOFTMAX, map_location="cpu", weights_only=True)
    if softmax["n_classes"] != len(vocab):
        raise WeightFileError(f"{directory / SOFTMAX} has {softmax['n_classes']} classes but {VOCAB} has {len(vocab)} words")
    model = LanguageModel(bilm.options, len(vocab), softmax["cutoffs"], softmax["div_value"], 0.0, lstm_impl)
    model.load_bilm_weights(bilm)
    model.softmax.load_state_dict(softmax["state_dict"])
    return model.eval(), vocab


def trained_max_length(model_dir: PathLike, fallback: int = 100) -> int:
    """The sentence length cap the model in ``model_dir`` was trained with (``fallback`` if unknown)."""
    import json

    from ..backend import resolve_model_files

    metrics = resolve_model_files(model_dir)[0].parent / "metrics.json"
    if metrics.is_file():
        return int(json.loads(metrics.read_text(encoding="utf-8")).get("config", {}).get("max_length", fallback))
    return fallback


def evaluate(
    model_dir: PathLike,
    paths: Sequence[PathLike],
    *,
    format: str = "lines",
    tokenizer: str = "whitespace",
    token_budget: int = 4096,
    max_length: Optional[int] = None,
) -> Dict[str, float]:
    """Forward, backward and mean perplexity of the model in ``model_dir`` on text files.

    ``max_length`` defaults to the one the model was trained with (from its ``metrics.json``), else 100.
    """
    from .corpus import make_sources

    model, vocab = load_language_model(model_dir)
    if max_length is None:
        max_length = trained_max_length(model_dir)
    sources = make_sources(paths, format, tokenizer)
    return perplexity_on(model, vocab, sources, token_budget, max_length)


__all__ = ["evaluate", "load_language_model", "perplexity_on"]


def record_result(model_dir: PathLike, name: str, result: Dict[str, float]) -> None:
    """Add a perplexity result to the model's ``metrics.json`` under ``test`` and refresh its ``README.md`` card."""
    import json

    from ..backend import resolve_model_files
    from .model_card import write_model_card

    directory = resolve_model_files(model_dir)[0].parent
    path = directory / "metrics.json"
    metrics = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    metrics.setdefault("test", {})[name] = {k: round(v, 3) if isinstance(v, float) else v for k, v in result.items()}
    path.write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
    if "config" in metrics:
        write_model_card(directory)
