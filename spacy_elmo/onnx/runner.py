"""ELMo layers from an ONNX export folder on ONNX Runtime: numpy and ``onnxruntime`` only, no torch.

:class:`OnnxBiLM` gives what :meth:`spacy_elmo.ElmoBackend.embed` gives for a batch of token lists: per sentence,
float32 ``(n_layers + 1, n_tokens, dim)``. As the torch path (``ElmoBackend._embed_batch``), it puts the sentence
markers (``<S>`` and ``</S>``, or an ELMoForManyLangs model's ``<bos>`` and ``<eos>``) around each sentence, runs the
biLM over the padded batch and keeps the positions between the two markers. Token vectors are kept per word (a
bounded LRU), so a word seen before skips the char CNN; the id rows are :mod:`.token_spelling`'s, which imports no
torch.
The forward and backward LSTM stacks are two graphs, run at the same time on two threads (the calling one and a
pool thread), as the torch path runs them.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

import numpy as np

from ..bilm.engine import precisions
from ..groundwork.file_names import PathLike
from ..groundwork.fork_safety import ForkSafePool, in_forked_child
from ..groundwork.machine import usable_cores
from ..groundwork.number_checks import whole_number
from .graph import DIRECTIONS, LAYERS, LENGTHS, TOKEN_ENCODER_ROLE, TOKEN_VECTORS, TOKENS
from .manifest import ADVICE, GRAPH_FILES, MANIFEST, OnnxFolderError, exported_precision, read_manifest
from .token_spelling import ELMO_CHARS, TokenSpelling, folder_spelling

if TYPE_CHECKING:  # pragma: no cover
    import onnxruntime

    from ..bilm.engine.precisions import Precision
    from ..bilm.options import BiLMOptions

BUCKET_ROWS = 256  # new words per char-CNN run, grouped by length so that short words are not padded to long ones

_second_direction = ForkSafePool(1, "spacy-elmo-onnx-direction")  # runs the backward stack beside the forward one


def import_onnxruntime() -> Any:
    """The ``onnxruntime`` module, or an ImportError saying how to install it."""
    try:
        import onnxruntime
    except ImportError as err:
        raise ImportError(
            f"running an ONNX export needs onnxruntime, which is not installed: pip install onnxruntime ({err})"
        ) from None
    return onnxruntime


def check_threads(threads: Optional[int]) -> int:
    """``threads`` checked, None read as the cores this process may use
    (:func:`~spacy_elmo.groundwork.machine.usable_cores`)."""
    if threads is None:
        return usable_cores()
    count = whole_number(threads, 1)
    if count is None:
        raise ValueError(f"threads must be a positive integer or None (the cores available), not {threads!r}")
    return count


def session_options(threads: int) -> onnxruntime.SessionOptions:
    """ONNX Runtime settings of an ``InferenceSession``: all graph optimizations, operators run one after the
    other (the graphs are chains), ``threads`` threads inside an operator. Per graph: nothing of the process
    changes."""
    ort = import_onnxruntime()
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return options


def _session(graph: Union[Path, bytes], threads: int, what: str, names: tuple[set[str], set[str]]) -> Any:
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

    ``threads``: threads in all (None: the cores this process may use). With two or more, the forward and backward
    LSTM stacks run at the same time, each on its own thread with half of them inside its operators, as the torch
    path runs them; with one (and in a forked child), one after the other. ``token_cache_size``: token vectors kept
    (0: none). :meth:`layers` may be called from several threads (the cache is locked; ONNX Runtime's ``run`` is
    thread-safe).
    """

    def __init__(self, folder: PathLike, *, token_cache_size: int, threads: Optional[int] = None):
        folder = Path(folder)
        manifest, options = read_manifest(folder)
        self.folder: Optional[Path] = folder
        self._spelling = folder_spelling(manifest, folder)
        graphs: dict[str, Union[Path, bytes]] = {role: folder / name for role, name in GRAPH_FILES.items()}
        self._setup(manifest, options, graphs, threads, token_cache_size)

    @classmethod
    def from_graphs(
        cls,
        graphs: dict[str, bytes],
        manifest: dict[str, Any],
        options: BiLMOptions,
        *,
        token_cache_size: int,
        threads: Optional[int] = None,
        spelling: TokenSpelling = ELMO_CHARS,
    ) -> OnnxBiLM:
        """A runner of graphs (bytes by role, as :func:`~spacy_elmo.onnx.graph.serialized_graphs` gives them) not
        (yet) in a folder, e.g. the export's check before it writes them; ``spelling`` what the folder's files would
        give (:func:`~.token_spelling.folder_spelling`)."""
        runner = cls.__new__(cls)
        runner.folder = None
        runner._spelling = spelling
        runner._setup(manifest, options, dict(graphs), threads, token_cache_size)
        return runner

    def _setup(
        self,
        manifest: dict[str, Any],
        options: BiLMOptions,
        graphs: dict[str, Union[Path, bytes]],
        threads: Optional[int],
        token_cache_size: int,
    ) -> None:
        self.token_cache = WordVectorCache(token_cache_size)
        self.manifest = manifest
        self.options = options
        self.threads = check_threads(threads)
        direction_threads = max(1, self.threads // len(DIRECTIONS))

        def where(role: str) -> str:
            graph = graphs[role]
            return f"the {role} graph" if isinstance(graph, bytes) else str(graph)

        role = TOKEN_ENCODER_ROLE
        self._encoder = _session(
            graphs[role], self.threads, where(role), ({self._spelling.input_name}, {TOKEN_VECTORS})
        )
        columns = self._encoder.get_inputs()[0].shape[1]
        if self._spelling.columns is not None and columns != self._spelling.columns:
            raise OnnxFolderError(
                f"{where(role)}: takes id rows {columns} wide, not {self._spelling.columns}: {ADVICE}"
            )
        self._directions = [
            _session(graphs[role], direction_threads, where(role), ({TOKENS, LENGTHS}, {LAYERS})) for role in DIRECTIONS
        ]
        expected = [options.n_layers, "batch", "time", options.projection_dim]
        widths = (self._encoder.get_outputs()[0].shape[1], *(d.get_outputs()[0].shape for d in self._directions))
        if widths != (options.projection_dim, *(expected for _ in DIRECTIONS)):
            said = self.folder / MANIFEST if self.folder is not None else "the manifest"
            raise OnnxFolderError(
                f"{said}: options (projection_dim {options.projection_dim}, n_layers {options.n_layers}) disagree with "
                f"the graphs' outputs (token vectors {widths[0]} wide, layers {list(widths[1:])}): {ADVICE}"
            )
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

        Rows go in buckets of :data:`BUCKET_ROWS`. ELMo's char ids go by similar length, each bucket cut to its own
        longest word plus the widest filter (the max over positions is unchanged:
        :func:`spacy_elmo.bilm.encoder.trim_padding`), so short words do not pay for long ones; other spellings go
        whole.
        """
        spelling = self._spelling
        ids = spelling.token_ids(tokens)
        out = np.empty((len(tokens), self.options.projection_dim), np.float32)
        if not len(tokens):
            return out
        columns = content_columns(ids) if spelling.trims_padding else np.full(len(tokens), ids.shape[1])
        order = np.argsort(columns, kind="stable")
        for start in range(0, len(order), BUCKET_ROWS):
            rows = order[start : start + BUCKET_ROWS]
            keep = min(ids.shape[1], int(columns[rows].max()) + self._max_width)
            (vectors,) = self._encoder.run(None, {spelling.input_name: np.ascontiguousarray(ids[rows, :keep])})
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
        directions = "at the same time" if self.threads > 1 else "one after the other"
        return (
            f"kernels: ONNX Runtime {import_onnxruntime().__version__} on the CPU, {self.threads} threads, the two "
            f"directions {directions}"
        )

    def layers(self, batch: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """Per sentence of ``batch`` (non-empty lists of token strings, as :meth:`spacy_elmo.ElmoBackend.embed` hands
        them over once checked), float32 layers ``(n_layers + 1, n_tokens, dim)``: layer 0 the token vectors twice,
        then each LSTM layer's forward and backward outputs. The batch runs as one padded batch: the backend groups
        sentences by length first, which wastes less on padding."""
        return self._run([list(tokens) for tokens in batch])

    def _run(self, batch: list[list[str]]) -> list[np.ndarray]:
        """:meth:`layers` of non-empty sentences: the markers added, one contextualizer run, the markers dropped."""
        bos, eos = self._spelling.markers
        index: dict[str, int] = {bos: 0, eos: 1}
        positions = [[0] + [index.setdefault(t, len(index)) for t in tokens] + [1] for tokens in batch]
        table = self.token_vectors(list(index))
        lengths = np.array([len(p) for p in positions], np.int64)
        tokens = np.zeros((len(batch), int(lengths.max()), table.shape[1]), np.float32)
        for r, row in enumerate(positions):
            tokens[r, : len(row)] = table[row]
        forward, backward = self._contextualize({TOKENS: tokens, LENGTHS: lengths})
        width = table.shape[1]
        out = []
        for r, sentence in enumerate(batch):
            layers = np.empty((forward.shape[0] + 1, len(sentence), 2 * width), np.float32)
            layers[0, :, :width] = layers[0, :, width:] = tokens[r, 1 : len(sentence) + 1]  # the token layer: [x; x]
            layers[1:, :, :width] = forward[:, r, 1 : len(sentence) + 1]
            layers[1:, :, width:] = backward[:, r, 1 : len(sentence) + 1]
            out.append(layers)
        return out

    def _contextualize(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Each direction's LSTM layers ``(n_layers, batch, time, proj)``: the backward stack on the worker thread
        while this one runs the forward stack, or one after the other with one thread (and in a forked child)."""
        forward, backward = self._directions
        if self.threads == 1 or in_forked_child():
            return [forward.run(None, feeds)[0], backward.run(None, feeds)[0]]
        later = _second_direction.get().submit(backward.run, None, feeds)
        first = forward.run(None, feeds)[0]
        return [first, later.result()[0]]


__all__ = ["OnnxBiLM", "content_columns", "import_onnxruntime", "session_options"]
