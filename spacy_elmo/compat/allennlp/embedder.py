"""AllenNLP 0.9's ``ElmoEmbedder`` (``allennlp.commands.elmo``): numpy vectors of tokenized sentences, and files of
them.

Its defaults name the published "original" model (AllenNLP's URLs, served from this package's
download cache). As in AllenNLP, the biLM is stateful: each call starts from the LSTM state the
previous one left in its batch rows, so the same sentence can get other vectors on a second call;
``stateful=False`` (keyword only, not in AllenNLP) gives this package's batch-invariant vectors.
"""

from __future__ import annotations

import logging
import numbers
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Union

import numpy as np
import torch

from ...groundwork.excerpt import excerpt
from ...output.embed_file import bounded_lines, hdf5_output
from ...output.hdf5_layout import OUTPUT_FORMATS, DuplicateSentenceError, LineDatasets
from ...runtime.configuration.validation import (
    check_batch,
    check_tokens,
    positive_int,
    resolve_device,
    validate_sentences,
)
from .modules import _ElmoBiLm
from .util import ConfigurationError, PathOrUrl, batch_to_ids, remove_sentence_boundaries

logger = logging.getLogger(__name__)

DEFAULT_OPTIONS_FILE = "https://allennlp.s3.amazonaws.com/models/elmo/2x4096_512_2048cnn_2xhighway/elmo_2x4096_512_2048cnn_2xhighway_options.json"
DEFAULT_WEIGHT_FILE = "https://allennlp.s3.amazonaws.com/models/elmo/2x4096_512_2048cnn_2xhighway/elmo_2x4096_512_2048cnn_2xhighway_weights.hdf5"
DEFAULT_BATCH_SIZE = 64  # AllenNLP 0.9's own (allennlp.commands.elmo), not a setting of this package


def check_cuda_device(cuda_device: int) -> None:
    """AllenNLP's ``cuda_device`` (-1 or below: the CPU; N: ``cuda:N``) checked to exist on this machine
    (:func:`~spacy_elmo.runtime.configuration.validation.resolve_device`, every front end's check): a ``ValueError``
    naming it."""
    if isinstance(cuda_device, bool) or not isinstance(cuda_device, numbers.Integral):
        raise TypeError(f"cuda_device={excerpt(cuda_device)}: expected an int (-1: the CPU, N: the GPU cuda:N)")
    if cuda_device >= 0:
        resolve_device(cuda_device, "cuda_device", cpu=-1)


