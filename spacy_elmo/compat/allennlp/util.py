"""AllenNLP's small helpers for ELMo: character ids, sentence boundaries, the error type, model files.

Each function has AllenNLP 0.9's name, arguments and result (``allennlp.modules.elmo.batch_to_ids``,
``allennlp.nn.util.add_sentence_boundary_token_ids`` / ``remove_sentence_boundaries``,
``allennlp.common.checks.ConfigurationError``); the character ids are this package's
(:mod:`spacy_elmo.bilm.chars`), which are AllenNLP's.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Union

import torch

from ...bilm.chars import batch_to_char_ids
from ...runtime.configuration.validation import validate_sentences
from ...sources.model_paths import published_files, resolve_model_files
from ...sources.published import published_by_url

PathOrUrl = Union[str, "os.PathLike[str]"]


class ConfigurationError(Exception):
    """AllenNLP's error for a misconfigured object or bad input (``str()`` is the message's ``repr``, as there)."""

    def __init__(self, message: Any) -> None:
        super().__init__()
        self.message = message

    def __str__(self) -> str:
        return repr(self.message)


def batch_to_ids(batch: list[list[str]]) -> torch.Tensor:
    """Character ids ``(len(batch), longest sentence, 50)`` of tokenized sentences, as AllenNLP makes them.

    UTF-8 bytes + 1 between begin- and end-of-word ids, padded with the padding char; ``<S>`` and
    ``</S>`` become the sentence markers; words are cut to 48 bytes; padding tokens are all zeros.
    A sentence that is a plain string, or a token that is not a ``str``, is a ``TypeError`` naming it.
    """
    return torch.from_numpy(batch_to_char_ids(validate_sentences(batch, "batch")))


def add_sentence_boundary_token_ids(
    tensor: torch.Tensor, mask: torch.Tensor, sentence_begin_token: Any, sentence_end_token: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """``<S>`` before and ``</S>`` after each row of ``tensor`` ``(batch, time[, dim])``; returns it and its mask.

    As AllenNLP: the end token goes at each row's ``mask.sum() + 1``; the new mask is ``tensor != 0``
    (2-D) or "some entry > 0" (3-D), a long tensor ``(batch, time + 2)``.
    """
    lengths = mask.sum(dim=1).long()
    shape = list(tensor.shape)
    shape[1] += 2
    out = tensor.new_zeros(*shape)
    out[:, 1:-1] = tensor
    out[:, 0] = sentence_begin_token
    out[torch.arange(shape[0], device=tensor.device), lengths + 1] = sentence_end_token
    if tensor.dim() == 2:
        return out, (out != 0).long()
    return out, ((out > 0).long().sum(dim=-1) > 0).long()


def remove_sentence_boundaries(tensor: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Drop each row's first and last valid position: ``(batch, time - 2, dim)`` and the new long mask.

    The inverse of :func:`add_sentence_boundary_token_ids`; rows of length <= 2 become all padding.
    """
    batch, time = tensor.shape[0], tensor.shape[1]
    lengths = mask.sum(dim=1).long() - 2
    positions = torch.arange(max(time - 2, 0), device=tensor.device)
    new_mask = (positions[None, :] < lengths[:, None]).long()
    inner = tensor[:, 1 : time - 1] if time >= 2 else tensor.new_zeros(batch, 0, *tensor.shape[2:])
    keep = new_mask.bool().reshape(*new_mask.shape, *([1] * (tensor.dim() - 2)))
    return torch.where(keep, inner, torch.zeros_like(inner)), new_mask


def local_files(options_file: PathOrUrl, weight_file: PathOrUrl) -> tuple[Path, Path]:
    """The local ``(options, weights)`` files that two paths or URLs name (AllenNLP's ``cached_path``).

    A published model's URLs (either S3 spelling, e.g. AllenNLP's defaults) come from this
    package's download cache, checked like ``load_bilm("original")``; other URLs are downloaded there too.
    """
    entries = {published_by_url(os.fspath(name)) for name in (options_file, weight_file)}
    if len(entries) == 1:
        entry = entries.pop()
        if entry is not None:
            return published_files(entry)
    return resolve_model_files(options=options_file, weights=weight_file)


__all__ = [
    "ConfigurationError",
    "add_sentence_boundary_token_ids",
    "batch_to_ids",
    "local_files",
    "remove_sentence_boundaries",
]
