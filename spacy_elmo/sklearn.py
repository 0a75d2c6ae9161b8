"""scikit-learn transformer: one pooled ELMo vector per text, token list or spaCy ``Doc``."""
from __future__ import annotations

import math
import os
from functools import partial
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, TypeVar, Union

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from spacy.tokens import Doc
from tqdm import tqdm

from .backend import ElmoBackend, dtype_name, load_bilm
from .mix import LayerSpec, layer_weights, mix_layers
from .pooling import PoolSink, check_pooling, pool, pooled_dim, pooling_parts
from .spacy.extensions import LAYERS, MODEL
from .tokenize import TokenizerSpec, is_whitespace, resolve_tokenizer
from .validation import positive_int
from .windows import check_window_config, embed_segments, fold_segments

FEATURE_PREFIX = "elmo"

Tokens = Tuple[str, ...]
T = TypeVar("T")


class ElmoVectorizer(TransformerMixin, BaseEstimator):
    """Pooled ELMo vectors as features for classic scikit-learn models.

    The biLM is pre-trained and frozen, so ``fit`` learns nothing: it checks the parameters,
    loads the shared backend (``load_bilm``, one model per process) and returns ``self``.
    ``transform`` is stateless and can be called without ``fit``.

    Parameters
    ----------
    model : str or path-like, default="default"
        ``"default"`` (the bundled model), a published name (``"original"``, ...), an archive or URL,
        or a model directory (ELMo's ``options.json`` + weights ``.hdf5``, or an ELMoForManyLangs model), as
        :func:`spacy_elmo.load_bilm` takes.
    layers : "average", "top", int or list of float, default="average"
        Which biLM layers to use, as in the spaCy component (see :func:`spacy_elmo.mix_layers`).
    pooling : {"mean", "max", "mean+max"}, default="mean"
        How token vectors become one row; ``"mean+max"`` concatenates both (``2 * dim`` features).
    batch_size : int or None, default=None
        Sentences per biLM batch (None: the backend's default, under its padded-token budget).
    device : str or None, default=None
        Torch device such as ``"cuda:0"``; None means CPU.
    tokenizer : None, str or callable, default=None
        How strings are split: None for a blank English spaCy tokenizer, a spaCy language code
        (``"de"``), or a callable returning tokens (strings or spaCy tokens), e.g. ``nlp.tokenizer``.
    max_length : int or None, default=128
        Texts longer than this many tokens are embedded as overlapping windows of at most
        ``max_length`` tokens (ELMo was trained on sentences; this also bounds memory), as the
        spaCy component does; None embeds every text as one sequence.
    window_overlap : int, default=32
        Tokens shared by neighbouring windows; each token takes its vectors from the window in
        which it is further from the edge.
    verbose : bool or int, default=0
        Show a tqdm progress bar over the texts being embedded in ``transform``.
    dtype : str or None, default=None
        The biLM's precision, as :func:`spacy_elmo.load_bilm` takes it: None/"float32" (exact),
        "bfloat16", "float16", "int8" (faster on CPU, approximate; docs/precision.md), or "auto"
        (the fastest within its error bound on this machine; ``model_fingerprint_`` names the choice).

    Notes
    -----
    ``X`` is one column of samples, all of one kind: strings (a list, 1-D array, pandas Series
    or one-column DataFrame), token lists, or spaCy ``Doc`` objects. A ``Doc`` whose
    ``doc._.elmo_layers`` the spaCy ``elmo`` component filled with this model is pooled from
    those stored layers, not recomputed. Whitespace tokens (spaCy's ``" "``, ``"\\n"``) are
    dropped before embedding: ELMo never saw them. A text with no tokens gives a row of zeros.
    Identical samples within one call are embedded once.

    Attributes
    ----------
    model_fingerprint_ : str
        The backend's fingerprint (hash of options and weights, and the precision) seen by ``fit``.
    dtype_ : str
        The precision ``fit`` loaded the biLM in ("float32", "int8", ...; what ``dtype="auto"`` chose).
    layer_weights_ : ndarray of shape (n_layers + 1,)
        The normalised layer weights that ``layers`` resolves to.
    """

    def __init__(
        self,
        model: Union[str, "os.PathLike[str]"] = "default",
        layers: LayerSpec = "average",
        pooling: str = "mean",
        batch_size: Optional[int] = None,
        device: Optional[str] = None,
        tokenizer: TokenizerSpec = None,
        max_length: Optional[int] = 128,
        window_overlap: int = 32,
        verbose: Union[bool, int] = 0,
        dtype: Optional[str] = None,
    ) -> None:
        self.model = model
        self.layers = layers
        self.pooling = pooling
        self.batch_size = batch_size
        self.device = device
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.window_overlap = window_overlap
        self.verbose = verbose
        self.dtype = dtype

    # -- scikit-learn API ------------------------------------------------------------------

    def fit(self, X: Any, y: Any = None) -> "ElmoVectorizer":
        """Check the parameters and the input, load the backend; nothing is learned."""
        self._fit(_as_samples(X))
        return self

    def fit_transform(self, X: Any, y: Any = None, **fit_params: Any) -> np.ndarray:
        """``fit`` then ``transform``, reading ``X`` once (so a generator works)."""
        samples = _as_samples(X)
        return self._transform(samples, self._fit(samples))

    def transform(self, X: Any) -> np.ndarray:
        """Float32 array ``(n_samples, n_features)``: each sample's mixed, pooled ELMo vectors."""
        samples = _as_samples(X)
        return self._transform(samples, self._check_params())

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        """``elmo0, elmo1, ...``; with ``pooling="mean+max"``: ``elmo_mean0, ..., elmo_max0, ...``."""
        backend = self._check_params()
        parts = pooling_parts(self.pooling)
        prefixes = [FEATURE_PREFIX] if len(parts) == 1 else [f"{FEATURE_PREFIX}_{part}" for part in parts]
        return np.asarray([f"{prefix}{i}" for prefix in prefixes for i in range(backend.dim)], dtype=object)

    def __sklearn_tags__(self):  # scikit-learn >= 1.6
        tags = super().__sklearn_tags__()
        tags.input_tags.string = True
        tags.input_tags.two_d_array = False
        tags.requires_fit = False
        return tags

    def _more_tags(self) -> Dict[str, Any]:  # scikit-learn < 1.6
        return {"X_types": ["string"], "requires_fit": False, "stateless": True}

    # -- internals -------------------------------------------------------------------------

    def _fit(self, samples: List[Any]) -> ElmoBackend:
        backend = self._check_params()
        _sample_kind(samples)
        self.model_fingerprint_ = backend.fingerprint
        self.dtype_ = dtype_name(backend.dtype)
        self.layer_weights_ = layer_weights(self.layers, backend.n_layers + 1)
        return backend

    def _check_params(self) -> ElmoBackend:
        """Validate every parameter (loading the shared backend) and return the backend."""
        if not isinstance(self.model, (str, os.PathLike)):
            raise TypeError(f"model={self.model!r}: expected 'default' or a path to an ELMo directory")
        check_pooling(self.pooling)
        if self.batch_size is not None:
            positive_int(self.batch_size, "batch_size")
        resolve_tokenizer(self.tokenizer)  # a bad type is a TypeError, an unknown language code a ValueError, here
        self._windows()
        backend = load_bilm(self.model, device=self.device, dtype=self.dtype)  # a bad dtype: ValueError naming it
        layer_weights(self.layers, backend.n_layers + 1)
        return backend

    def _windows(self) -> Tuple[Optional[int], int]:
        """``(max_length, window_overlap)`` as plain ints (numpy integers from a parameter grid are fine)."""
        if self.max_length is None:
            return None, self.window_overlap
        return check_window_config(self.max_length, self.window_overlap)

    def _transform(self, samples: List[Any], backend: ElmoBackend) -> np.ndarray:
        kind = _sample_kind(samples)
        out = np.zeros((len(samples), pooled_dim(backend.dim, self.pooling)), dtype=np.float32)
        if kind == "doc":
            pending: Dict[Tokens, List[int]] = {}  # unique token sequence -> rows that need it
            for i, doc in enumerate(samples):
                keep = [token.i for token in doc if not is_whitespace(token.text)]
                stored = stored_layers(doc, backend)
                if stored is None:
                    pending.setdefault(tuple(doc[j].text for j in keep), []).append(i)
                else:
                    out[i] = self._pool(stored[:, keep])
        else:
            pending = self._token_rows(samples, kind)
        for tokens, row in self._pooled(pending, backend):  # window by window: memory flat in the text's length
            out[pending[tokens]] = row
        # sequences with no tokens keep their zero rows (what pool() gives for zero tokens)
        return out

    def _token_rows(self, samples: List[Any], kind: str) -> Dict[Tokens, List[int]]:
        """Each unique token sequence of strings (``kind="text"``) or token lists, and the rows that hold it."""
        pending: Dict[Tokens, List[int]] = {}
        if kind == "text":
            split = resolve_tokenizer(self.tokenizer)
            tokenized: Dict[str, Tokens] = {}
            for i, text in enumerate(samples):
                text = str(text)  # numpy.str_ -> str, which spaCy's tokenizer requires
                if text not in tokenized:
                    tokenized[text] = _clean_tokens(_split_text(split, text, i), i)
                pending.setdefault(tokenized[text], []).append(i)
        else:
            for i, tokens in enumerate(samples):
                pending.setdefault(_clean_tokens(tokens, i), []).append(i)
        return pending

    def _embedded(self, pending: Dict[Tokens, List[int]], backend: ElmoBackend) -> Iterator[Tuple[Tokens, np.ndarray]]:
        """All layers of each unique non-empty token sequence, embedded once, longest first (windowed as configured)."""
        return self._folded(pending, backend, embed_segments)

    def _pooled(self, pending: Dict[Tokens, List[int]], backend: ElmoBackend) -> Iterator[Tuple[Tokens, np.ndarray]]:
        """The mixed, pooled row of each unique non-empty token sequence, folded window by window (never stitched)."""

        def new_sink(shape: Tuple[int, int, int], windows: int) -> PoolSink:
            return PoolSink(shape, windows, self.pooling, lambda layers: mix_layers(layers, self.layers))

        return self._folded(pending, backend, partial(fold_segments, new_sink=new_sink))

    def _folded(
        self, pending: Dict[Tokens, List[int]], backend: ElmoBackend, embed: Callable[..., Iterator[Tuple[Tokens, T]]]
    ) -> Iterator[Tuple[Tokens, T]]:
        """``embed``'s result for each unique non-empty token sequence, longest first (windowed as configured), with the bar."""
        unique = sorted((tokens for tokens in pending if tokens), key=len, reverse=True)
        max_length, overlap = self._windows()
        segments = ((tokens, tokens) for tokens in unique)
        with tqdm(total=len(unique), unit="text", desc="ELMo", disable=not self.verbose) as bar:
            for tokens, result in embed(backend, segments, max_length=max_length, overlap=overlap, batch_size=self.batch_size):
                yield tokens, result
                bar.update(1)

    def _pool(self, activations: np.ndarray) -> np.ndarray:
        return pool(mix_layers(activations, self.layers), self.pooling)


