"""The torch runner: a biLM on a torch device computes one batch's layers for the backend (:class:`.runner.Runner`).

Everything the backend needs of torch lives here: the files read into a :class:`~spacy_elmo.bilm.model.BiLM`, the
model cast or packed for its precision with its engines chosen (:func:`spacy_elmo.bilm.engine.prepare`), the warning
for an emulated precision, the char-CNN token cache, the thread limit of small batches, inference mode, the refusal of
a low precision's overflow, and what running out of memory looks like on a torch device.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Optional, Union

import numpy as np
import torch

from ...bilm import engine
from ...bilm.engine.precisions import Precision, of_dtype
from ...bilm.model import BiLM
from ...bilm.threads import batch_thread_limit, thread_limit
from ...bilm.vocab_cache import TokenVectorCache, batch_token_vectors
from ...bilm.weights import load_model
from ...sources.model_paths import is_manylangs
from ..configuration.defaults import DEFAULT_TOKEN_CACHE


class TorchRunner:
    """A biLM prepared for ``precision`` on a torch ``device``, computing batches in inference mode.

    ``name`` names the model in its errors ("ELMo model <folder>"); ``stacklevel`` is the emulated-precision warning's
    (:func:`spacy_elmo.bilm.engine.warn_if_slow`), counted from that function (3: this constructor's caller).
    """

    def __init__(
        self,
        model: BiLM,
        device: torch.device,
        precision: Union[torch.dtype, Precision] = torch.float32,
        *,
        name: str = "ELMo model",
        token_cache_size: int = DEFAULT_TOKEN_CACHE,
        stacklevel: int = 3,
    ) -> None:
        # its precision's row (bilm/engine/precisions.py) and torch dtype ("int8": float32 activations, int8 weights)
        self.precision = precision if isinstance(precision, Precision) else of_dtype(precision)
        self.dtype: torch.dtype = self.precision.dtype()
        # cast, or (int8: CPU only) packed with the float32 matrices released, and its engines chosen (bilm/engine)
        self.model = engine.prepare(model, device, self.dtype)
        engine.warn_if_slow(self.precision, device, stacklevel=stacklevel)  # correct but emulated: say so once
        self.device = device
        self.name = name
        self.token_cache = TokenVectorCache(self.model, token_cache_size)
        self.small_work_threads: Optional[int] = 1

    @property
    def n_layers(self) -> int:
        return self.model.n_layers

    @property
    def dim(self) -> int:
        return self.model.output_dim

    @property
    def device_name(self) -> str:
        return str(self.device)

    def layers(self, batch: list[Sequence[str]]) -> list[np.ndarray]:
        """Activations of one batch of non-empty sentences, through the token-vector cache and the inference path."""
        with torch.inference_mode(), thread_limit(self._threads_for(len(batch))):
            tokens, lengths = batch_token_vectors(self.token_cache, batch)
            activations, _ = self.model.contextualize_vectors(
                tokens, lengths, boundaries=False
            )  # <S>, </S> dropped below
            layers = activations.float().cpu().numpy()
        if self.precision.overflow_guard and not np.isfinite(layers).all():
            self._refuse_overflow(len(batch))
        return [np.ascontiguousarray(layers[:, row, 1 : len(t) + 1]) for row, t in enumerate(batch)]

    def _refuse_overflow(self, rows: int) -> None:
        """Low precision ran out of range (float16's largest value is 65504): never hand out inf / nan vectors."""
        clip = self.model.options.cell_clip
        why = "this model has no cell clip, so its LSTM cells can grow past that" if clip is None else ""
        raise FloatingPointError(
            f"{self.name}: precision={self.precision.name!r} overflowed (inf or nan in the vectors of a batch of "
            f"{rows} sentences; float16's largest value is 65504{', and ' + why if why else ''}): use "
            "precision='float32', or 'bfloat16' (float32's range)"
        )

    def _threads_for(self, rows: int) -> Optional[int]:
        """Small CPU batches run on ``small_work_threads`` threads of the calling thread (``None``: torch's setting).

        Each step of a small batch is a few microseconds of work, less than what waking a thread
        team costs (and far less on a busy machine), so more threads only make it slower; where
        "small" ends is :func:`.bilm.threads.batch_thread_limit`'s to say.
        """
        options = self.model.options
        step_macs = rows * options.projection_dim * 4 * options.cell_dim  # the recurrent product of one step
        return batch_thread_limit(step_macs, self.device, self.small_work_threads)

    def after_fork(self) -> None:
        self.token_cache.clear()

    def is_out_of_memory(self, err: BaseException) -> bool:
        """torch's and numpy's ways of running out (a ``RuntimeError`` or ``MemoryError``): :func:`is_out_of_memory`."""
        return isinstance(err, (RuntimeError, MemoryError)) and is_out_of_memory(err)

    def free_memory(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def describe(self) -> str:
        """``kernels: <engine> engine, <its kernels>`` of the biLM's LSTM."""
        lstm = engine.engine_of(self.model.lstm)
        return f"kernels: {lstm.name} engine, {lstm.describe()}"


def is_out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` is torch or numpy running out of device (or host) memory for an allocation."""
    if isinstance(err, (MemoryError, torch.cuda.OutOfMemoryError)):
        return True
    message = str(err)
    return "out of memory" in message or "can't allocate memory" in message


def load_model_files(options_path: Path, weights_path: Path) -> BiLM:
    """The biLM in a resolved pair of files, by their format: ELMo's options.json + HDF5, or ELMoForManyLangs'."""
    if is_manylangs(options_path, weights_path):
        from ...bilm import manylangs_reader

        return manylangs_reader.load_model(weights_path.parent)
    return load_model(options_path, weights_path)


def open_torch_runner(
    options_path: Path, weights_path: Path, device: torch.device, precision: Precision, *, name: str, stacklevel: int
) -> TorchRunner:
    """The model in a resolved pair of files on ``device`` in ``precision`` (``stacklevel``: :class:`TorchRunner`'s)."""
    return TorchRunner(
        load_model_files(options_path, weights_path), device, precision, name=name, stacklevel=stacklevel
    )
