"""One shared, cached biLM backend: load a model once per process, embed token sequences in batches."""

from __future__ import annotations

import logging
import os
import threading
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

import numpy as np

from ...bilm.engine.precisions import AUTO, Precision, PrecisionLike, check, resolve
from ...bilm.weights import WeightFileError
from ...groundwork.file_names import PathLike
from ...groundwork.fork_safety import ForkSafeLock, renew_after_fork
from ...sources.download import cache_advice
from ...sources.model_names import is_default, local_path
from ...sources.model_paths import (  # noqa: F401 (DEFAULT_MODEL_DIR re-exported)
    DEFAULT_MODEL_DIR,
    fingerprint,
    is_onnx_dir,
    is_onnx_export,
    model_file_map,
    resolve_model_files,
)
from ..configuration.defaults import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_MEMORY_MB,
    DEFAULT_PRECISION,
    DEFAULT_TOKEN_BUDGET,
    DEFAULT_TOKEN_CACHE,
)
from ..configuration.validation import (
    disk_mb,
    integer_in,
    memory_mb,
    positive_int,
    precision_or_dtype,
    resolve_device,
    validate_sentences,
)
from .cache import DiskCache, MemoryCache, env_cache_dir, env_disk_mb, open_disk_cache
from .runner import Runner, TokenCache, device_type
from .windows import length_batches

if TYPE_CHECKING:
    import torch

    from ...bilm.model import BiLM

logger = logging.getLogger("spacy_elmo")  # the package's logger (its modules log to children of it)


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
        dtype: Union[torch.dtype, Precision, None] = None,
    ) -> None:
        """A backend on ``model``, a torch biLM read from ``options_path`` and ``weights_path``, prepared here for
        ``device`` in ``dtype`` (a torch dtype or a precision's row; ``None``: float32). :func:`load_bilm` shares one
        per model, device and precision, through :func:`open_runner` and :meth:`on_runner`."""
        import torch

        from .torch_runner import TorchRunner

        precision = torch.float32 if dtype is None else dtype
        # the emulated-precision warning points at this constructor's caller: TorchRunner <- here <- the caller
        runner = TorchRunner(model, device, precision, name=_model_name(options_path), stacklevel=4)
        self._start(runner, options_path, weights_path)

    @classmethod
    def on_runner(cls, runner: Runner, options_path: Path, weights_path: Path) -> ElmoBackend:
        """A backend around ``runner`` (:func:`open_runner`'s), the model in ``options_path`` and ``weights_path``."""
        backend = cls.__new__(cls)
        backend._start(runner, options_path, weights_path)
        return backend

    def _start(self, runner: Runner, options_path: Path, weights_path: Path) -> None:
        self.runner = runner
        self.options_path = options_path
        self.weights_path = weights_path
        self.files_fingerprint = fingerprint(options_path, weights_path)  # the model's identity, whatever the precision
        # the vectors' identity (cache keys, Doc data): other precisions give other vectors, never shared entries
        self.fingerprint = self.precision.fingerprint(self.files_fingerprint, device_type(runner))
        self.token_budget = DEFAULT_TOKEN_BUDGET
        self.memory_cache = MemoryCache(DEFAULT_MEMORY_MB)
        self.disk_cache: Optional[DiskCache] = None
        directory = env_cache_dir()
        if directory:
            self.disk_cache = open_disk_cache(directory, env_disk_mb())
        self._warned_oom = False
        self._lock = threading.RLock()
        renew_after_fork(self)

    @property
    def precision(self) -> Precision:
        """Its row of the precision table (bilm/engine/precisions.py); :attr:`dtype` is its torch dtype."""
        return self.runner.precision

    @property
    def dtype(self) -> torch.dtype:
        """The torch dtype that stands for :attr:`precision` (``torch.int8``: int8 weights, float32 activations;
        imports torch)."""
        return self.precision.dtype()

    @property
    def device(self) -> torch.device:
        """The torch device it computes on (imports torch)."""
        import torch

        return torch.device(self.runner.device_name)

    @property
    def model(self) -> BiLM:
        """The torch biLM it computes with, prepared for its precision (a torch runner's)."""
        model = getattr(self.runner, "model", None)
        if model is None:
            raise AttributeError(f"a {type(self.runner).__name__} computes with no torch biLM (ElmoBackend.model)")
        return model  # type: ignore[no-any-return]

    @property
    def token_cache(self) -> TokenCache:
        """The runner's char-CNN token vectors kept between batches (``max_tokens``: its size, 0 off)."""
        return self.runner.token_cache

    @property
    def small_work_threads(self) -> Optional[int]:
        """Threads of the calling thread for a small CPU batch (1; ``None``: the runtime's own setting)."""
        return self.runner.small_work_threads

    @small_work_threads.setter
    def small_work_threads(self, value: Optional[int]) -> None:
        self.runner.small_work_threads = value

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
        return _model_name(self.options_path)

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
        return self.runner.n_layers

    @property
    def dim(self) -> int:
        """Width of every output layer, ``2 * projection_dim``."""
        return self.runner.dim

    def __repr__(self) -> str:
        return (
            f"ElmoBackend({str(self.weights_path)!r}, device={self.runner.device_name!r}, "
            f"dtype={self.precision.name!r}, n_layers={self.n_layers}, dim={self.dim})"
        )

    def __reduce__(self):  # pickles as a reference: the unpickled backend comes from the shared cache
        dtype = self.precision.name
        return (_load_from_paths, (str(self.options_path), str(self.weights_path), self.runner.device_name, dtype))

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
        except Exception as err:  # torch's and numpy's ways of running out: the runner says which they are
            if not self.runner.is_out_of_memory(err):
                raise
            self.token_cache.clear()  # it may have been half-updated
            self.runner.free_memory()
            device = self.runner.device_name
            if len(batch) == 1:
                raise MemoryError(
                    f"out of {device} memory embedding one sentence of {len(batch[0])} tokens; "
                    "split long texts (the spaCy component's max_length windows do) or use another device"
                ) from err
            if not self._warned_oom:
                self._warned_oom = True
                warnings.warn(
                    f"spacy_elmo: out of {device} memory on a batch of {len(batch)} sentences "
                    f"(longest {max(len(s) for s in batch)} tokens); retrying in halves. Lower batch_size "
                    f"or backend.token_budget (now {self.token_budget}) to avoid the retries",
                    ResourceWarning,
                    stacklevel=4,
                )
        half = len(batch) // 2
        return self._embed_splitting_on_oom(batch[:half]) + self._embed_splitting_on_oom(batch[half:])

    def _embed_batch(self, batch: list[Sequence[str]]) -> list[np.ndarray]:
        """Activations of one batch of non-empty sentences: the runner's, one batch at a time."""
        with self._lock:
            return self.runner.layers(batch)

    def _after_fork(self) -> None:
        """In a forked child: a new lock (a parent thread may have held this one) and empty in-memory caches."""
        self._lock = threading.RLock()
        self.runner.after_fork()


