"""The ``elmo`` pipeline component: embeds docs with the shared biLM and stores the layers on each doc."""

from __future__ import annotations

import atexit
import hashlib
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Callable, Optional, Union

import numpy as np
import srsly
from spacy.language import Language
from spacy.pipeline import Pipe
from spacy.tokens import Doc
from spacy.util import SimpleFrozenList, ensure_path, from_bytes, from_disk, logger, minibatch, to_bytes, to_disk
from spacy.vocab import Vocab
from thinc.api import Config, Model

from ..about import __version__
from ..bilm.files import COMPONENT_MODEL, atomic_path, atomic_paths, reported_as
from ..bilm.threads import ForkSafeLock
from ..bilm.weights import WeightFileError
from ..runtime.backend import ElmoBackend
from ..runtime.mix import LayerSpec, check_gamma, check_layer_spec, layer_weights
from ..runtime.settings import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_DTYPE,
    DEFAULT_GAMMA,
    DEFAULT_LAYERS,
    DEFAULT_MAX_LENGTH,
    DEFAULT_OVERLAP,
    DEFAULT_PIPE_BATCH_SIZE,
)
from ..runtime.validation import VECTOR_PRECISIONS, check_dtype, check_window_config, positive_int
from ..runtime.windows import embed_segments
from ..sources.bundled_versions import bundled_version, follow_saved, moved_on_advice, saved_fingerprint
from ..sources.model_files import OPTIONS, WEIGHTS, model_file_map
from .architectures import ElmoModelRef, PositionGetter, as_model_ref, optional_device, sentence_positions
from .extensions import LAYERS, MIX, MODEL, install_extensions
from .hooks import set_hooks
from .layers import is_cached_reader, link, listening_layers, unlink

INIT_EMBED_DOCS = 1024  # training docs embedded per predict() call in initialize (bounds its memory)

