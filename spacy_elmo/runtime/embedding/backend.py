"""One shared, cached biLM backend: load a model once per process, embed token sequences in batches."""

from __future__ import annotations

import logging
import os
import threading
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Callable, Optional, Union

import numpy as np
import torch

from ...bilm import cpu_support, engine, manylangs_reader
from ...bilm.engine.precisions import AUTO, PRECISION_NAMES, PRECISIONS, auto_precision, precision
from ...bilm.model import BiLM
from ...bilm.threads import ForkSafeLock, batch_thread_limit, renew_after_fork, thread_limit
from ...bilm.vocab_cache import TokenVectorCache, batch_token_vectors
from ...bilm.weights import WeightFileError, load_model
from ...groundwork.file_names import PathLike
from ...sources.bundled_versions import precision_fingerprint
from ...sources.download import cache_advice
from ...sources.model_paths import DEFAULT_MODEL_DIR, fingerprint, is_manylangs, model_file_map, resolve_model_files  # noqa: F401 (DEFAULT_MODEL_DIR re-exported)
from ..configuration.defaults import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_DTYPE,
    DEFAULT_MEMORY_MB,
    DEFAULT_TOKEN_BUDGET,
    DEFAULT_TOKEN_CACHE,
)
from ..configuration.validation import (
    check_dtype,
    disk_mb,
    integer_in,
    memory_mb,
    positive_int,
    resolve_device,
    validate_sentences,
    vectors_precision,
)
from .cache import DiskCache, MemoryCache, env_cache_dir, env_disk_mb, open_disk_cache
from .windows import length_batches

logger = logging.getLogger("spacy_elmo")  # the package's logger (its modules log to children of it)

# each precision's torch dtype ("int8": float32 activations, int8 weights in the inference path's products)
DTYPES = {p.name: p.dtype() for p in PRECISIONS}