def _model_name(options_path: Path) -> str:
    """How errors and the log name a model: by its folder."""
    return f"ELMo model {options_path.parent}"


# -- the process-wide cache ---------------------------------------------------------------

_CACHE: dict[tuple, ElmoBackend] = {}
_CACHE_LOCK = ForkSafeLock()


def resolve_precision(value: PrecisionLike, device: Union[str, torch.device, None] = None) -> Precision:
    """The row of the precision table that ``value`` names (:func:`spacy_elmo.bilm.engine.precisions.resolve`:
    ``None`` means float32, exact; the others trade accuracy for speed: docs/precision.md); "auto" is the fastest
    of them on ``device`` (default CPU) that holds its documented bound on every input (float32: no low precision
    does on a trained model). A precision this torch cannot run on ``device`` is refused (``ValueError``).
    """
    device_type = resolve_device(device).type
    row = resolve(value, device_type)
    refusal = row.refusal(device_type)
    if refusal is not None:
        raise ValueError(refusal)
    return row


def resolve_dtype(dtype: PrecisionLike, device: Union[str, torch.device, None] = None) -> torch.dtype:
    """The torch dtype of :func:`resolve_precision`'s row (``torch.int8`` stands for the int8 path: float32
    activations, int8 weights in the biLM's products)."""
    return resolve_precision(dtype, device).dtype()


