"""The ``elmo`` pipeline component: embeds docs with the shared biLM and stores the layers on each doc; its default
``get_positions`` (``spacy_elmo.sentence_positions.v1``: which tokens form each biLM input) is registered here."""

import warnings
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Callable, Optional, Union

import numpy as np
import srsly
from spacy.language import Language
from spacy.pipeline import Pipe
from spacy.tokens import Doc
from spacy.util import (
    SimpleFrozenList,
    ensure_path,
    from_bytes,
    from_disk,
    logger,
    minibatch,
    registry,
    to_bytes,
    to_disk,
)
from spacy.vocab import Vocab
from thinc.api import Config, Model

from ..runtime.configuration.defaults import DEFAULT_PIPE_BATCH_SIZE
from ..runtime.configuration.validation import positive_int, precision_or_dtype
from ..runtime.embedding.backend import ElmoBackend, check_cache_sizes
from ..runtime.embedding.windows import embed_segments
from ..runtime.features.front_settings import COMPONENT_DEFAULTS, COMPONENT_SETTINGS, ComponentSettings, config_lines
from ..runtime.features.mix import LayerMix, mix_layers, mixed_width
from ..runtime.features.progress import Progress
from ..runtime.features.tokenize import is_whitespace
from ..sources.pinned_model import PinnedModel
from .architectures import ElmoModelRef, as_model_ref
from .extensions import LAYERS, MIX, MODEL, install_extensions
from .hooks import attach_vectors
from .mix_layer import is_cached_reader, link, listening_mixes, unlink
from .saved_model import check_saved_identity, load_model_dir, load_payload, model_dir_writer, model_payload

PositionGetter = Callable[[Doc, bool], Iterable[Sequence[int]]]


def sentence_positions(doc: Doc, use_sentences: bool = True) -> list[list[int]]:
    """The token indices of each biLM input of ``doc``, whitespace tokens left out (and groups left empty).

    doc (Doc): the doc to embed.
    use_sentences (bool): one group per sentence when the doc has sentence boundaries; else (or
        when False) one group for the whole doc.

    Groups longer than the component's ``max_length`` are cut into overlapping windows by
    :func:`spacy_elmo.runtime.embedding.windows.embed_segments`, as every front end's are.
    """
    if use_sentences and len(doc) and doc.has_annotation("SENT_START"):
        spans = list(doc.sents)
    else:
        spans = [doc[:]]
    groups = ([token.i for token in span if not is_whitespace(token.text)] for span in spans)
    return [group for group in groups if group]


@registry.misc("spacy_elmo.sentence_positions.v1")
def sentence_positions_v1() -> PositionGetter:
    """The ``elmo`` component's default ``get_positions``: :func:`sentence_positions`.

    A replacement is any registered function returning a callable ``(doc, use_sentences) ->
    groups of token indices`` (each group in order; the component writes each group's vectors
    to its tokens, and tokens in no group keep zeros).
    """
    return sentence_positions


INIT_EMBED_DOCS = 1024  # training docs embedded per predict() call in initialize (bounds its memory)

DEFAULTS = COMPONENT_DEFAULTS  # the settings it shares with the other front ends: runtime/features/front_settings.py
DEFAULT_CONFIG_STR = f"""
[elmo]
{config_lines(COMPONENT_SETTINGS, DEFAULTS)}
use_sentences = true
set_vectors = true

[elmo.model]
@misc = "spacy_elmo.ElmoBiLM.v1"
path = "default"

[elmo.get_positions]
@misc = "spacy_elmo.sentence_positions.v1"
"""
DEFAULT_CONFIG = Config().from_str(DEFAULT_CONFIG_STR)

install_extensions()