class ElmoBackend:
    """A loaded biLM on one device. Stateless: a sentence's vectors do not depend on its batch (no state
    is carried over, padding is never computed), to float32 rounding (other batch shapes can take
    other GEMM kernels).

    Get one with :func:`spacy_elmo.load_bilm`, which shares one object per model and device.
    """

    def __init__(
        self,
        model: BiLM,
        options_path: Path,
        weights_path: Path,
        device: torch.device,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        # cast, or (int8: CPU only) packed with the float32 matrices released, and its engines chosen (bilm/engine)
        self.model = engine.prepare(model, device, dtype)
        engine.warn_if_slow(dtype, device, stacklevel=4)  # correct but emulated: say so once, with what to pick
        self.options_path = options_path
        self.weights_path = weights_path
        self.device = device
        self.dtype = dtype
        self.files_fingerprint = fingerprint(options_path, weights_path)  # the model's identity, whatever the precision
        # the vectors' identity (cache keys, Doc data): other precisions give other vectors, never shared entries
        self.fingerprint = precision_fingerprint(self.files_fingerprint, vectors_precision(dtype_name(dtype), device))
        self.token_budget = DEFAULT_TOKEN_BUDGET
        self.memory_cache = MemoryCache(DEFAULT_MEMORY_MB)
        self.token_cache = TokenVectorCache(self.model, DEFAULT_TOKEN_CACHE)
        self.disk_cache: Optional[DiskCache] = None
        directory = env_cache_dir()
        if directory:
            self.disk_cache = open_disk_cache(directory, env_disk_mb())
        self.small_work_threads: Optional[int] = 1
        self._warned_oom = False
        self._lock = threading.RLock()
        renew_after_fork(self)

    def configure_cache(
        self,
        *,
        cache_mb: Optional[float] = None,
        cache_dir: Union[bool, PathLike, None] = None,
        disk_cache_mb: Optional[float] = None,
        token_cache_size: Optional[int] = None,
    ) -> ElmoBackend:
        """Change the caches; ``None`` leaves a setting as it is. Returns ``self``.

        ``cache_mb``: in-memory LRU of sentence activations, in MiB (0 turns it off).
        ``cache_dir``: a directory for the persistent sqlite cache, or ``False`` to stop using one.
        ``disk_cache_mb``: bound on the disk cache's size (least recently used entries are evicted).
        ``token_cache_size``: char-CNN token vectors kept between batches (0 turns it off).
        """
        cache_mb, disk_cache_mb, token_cache_size = check_cache_sizes(cache_mb, disk_cache_mb, token_cache_size)
        with self._lock:
            if cache_mb is not None:
                if cache_mb == 0 and self.memory_cache.max_mb != 0:
                    logger.info("%s: in-memory cache turned off (cache_mb=0)", self._name())
                self.memory_cache.max_mb = cache_mb
            if cache_dir is False:
                if self.disk_cache is not None:
                    logger.info("%s: disk cache %s turned off (cache_dir=False)", self._name(), self.disk_cache.path)
                self.disk_cache = None
            elif cache_dir is not None and cache_dir is not True:
                size = disk_cache_mb if disk_cache_mb is not None else env_disk_mb()
                self.disk_cache = open_disk_cache(cache_dir, size)
            elif disk_cache_mb is not None and self.disk_cache is not None:
                self.disk_cache = open_disk_cache(self.disk_cache.directory, disk_cache_mb)
            if token_cache_size is not None:
                if token_cache_size == 0 and self.token_cache.max_tokens != 0:
                    logger.info("%s: token-vector cache turned off (token_cache_size=0)", self._name())
                self.token_cache.max_tokens = token_cache_size
                self.token_cache.clear()
        return self

    def _name(self) -> str:
        return f"ELMo model {self.options_path.parent}"

    def clear_cache(self, disk: bool = False) -> None:
        """Empty the in-memory caches (and this model's disk cache entries when ``disk=True``)."""
        with self._lock:
            self.memory_cache.clear()
            self.token_cache.clear()
            if disk and self.disk_cache is not None:
                self.disk_cache.clear(self.fingerprint)

    @property
    def n_layers(self) -> int:
        """Number of biLSTM layers; ``embed`` returns ``n_layers + 1`` layers (0 = token layer)."""
        return self.model.n_layers

    @property
    def dim(self) -> int:
        """Width of every output layer, ``2 * projection_dim``."""
        return self.model.output_dim

    def __repr__(self) -> str:
        return (
            f"ElmoBackend({str(self.weights_path)!r}, device={str(self.device)!r}, "
            f"dtype={dtype_name(self.dtype)!r}, n_layers={self.n_layers}, dim={self.dim})"
        )

    def __reduce__(self):  # pickles as a reference: the unpickled backend comes from the shared cache
        dtype = dtype_name(self.dtype)
        return (_load_from_paths, (str(self.options_path), str(self.weights_path), str(self.device), dtype))

    def embed(
        self,
        sentences: Iterable[Sequence[str]],
        *,
        batch_size: Optional[int] = None,
        on_progress: Optional[Callable[[int], object]] = None,
    ) -> list[np.ndarray]:
        """ELMo activations for each sentence, float32 ``(n_layers + 1, n_tokens, dim)``, in input order.

        Sentences are looked up in the caches (memory, then disk), repeated sentences are computed
        once, and the rest are sorted by length and batched under ``batch_size`` sentences and a
        padded token budget; an empty sentence gives ``(n_layers + 1, 0, dim)``. Every returned
        array is the caller's own (writable, not shared with the cache). ``on_progress(n)`` is
        called as sentences are done (``n`` more each time: the cached ones, then each batch),
        e.g. with a tqdm bar's ``update``.
        """
        sentences = validate_sentences(sentences)
        max_rows = DEFAULT_BATCH_SIZE if batch_size is None else positive_int(batch_size, "batch_size")
        results: list[Optional[np.ndarray]] = [None] * len(sentences)
        pending: dict[tuple[str, ...], list[int]] = {}
        use_memory = self.memory_cache.max_mb > 0
        for i, tokens in enumerate(sentences):
            if not tokens:
                results[i] = np.zeros((self.n_layers + 1, 0, self.dim), dtype=np.float32)
                continue
            key = tuple(tokens)
            hit = self.memory_cache.get(key) if use_memory else None
            if hit is not None:
                results[i] = hit.copy()
            else:
                pending.setdefault(key, []).append(i)
        disk = self.disk_cache
        if pending and disk is not None:
            for key, array in disk.get_many(self.fingerprint, list(pending), self.n_layers + 1, self.dim).items():
                self._deliver(results, pending.pop(key), key, array, use_memory)
        keys = list(pending)
        if on_progress is not None:
            on_progress(len(sentences) - sum(map(len, pending.values())))
        for batch in length_batches([len(k) for k in keys], max_rows, self.token_budget):
            arrays = self._embed_splitting_on_oom([keys[j] for j in batch])
            for j, array in zip(batch, arrays):
                self._deliver(results, pending[keys[j]], keys[j], array, use_memory)
            if disk is not None:
                disk.put_many(self.fingerprint, ((keys[j], a) for j, a in zip(batch, arrays)))
            if on_progress is not None:
                on_progress(sum(len(pending[keys[j]]) for j in batch))
        return results  # type: ignore[return-value]

    def _deliver(
        self, results: list, rows: list[int], key: tuple[str, ...], array: np.ndarray, use_memory: bool
    ) -> None:
        if use_memory:
            self.memory_cache.put(key, array)
        results[rows[0]] = array
        for row in rows[1:]:
            results[row] = array.copy()

    def _embed_splitting_on_oom(self, batch: list[Sequence[str]]) -> list[np.ndarray]:
        """:meth:`_embed_batch`, retried in halves when the device runs out of memory (down to one sentence)."""
        try:
            return self._embed_batch(batch)
        except (RuntimeError, MemoryError) as err:  # torch's and numpy's ways of running out
            if not is_out_of_memory(err):
                raise
            self.token_cache.clear()  # it may have been half-updated
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            if len(batch) == 1:
                raise MemoryError(
                    f"out of {self.device} memory embedding one sentence of {len(batch[0])} tokens; "
                    "split long texts (the spaCy component's max_length windows do) or use another device"
                ) from err
            if not self._warned_oom:
                self._warned_oom = True
                warnings.warn(
                    f"spacy_elmo: out of {self.device} memory on a batch of {len(batch)} sentences "
                    f"(longest {max(len(s) for s in batch)} tokens); retrying in halves. Lower batch_size "
                    f"or backend.token_budget (now {self.token_budget}) to avoid the retries",
                    ResourceWarning,
                    stacklevel=4,
                )
        half = len(batch) // 2
        return self._embed_splitting_on_oom(batch[:half]) + self._embed_splitting_on_oom(batch[half:])

    def _embed_batch(self, batch: list[Sequence[str]]) -> list[np.ndarray]:
        """Activations of one batch of non-empty sentences, through the token-vector cache and the inference path."""
        with self._lock, torch.inference_mode(), thread_limit(self._threads_for(len(batch))):
            tokens, lengths = batch_token_vectors(self.token_cache, batch)
            activations, _ = self.model.contextualize_vectors(
                tokens, lengths, boundaries=False
            )  # <S>, </S> dropped below
            layers = activations.float().cpu().numpy()
        if self.dtype in (torch.float16, torch.bfloat16) and not np.isfinite(layers).all():
            self._refuse_overflow(len(batch))
        return [np.ascontiguousarray(layers[:, row, 1 : len(t) + 1]) for row, t in enumerate(batch)]

    def _refuse_overflow(self, rows: int) -> None:
        """Low precision ran out of range (float16's largest value is 65504): never hand out inf / nan vectors."""
        clip = self.model.options.cell_clip
        why = "this model has no cell clip, so its LSTM cells can grow past that" if clip is None else ""
        raise FloatingPointError(
            f"{self._name()}: dtype={dtype_name(self.dtype)!r} overflowed (inf or nan in the vectors of a batch of "
            f"{rows} sentences; float16's largest value is 65504{', and ' + why if why else ''}): use "
            "dtype='float32', or 'bfloat16' (float32's range)"
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

    def _after_fork(self) -> None:
        """In a forked child: a new lock (a parent thread may have held this one) and empty in-memory caches."""
        self._lock = threading.RLock()
        self.token_cache.clear()


def is_out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` is torch or numpy running out of device (or host) memory for an allocation."""
    if isinstance(err, (MemoryError, torch.cuda.OutOfMemoryError)):
        return True
    message = str(err)
    return "out of memory" in message or "can't allocate memory" in message


# -- the process-wide cache ---------------------------------------------------------------

_CACHE: dict[tuple, ElmoBackend] = {}
_CACHE_LOCK = ForkSafeLock()


def resolve_dtype(dtype: Union[str, torch.dtype, None], device: Union[str, torch.device, None] = None) -> torch.dtype:
    """The torch dtype of the precision ``dtype`` names (a row of the precision table,
    :data:`spacy_elmo.bilm.engine.precisions.PRECISIONS`; ``None`` means float32, exact; the others trade accuracy
    for speed: docs/precision.md); "auto" is the fastest of them on ``device`` (default CPU) that holds its
    documented bound on every input (float32: no low precision does on a trained model).

    ``torch.int8`` stands for the int8 path: float32 activations, int8 weights in the biLM's products.
    """
    name = check_dtype(dtype)
    if name == AUTO:
        return DTYPES[auto_precision(resolve_device(device).type)]
    if name == "float16" and resolve_device(device).type == "cpu" and not cpu_support.float16_products():
        raise ValueError(
            f"dtype='float16': this torch ({torch.__version__}) has no float16 products on the CPU: use 'bfloat16' or "
            f"'float32' there, float16 on a GPU, or a newer torch"
        )
    return DTYPES[name]


def dtype_name(dtype: torch.dtype) -> str:
    """The name ``load_bilm`` takes for ``dtype`` ("float32", "int8", ...)."""
    return str(dtype).replace("torch.", "")


def load_bilm(
    model: Optional[PathLike] = "default",
    *,
    options: Optional[PathLike] = None,
    weights: Optional[PathLike] = None,
    device: Union[str, torch.device, None] = None,
    dtype: Union[str, torch.dtype, None] = None,
    cache_mb: Optional[float] = None,
    cache_dir: Union[bool, PathLike, None] = None,
    disk_cache_mb: Optional[float] = None,
    token_cache_size: Optional[int] = None,
) -> ElmoBackend:
    """Load (once per process) the ELMo model in ``model`` (a directory, ``"default"`` or a bundled version's name
    such as ``"default-v1"``, a published name, an archive or URL).

    The same resolved files, device and dtype always give the same :class:`ElmoBackend` object,
    so every spaCy component and scikit-learn transformer shares one model and one cache. The
    cache arguments (see :meth:`ElmoBackend.configure_cache`) reconfigure that shared object;
    ``None`` keeps its settings (defaults: 256 MiB in memory, a disk cache only when given or
    named by ``SPACY_ELMO_CACHE_DIR``). 256 MiB holds the layers of about 87,000 tokens of the bundled model (4,000
    SST sentences): a refit of more texts (``GridSearchCV``, a pipeline fitted again) recomputes them unless
    ``cache_mb`` is larger, up to this machine's memory (docs/sklearn.md). The default is not sized by the machine's
    memory: every process (a Dask worker, a scikit-learn ``n_jobs`` worker) holds its own cache.

    ``dtype``: a precision's name in the precision table (:data:`spacy_elmo.bilm.engine.precisions.PRECISIONS`):
    ``None``/"float32" (exact) or a low precision ("bfloat16", "int8"...: approximate, docs/precision.md), or
    "auto" (the fastest of them that holds its documented error bound on every input: float32, since no low
    precision does on a trained model's repetitive input); ``backend.dtype`` says which was chosen, and it is part
    of ``backend.fingerprint``.
    A precision without native kernels on this CPU warns once (:class:`SlowPrecisionWarning`).
    """
    check_cache_sizes(cache_mb, disk_cache_mb, token_cache_size)  # before the model loads: said at once
    torch_device = resolve_device(device)  # before the files: a device this machine lacks is said before a download
    options_path, weights_path = resolve_model_files(model, options, weights)
    torch_dtype = resolve_dtype(dtype, torch_device)
    files = [weights_path, *(p for p in model_file_map(options_path, weights_path).values() if p != weights_path)]
    stats = [(p.stat().st_size, p.stat().st_mtime_ns) for p in files]  # the weights first, then the other files
    key = (str(options_path), str(weights_path), *stats, str(torch_device), str(torch_dtype))
    with _CACHE_LOCK:
        backend = _CACHE.get(key)
        if backend is None:
            try:
                model_ = load_model_files(options_path, weights_path)
            except WeightFileError as err:
                advice = cache_advice(weights_path)  # a damaged cached file: say which folder to delete, and how
                if not advice:
                    raise
                raise WeightFileError(f"{err}{advice}") from err
            backend = ElmoBackend(model_, options_path, weights_path, torch_device, torch_dtype)
            _CACHE[key] = backend
            _log_loaded(model, backend, stats[0][0])
    return backend.configure_cache(
        cache_mb=cache_mb, cache_dir=cache_dir, disk_cache_mb=disk_cache_mb, token_cache_size=token_cache_size
    )


def check_cache_sizes(
    cache_mb: Optional[float], disk_cache_mb: Optional[float], token_cache_size: Optional[int]
) -> tuple[Optional[float], Optional[float], Optional[int]]:
    """The cache arguments of :func:`load_bilm` and :meth:`ElmoBackend.configure_cache` checked (``None``: left as
    it is): ``cache_mb`` from 0 up to this machine's memory, ``disk_cache_mb`` above 0, ``token_cache_size`` an
    integer from 0; a ``ValueError`` names the first bad one."""
    return (
        None if cache_mb is None else memory_mb(cache_mb, "cache_mb"),
        None if disk_cache_mb is None else disk_mb(disk_cache_mb, "disk_cache_mb"),
        None if token_cache_size is None else integer_in(token_cache_size, "token_cache_size", 0),
    )


def load_model_files(options_path: Path, weights_path: Path) -> BiLM:
    """The biLM in a resolved pair of files, by their format: ELMo's options.json + HDF5, or ELMoForManyLangs'."""
    if is_manylangs(options_path, weights_path):
        return manylangs_reader.load_model(weights_path.parent)
    return load_model(options_path, weights_path)


def _log_loaded(model: Optional[PathLike], backend: ElmoBackend, weights_bytes: int) -> None:
    """INFO: which model was loaded from where, with which precision; DEBUG: the kernels it will use."""
    name = dtype_name(backend.dtype)
    logger.info(
        "loaded ELMo model %s from %s (weights %s, %.1f MB) on %s, precision %s; fingerprint %s",
        os.fspath(model) if model is not None else "from options/weights",
        backend.options_path.parent,
        backend.weights_path.name,
        weights_bytes / 1e6,
        backend.device,
        precision(name).description if name in PRECISION_NAMES else name,
        backend.fingerprint,
    )
    if logger.isEnabledFor(logging.DEBUG):
        lstm = engine.engine_of(backend.model.lstm)
        logger.debug("kernels: %s engine, %s", lstm.name, lstm.describe())


def _load_from_paths(options: str, weights: str, device: str, dtype: str = DEFAULT_DTYPE) -> ElmoBackend:
    return load_bilm(options=options, weights=weights, device=device, dtype=dtype)