def load_bilm(
    model: Optional[PathLike] = "default",
    *,
    options: Optional[PathLike] = None,
    weights: Optional[PathLike] = None,
    device: Union[str, torch.device, None] = None,
    precision: PrecisionLike = None,
    cache_mb: Optional[float] = None,
    cache_dir: Union[bool, PathLike, None] = None,
    disk_cache_mb: Optional[float] = None,
    token_cache_size: Optional[int] = None,
    dtype: PrecisionLike = None,
) -> ElmoBackend:
    """Load (once per process) the ELMo model in ``model`` (a directory, ``"default"`` or a bundled version's name
    such as ``"default-v1"``, a published name, an archive or URL).

    The same resolved files, device and precision always give the same :class:`ElmoBackend` object,
    so every spaCy component and scikit-learn transformer shares one model and one cache. The
    cache arguments (see :meth:`ElmoBackend.configure_cache`) reconfigure that shared object;
    ``None`` keeps its settings (defaults: 256 MiB in memory, a disk cache only when given or
    named by ``SPACY_ELMO_CACHE_DIR``). 256 MiB holds the layers of about 87,000 tokens of the bundled model (4,000
    SST sentences): a refit of more texts (``GridSearchCV``, a pipeline fitted again) recomputes them unless
    ``cache_mb`` is larger, up to this machine's memory (docs/sklearn.md). The default is not sized by the machine's
    memory: every process (a Dask worker, a scikit-learn ``n_jobs`` worker) holds its own cache.

    ``precision``: a precision's name in the precision table (:data:`spacy_elmo.bilm.engine.precisions.PRECISIONS`,
    or an alias, a torch dtype): ``None``/"float32" (exact) or a low precision ("bfloat16", "int8"...: approximate,
    docs/precision.md), or "auto" (the fastest of them that holds its documented error bound on every input:
    float32, since no low precision does on a trained model's repetitive input); ``backend.precision`` says which
    was chosen (``backend.dtype``: its torch dtype), and it is part of ``backend.fingerprint``. ``dtype``: its name
    up to 0.2.0, deprecated (``FutureWarning``).
    A precision without native kernels on this CPU warns once (:class:`SlowPrecisionWarning`).
    """
    check_cache_sizes(cache_mb, disk_cache_mb, token_cache_size)  # before the model loads: said at once
    asked = precision_or_dtype(precision, dtype, "load_bilm")
    if onnx_export_folder(model, options, weights) is not None:  # no torch: device and precision checked by its runner
        options_path, weights_path = resolve_model_files(model, options, weights)
        where: Union[str, torch.device] = "cpu" if device is None else str(device)
    else:
        where = resolve_device(device)  # before the files: a device this machine lacks is said before a download
        options_path, weights_path = resolve_model_files(model, options, weights)
    if is_onnx_export(options_path, weights_path):  # by any spelling: None and "auto" are the folder's precision
        row = onnx_precision(asked, exported_row(weights_path.parent), weights_path.parent)
    else:
        row = resolve_precision(asked, where)
    files = [weights_path, *(p for p in model_file_map(options_path, weights_path).values() if p != weights_path)]
    stats = [(p.stat().st_size, p.stat().st_mtime_ns) for p in files]  # the weights first, then the other files
    key = (str(options_path), str(weights_path), *stats, str(where), row.name)
    with _CACHE_LOCK:
        backend = _CACHE.get(key)
        if backend is None:
            try:
                runner = open_runner(options_path, weights_path, where, row)
            except WeightFileError as err:
                advice = cache_advice(weights_path)  # a damaged cached file: say which folder to delete, and how
                if not advice:
                    raise
                raise WeightFileError(f"{err}{advice}") from err
            backend = ElmoBackend.on_runner(runner, options_path, weights_path)
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


def onnx_export_folder(
    model: Optional[PathLike], options: Optional[PathLike], weights: Optional[PathLike]
) -> Optional[Path]:
    """The ONNX export folder (``spacy-elmo export``) that ``model`` names here, else None (only a local folder is
    looked into: nothing is downloaded to tell)."""
    if options is not None or weights is not None or model is None or is_default(model):
        return None
    try:
        path = local_path(os.fspath(model))  # as resolve_model_files reads a local name ("~" expanded)
    except WeightFileError:  # a name no path can have: resolve_model_files says what it is not
        return None
    return path if path.is_dir() and is_onnx_dir(path) else None