def stored_layers(doc: Doc, backend: ElmoBackend) -> Optional[np.ndarray]:
    """The ELMo layers the spaCy component stored on ``doc``, if they come from ``backend``'s model and fit the doc."""
    if not (Doc.has_extension(LAYERS) and Doc.has_extension(MODEL)):
        return None
    layers = doc._.get(LAYERS)
    if layers is None or doc._.get(MODEL) != backend.fingerprint:
        return None
    layers = np.asarray(layers, dtype=np.float32)
    if layers.shape != (backend.n_layers + 1, len(doc), backend.dim):
        return None  # the doc was retokenized after the component ran: recompute
    return layers


# -- input handling --------------------------------------------------------------------------

_KIND_NAMES = {"text": "a string", "tokens": "a token list", "doc": "a spaCy Doc"}


def _as_samples(X: Any) -> List[Any]:
    """One column of samples as a list: a list/tuple/iterable, 1-D array, Series, or one-column table."""
    if X is None or isinstance(X, (str, bytes, Doc, dict)):
        raise TypeError(
            f"X must be a list-like of texts, token lists or spaCy Docs (one sample per row), "
            f"not a single {type(X).__name__}"
        )
    ndim = getattr(X, "ndim", None)
    if ndim == 2:
        n_columns = X.shape[1]
        if n_columns != 1:
            raise ValueError(
                f"X has {n_columns} columns; ElmoVectorizer encodes one text column "
                "(in a ColumnTransformer, select it by name, e.g. 'text', not ['text', ...])"
            )
        X = X.iloc[:, 0] if hasattr(X, "iloc") else np.asarray(X)[:, 0]
    elif ndim is not None and ndim != 1:
        raise ValueError(f"X must be one column of samples; got an array with {ndim} dimensions")
    try:
        return list(X)
    except TypeError:
        raise TypeError(f"X must be a list-like of texts, token lists or spaCy Docs, not {type(X).__name__}") from None


