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
from ..groundwork.file_names import PathLike
from ..runtime.configuration.defaults import DEFAULT_TOKEN_CACHE
from ..runtime.configuration.validation import validate_sentences
from .graph import CHAR_IDS, LAYERS, LENGTHS, TOKEN_VECTORS, TOKENS
from .manifest import ADVICE, CONTEXTUALIZER, MANIFEST, TOKEN_ENCODER, OnnxFolderError, read_manifest

if TYPE_CHECKING:  # pragma: no cover
    import onnxruntime

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


def content_columns(ids: np.ndarray) -> np.ndarray:
    """Per row of char ids, the columns before its trailing run of padding (one repeated id)."""
    varying = ids != ids[:, -1:]
    return (varying * np.arange(1, ids.shape[1] + 1)).max(axis=1, initial=0)


class OnnxBiLM:
    """The biLM of an ONNX export folder (:func:`~spacy_elmo.onnx.export_onnx`), run on ONNX Runtime's CPU provider.

    ``threads``: threads inside an operator (None: ONNX Runtime's default, the machine's cores). ``token_cache_size``:
    token vectors kept (0: none). :meth:`layers` may be called from several threads (the cache is locked; ONNX
    Runtime's ``run`` is thread-safe).
    """

    def __init__(self, folder: PathLike, threads: Optional[int] = None, token_cache_size: int = DEFAULT_TOKEN_CACHE):
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
        threads: Optional[int] = None,
        token_cache_size: int = DEFAULT_TOKEN_CACHE,
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
        if isinstance(token_cache_size, bool) or not isinstance(token_cache_size, int) or token_cache_size < 0:
            raise ValueError(f"token_cache_size must be a non-negative integer, not {token_cache_size!r}")
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
        self.token_cache_size = token_cache_size
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
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
        if len(tokens) > self.token_cache_size:  # the cache cannot hold them all
            return self.encode_tokens(tokens)
        with self._lock:  # (new words are encoded under it, as the torch backend's cache does)
            missing = [t for t in tokens if t not in self._cache]
            for token, vector in zip(missing, self.encode_tokens(missing)):
                self._cache[token] = vector
            for token in tokens:
                self._cache.move_to_end(token)
            vectors = np.stack([self._cache[t] for t in tokens]) if tokens else self.encode_tokens([])
            while len(self._cache) > self.token_cache_size:  # the least recently used, none of ``tokens``
                self._cache.popitem(last=False)
        return vectors

    def clear_cache(self) -> None:
        """Forget every kept token vector."""
        with self._lock:
            self._cache.clear()

    def layers(self, batch: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """Per sentence of ``batch`` (token lists), float32 layers ``(n_layers + 1, n_tokens, dim)``: layer 0 the token
        vectors twice, then each LSTM layer's forward and backward outputs. An empty sentence gives
        ``(n_layers + 1, 0, dim)``. The batch runs as one padded batch (as one of ``ElmoBackend.embed``'s): a caller
        with many sentences groups them by length first, which wastes less on padding. A plain string where a batch
        or a token list belongs, or a token that is not a ``str``, is a ``TypeError`` (the backend's check of token
        lists)."""
        sentences = validate_sentences(batch, "batch")  # a TypeError, one line, as ElmoBackend.embed's
        results: list[Optional[np.ndarray]] = [None] * len(sentences)
        rows = [r for r, tokens in enumerate(sentences) if tokens]
        for r, tokens in enumerate(sentences):
            if not tokens:
                results[r] = np.zeros((self.n_layers + 1, 0, self.dim), np.float32)
        if rows:
            for r, array in zip(rows, self._run([sentences[r] for r in rows])):
                results[r] = array
        return [array for array in results if array is not None]

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
