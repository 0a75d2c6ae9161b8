"""scikit-learn transformer: one pooled ELMo vector per text, token list or spaCy ``Doc``."""

from __future__ import annotations

import dataclasses
import os
import warnings
from typing import Any, Optional, Union

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin

from .about import __version__
from .groundwork.file_names import PathLike
from .runtime.configuration.validation import DEPRECATED, DTYPE_REMOVED_IN, precision_or_dtype
from .runtime.embedding.backend import ElmoBackend, load_bilm
from .runtime.features.front_settings import VECTORIZER_SETTINGS, FrontSettings
from .runtime.features.mix import ALL, LayerMix, layer_weights
from .runtime.features.pooling import pooling_parts
from .runtime.features.stored_layers import is_doc
from .runtime.features.text_rows import EmptyTextWarning, SampleColumn, pooled_matrix, sample_column
from .runtime.features.tokenize import TokenizerSpec
from .sources.model_paths import model_shape, resolve_model_files
from .sources.pinned_model import PinnedModel

__all__ = ["ElmoVectorizer", "EmptyTextWarning"]

FEATURE_PREFIX = "elmo"
DEFAULTS = (
    FrontSettings()
)  # the vectorizer's defaults: runtime/features/front_settings.py declares every shared setting


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
    layers : "average", "top", "all", int or list of float, default="average"
        Which biLM layers to use, as in the spaCy component (see :func:`spacy_elmo.mix_layers`); ``"all"``: every
        layer's pooled row side by side (``n_layers + 1`` times as many features), for the classifier to weigh.
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
    verbose : bool, int or None, default=None
        A tqdm progress bar on stderr over the texts being embedded in ``transform``: None shows one only where
        stderr is a terminal and the work takes more than a few seconds (never in logs, pipes or tests); 0 or
        False never, as scikit-learn's estimators say nothing at 0; 1 or True always, from the first batch on.
    precision : str or None, default=None
        The biLM's precision, as :func:`spacy_elmo.load_bilm` takes it: None/"float32" (exact),
        "bfloat16", "float16", "int8" (faster on CPU, approximate; docs/precision.md), or "auto"
        (the fastest that holds its error bound on every input: float32; ``precision_`` names the choice).
    norm : {"l2", "l1"} or None, default=None
        Each output row scaled to unit norm after pooling, as ``TfidfVectorizer``'s ``norm`` scales its rows
        (``sklearn.preprocessing.normalize``): ``"l2"``, the sum of squares is 1; ``"l1"``, the sum of absolute
        values. The whole row at once, whatever ``layers`` and ``pooling`` put side by side (``layers="all"``: one
        norm over every layer's block, not one per block). A row of zeros (a text with no tokens) stays zeros.
        None: the pooled rows as they are. With TF-IDF in a ``FeatureUnion``, ``"l2"`` puts both blocks on one
        scale (docs/sklearn.md).
    dtype : str, default="deprecated"
        Deprecated since 0.3.0 (removed in 0.4.0): the name ``precision`` had up to 0.2.0, taken with a
        ``FutureWarning`` (in scikit-learn's words a vectorizer's ``dtype`` is its output's type; the rows are
        float32).

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
    precision_ : str
        The precision ``fit`` loaded the biLM in ("float32", "int8", ...; what ``precision="auto"`` chose).
        (``dtype_``, its name up to 0.2.0, is deprecated.)
    layer_weights_ : ndarray of shape (n_layers + 1,) or None
        The normalised layer weights that ``layers`` resolves to (None for ``layers="all"``: no mix).
    model_pin_ : spacy_elmo.sources.pinned_model.PinnedModel
        The model ``fit`` used, pinned: what ``model`` named and the fingerprints of its files and vectors, which
        ``transform`` resolves (the bundled version it was, should ``"default"`` name a newer one) and checks the
        files against: files changed on disk since ``fit`` (in this process or before a pickle was loaded) are a
        ``WeightFileError`` naming the folder and both fingerprints, never other features.
    """

    def __init__(
        self,
        model: PathLike = "default",
        *,
        layers: LayerMix = DEFAULTS.layers,
        pooling: str = DEFAULTS.pooling,
        batch_size: Optional[int] = DEFAULTS.batch_size,
        device: Optional[str] = DEFAULTS.device,
        tokenizer: TokenizerSpec = DEFAULTS.tokenizer,
        max_length: Optional[int] = DEFAULTS.max_length,
        window_overlap: int = DEFAULTS.window_overlap,
        verbose: Optional[Union[bool, int]] = DEFAULTS.verbose,
        precision: Optional[str] = DEFAULTS.precision,
        norm: Optional[str] = DEFAULTS.norm,
        dtype: Optional[str] = DEPRECATED,
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
        self.precision = precision
        self.norm = norm
        self.dtype = dtype

    # -- scikit-learn API ------------------------------------------------------------------

    def fit(self, X: Any, y: Any = None) -> ElmoVectorizer:
        """Check the parameters and the input, load the backend and pin its model; nothing is learned."""
        settings = self._settings()
        _as_column(X)  # one kind of sample, or a TypeError naming the first that breaks it
        self._fit(settings)
        return self

    def fit_transform(self, X: Any, y: Any = None, **fit_params: Any) -> np.ndarray:
        """``fit`` then ``transform``, reading ``X`` once (so a generator works)."""
        settings = self._settings()
        column = _as_column(X)  # checked before the fitted state is set, as fit does
        return pooled_matrix(column, self._fit(settings), settings)

    def transform(self, X: Any) -> np.ndarray:
        """Float32 array ``(n_samples, n_features)``: each sample's mixed, pooled ELMo vectors."""
        settings = self._settings()
        return pooled_matrix(_as_column(X), self._pinned_backend(settings), settings)

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        """``elmo0, elmo1, ...``; with ``pooling="mean+max"``: ``elmo_mean0, ..., elmo_max0, ...``; with
        ``layers="all"``: ``elmo_layer0_0, ...`` (``elmo_mean_layer0_0, ...``). Read from the model's options file:
        the weights stay unread."""
        settings = self._settings()
        pin = self._pin_in_force()
        n_layers, dim = model_shape(*resolve_model_files(self.model if pin is None else self._model_to_load(pin)))
        settings.mixed_width(n_layers, dim)  # layers checked against the model's
        parts = pooling_parts(settings.pooling)
        prefixes = [FEATURE_PREFIX] if len(parts) == 1 else [f"{FEATURE_PREFIX}_{part}" for part in parts]
        if settings.layers == ALL:
            prefixes = [f"{prefix}_layer{k}_" for prefix in prefixes for k in range(n_layers + 1)]
        return np.asarray([f"{prefix}{i}" for prefix in prefixes for i in range(dim)], dtype=object)

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

    def _settings(self) -> FrontSettings:
        """The parameters as the shared settings, checked (``TypeError``/``ValueError`` names a bad one)."""
        if not isinstance(self.model, (str, os.PathLike)):
            raise TypeError(f"model={self.model!r}: expected 'default' or a path to an ELMo directory")
        settings = FrontSettings.of(self, VECTORIZER_SETTINGS)
        precision = precision_or_dtype(self.precision, self.dtype, self._where(), stacklevel=4)
        return dataclasses.replace(settings, precision=precision).checked()

    def _load(self, model: PathLike, settings: FrontSettings, pin: Optional[PinnedModel] = None) -> ElmoBackend:
        """The shared backend of ``model`` (resolved to its files once, by ``load_bilm``), its files as they are on
        disk now checked with one look: against ``pin``, the model ``fit`` pinned (``transform``'s;
        ``WeightFileError``: they changed on disk since ``fit``, in this process or before the vectorizer was pickled),
        then against the loaded model (the process keeps one backend per files, size and mtime: files rewritten
        without a new size or mtime would leave it holding other weights than the files it names). Either refuses
        before anything is embedded, so that other weights never give features under the pin. ``layers`` is checked
        against the model's layers where they are used: ``fit``'s layer weights, ``transform``'s width
        (``pooled_matrix``)."""
        backend = load_bilm(model, device=settings.device, precision=settings.precision)  # bad: a ValueError
        files = backend.options_path, backend.weights_path
        now = None
        if pin is not None:
            now = pin.check_files(
                *files,
                where=self._where(),
                since="it was fitted",
                what_to_do="put back the files it was fitted with, or fit the vectorizer and the estimators after it "
                "again on these files",
            )
        PinnedModel(os.fspath(model), backend.files_fingerprint).check_files(
            *files,
            where=self._where(),
            since="this process loaded them",
            what_to_do="put back the files it loaded, or start a new Python process to load them as they are now",
            now=now,
        )
        return backend

    def _pinned_backend(self, settings: FrontSettings) -> ElmoBackend:
        """The backend ``transform`` embeds with: the model ``fit`` pinned (:meth:`_model_to_load`), its files checked
        against the pin (:meth:`_load`); an unfitted vectorizer's, as ``fit`` loads it."""
        pin = self._pin_in_force()
        return self._load(self.model if pin is None else self._model_to_load(pin), settings, pin)

    def _pin_in_force(self) -> Optional[PinnedModel]:
        """``model_pin_`` while ``model`` still names what ``fit`` pinned (``set_params`` may have changed it)."""
        pin: Optional[PinnedModel] = getattr(self, "model_pin_", None)
        return pin if pin is not None and pin.name == os.fspath(self.model) else None

    def _where(self) -> str:
        """How error messages name this vectorizer."""
        return f"ElmoVectorizer(model={os.fspath(self.model)!r})"

    def _fit(self, settings: FrontSettings) -> ElmoBackend:
        """Load what ``model`` names now and set the fitted state from it (``layers`` checked against the model's by
        its weights, before any of it is set)."""
        backend = self._load(self.model, settings)
        weights = None if settings.layers == ALL else layer_weights(settings.layers, backend.n_layers + 1)
        self.model_fingerprint_ = backend.fingerprint
        self.precision_ = backend.precision.name
        self.layer_weights_ = weights
        self.model_pin_ = PinnedModel(
            os.fspath(self.model), backend.files_fingerprint, backend.fingerprint, saved_by=__version__
        )
        return backend

    def _model_to_load(self, pin: PinnedModel) -> PathLike:
        """What ``pin`` (:meth:`_pin_in_force`) makes of ``model``: ``model``, unless the vectorizer was fitted with a
        bundled model that the name means no longer (this spacy-elmo's default is newer than the one it was fitted
        with, perhaps in another process that pickled it): then that bundled version, so transform gives the vectors
        fit saw (:meth:`PinnedModel.resolve`; a ``WeightFileError`` says what to do when this spacy-elmo no longer
        bundles it)."""
        precision = precision_or_dtype(self.precision, self.dtype, self._where(), warn=False)  # (said by _settings)
        return pin.resolve(
            "this ElmoVectorizer was fitted",
            self._where(),
            installed=__version__,
            set_model="set its model to the files it was fitted with: set_params(model=FOLDER) (in a Pipeline, "
            "set_params(STEP__model=FOLDER))",
            redo="fit the vectorizer and the estimators after it again on this version's default",
            done="fitted",
            still_current=lambda: load_bilm(self.model, device=self.device, precision=precision).files_fingerprint,
        )

    @property
    def dtype_(self) -> str:
        """Deprecated since 0.3.0 (removed in 0.4.0): ``precision_``."""
        warnings.warn(
            f"ElmoVectorizer.dtype_ is deprecated since 0.3.0 and will be removed in {DTYPE_REMOVED_IN}; use "
            "precision_",
            FutureWarning,
            stacklevel=2,
        )
        return str(self.precision_)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickle; a vectorizer fitted by an earlier spacy-elmo (``model_fingerprint_`` but no ``model_pin_``) gets
        the pin its fingerprint makes, and its cached resolution (``_resolved_model``) is dropped; one pickled before
        ``norm`` existed gets ``norm=None``, the rows it gave then; one pickled before ``precision`` existed (0.2.0:
        ``dtype``) gets its ``dtype`` as ``precision``, and ``dtype`` back at its default."""
        state = dict(state)
        state.setdefault("norm", DEFAULTS.norm)
        if "precision" not in state:
            state["precision"] = state.pop("dtype", DEFAULTS.precision)
            state["dtype"] = DEPRECATED
            if "dtype_" in state:
                state["precision_"] = state.pop("dtype_")
        state.pop("_resolved_model", None)
        if "model_fingerprint_" in state and "model_pin_" not in state:
            model = state.get("model", "default")
            name = os.fspath(model) if isinstance(model, (str, os.PathLike)) else str(model)
            state["model_pin_"] = PinnedModel(name, fingerprint=str(state["model_fingerprint_"]))
        super().__setstate__(state)


# -- input handling --------------------------------------------------------------------------


def _as_column(X: Any) -> SampleColumn:
    """One column of samples (a list/tuple/iterable, 1-D array, Series, or one-column table) as a list, and its kind
    (``text_rows.sample_kind``: a ``TypeError`` or ``ValueError`` names the first sample that breaks it)."""
    if X is None or isinstance(X, (str, bytes, dict)) or is_doc(X):
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
        samples = list(X)
    except TypeError:
        raise TypeError(f"X must be a list-like of texts, token lists or spaCy Docs, not {type(X).__name__}") from None
    return sample_column(samples)
