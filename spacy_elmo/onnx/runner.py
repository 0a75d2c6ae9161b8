"""ELMo layers from an ONNX export folder on ONNX Runtime: numpy and ``onnxruntime`` only, no torch.

:class:`OnnxBiLM` gives what :meth:`spacy_elmo.ElmoBackend.embed` gives for a batch of token lists: per sentence,
float32 ``(n_layers + 1, n_tokens, dim)``. As the torch path (``ElmoBackend._embed_batch``), it puts ``<S>`` and
``</S>`` around each sentence, runs the biLM over the padded batch and keeps the positions between the two
markers. Token vectors are kept per word (a bounded LRU), so a word seen before skips the char CNN; the char ids
are :mod:`spacy_elmo.bilm.chars`'s, which imports no torch.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

import numpy as np

from ..bilm.chars import BOS_TOKEN, EOS_TOKEN, tokens_to_char_ids
from ..bilm.engine import precisions
from ..groundwork.file_names import PathLike
from .graph import CHAR_IDS, LAYERS, LENGTHS, TOKEN_VECTORS, TOKENS
from .manifest import (
    ADVICE,
    CONTEXTUALIZER,
    MANIFEST,
    TOKEN_ENCODER,
    OnnxFolderError,
    exported_precision,
    read_manifest,
)

if TYPE_CHECKING:  # pragma: no cover
    import onnxruntime

    from ..bilm.engine.precisions import Precision
    from ..bilm.options import BiLMOptions

BUCKET_ROWS = 256  # new words per char-CNN run, grouped by length so that short words are not padded to long ones


def import_onnxruntime() -> Any:
    """The ``onnxruntime`` module, or an ImportError saying how to install it."""
    try:
        import onnxruntime
    except ImportError as err:
        raise ImportError(
            f"running an ONNX export needs onnxruntime, which is not installed: pip install onnxruntime ({err})"
        ) from None
    return onnxruntime


def session_options(threads: Optional[int]) -> onnxruntime.SessionOptions:
    """ONNX Runtime settings of an ``InferenceSession``: all graph optimizations, operators run one after the
    other (the graphs are chains), ``threads`` threads inside an operator (None: ONNX Runtime's default). Per graph:
    nothing of the process changes."""
    ort = import_onnxruntime()
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    if threads is not None:
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads must be a positive integer or None (ONNX Runtime's default), not {threads!r}")
        options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return options


def _session(graph: Union[Path, bytes], threads: Optional[int], what: str, names: tuple[set[str], set[str]]) -> Any:
    """An ONNX Runtime ``InferenceSession`` of ``graph`` (a file or its bytes) on the CPU, whose input and output
    names are ``names``; an :class:`OnnxFolderError` (one line) when ONNX Runtime cannot load it or it is another
    graph."""
    ort = import_onnxruntime()
    source = graph if isinstance(graph, bytes) else str(graph)
    try:
        loaded = ort.InferenceSession(source, session_options(threads), providers=["CPUExecutionProvider"])
    except Exception as err:  # onnxruntime's own exception types (Fail, InvalidProtobuf, ...) share no base class
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise OnnxFolderError(f"{what}: ONNX Runtime cannot load it ({first[:300]}): {ADVICE}") from None
    found = ({i.name for i in loaded.get_inputs()}, {o.name for o in loaded.get_outputs()})
    if found != names:
        raise OnnxFolderError(f"{what}: inputs/outputs {found}, not the expected {names}: {ADVICE}")
    return loaded


class WordVectorCache:
    """Token vectors kept between batches, least recently used first out; ``max_tokens`` 0 keeps none. The
    backend sizes and clears it (the runner protocol's ``token_cache``)."""

    def __init__(self, max_tokens: int) -> None:
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
            raise ValueError(f"token_cache_size must be a non-negative integer, not {max_tokens!r}")
        self.max_tokens = max_tokens
        self.vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self.lock = threading.Lock()

    def clear(self) -> None:
        with self.lock:
            self.vectors.clear()

    def __len__(self) -> int:
        return len(self.vectors)


def content_columns(ids: np.ndarray) -> np.ndarray:
    """Per row of char ids, the columns before its trailing run of padding (one repeated id)."""
    varying = ids != ids[:, -1:]
    return (varying * np.arange(1, ids.shape[1] + 1)).max(axis=1, initial=0)


class OnnxBiLM:
    """The biLM of an ONNX export folder (``spacy-elmo export``), run on ONNX Runtime's CPU provider: the backend's
    runner for such a folder (the protocol of :mod:`spacy_elmo.runtime.embedding.runner`).

    ``threads``: threads inside an operator (None: ONNX Runtime's default, the machine's cores). ``token_cache_size``:
    token vectors kept (0: none). :meth:`layers` may be called from several threads (the cache is locked; ONNX
    Runtime's ``run`` is thread-safe).
    """

    def __init__(self, folder: PathLike, *, token_cache_size: int, threads: Optional[int] = None):
        folder = Path(folder)
        manifest, options = read_manifest(folder)
        self.folder: Optional[Path] = folder
        self._setup(manifest, options, folder / TOKEN_ENCODER, folder / CONTEXTUALIZER, threads, token_cache_size)

    @classmethod
    def from_graphs(
        cls,
        token_encoder: Union[Path, bytes],
        contextualizer: Union[Path, bytes],
        manifest: dict[str, Any],
        options: BiLMOptions,
        *,
        token_cache_size: int,
        threads: Optional[int] = None,
    ) -> OnnxBiLM:
        """A runner of two graphs not (yet) in a folder, e.g. the export's check before it writes them."""
        runner = cls.__new__(cls)
        runner.folder = None
        runner._setup(manifest, options, token_encoder, contextualizer, threads, token_cache_size)
        return runner

    def _setup(
        self,
        manifest: dict[str, Any],
        options: BiLMOptions,
        token_encoder: Union[Path, bytes],
        contextualizer: Union[Path, bytes],
        threads: Optional[int],
        token_cache_size: int,
    ) -> None:
        self.token_cache = WordVectorCache(token_cache_size)
        self.manifest = manifest
        self.options = options
        where = "the token encoder" if isinstance(token_encoder, bytes) else str(token_encoder)
        self._encoder = _session(token_encoder, threads, where, ({CHAR_IDS}, {TOKEN_VECTORS}))
        where = "the contextualizer" if isinstance(contextualizer, bytes) else str(contextualizer)
        self._contextualizer = _session(contextualizer, threads, where, ({TOKENS, LENGTHS}, {LAYERS}))
        widths = (self._encoder.get_outputs()[0].shape[1], self._contextualizer.get_outputs()[0].shape)
        if widths != (options.projection_dim, [options.n_layers + 1, "batch", "time", options.output_dim]):
            said = self.folder / MANIFEST if self.folder is not None else "the manifest"
            raise OnnxFolderError(
                f"{said}: options (projection_dim {options.projection_dim}, n_layers {options.n_layers}) disagree with "
                f"the graphs' outputs (token vectors {widths[0]} wide, layers {widths[1]}): {ADVICE}"
            )
        self.threads = threads
        self.small_work_threads: Optional[int] = None  # (ONNX Runtime's pool is fixed when a graph loads)
        self._max_width = max(width for width, _ in options.filters)

    @property
    def n_layers(self) -> int:
        """LSTM layers; :meth:`layers` gives one more (the token layer first)."""
        return self.options.n_layers

    @property
    def dim(self) -> int:
        """Width of each layer: both directions side by side."""
        return self.options.output_dim

    @property
    def fingerprint(self) -> str:
        """The source model's fingerprint (:func:`spacy_elmo.sources.model_paths.fingerprint`), as the export saw it."""
        return str(self.manifest["fingerprint"])

    def encode_tokens(self, tokens: Sequence[str]) -> np.ndarray:
        """Token vectors ``(len(tokens), projection_dim)`` by the char CNN, with no cache.

        Rows go in buckets of similar length, each cut to its own longest word plus the widest filter (the max over
        positions is unchanged: :func:`spacy_elmo.bilm.encoder.trim_padding`), so short words do not pay for long ones.
        """
        ids = tokens_to_char_ids(tokens)
        out = np.empty((len(tokens), self.options.projection_dim), np.float32)
        if not len(tokens):
            return out
        columns = content_columns(ids)
        order = np.argsort(columns, kind="stable")
        for start in range(0, len(order), BUCKET_ROWS):
            rows = order[start : start + BUCKET_ROWS]
            keep = min(ids.shape[1], int(columns[rows].max()) + self._max_width)
            (vectors,) = self._encoder.run(None, {CHAR_IDS: np.ascontiguousarray(ids[rows, :keep])})
            out[rows] = vectors
        return out

    def token_vectors(self, tokens: Sequence[str]) -> np.ndarray:
        """Vectors ``(len(tokens), projection_dim)`` of distinct ``tokens``, from the cache where possible."""
        cache = self.token_cache
        if len(tokens) > cache.max_tokens:  # the cache cannot hold them all
            return self.encode_tokens(tokens)
        with cache.lock:  # (new words are encoded under it, as the torch backend's cache does)
            kept = cache.vectors
            missing = [t for t in tokens if t not in kept]
            for token, vector in zip(missing, self.encode_tokens(missing)):
                kept[token] = vector
            for token in tokens:
                kept.move_to_end(token)
            vectors = np.stack([kept[t] for t in tokens]) if tokens else self.encode_tokens([])
            while len(kept) > cache.max_tokens:  # the least recently used, none of ``tokens``
                kept.popitem(last=False)
        return vectors

    def clear_cache(self) -> None:
        """Forget every kept token vector."""
        self.token_cache.clear()

    # -- the backend's runner protocol (spacy_elmo/runtime/embedding/runner.py) --------------------------------------

    @property
    def device_name(self) -> str:
        """ONNX Runtime's CPU provider: ``"cpu"``."""
        return "cpu"

    @property
    def precision(self) -> Precision:
        """The row of the precision the graphs compute in, as the manifest says: float32, or int8 (an export with
        ``--precision int8``: int8 weights in its products)."""
        return precisions.precision(exported_precision(self.manifest))

    def after_fork(self) -> None:
        """In a forked child: a new cache lock (a parent thread may have held it) and no kept vectors."""
        self.token_cache.lock = threading.Lock()
        self.token_cache.vectors.clear()

    def is_out_of_memory(self, err: BaseException) -> bool:
        """Whether ``err`` is numpy or ONNX Runtime failing to allocate memory."""
        return isinstance(err, MemoryError) or "Failed to allocate memory" in str(err) or "bad_alloc" in str(err)

    def free_memory(self) -> None:
        """Nothing to hand back: ONNX Runtime's CPU arena keeps its memory for the next run."""

    def describe(self) -> str:
        """The load log's DEBUG line: the runtime, its version and its threads."""
        threads = "ONNX Runtime's default" if self.threads is None else str(self.threads)
        return f"kernels: ONNX Runtime {import_onnxruntime().__version__} on the CPU, {threads} threads per operator"

    def layers(self, batch: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """Per sentence of ``batch`` (non-empty lists of token strings, as :meth:`spacy_elmo.ElmoBackend.embed` hands
        them over once checked), float32 layers ``(n_layers + 1, n_tokens, dim)``: layer 0 the token vectors twice,
        then each LSTM layer's forward and backward outputs. The batch runs as one padded batch: the backend groups
        sentences by length first, which wastes less on padding."""
        return self._run([list(tokens) for tokens in batch])

    def _run(self, batch: list[list[str]]) -> list[np.ndarray]:
        """:meth:`layers` of non-empty sentences: the markers added, one contextualizer run, the markers dropped."""
        index: dict[str, int] = {BOS_TOKEN: 0, EOS_TOKEN: 1}
        positions = [[0] + [index.setdefault(t, len(index)) for t in tokens] + [1] for tokens in batch]
        table = self.token_vectors(list(index))
        lengths = np.array([len(p) for p in positions], np.int64)
        tokens = np.zeros((len(batch), int(lengths.max()), table.shape[1]), np.float32)
        for r, row in enumerate(positions):
            tokens[r, : len(row)] = table[row]
        (layers,) = self._contextualizer.run(None, {TOKENS: tokens, LENGTHS: lengths})
        return [np.ascontiguousarray(layers[:, r, 1 : len(t) + 1]) for r, t in enumerate(batch)]


__all__ = ["OnnxBiLM", "content_columns", "import_onnxruntime", "session_options"]