MODEL_META = COMPONENT_MODEL  # the component's saved model: where its files are, and their fingerprints
DEFAULT_CONFIG_STR = f"""
[elmo]
layers = "{DEFAULT_LAYERS}"
gamma = {DEFAULT_GAMMA}
batch_size = {DEFAULT_BATCH_SIZE}
max_length = {DEFAULT_MAX_LENGTH}
window_overlap = {DEFAULT_OVERLAP}
use_sentences = true
set_vectors = true
device = null
dtype = "{DEFAULT_DTYPE}"

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
    max_length: int,
    window_overlap: int,
    use_sentences: bool,
    set_vectors: bool,
    device: Optional[str],
    get_positions: PositionGetter,
    dtype: str = DEFAULT_DTYPE,
) -> ElmoComponent:
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
        dtype=dtype,
    )


class ElmoComponent(Pipe):
    """Embed docs with ELMo: ``doc._.elmo_layers`` (raw layers) plus mixed vectors and, optionally, vector hooks.

    model (str | ElmoModelRef): directory with options.json + weights (or an ELMoForManyLangs model), a published
        name, "default" or a bundled version's name ("default-v1"); loaded lazily, shared. A pipeline saved with
        "default" keeps the bundled version it was saved with after "default" names a newer one.
    layers (str | int | list): "average", "top", a layer index, or one unnormalised scalar s_j per layer.
    gamma (float): scale of the mix, gamma * sum_j softmax(s)_j h_j.
    batch_size (int): sentences/windows per biLM forward pass.
    max_length (int): longest biLM input in tokens; longer sentences/docs are cut into windows.
    window_overlap (int): tokens shared by consecutive windows (stitched at the middle of the overlap).
    use_sentences (bool): embed sentence by sentence when the doc has sentence boundaries (passed to get_positions).
    set_vectors (bool): make .vector/.has_vector/.similarity use ELMo: vector hooks, and ``doc.tensor`` set to the
        mixed vectors, which ``Doc.to_bytes`` and ``nlp.pipe(n_process=...)`` keep (see :func:`set_hooks`).
    device (str | None): torch device for the biLM, e.g. "cuda:0" or "cpu"; None follows thinc's current ops when
        the model loads: "cuda:N" under CupyOps (``spacy.require_gpu()``, ``spacy train --gpu-id N``), else the CPU.
    get_positions (callable | None): ``(doc, use_sentences) -> groups of token indices``, one group per
        biLM input before windowing; None: ``spacy_elmo.sentence_positions.v1`` (sentences, no whitespace).
    dtype (str): the biLM's precision: "float32" (exact), "bfloat16", "float16", "int8", or "auto" (the fastest
        that holds its error bound on every input, on the machine that runs the pipeline: float32 today;
        docs/precision.md).

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
        layers: LayerSpec = DEFAULT_LAYERS,
        gamma: float = DEFAULT_GAMMA,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_length: int = DEFAULT_MAX_LENGTH,
        window_overlap: int = DEFAULT_OVERLAP,
        use_sentences: bool = True,
        set_vectors: bool = True,
        device: Optional[str] = None,
        get_positions: Optional[PositionGetter] = None,
        dtype: str = DEFAULT_DTYPE,
    ) -> None:
        install_extensions()
        self.vocab = vocab
        self.name = name
        self.model_ref = as_model_ref(model)
        self.layers = check_layer_spec(layers)
        self.gamma = check_gamma(gamma)
        self.batch_size = positive_int(batch_size, "batch_size")
        self.max_length, self.window_overlap = check_window_config(max_length, window_overlap)
        if get_positions is not None and not callable(get_positions):
            raise TypeError(
                f"get_positions={get_positions!r}: expected a function (doc, use_sentences) -> token index groups"
            )
        self.get_positions: PositionGetter = get_positions or sentence_positions
        self.use_sentences = bool(use_sentences)
        self.set_vectors = bool(set_vectors)
        self.device = optional_device(device)
        check_dtype(dtype)  # a bad value fails here, naming it
        self.dtype = str(dtype)
        self._backend: Optional[ElmoBackend] = None
        self._expected_fingerprint: Optional[str] = None
        self._expected_is_files = False
        self.listener_map: dict[str, list[Model]] = {}

    # -- the model -----------------------------------------------------------------------------

    @property
    def backend(self) -> ElmoBackend:
        """The shared biLM backend, loaded on first use (or by ``initialize``/``from_disk``)."""
        if self._backend is None:
            backend = self.model_ref.load(self.device, self.dtype)
            # the files' identity (saved since dtype="auto": another machine may pick another precision),
            # else, for pipelines saved before it, the precision-specific fingerprint
            expected = self._expected_fingerprint
            found = backend.files_fingerprint if self._expected_is_files else backend.fingerprint
            bundled = self.model_ref.bundled_name
            if expected is not None and found != expected and bundled is not None:
                raise WeightFileError(f"component {self.name!r}: {self._moved_on(bundled, expected)}")
            if expected is not None and found != expected:
                raise WeightFileError(
                    f"component {self.name!r}: the ELMo model in {self.model_ref.path} has fingerprint "
                    f"{found}, but the pipeline was saved with {expected}"
                )
            layer_weights(self.layers, backend.n_layers + 1)  # a bad layer spec fails here, naming the model's layers
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
        so each epoch finds their layers in the cache.
        """
        backend = self.backend
        backend.configure_cache(cache_mb=cache_mb, cache_dir=cache_dir)
        if get_examples is None or not any(is_cached_reader(layer) for layer in self.listeners):
            return  # no listener reads layers from the cache (ElmoFineTune computes its own)
        n_docs = 0
        for docs in minibatch((example.predicted for example in get_examples()), size=INIT_EMBED_DOCS):
            self.predict(docs)  # the results land in the backend's cache
            n_docs += len(docs)
        logger.info(
            "%s: embedded %d training docs (cache: %s MiB in memory)", self.name, n_docs, backend.memory_cache.max_mb
        )

    # -- listeners: the ElmoScalarMix layers of later components -------------------------------

    @property
    def listeners(self) -> list[Model]:
        """Every linked mix layer."""
        return [layer for layers in self.listener_map.values() for layer in layers]

    @property
    def listening_components(self) -> list[str]:
        """Names of the components whose mix layers are linked."""
        return list(self.listener_map)

    def add_listener(self, listener: Model, component_name: str) -> None:
        """Link a mix layer of ``component_name``; a trained layer must fit this component's model."""
        layers = self.listener_map.setdefault(component_name, [])
        if listener not in layers:
            layers.append(listener)
        link(listener, self)

    def remove_listener(self, listener: Model, component_name: str) -> bool:
        """Unlink a mix layer; False when it was not linked."""
        layers = self.listener_map.get(component_name, [])
        if listener not in layers:
            return False
        layers.remove(listener)
        if not layers:
            del self.listener_map[component_name]
        unlink(listener)
        return True

    def find_listeners(self, component: Any) -> None:
        """Link the mix layers in ``component``'s model whose ``upstream`` is this component's name or "*"."""
        for layer in listening_layers(component, self.name):
            self.add_listener(layer, component.name)

    # -- processing ----------------------------------------------------------------------------

    def __call__(self, doc: Doc) -> Doc:
        """Embed one doc and set its extensions (and hooks)."""
        install_extensions()
        error_handler = self.get_error_handler()
        try:
            self.set_annotations([doc], self.predict([doc]))
        except Exception as e:
            error_handler(self.name, self, [doc], e)
        return doc

    def pipe(self, stream: Iterable[Doc], *, batch_size: int = DEFAULT_PIPE_BATCH_SIZE) -> Iterator[Doc]:
        """Embed docs in batches of ``batch_size`` docs; sentences of all docs in a batch share forward passes."""
        install_extensions()
        error_handler = self.get_error_handler()
        for docs in minibatch(stream, size=batch_size):
            try:
                self.set_annotations(docs, self.predict(docs))
            except Exception as e:
                error_handler(self.name, self, docs, e)
            yield from docs

    def predict(self, docs: Sequence[Doc]) -> list[np.ndarray]:
        """The raw layers ``(n_layers + 1, len(doc), dim)`` of each doc; whitespace tokens get zeros."""
        backend = self.backend
        outputs = [np.zeros((backend.n_layers + 1, len(doc), backend.dim), dtype=np.float32) for doc in docs]
        segments = (
            ((d, np.asarray(positions, dtype=np.intp)), [doc[i].text for i in positions])
            for d, doc in enumerate(docs)
            for positions in self.get_positions(doc, self.use_sentences)
        )
        for (d, positions), layers in embed_segments(
            backend, segments, max_length=self.max_length, overlap=self.window_overlap, batch_size=self.batch_size
        ):
            outputs[d][:, positions, :] = layers
        return outputs

    def set_annotations(self, docs: Sequence[Doc], layers: Sequence[np.ndarray]) -> None:
        """Store the layers, the model fingerprint and the layer mix on each doc; if asked, the vectors (tensor, hooks).

        The fingerprint and mix tell later readers which model made the layers and how to mix them.
        """
        fingerprint = self.backend.fingerprint
        for doc, array in zip(docs, layers):
            doc._.set(LAYERS, array)
            doc._.set(MODEL, fingerprint)
            doc._.set(
                MIX,
                {"layers": list(self.layers) if isinstance(self.layers, list) else self.layers, "gamma": self.gamma},
            )
            if self.set_vectors:
                set_hooks(doc)

    # -- serialization -------------------------------------------------------------------------

    def to_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = SimpleFrozenList()) -> None:
        """Save the model: a copy of its files (options.json + weights, or an ELMoForManyLangs model's).

        Bundled and remote models are saved as a reference (name or URL + fingerprint).
        """
        to_disk(ensure_path(path), {"model": self._save_model_dir}, exclude)

    def from_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = SimpleFrozenList()) -> ElmoComponent:
        """Load the model saved by :meth:`to_disk` (from the pipeline's own copy)."""
        from_disk(ensure_path(path), {"model": self._load_model_dir}, exclude)
        return self

    def to_bytes(self, *, exclude: Iterable[str] = SimpleFrozenList()) -> bytes:
        """The model as bytes (options.json + weights, or a reference for the bundled default)."""
        return to_bytes({"model": lambda: srsly.msgpack_dumps(self._model_payload(with_files=True))}, exclude)

    def from_bytes(self, bytes_data: bytes, *, exclude: Iterable[str] = SimpleFrozenList()) -> ElmoComponent:
        """Load the model from :meth:`to_bytes` output (files go to a temporary directory kept for the process)."""
        from_bytes(bytes_data, {"model": lambda b: self._load_payload(srsly.msgpack_loads(b))}, exclude)
        return self

    def _model_payload(self, with_files: bool) -> dict[str, Any]:
        bundled = self.model_ref.bundled_name
        if bundled is not None:  # a reference only: saving must not need the bundled model to exist
            backend = self._backend
            version = bundled_version(bundled)  # not loaded yet: the table knows its files' fingerprint
            payload: dict[str, Any] = {
                "source": "default",
                "fingerprint": backend.fingerprint if backend else None,
                "files_fingerprint": backend.files_fingerprint if backend else version and version.files_fingerprint,
                "spacy_elmo_version": __version__,  # what to install again should a later version not bundle it
            }
            if bundled != "default":
                payload["model"] = bundled
            return payload
        identity = {"fingerprint": self.backend.fingerprint, "files_fingerprint": self.backend.files_fingerprint}
        if self.model_ref.is_remote:  # name or URL + fingerprint; the files come from the download cache
            return {"source": "remote", "model": self.model_ref.path, **identity}
        files = self._loaded_files()
        payload = {"source": "files", **identity}
        if with_files and set(files) == {OPTIONS, WEIGHTS}:  # ELMo's format: the two files under their own keys
            payload["options"] = files[OPTIONS].read_bytes()
            payload["weights"] = files[WEIGHTS].read_bytes()
        elif with_files:  # another format (ELMoForManyLangs): each of its files by name
            payload["files"] = {name: path.read_bytes() for name, path in files.items()}
        return payload

    def _save_model_dir(self, directory: Path) -> None:
        """The model's files (a copy, unless they are this folder's already) and :data:`MODEL_META`, written as one
        set (:func:`~spacy_elmo.bilm.files.atomic_paths`): an error or a full disk leaves the folder's previous save
        whole."""
        directory.mkdir(parents=True, exist_ok=True)
        payload = self._model_payload(with_files=False)
        copies: dict[Path, Path] = {}  # target -> source
        if payload["source"] == "files":
            copies = {
                directory / name: path
                for name, path in self._loaded_files().items()
                if not _same_file(path, directory / name)  # re-saving a loaded pipeline into its own folder
            }
        meta = directory / MODEL_META
        with atomic_paths(*copies, meta) as temporaries:
            for (target, source), tmp in zip(copies.items(), temporaries):
                with reported_as(target):
                    shutil.copyfile(source, tmp)
            with reported_as(meta):
                srsly.write_json(temporaries[-1], payload)

    def _loaded_files(self) -> dict[str, Path]:
        """The files of the loaded model, which a saved pipeline copies; gone since loading: an error saying so.

        The backend holds the model's parameters, not its files (an int8 backend no longer even holds the
        float32 weights), so a pipeline cannot be saved from memory once its model folder is deleted or moved.
        """
        try:
            return model_file_map(*self.model_ref.files())
        except WeightFileError as err:
            raise WeightFileError(
                f"component {self.name!r}: cannot save the model: it was loaded from {self.model_ref.path}, whose "
                f"files are gone since ({err}). The loaded model still embeds, but a saved pipeline holds a copy of "
                "its files: put them back there, or save a pipeline whose elmo model is a folder that exists, "
                '"default" or a published name'
            ) from err

    def _load_model_dir(self, directory: Path) -> None:
        meta_path = directory / MODEL_META
        if not meta_path.is_file():
            raise WeightFileError(f"component {self.name!r}: {meta_path} is missing (not saved by the elmo component?)")
        meta = srsly.read_json(meta_path)
        source = _saved_source(meta, f"component {self.name!r}: {meta_path}", files=())
        if source == "default":
            self._use_bundled(meta)
            return
        self._use_model(meta["model"] if source == "remote" else str(directory), meta)

    def _load_payload(self, payload: dict[str, Any]) -> None:
        where = f"component {self.name!r}: the model in the serialized bytes"
        source = _saved_source(payload, where, files=("options", "weights"))
        if source == "default":
            self._use_bundled(payload)
            return
        if source == "remote":
            self._use_model(payload["model"], payload)
            return
        files = payload.get("files") or {OPTIONS: payload["options"], WEIGHTS: payload["weights"]}
        self._use_model(str(_unpacked_model_dir(files)), payload)

    def _use_bundled(self, saved: dict[str, Any]) -> None:
        """Use the bundled model a pipeline was saved with: the version with its saved fingerprint, should
        ``"default"`` (or the saved version name) now name another one; with none, the model this component's config
        names if that is a folder or a published name (where the error below sends users), else that error."""
        name = saved.get("model", "default")
        fingerprint = saved_fingerprint(saved)
        path = follow_saved(name, fingerprint, f"component {self.name!r} was saved", VECTOR_PRECISIONS)
        if path is None and self.model_ref.bundled_name is None:
            path = self.model_ref.path  # the user's choice: the saved model's files, checked by their fingerprint
        if path is None:
            advice = self._moved_on(name, fingerprint, saved.get("spacy_elmo_version"))
            raise WeightFileError(f"component {self.name!r}: {advice}")
        self._use_model(path, saved)

    def _moved_on(self, name: str, saved: Optional[str], saved_by: Optional[str] = None) -> str:
        return moved_on_advice(
            name,
            saved or "?",
            saved_by,
            __version__,
            set_model=(
                "load it with the component's model set to the files it was saved with: "
                f'spacy.load(PATH, config={{"components.{self.name}.model.path": FOLDER}})'
            ),
            redo=(
                f"train the pipeline's components that follow {self.name!r} again on this version's default "
                "(spacy train with the pipeline's config.cfg)"
            ),
        )

    def _use_model(self, path: str, saved: dict[str, Any]) -> None:
        """Use the model at ``path``, checked against the identity ``saved`` with the pipeline."""
        self.model_ref = ElmoModelRef(path)
        self._expected_is_files = saved.get("files_fingerprint") is not None
        self._expected_fingerprint = saved.get("files_fingerprint") or saved.get("fingerprint")
        self._backend = None
        _ = self.backend  # load now: a broken saved pipeline fails at load time, not on the first doc