class ElmoEmbedder:
    """``embed_sentence``, ``embed_batch``, ``embed_sentences``, ``embed_file`` and ``batch_to_embeddings``, as
    AllenNLP 0.9."""

    def __init__(
        self,
        options_file: PathOrUrl = DEFAULT_OPTIONS_FILE,
        weight_file: PathOrUrl = DEFAULT_WEIGHT_FILE,
        cuda_device: int = -1,
        *,
        stateful: bool = True,
    ) -> None:
        check_cuda_device(cuda_device)  # before the model is read: a GPU this machine lacks is a ValueError naming it
        self.elmo_bilm = _ElmoBiLm(options_file, weight_file, stateful=stateful)
        if cuda_device >= 0:
            self.elmo_bilm = self.elmo_bilm.cuda(device=cuda_device)
        self.cuda_device = cuda_device

    def _empty(self) -> np.ndarray:
        return np.zeros((self.elmo_bilm.num_layers, 0, self.elmo_bilm.get_output_dim()), dtype=np.float32)

    def batch_to_embeddings(self, batch: list[list[str]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Activations ``(batch, num_layers, time, dim)`` without the boundary tokens, and the mask
        ``(batch, time)``."""
        character_ids = batch_to_ids(batch)
        if self.cuda_device >= 0:
            character_ids = character_ids.cuda(device=self.cuda_device)
        bilm_output = self.elmo_bilm(character_ids)
        mask_with_bos_eos = bilm_output["mask"]
        without_bos_eos = [remove_sentence_boundaries(layer, mask_with_bos_eos) for layer in bilm_output["activations"]]
        activations = torch.cat([layer.unsqueeze(1) for layer, _ in without_bos_eos], dim=1)
        return activations, without_bos_eos[0][1]

    def embed_sentence(self, sentence: list[str]) -> np.ndarray:
        """float32 ``(num_layers, len(sentence), dim)`` (``(num_layers, 0, dim)`` for an empty sentence)."""
        return self.embed_batch([check_tokens(sentence, "sentence")])[0]

    def embed_batch(self, batch: list[list[str]]) -> list[np.ndarray]:
        """One float32 array ``(num_layers, len(sentence), dim)`` per sentence, in order."""
        batch = validate_sentences(batch, "batch")  # a TypeError naming a plain string or a non-str token, first
        if batch == [[]]:  # AllenNLP does not run the model for a lone empty sentence (the state stays)
            return [self._empty()]
        embeddings, mask = self.batch_to_embeddings(batch)
        out = []
        for i in range(len(batch)):
            length = int(mask[i, :].sum())
            out.append(self._empty() if length == 0 else embeddings[i, :, :length, :].detach().cpu().numpy())
        return out

    def embed_sentences(
        self, sentences: Iterable[list[str]], batch_size: int = DEFAULT_BATCH_SIZE
    ) -> Iterator[np.ndarray]:
        """The arrays of :meth:`embed_batch` for ``batch_size`` sentences at a time, as a generator.

        ``sentences`` is read as the generator runs (it may be a stream); a plain string in place of it is a
        ``TypeError`` here, at the call, and each sentence is checked as it is read, named by its place in the stream.
        """
        check_batch(sentences, "sentences")  # at the call: the sentences themselves are read as it runs
        return self._embedded_stream(sentences, positive_int(batch_size, "batch_size"))

    def _embedded_stream(self, sentences: Iterable[list[str]], batch_size: int) -> Iterator[np.ndarray]:
        batch: list[list[str]] = []
        for i, sentence in enumerate(sentences):
            batch.append(check_tokens(sentence, f"sentences: sentence {i}"))
            if len(batch) == batch_size:
                yield from self.embed_batch(batch)
                batch = []
        if batch:
            yield from self.embed_batch(batch)

    def embed_file(
        self,
        input_file: Union[IO[str], PathOrUrl],
        output_file_path: PathOrUrl,
        output_format: str = "all",
        batch_size: int = DEFAULT_BATCH_SIZE,
        forget_sentences: bool = False,
        use_sentence_keys: bool = False,
    ) -> None:
        """Each line of ``input_file`` (whitespace-tokenized; an open file, closed here, or a path) -> an HDF5 dataset.

        AllenNLP's layout, written by ``spacy-elmo embed``'s own (:class:`spacy_elmo.output.hdf5_layout.LineDatasets`,
        keys unchecked and the ``sentence_to_index`` JSON ASCII-escaped, as AllenNLP writes them): dataset
        ``str(line number)`` (or the sentence itself with ``use_sentence_keys``) holding ``(num_layers, n, dim)``
        (``all``), ``(n, dim)`` (``top``: the last layer; ``average``: the mean of the layers), all float32, and
        unless ``forget_sentences`` or ``use_sentence_keys`` a ``sentence_to_index`` dataset: one string, the JSON
        object from each sentence to its key (the last line for a repeated sentence). A blank line raises
        :class:`ConfigurationError` before anything runs, as does a repeated sentence with ``use_sentence_keys``.
        The file appears whole, through ``spacy-elmo embed``'s writer
        (:func:`spacy_elmo.output.embed_file.hdf5_output`): a full disk raises
        :class:`~spacy_elmo.output.write_guard.WriteFailedError` naming the output and leaves no file.
        """
        positive_int(batch_size, "batch_size")  # before the input is read
        if output_format not in OUTPUT_FORMATS:
            raise ConfigurationError(f"output_format {output_format!r}: expected one of {', '.join(OUTPUT_FORMATS)}")
        # a path is opened here, a handle is taken as passed in: the `with` below closes either
        handle = open(input_file, encoding="utf-8") if isinstance(input_file, (str, os.PathLike)) else input_file  # noqa: SIM115
        with handle:  # a line past embed_file.MAX_LINE_BYTES (an endless one: /dev/zero) is an error naming it
            sentences = [line.strip() for line in bounded_lines(handle, getattr(handle, "name", str(input_file)))]
        blank_lines = [i for (i, line) in enumerate(sentences) if line == ""]
        if blank_lines:
            raise ConfigurationError(
                f"Your input file contains empty lines at indexes {blank_lines}. Please remove them."
            )
        embedded = self.embed_sentences([sentence.split() for sentence in sentences], batch_size)
        if use_sentence_keys:
            logger.warning(
                "Using sentences as keys can fail if sentences contain forward slashes or colons. Use with caution."
            )
        with hdf5_output(Path(output_file_path)) as fout:
            datasets = LineDatasets(
                fout,
                output_format,
                str(output_file_path),
                use_sentence_keys=use_sentence_keys,
                forget_sentences=forget_sentences,
                check_keys=False,
                ascii_index=True,
            )
            for number, (sentence, embeddings) in enumerate(zip(sentences, embedded)):
                try:
                    datasets.add(number, sentence, embeddings)
                except DuplicateSentenceError:
                    raise ConfigurationError(
                        f"Key already exists in {output_file_path}. To encode duplicate sentences, "
                        f"do not pass the --use-sentence-keys flag."
                    ) from None
            datasets.finish()


__all__ = ["DEFAULT_BATCH_SIZE", "DEFAULT_OPTIONS_FILE", "DEFAULT_WEIGHT_FILE", "ElmoEmbedder"]