@Language.factory(
    "elmo",
    assigns=[f"doc._.{LAYERS}", f"doc._.{MODEL}", f"doc._.{MIX}"],
    default_config=DEFAULT_CONFIG["elmo"],
)
def make_elmo(
    nlp: Language,
    name: str,
    model: Union[str, ElmoModelRef],
    layers: Union[str, int, list[float]],
    gamma: float,
    batch_size: int,
    max_length: Optional[int],
    window_overlap: int,
    use_sentences: bool,
    set_vectors: bool,
    device: Optional[str],
    get_positions: PositionGetter,
    precision: str = DEFAULTS.precision,  # a default, unlike the others: configs saved before it existed load
    dtype: Optional[str] = None,  # its name up to 0.2.0 (deprecated): configs saved then load, with a FutureWarning
) -> "ElmoComponent":
    """Create the ``elmo`` component (see :class:`ElmoComponent` for the arguments)."""
    return ElmoComponent(
        nlp.vocab,
        model,
        name,
        layers=layers,
        gamma=gamma,
        batch_size=batch_size,
        max_length=max_length,
        window_overlap=window_overlap,
        use_sentences=use_sentences,
        set_vectors=set_vectors,
        device=device,
        get_positions=get_positions,
        precision=precision,
        dtype=dtype,
    )


