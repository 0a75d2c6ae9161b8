"""scikit-learn transformer: one pooled ELMo vector per text, token list or spaCy ``Doc``."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from typing import Any, Optional, Union

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from spacy.tokens import Doc

from .about import __version__
from .bilm.files import PathLike
from .bilm.weights import WeightFileError
from .runtime.backend import ElmoBackend, dtype_name, load_bilm, resolve_dtype
from .runtime.mix import LayerSpec, layer_weights, mix_layers
from .runtime.pooling import PoolSink, check_pooling, pool, pooled_dim, pooling_parts
from .runtime.settings import DEFAULT_LAYERS, DEFAULT_MAX_LENGTH, DEFAULT_OVERLAP
from .runtime.text_rows import Rows, Tokens, pooled_rows, sample_kind, token_rows
from .runtime.tokenize import TokenizerSpec, is_whitespace, resolve_tokenizer
from .runtime.validation import VECTOR_PRECISIONS, optional_windows, positive_int, resolve_device
from .sources.bundled_versions import bundled_version, follow_saved, moved_on_advice, precision_fingerprint
from .sources.model_files import bundled_name
from .spacy.extensions import fresh_layers

FEATURE_PREFIX = "elmo"


class EmptyTextWarning(UserWarning):
    """Some samples had no tokens (empty or whitespace only): their rows are zeros, as documented, but a column of
    them usually means the wrong column or an unread file. Shown once per process (Python's default filter)."""


class ElmoVectorizer(TransformerMixin, BaseEstimator):
    """Pooled ELMo vectors as features for classic scikit-learn models.

    The biLM is pre-trained and frozen, so ``fit`` learns nothing: it checks the parameters,
    loads the shared backend (``load_bilm``, one model per process) and returns ``self``.
    ``transform`` is stateless and can be called without ``fit``.

    Parameters
    ----------
    model : str or path-like, default="default"
        ``"default"`` (the bundled model) or a bundled version (``"default-v1"``), a published name
        (``"original"``, ...), an archive or URL,
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
        (the fastest that holds its error bound on every input: float32; ``model_fingerprint_`` names the choice).

    Notes
    -----
    ``X`` is one column of samples, all of one kind: strings (a list, 1-D array, pandas Series
    or one-column DataFrame), token lists, or spaCy ``Doc`` objects. A ``Doc`` whose
    ``doc._.elmo_layers`` the spaCy ``elmo`` component filled with this model is pooled from
    those stored layers, not recomputed. Whitespace tokens (spaCy's ``" "``, ``"\\n"``) are
    dropped before embedding: ELMo never saw them. A text with no tokens gives a row of zeros (and, once per
    process, an :class:`EmptyTextWarning`).
    Identical samples within one call are embedded once.

    Attributes
    ----------
    model_fingerprint_ : str
        The backend's fingerprint (hash of options and weights, and the precision) seen by ``fit``. For a bundled
        model, ``transform`` keeps using the bundled version it names (``"default-v1"``) after ``"default"``
        names a newer one (a clear error if this spacy-elmo no longer bundles it).
    dtype_ : str
        The precision ``fit`` loaded the biLM in ("float32", "int8", ...; what ``dtype="auto"`` chose).
    layer_weights_ : ndarray of shape (n_layers + 1,)
        The normalised layer weights that ``layers`` resolves to.
    """

    def __init__(
        self,
        model: PathLike = "default",
        layers: LayerSpec = DEFAULT_LAYERS,
        pooling: str = "mean",
        batch_size: Optional[int] = None,
        device: Optional[str] = None,
        tokenizer: TokenizerSpec = None,
        max_length: Optional[int] = DEFAULT_MAX_LENGTH,
        window_overlap: int = DEFAULT_OVERLAP,
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

    def fit(self, X: Any, y: Any = None) -> ElmoVectorizer:
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
        tags.transformer_tags.preserves_dtype = ["float32"]  # every row is float32, whatever the input
        return tags

    def _more_tags(self) -> dict[str, Any]:  # scikit-learn < 1.6
        return {"X_types": ["string"], "requires_fit": False, "stateless": True, "preserves_dtype": [np.float32]}

    # -- internals -------------------------------------------------------------------------

    def _fit(self, samples: list[Any]) -> ElmoBackend:
        backend = self._check_params(fitting=True)
        sample_kind(samples)
        self.model_fingerprint_ = backend.fingerprint
        self.dtype_ = dtype_name(backend.dtype)
        self.layer_weights_ = layer_weights(self.layers, backend.n_layers + 1)
        self._resolved_model = (self._resolution_key(backend.fingerprint), self.model)
        return backend

    def _check_params(self, fitting: bool = False) -> ElmoBackend:
        """Validate every parameter (loading the shared backend) and return the backend.

        ``fitting``: load what ``model`` names now; else, for a fitted vectorizer, the model it was fitted with
        (:meth:`_model_to_load`).
        """
        self.check_settings()
        model = self.model if fitting else self._model_to_load()
        backend = load_bilm(model, device=self.device, dtype=self.dtype)  # a bad dtype: ValueError naming it
        layer_weights(self.layers, backend.n_layers + 1)
        return backend

    def _model_to_load(self) -> PathLike:
        """``model``, unless it names a bundled model and the vectorizer was fitted with another bundled version
        than the one it names now (this spacy-elmo's default is newer than the one it was fitted with, perhaps in
        another process that pickled it): then that version's name, so transform gives the vectors fit saw.

        The choice is kept in ``_resolved_model`` (``(key, what to load)``; ``fit`` sets it), for as long as its key
        holds: the same ``model`` and ``model_fingerprint_``, and the same bundled version behind ``model``'s name.
        ``model`` changed since fit (``set_params``) loads what it names, as an unfitted vectorizer does. A
        fingerprint of no bundled version: ``WeightFileError`` saying what to do.
        """
        fingerprint = getattr(self, "model_fingerprint_", None)
        name = bundled_name(self.model)
        resolved = getattr(self, "_resolved_model", None)
        if fingerprint is None or name is None or (resolved is not None and resolved[0][0] != os.fspath(self.model)):
            return self.model
        key = self._resolution_key(str(fingerprint))
        if resolved is not None and resolved[0] == key:
            return resolved[1]
        version = follow_saved(name, fingerprint, "this ElmoVectorizer was fitted", VECTOR_PRECISIONS)
        if version is None:
            current = load_bilm(self.model, device=self.device, dtype=self.dtype).files_fingerprint
            if fingerprint not in {precision_fingerprint(current, p) for p in VECTOR_PRECISIONS}:
                where = f"ElmoVectorizer(model={os.fspath(self.model)!r})"
                raise WeightFileError(f"{where}: {self._moved_on(fingerprint)}")
            version = name
        model = self.model if version == name else version
        self._resolved_model = (key, model)
        return model

    def _resolution_key(self, fingerprint: str) -> tuple[str, str, Optional[str]]:
        """What ``_resolved_model`` holds for: ``model``, the fitted fingerprint, the files ``model`` names now."""
        name = bundled_name(self.model)
        version = bundled_version(name) if name is not None else None
        return os.fspath(self.model), fingerprint, version.files_fingerprint if version else None

    def _moved_on(self, fingerprint: str) -> str:
        return moved_on_advice(
            bundled_name(self.model) or "default",
            fingerprint,
            None,
            __version__,
            set_model="set its model to the files it was fitted with: set_params(model=FOLDER) (in a Pipeline, "
            "set_params(STEP__model=FOLDER))",
            redo="fit the vectorizer and the estimators after it again on this version's default",
            done="fitted",
        )

    def check_settings(self, n_layers: Optional[int] = None) -> None:
        """Check the parameters without loading the model; with ``n_layers`` (the model's LSTM layers) ``layers`` too.

        ``TypeError`` or ``ValueError`` names a bad one. A client that must not load the model
        (``spacy_elmo.dask``) reads ``n_layers`` from the model's options (``model_files.model_shape``).
        """
        if not isinstance(self.model, (str, os.PathLike)):
            raise TypeError(f"model={self.model!r}: expected 'default' or a path to an ELMo directory")
        check_pooling(self.pooling)
        if self.batch_size is not None:
            positive_int(self.batch_size, "batch_size")
        resolve_tokenizer(self.tokenizer)  # a bad type is a TypeError, an unknown language code a ValueError, here
        self._windows()
        if n_layers is not None:
            resolve_dtype(self.dtype, resolve_device(self.device))  # what load_bilm would refuse, named here
            layer_weights(self.layers, n_layers + 1)

    def _windows(self) -> tuple[Optional[int], int]:
        """``(max_length, window_overlap)`` as plain ints (numpy integers from a parameter grid are fine)."""
        return optional_windows(self.max_length, self.window_overlap)

    def _transform(self, samples: list[Any], backend: ElmoBackend) -> np.ndarray:
        kind = sample_kind(samples)
        out = np.zeros((len(samples), pooled_dim(backend.dim, self.pooling)), dtype=np.float32)
        empty = 0  # samples with no tokens
        if kind == "doc":
            pending: Rows = {}  # unique token sequence -> rows that need it
            for i, doc in enumerate(samples):
                keep = [token.i for token in doc if not is_whitespace(token.text)]
                empty += not keep
                stored = fresh_layers(doc, backend.fingerprint, (backend.n_layers + 1, backend.dim))
                if stored is None:
                    pending.setdefault(tuple(doc[j].text for j in keep), []).append(i)
                else:
                    out[i] = self._pool(stored[:, keep])
        else:
            pending = token_rows(samples, kind, self.tokenizer)
            empty = len(pending.get((), []))
        if empty:
            warnings.warn(  # one message for every call, so that Python's default filter shows it once
                "spacy_elmo: ElmoVectorizer was given samples with no tokens (empty or whitespace only); "
                "their rows are zeros",
                EmptyTextWarning,
                stacklevel=1,
            )
        for tokens, row in self._pooled(pending, backend):  # window by window: memory flat in the text's length
            out[pending[tokens]] = row
        # sequences with no tokens keep their zero rows (what pool() gives for zero tokens)
        return out

    def _pooled(self, pending: Rows, backend: ElmoBackend) -> Iterator[tuple[Tokens, np.ndarray]]:
        """The mixed, pooled row of each unique non-empty token sequence, folded window by window (never stitched)."""

        def new_sink(shape: tuple[int, int, int], windows: int) -> PoolSink:
            return PoolSink(shape, windows, self.pooling, lambda layers: mix_layers(layers, self.layers))

        max_length, overlap = self._windows()
        return pooled_rows(
            pending,
            backend,
            new_sink,
            max_length=max_length,
            overlap=overlap,
            batch_size=self.batch_size,
            verbose=self.verbose,
        )

    def _pool(self, activations: np.ndarray) -> np.ndarray:
        return pool(mix_layers(activations, self.layers), self.pooling)


# -- input handling --------------------------------------------------------------------------


def _as_samples(X: Any) -> list[Any]:
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