def onnx_device(device: object) -> str:
    """An ONNX export runs on ONNX Runtime's CPU provider: ``device`` None or the CPU, else a ``ValueError``."""
    if device is None or str(device) == "cpu":
        return "cpu"
    raise ValueError(
        f"device={str(device)!r}: an ONNX export folder runs on ONNX Runtime's CPU provider; give device=None (or "
        "'cpu'), or load the model it was exported from for a GPU"
    )


def onnx_precision(value: PrecisionLike, exported: Precision, folder: Path) -> Precision:
    """An ONNX export folder ``folder`` computes in the precision it was exported in (``exported``, its manifest's:
    float32 or int8): ``value`` None, "auto" or that precision gives its row, another a ``ValueError`` (one line)
    saying what to do."""
    from ...onnx.manifest import EXPORT_PRECISIONS

    name = check(value)
    if value is None or name in (AUTO, exported.name):
        return exported
    if name in EXPORT_PRECISIONS:
        flag = " --precision int8" if name == "int8" else ""
        instead = f"export the model again in {name} (spacy-elmo export MODEL FOLDER --format onnx{flag})"
    else:
        instead = f"load the model it was exported from for {name}"
    raise ValueError(
        f"precision={name!r}: the ONNX export folder {folder} computes in {exported.name} on ONNX Runtime; give "
        f"precision=None (or {exported.name!r}), or {instead}"
    )


def exported_row(folder: Path) -> Precision:
    """The row of the precision ONNX export folder ``folder`` computes in, as its checked manifest says (an
    ``OnnxFolderError`` when it cannot be read)."""
    from ...onnx.manifest import exported_precision, read_manifest

    return resolve(exported_precision(read_manifest(folder)[0]), "cpu")


def open_runner(
    options_path: Path, weights_path: Path, device: Union[str, torch.device], precision: Precision
) -> Runner:
    """The runner that computes the model in a resolved pair of files on ``device`` in ``precision``: the one place a
    runner is chosen. An ONNX export folder (``spacy-elmo export``) runs on ONNX Runtime (:mod:`spacy_elmo.onnx`,
    numpy and onnxruntime only), on the CPU, in the precision it was exported in (``precision`` that row, which
    :func:`load_bilm` makes of None and "auto": :func:`onnx_precision`; another is refused); every other model on
    torch (:mod:`.torch_runner`, imported here and nowhere else in this module)."""
    if is_onnx_export(options_path, weights_path):  # whatever route led here: the CPU, in the folder's precision
        onnx_device(device)
        from ...onnx.runner import OnnxBiLM

        runner = OnnxBiLM(weights_path.parent, token_cache_size=DEFAULT_TOKEN_CACHE)
        onnx_precision(precision, runner.precision, weights_path.parent)
        return runner
    from .torch_runner import open_torch_runner

    assert not isinstance(device, str), "a torch model's device is resolved (resolve_device) before its runner opens"
    # the emulated-precision warning points at load_bilm's caller:
    # warn_if_slow <- TorchRunner <- open_torch_runner <- open_runner <- load_bilm <- the caller
    return open_torch_runner(
        options_path, weights_path, device, precision, name=_model_name(options_path), stacklevel=6
    )


def _log_loaded(model: Optional[PathLike], backend: ElmoBackend, weights_bytes: int) -> None:
    """INFO: which model was loaded from where, with which precision; DEBUG: the kernels it will use."""
    logger.info(
        "loaded ELMo model %s from %s (weights %s, %.1f MB) on %s, precision %s; fingerprint %s",
        os.fspath(model) if model is not None else "from options/weights",
        backend.options_path.parent,
        backend.weights_path.name,
        weights_bytes / 1e6,
        backend.runner.device_name,
        backend.precision.description,
        backend.fingerprint,
    )
    if logger.isEnabledFor(logging.DEBUG):
        logger.debug("%s", backend.runner.describe())


def _load_from_paths(options: str, weights: str, device: str, precision: str = DEFAULT_PRECISION) -> ElmoBackend:
    return load_bilm(options=options, weights=weights, device=device, precision=precision)


# names of the torch runner that this module exported before the runner was split off: imported (with torch) on use
_TORCH_RUNNER_NAMES = ("load_model_files", "is_out_of_memory", "batch_token_vectors", "TokenVectorCache")


def __getattr__(name: str) -> Any:
    if name in _TORCH_RUNNER_NAMES:
        from . import torch_runner

        value = getattr(torch_runner, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
