"""The settings the front ends share, declared once: names, types, defaults and checks.

``ElmoVectorizer``, the spaCy ``elmo`` component (its factory, ``__init__`` and default config) and
``spacy_elmo.dask`` take the same settings: which layers and how they are mixed, pooling, batches, windows, device,
precision and tokenizer (and the rows' norm, the vectorizer's and Dask's). :class:`FrontSettings` is their one
declaration: a field is a setting's name, type and default (scikit-learn's and Dask's; :class:`ComponentSettings`
where the spaCy component's differ), and :meth:`FrontSettings.checked` holds every check that needs no model,
:meth:`FrontSettings.width` the checks that need its shape. Only the signatures that conventions require spell the
settings out (scikit-learn's ``__init__``, spaCy's factory and component), taking their defaults from here;
``tests/runtime/test_settings.py`` holds them against this declaration. Adding a setting: a field here (and its
check), those signatures, the docs.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Optional, TypeVar, Union

from ..configuration.defaults import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_GAMMA,
    DEFAULT_LAYERS,
    DEFAULT_MAX_LENGTH,
    DEFAULT_OVERLAP,
    DEFAULT_POOLING,
    DEFAULT_PRECISION,
)
from ..configuration.validation import (
    check_precision,
    optional_windows,
    positive_int,
    precision_or_dtype,
    resolve_device,
)
from .mix import LayerMix, check_gamma, check_layer_spec, mixed_width
from .pooling import check_norm, check_pooling, pooled_dim
from .tokenize import TokenizerSpec, resolve_tokenizer

Settings = TypeVar("Settings", bound="FrontSettings")


@dataclass(frozen=True)
class FrontSettings:
    """One value of each shared setting; the field defaults are ``ElmoVectorizer``'s and ``spacy_elmo.dask``'s.

    layers: "average", "top", "all" (every layer side by side), a layer index or one weight per layer (mix.py).
    gamma: the mix's scale (the spaCy component's).
    pooling: "mean", "max" or "mean+max": token vectors into one row per text (the vectorizer's and Dask's).
    norm: "l2", "l1" or None: each pooled row scaled to unit norm, the whole row at once (TfidfVectorizer's
        ``norm``; the vectorizer's and Dask's); None: the rows as pooled.
    batch_size: sentences (or windows) per biLM batch; None: the backend's default under its padded-token budget.
    max_length: longest biLM input in tokens, longer ones cut into overlapping windows; None: no windows.
    window_overlap: tokens shared by neighbouring windows.
    device: a torch device ("cuda:0"); None: the CPU (the spaCy component: thinc's current ops).
    precision: the biLM's precision ("float32", "bfloat16", "float16", "int8", "auto"); None: float32.
    tokenizer: how strings are split: None (blank English spaCy), a spaCy language code, or a callable.
    verbose: a progress bar over the texts (the vectorizer's): None on a terminal when the work takes a while, 0
        never, 1 always (runtime/features/progress.py).
    """

    layers: LayerMix = DEFAULT_LAYERS
    gamma: float = DEFAULT_GAMMA
    pooling: str = DEFAULT_POOLING
    norm: Optional[str] = None
    batch_size: Optional[int] = None
    max_length: Optional[int] = DEFAULT_MAX_LENGTH
    window_overlap: int = DEFAULT_OVERLAP
    device: Optional[str] = None
    precision: Optional[str] = None
    tokenizer: TokenizerSpec = None
    verbose: Optional[Union[bool, int]] = None

    @classmethod
    def of(cls: type[Settings], owner: Any, names: tuple[str, ...]) -> Settings:
        """The settings ``owner`` holds as attributes (an estimator's parameters), the others at their defaults."""
        return cls(**{name: getattr(owner, name) for name in names})

    def set_on(self, owner: Any, names: tuple[str, ...]) -> None:
        """Set the settings ``names`` as attributes of ``owner``: :meth:`of`'s inverse (the spaCy component keeps its
        settings as attributes, checked)."""
        for name in names:
            setattr(owner, name, getattr(self, name))

    def checked(self: Settings) -> Settings:
        """These settings in plain Python types after every check that needs no model; a ``TypeError`` or
        ``ValueError`` names the first bad one."""
        max_length, overlap = optional_windows(self.max_length, self.window_overlap)
        if self.tokenizer is not None:  # a bad type is a TypeError, an unknown language code a ValueError
            resolve_tokenizer(self.tokenizer)
        check_precision(self.precision)  # the device is checked where the model loads (a client may send work to GPUs)
        return dataclasses.replace(
            self,
            layers=check_layer_spec(self.layers),
            gamma=check_gamma(self.gamma),
            pooling=check_pooling(self.pooling),
            norm=check_norm(self.norm),
            batch_size=None if self.batch_size is None else positive_int(self.batch_size, "batch_size"),
            max_length=max_length,
            window_overlap=overlap,
        )

    def mixed_width(self, n_layers: int, dim: int) -> int:
        """The width of one token's vector for a model of ``n_layers`` LSTM layers of ``dim`` (``layers`` checked
        against them): ``dim``, or ``(n_layers + 1) * dim`` for ``layers="all"``."""
        return mixed_width(self.layers, n_layers + 1, dim)

    def width(self, n_layers: int, dim: int) -> int:
        """The width of one pooled row (``layers`` and ``pooling``) for a model of ``n_layers`` layers of ``dim``."""
        return pooled_dim(self.mixed_width(n_layers, dim), self.pooling)


@dataclass(frozen=True)
class ComponentSettings(FrontSettings):
    """The spaCy component's settings, where they differ from :class:`FrontSettings`: its config spells out the batch
    size (64 sentences per batch, never None) and the precision ("float32", never None), and the device is checked
    when the component is made (not when its model loads: a pipeline fails at ``add_pipe`` or ``spacy.load``)."""

    batch_size: int = DEFAULT_BATCH_SIZE
    precision: str = DEFAULT_PRECISION

    def checked(self: Settings) -> Settings:
        """:meth:`FrontSettings.checked`, a batch size that is a number, and the device: a ``ValueError`` for one this
        machine lacks (:func:`~spacy_elmo.runtime.configuration.validation.resolve_device`, every front end's check);
        ``None`` or ``""``: None, the device of thinc's current ops when the model loads
        (``spacy/architectures.py``)."""
        settings = super().checked()
        if settings.batch_size is None:
            raise ValueError("batch_size=None: expected a positive integer")
        if settings.device in (None, ""):
            return dataclasses.replace(settings, device=None)
        resolve_device(settings.device)
        return dataclasses.replace(settings, device=str(settings.device))


COMPONENT_DEFAULTS = ComponentSettings()  # the spaCy component's defaults (its factory, __init__ and config)

# which settings each front end takes
VECTORIZER_SETTINGS = (
    "layers",
    "pooling",
    "batch_size",
    "device",
    "tokenizer",
    "max_length",
    "window_overlap",
    "verbose",
    "precision",
    "norm",
)
DASK_SETTINGS = tuple(name for name in VECTORIZER_SETTINGS if name != "verbose")  # embed_texts
DASK_TOKEN_SETTINGS = tuple(name for name in DASK_SETTINGS if name not in ("pooling", "norm"))  # embed_tokens: no rows
COMPONENT_SETTINGS = ("layers", "gamma", "batch_size", "max_length", "window_overlap", "device", "precision")


def given_settings(settings: dict[str, Any], names: tuple[str, ...], where: str) -> FrontSettings:
    """:class:`FrontSettings` of keyword arguments that name settings among ``names`` (a front end that passes
    them on, such as ``spacy_elmo.dask``), checked; ``TypeError`` names one that is no setting of ``where``."""
    if "dtype" in settings:  # the deprecated name of precision
        settings = dict(settings)
        settings["precision"] = precision_or_dtype(
            settings.get("precision"), settings.pop("dtype"), where, stacklevel=4
        )
    unknown = sorted(set(settings) - set(names))
    if unknown:
        raise TypeError(f"{where}() got an unexpected setting {unknown[0]!r}; its settings: {', '.join(names)}")
    return FrontSettings(**settings).checked()


def config_lines(names: tuple[str, ...] = COMPONENT_SETTINGS, defaults: FrontSettings = COMPONENT_DEFAULTS) -> str:
    """``name = value`` lines of the settings ``names`` at ``defaults``, in a spaCy config's syntax (JSON values)."""
    return "\n".join(f"{name} = {json.dumps(getattr(defaults, name))}" for name in names)