_unpacked_root: Optional[Path] = None
_unpacked_lock = ForkSafeLock()


def _unpacked_model_dir(files: dict[str, bytes]) -> Path:
    """A folder holding ``files`` (name -> bytes) for the rest of the process, one per distinct content.

    ``from_bytes`` of the same pipeline again (a server reloading it, ``n_process`` workers) reuses the
    folder, so the disk holds one copy and the backend cache, keyed by the files, finds the loaded model.
    All folders sit in one temporary root, removed at exit (one ``atexit`` registration per process).
    """
    global _unpacked_root
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    with _unpacked_lock:
        if _unpacked_root is None or not _unpacked_root.is_dir():
            _unpacked_root = Path(tempfile.mkdtemp(prefix="spacy_elmo_"))
            atexit.register(shutil.rmtree, _unpacked_root, True)
        directory = _unpacked_root / digest.hexdigest()[:32]
        directory.mkdir(exist_ok=True)
        for name, data in files.items():
            target = directory / Path(name).name  # a bare file name: nothing lands outside the folder
            if not (target.is_file() and target.stat().st_size == len(data)):
                with atomic_path(target) as tmp:
                    tmp.write_bytes(data)
    return directory


def _saved_source(meta: Any, where: str, files: Sequence[str]) -> str:
    """The ``source`` of a saved model description, checked, so a damaged save fails naming ``where`` and the key.

    A "files" save must also hold each key in ``files`` (the bytes of options.json and the weights).
    """
    if not isinstance(meta, dict):
        raise WeightFileError(f"{where}: expected an object with a 'source' key, not {type(meta).__name__}")
    if "source" not in meta:
        raise WeightFileError(f'{where}: missing key \'source\' (expected "default" or "files")')
    source = meta["source"]
    if source not in ("default", "files", "remote"):
        raise WeightFileError(f'{where}: key \'source\' must be "default", "files" or "remote", not {source!r}')
    if source == "default" and not isinstance(meta.get("model", "default"), str):
        raise WeightFileError(f"{where}: key 'model' must be the name of a bundled model, such as \"default-v1\"")
    if source == "remote" and not isinstance(meta.get("model"), str):
        raise WeightFileError(f"{where}: missing key 'model' (the published name or URL of the saved model)")
    if source == "files" and isinstance(meta.get("files"), dict):  # another format's files, by name
        if all(isinstance(k, str) and isinstance(v, bytes) for k, v in meta["files"].items()):
            return source
        raise WeightFileError(f"{where}: key 'files' must map file names to their bytes")
    missing = [key for key in files if source == "files" and not isinstance(meta.get(key), bytes)]
    if missing:
        raise WeightFileError(f"{where}: missing key {missing[0]!r} (the bytes of the saved model file)")
    return source


def _same_file(source: Path, target: Path) -> bool:
    return target.exists() and target.resolve() == source.resolve()