class ElmoComponent(Pipe):
    """Embed docs with ELMo: ``doc._.elmo_layers`` (raw layers) plus mixed vectors and, optionally, vector hooks.

    model (str | ElmoModelRef): directory with options.json + weights (or an ELMoForManyLangs model), a published
        name, "default" or a bundled version's name ("default-v1"); loaded lazily, shared. A pipeline saved with
        "default" keeps the bundled version it was saved with after "default" names a newer one.
    layers (str | int | list): "average", "top", a layer index, or one unnormalised scalar s_j per layer; "all":
        every layer side by side (``doc._.elmo`` and the vectors ``(n_layers + 1) * dim`` wide).
    gamma (float): scale of the mix, gamma * sum_j softmax(s)_j h_j.
    batch_size (int): sentences/windows per biLM forward pass.
    max_length (int | None): longest biLM input in tokens; longer sentences/docs are cut into windows (None: none).
    window_overlap (int): tokens shared by consecutive windows (stitched at the middle of the overlap).
    use_sentences (bool): embed sentence by sentence when the doc has sentence boundaries (passed to get_positions).
    set_vectors (bool): make .vector/.has_vector/.similarity use ELMo: vector hooks, and ``doc.tensor`` set to the
        mixed vectors, which ``Doc.to_bytes`` and ``nlp.pipe(n_process=...)`` keep (see :func:`set_hooks`).
    device (str | None): torch device for the biLM, e.g. "cuda:0" or "cpu"; None follows thinc's current ops when
        the model loads: "cuda:N" under CupyOps (``spacy.require_gpu()``, ``spacy train --gpu-id N``), else the CPU.
    get_positions (callable | None): ``(doc, use_sentences) -> groups of token indices``, one group per
        biLM input before windowing; None: ``spacy_elmo.sentence_positions.v1`` (sentences, no whitespace).
    precision (str): the biLM's precision: "float32" (exact), "bfloat16", "float16", "int8", or "auto" (the
        fastest that holds its error bound on every input, on the machine that runs the pipeline: float32 today;
        docs/precision.md).
    dtype (str | None): deprecated since 0.3.0 (removed in 0.4.0): the name ``precision`` had up to 0.2.0, taken
        with a ``FutureWarning`` (a pipeline saved then has ``dtype`` in its config).

    Later components' ``spacy_elmo.ElmoScalarMix`` layers are linked to it (spaCy's listener
    mechanism): they take the model's shape from it and embed docs it has not annotated.
    """

    # spaCy links listeners only for components shaped like spacy.ty.ListenedToComponent, which has a
    # `model`; the biLM is not a Thinc model (nothing of it is trained), so it is None.
    model = None

    def __init__(
        self,
        vocab: Vocab,
        model: Union[str, ElmoModelRef] = "default",
        name: str = "elmo",
        *,
        layers: LayerMix = DEFAULTS.layers,
        gamma: float = DEFAULTS.gamma,
        batch_size: int = DEFAULTS.batch_size,
        max_length: Optional[int] = DEFAULTS.max_length,
        window_overlap: int = DEFAULTS.window_overlap,
        use_sentences: bool = True,
        set_vectors: bool = True,
        device: Optional[str] = DEFAULTS.device,
        get_positions: Optional[PositionGetter] = None,
        precision: str = DEFAULTS.precision,
        dtype: Optional[str] = None,
    ) -> None:
        install_extensions()
        self.vocab = vocab
        self.name = name
        self.model_ref = as_model_ref(model)
        # the settings it shares with the other front ends, as given, then checked and kept in plain types
        self.layers, self.gamma, self.batch_size = layers, gamma, batch_size
        self.max_length, self.window_overlap, self.device = max_length, window_overlap, device
        self.precision = precision_or_dtype(precision, dtype, f"the {name} component", default=DEFAULTS.precision)
        ComponentSettings.of(self, COMPONENT_SETTINGS).checked().set_on(self, COMPONENT_SETTINGS)
        if get_positions is not None and not callable(get_positions):
            raise TypeError(
                f"get_positions={get_positions!r}: expected a function (doc, use_sentences) -> token index groups"
            )
        self.get_positions: PositionGetter = get_positions or sentence_positions
        self.use_sentences = bool(use_sentences)
        self.set_vectors = bool(set_vectors)
        self._backend: Optional[ElmoBackend] = None
        self._pin: Optional[PinnedModel] = None  # the model a loaded pipeline was saved with (saved_model.py)
        self.listener_map: dict[str, list[Model]] = {}

    @property
    def dtype(self) -> str:
        """Deprecated since 0.3.0 (removed in 0.4.0): ``precision``."""
        warnings.warn(
            "ElmoComponent.dtype is deprecated since 0.3.0 and will be removed in 0.4.0; use precision",
            FutureWarning,
            stacklevel=2,
        )
        return self.precision

    # -- the model -----------------------------------------------------------------------------

    @property
    def loaded_backend(self) -> Optional[ElmoBackend]:
        """The backend when it is loaded already, else None (saving a bundled model's reference loads nothing)."""
        return self._backend

    @property
    def backend(self) -> ElmoBackend:
        """The shared biLM backend, loaded on first use (or by ``initialize``/``from_disk``)."""
        if self._backend is None:
            backend = self.model_ref.load(self.device, self.precision)
            if self._pin is not None:
                check_saved_identity(self, backend, self._pin)
            mixed_width(self.layers, backend.n_layers + 1, backend.dim)  # a bad layer spec fails here, naming them
            self._backend = backend
        return self._backend

    def initialize(
        self,
        get_examples: Optional[Callable[[], Iterable[Any]]] = None,
        *,
        nlp: Optional[Language] = None,
        cache_mb: Optional[float] = None,
        cache_dir: Optional[str] = None,
    ) -> None:
        """Load the biLM now (so a bad model path fails early); for training, size its cache and fill it.

        cache_mb (float | None): the backend's in-memory cache of sentence layers, in MiB (None keeps the
            backend's setting, 256 MiB by default). Training docs are embedded once per run when their
            layers fit (n_tokens x (n_layers + 1) x dim x 4 bytes).
        cache_dir (str | None): a directory for the backend's disk cache, shared by runs and processes.
        Set them in ``[initialize.components.elmo]``; a loaded pipeline does not run this.

        When a later component's mix layer reads cached layers from this component (ElmoScalarMix; not
        ElmoFineTune, which runs its own biLM), the training examples are embedded here, in large batches,
        so each epoch finds their layers in the cache. What ``spacy train`` and ``spacy debug data`` wait on:
        said in spaCy's log as it starts, with a progress bar on a terminal when it takes a while.
        """
        check_cache_sizes(cache_mb, None, None)  # before the model loads
        backend = self.backend
        backend.configure_cache(cache_mb=cache_mb, cache_dir=cache_dir)
        if get_examples is None or not any(is_cached_reader(layer) for layer in self.listeners):
            return  # no listener reads layers from the cache (ElmoFineTune computes its own)
        n_docs = n_tokens = 0
        for example in get_examples():  # counted first: the bar's total
            n_docs += 1
            n_tokens += sum(len(group) for group in self.get_positions(example.predicted, self.use_sentences))
        logger.info("%s: embedding %d training docs (%d tokens) into the layer cache", self.name, n_docs, n_tokens)
        with Progress(n_tokens, unit="token", desc=f"{self.name}: training docs") as progress:
            for docs in minibatch((example.predicted for example in get_examples()), size=INIT_EMBED_DOCS):
                self._predict(docs, progress.update)  # the results land in the backend's cache
        logger.info(
            "%s: embedded %d training docs (cache: %s MiB in memory)", self.name, n_docs, backend.memory_cache.max_mb
        )

    # -- listeners: the ElmoScalarMix layers of later components -------------------------------

    @property
    def listeners(self) -> list[Model]:
        """Every linked mix layer."""
        return [layer for linked in self.listener_map.values() for layer in linked]

    @property
    def listening_components(self) -> list[str]:
        """Names of the components whose mix layers are linked."""
        return list(self.listener_map)

    def add_listener(self, listener: Model, component_name: str) -> None:
        """Link a mix layer of ``component_name``; a trained layer must fit this component's model."""
        linked = self.listener_map.setdefault(component_name, [])
        if listener not in linked:
            linked.append(listener)
        link(listener, self)

    def remove_listener(self, listener: Model, component_name: str) -> bool:
        """Unlink a mix layer; False when it was not linked."""
        linked = self.listener_map.get(component_name, [])
        if listener not in linked:
            return False
        linked.remove(listener)
        if not linked:
            del self.listener_map[component_name]
        unlink(listener)
        return True

    def find_listeners(self, component: Any) -> None:
        """Link the mix layers in ``component``'s model whose ``upstream`` is this component's name or "*"."""
        for layer in listening_mixes(component, self.name):
            self.add_listener(layer, component.name)

    # -- processing ----------------------------------------------------------------------------

    def __call__(self, doc: Doc) -> Doc:
        """Embed one doc and set its extensions (and hooks)."""
        error_handler = self.get_error_handler()
        try:
            with Progress(len(doc), unit="token", desc=self.name) as progress:  # a very long doc: its windows
                self.set_annotations([doc], self._predict([doc], progress.update))
        except Exception as e:
            error_handler(self.name, self, [doc], e)
        return doc

    def pipe(self, stream: Iterable[Doc], *, batch_size: int = DEFAULT_PIPE_BATCH_SIZE) -> Iterator[Doc]:
        """Embed docs in batches of ``batch_size`` docs; sentences of all docs in a batch share forward passes.

        Work that takes more than a few seconds shows a progress bar over the tokens on a terminal's stderr
        (:mod:`spacy_elmo.runtime.features.progress`); none in logs, pipes or tests.
        """
        error_handler = self.get_error_handler()
        size = positive_int(batch_size, "batch_size")
        with Progress(unit="token", desc=self.name) as progress:
            for docs in minibatch(stream, size=size):
                try:
                    self.set_annotations(docs, self._predict(docs, progress.update))
                except Exception as e:
                    error_handler(self.name, self, docs, e)
                yield from docs

    def predict(self, docs: Sequence[Doc]) -> list[np.ndarray]:
        """The raw layers ``(n_layers + 1, len(doc), dim)`` of each doc; whitespace tokens get zeros."""
        return self._predict(docs)

    def _predict(self, docs: Sequence[Doc], on_tokens: Optional[Callable[[int], object]] = None) -> list[np.ndarray]:
        """:meth:`predict`, calling ``on_tokens(n)`` as each backend call embeds ``n`` more of the docs' tokens."""
        backend = self.backend
        outputs = [np.zeros((backend.n_layers + 1, len(doc), backend.dim), dtype=np.float32) for doc in docs]
        # found whole before the windows read them (the docs are in memory already): the windows never call back into
        # the component, and a get_positions that fails does so before anything is embedded
        segments = [
            ((d, np.asarray(positions, dtype=np.intp)), [doc[i].text for i in positions])
            for d, doc in enumerate(docs)
            for positions in self.get_positions(doc, self.use_sentences)
        ]
        for (d, positions), activations in embed_segments(
            backend,
            segments,
            max_length=self.max_length,
            overlap=self.window_overlap,
            batch_size=self.batch_size,
            on_tokens=on_tokens,
        ):
            outputs[d][:, positions, :] = activations
        return outputs

    def set_annotations(self, docs: Sequence[Doc], activations: Sequence[np.ndarray]) -> None:
        """Store each doc's activations (its raw layers, :meth:`predict`'s), the model fingerprint and the layer mix
        (the ``layers`` setting) on each doc; if asked, the vectors (tensor, hooks).

        The fingerprint and mix tell later readers which model made the layers and how to mix them.
        """
        fingerprint = self.backend.fingerprint
        for doc, array in zip(docs, activations):
            doc._.set(LAYERS, array)
            doc._.set(MODEL, fingerprint)
            setting = list(self.layers) if isinstance(self.layers, list) else self.layers  # the doc's own copy
            doc._.set(MIX, {"layers": setting, "gamma": self.gamma})
            if self.set_vectors:  # the layers in hand, mixed as stored: what set_hooks would mix from the doc
                attach_vectors(doc, mix_layers(array, setting, self.gamma))

    # -- serialization -------------------------------------------------------------------------

    def to_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = SimpleFrozenList()) -> None:
        """Save the model: a copy of its files (options.json + weights, or an ELMoForManyLangs model's).

        Bundled and remote models are saved as a reference (name or URL + fingerprint). Files gone or changed on disk
        since the model was loaded: ``WeightFileError``, and nothing of the component is written.
        """
        # checked before spaCy makes the component's folder: a model that cannot be saved leaves nothing of it
        writers = {} if "model" in exclude else {"model": model_dir_writer(self)}
        to_disk(ensure_path(path), writers, exclude)

    def from_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = SimpleFrozenList()) -> "ElmoComponent":
        """Load the model saved by :meth:`to_disk` (from the pipeline's own copy)."""
        from_disk(ensure_path(path), {"model": lambda directory: load_model_dir(self, directory)}, exclude)
        return self

    def to_bytes(self, *, exclude: Iterable[str] = SimpleFrozenList()) -> bytes:
        """The model as bytes (options.json + weights, or a reference for the bundled default); files gone or changed
        on disk since the model was loaded: ``WeightFileError``."""
        return to_bytes({"model": lambda: srsly.msgpack_dumps(model_payload(self, with_files=True))}, exclude)

    def from_bytes(self, bytes_data: bytes, *, exclude: Iterable[str] = SimpleFrozenList()) -> "ElmoComponent":
        """Load the model from :meth:`to_bytes` output (files go to a temporary directory kept for the process)."""
        from_bytes(bytes_data, {"model": lambda b: load_payload(self, srsly.msgpack_loads(b))}, exclude)
        return self

    def use_model(self, path: str, pin: PinnedModel) -> None:
        """Use the model at ``path``, checked against the model ``pin`` the pipeline was saved with
        (``saved_model``)."""
        self.model_ref = ElmoModelRef(path)
        self._pin = pin
        self._backend = None
        _ = self.backend  # load now: a broken saved pipeline fails at load time, not on the first doc