def _kind(sample: Any) -> Optional[str]:
    if isinstance(sample, str):
        return "text"
    if isinstance(sample, Doc):
        return "doc"
    if isinstance(sample, (list, tuple)) or (isinstance(sample, np.ndarray) and sample.ndim == 1):
        return "tokens"
    return None


def _sample_kind(samples: Sequence[Any]) -> str:
    """The one kind shared by all samples; ``TypeError`` naming the first sample that breaks it."""
    first: Optional[str] = None
    for i, sample in enumerate(samples):
        kind = _kind(sample)
        if kind is None:
            hint = " (a missing value: fill it, e.g. with '')" if _is_missing(sample) else ""
            raise TypeError(
                f"sample {i} is {type(sample).__name__} ({sample!r}){hint}: expected a string, "
                "a list of token strings or a spaCy Doc"
            )
        if first is None:
            first = kind
        elif kind != first:
            raise TypeError(
                f"sample {i} is {_KIND_NAMES[kind]} ({type(sample).__name__}) but sample 0 is "
                f"{_KIND_NAMES[first]}: all samples must be of one kind (texts, token lists or Docs)"
            )
    return first or "text"


def _is_missing(value: Any) -> bool:
    if value is None or type(value).__name__ in ("NAType", "NaTType"):  # None, pandas.NA, pandas.NaT
        return True
    return isinstance(value, float) and math.isnan(value)


def _clean_tokens(tokens: Iterable[Any], index: int) -> Tokens:
    """Token texts without whitespace-only tokens; ``TypeError`` names the sample and token."""
    texts = []
    for j, token in enumerate(tokens):
        text = token if isinstance(token, str) else getattr(token, "text", None)
        if not isinstance(text, str):
            raise TypeError(
                f"sample {index}, token {j}: expected a string (or spaCy token), got {type(token).__name__} ({token!r})"
            )
        if not is_whitespace(text):
            texts.append(str(text))
    return tuple(texts)


def _split_text(split: Callable[[str], Iterable[Any]], text: str, row: int) -> Iterable[Any]:
    """``split(text)``, with a lone surrogate (which spaCy's string store cannot encode) named by row and position."""
    try:
        return split(text)
    except UnicodeEncodeError as err:
        raise ValueError(
            f"text {row}: {text[err.start:err.end]!r} at position {err.start} is a lone surrogate, not Unicode text, "
            "and the tokenizer cannot take it; decode the bytes with errors='replace' or pass token lists"
        ) from err
