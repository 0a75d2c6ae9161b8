"""End-to-end fine-tuning: a Thinc layer whose backprop reaches chosen parts of its own copy of the biLM.

``spacy_elmo.ElmoFineTune.v1`` (registered in architectures.py) has the same output as
``spacy_elmo.ElmoScalarMix.v2`` (a float32 ``(n_tokens, width)`` array per doc, whitespace tokens
zero) but computes the layers itself, so the task's gradient can flow into the biLM, as
spacy-transformers lets it flow into a transformer:

- ``trainable`` names the parts that learn: ``"none"`` (the frozen biLM), ``"top"`` (the top LSTM
  layer of each direction), ``"lstm"`` (every LSTM layer) or ``"all"`` (the char CNN too);
- ``grad_factor`` scales the gradient that reaches the biLM (not the mix's own);
- ``learn_rate_factor`` scales the biLM's learning rate against the task's (discriminative fine-tuning, as
  ULMFiT's): the layer's params hold the biLM's arrays divided by the factor, and the biLM uses them times
  the factor, so an optimizer that normalises the step size (Adam, spaCy's default) moves the biLM's
  weights by the factor times the step it gives the task's layers. Adam's steps do not depend on the
  gradient's scale, so ``grad_factor`` alone hardly slows the biLM there; a full-rate Adam step is large
  against pre-trained LSTM weights;
- the biLM is the layer's own float32 copy, read from the model's files: the process-wide backend
  that the ``elmo`` component and every other front end share is never changed, so another
  pipeline's vectors do not move while this one trains;
- the trained parameters are Thinc params of this layer (the optimizer updates them, and
  ``to_disk`` / ``spacy.load`` / ``spacy package`` keep them in Thinc's msgpack of arrays, nothing
  pickled); the rest comes from the model files the ``elmo`` component saves or references.

While training, the biLM runs its reference (autograd) path; predictions run under ``torch.no_grad()``
so :mod:`spacy_elmo.bilm.model` chooses the inference path. The layer reads the ``elmo`` component
it is linked to (through its mix, as ElmoScalarMix.v2 is) for the model, the token groups
(``get_positions``) and the windows (``max_length`` / ``window_overlap``).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional, cast

import numpy as np
import torch
from spacy.tokens import Doc
from thinc.api import Model, Ops, torch2xp, xp2torch
from thinc.types import Floats2d

from ..bilm.model import BiLM
from ..runtime.embedding.backend import ElmoBackend, load_model_files
from ..runtime.embedding.windows import length_batches, window_bounds
from ..sources.bundled_versions import version_with_fingerprint
from .mix_layer import OWN_BILM, linked, mix_forward

FINE_TUNE_NAME = "elmo_fine_tune"
TRAINABLE = ("none", "top", "lstm", "all")
BILM = "bilm"  # attr holding the layer's own biLM (a _Held, which Thinc cannot serialize and skips)
BASE = "base_fingerprint"  # the files fingerprint of the model the layer was trained from (saved)


class _Held:
    """The layer's own biLM, built on first use: skipped by Thinc's serialization, not shared by deepcopy."""

    __slots__ = ("bilm",)

    def __init__(self) -> None:
        self.bilm: Optional[BiLM] = None

    def __deepcopy__(self, memo: dict) -> _Held:
        return _Held()  # a copy builds its own biLM from its own params


def build_fine_tune(
    *, trainable: str, grad_factor: float, learn_rate_factor: float, mix: Model
) -> Model[list[Doc], list[Floats2d]]:
    """The fine-tuning layer around ``mix`` (an ElmoScalarMix node, which links it to the ``elmo`` component)."""
    if trainable not in TRAINABLE:
        raise ValueError(f"trainable={trainable!r}: expected one of {', '.join(map(repr, TRAINABLE))}")
    if isinstance(grad_factor, bool) or not isinstance(grad_factor, (int, float)) or not np.isfinite(grad_factor):
        raise ValueError(f"grad_factor={grad_factor!r}: expected a finite number")
    if (
        isinstance(learn_rate_factor, bool)
        or not isinstance(learn_rate_factor, (int, float))
        or not (np.isfinite(learn_rate_factor) and learn_rate_factor > 0)
    ):
        raise ValueError(f"learn_rate_factor={learn_rate_factor!r}: expected a number > 0 (trainable='none' freezes)")
    mix.attrs[OWN_BILM] = True  # the elmo component need not fill its cache for it
    return Model(
        FINE_TUNE_NAME,
        _forward,
        init=_init,
        layers=[mix],
        dims={"nO": None},
        attrs={
            "trainable": trainable,
            "grad_factor": float(grad_factor),
            "learn_rate_factor": float(learn_rate_factor),
            BILM: _Held(),
            BASE: None,
        },
    )


def trainable_names(bilm: BiLM, trainable: str) -> list[str]:
    """The names of the biLM parameters that ``trainable`` lets learn (``"top"``: the top layer of both directions)."""
    names = [name for name, _ in bilm.named_parameters()]
    if trainable == "none":
        return []
    if trainable == "all":
        return names
    prefixes: tuple[str, ...] = ("lstm.",)
    if trainable == "top":
        top = bilm.n_layers - 1
        prefixes = (f"lstm.forward_layers.{top}.", f"lstm.backward_layers.{top}.")
    chosen = [name for name in names if name.startswith(prefixes)]
    if not chosen:
        raise ValueError(
            f"trainable={trainable!r}: this biLM ({type(bilm.lstm).__name__}) has no parameters named "
            f"{' or '.join(p + '*' for p in prefixes)}; use trainable='all' or 'none'"
        )
    return chosen


# -- the layer's own biLM ----------------------------------------------------------------------------


def _component(model: Model) -> Any:
    component = linked(model.layers[0])
    if component is None:
        raise ValueError(
            "ElmoFineTune is not linked to an 'elmo' component: put the 'elmo' component before this one in the "
            "pipeline (its model, positions and windows are the ones this layer fine-tunes)"
        )
    return component


def _base_backend(model: Model) -> ElmoBackend:
    """The linked component's (shared) backend, whose files this layer copies; refused unless float32."""
    component = _component(model)
    backend = component.backend
    if backend.dtype != torch.float32:
        raise ValueError(
            f"ElmoFineTune trains the biLM in float32, but component {component.name!r} loads it as "
            f'dtype={component.dtype!r}: set [components.{component.name}] dtype = "float32"'
        )
    return cast(ElmoBackend, backend)


def _own_bilm(model: Model) -> BiLM:
    """The layer's biLM: its own float32 copy read from the model files, with the trained params of this layer."""
    held: _Held = model.attrs[BILM]
    if held.bilm is None:
        backend = _base_backend(model)
        base = model.attrs[BASE]
        if base is not None and base != backend.files_fingerprint:
            raise ValueError(_base_mismatch(base, backend, _component(model).name))
        bilm = load_model_files(backend.options_path, backend.weights_path).to(backend.device, torch.float32)
        bilm.eval()  # the biLM's own dropout stays off; the mix's dropout is the task's
        names = set(trainable_names(bilm, model.attrs["trainable"]))
        for name, param in bilm.named_parameters():
            param.requires_grad_(name in names)
        held.bilm = bilm
    return held.bilm


def _base_mismatch(base: str, backend: ElmoBackend, component: str) -> str:
    """The error for a layer trained from another model than its component loads: which model to set, when the
    base is a bundled version (the default it was trained on, now named ``"default-v1"``)."""
    version = version_with_fingerprint(base)
    use = (
        f"set the {component} component's model to {version.name!r} (the bundled model it was trained from)"
        if version is not None
        else "use the model it was trained from"
    )
    return (
        f"ElmoFineTune was trained from the ELMo model with fingerprint {base}, but the {component!r} component "
        f"loads {backend.files_fingerprint} ({backend.options_path.parent}): {use}"
    )


def _trained(bilm: BiLM) -> dict[str, torch.nn.Parameter]:
    """The biLM parameters that learn (those ``trainable`` chose), by name."""
    return {name: p for name, p in bilm.named_parameters() if p.requires_grad}


def _init(model: Model, X: Optional[list[Doc]] = None, Y: Optional[list[Floats2d]] = None) -> Model:
    mix = model.layers[0]
    mix.initialize(X=X)
    model.set_dim("nO", mix.get_dim("nO"))
    model.attrs[BILM] = _Held()  # a fresh copy of the model's weights: initialize starts from the pre-trained biLM
    model.attrs[BASE] = None
    bilm = _own_bilm(model)
    model.attrs[BASE] = _base_backend(model).files_fingerprint
    for name, param in _trained(bilm).items():
        model.set_param(name, _as_ops_array(model.ops, param.detach() / model.attrs["learn_rate_factor"]))
    return model


def _as_ops_array(ops: Ops, tensor: torch.Tensor) -> Any:
    """``tensor`` as an array of ``ops`` (numpy under NumpyOps, CuPy under CupyOps), wherever the biLM runs.

    ``torch2xp`` alone follows the tensor's device, so a CUDA biLM under NumpyOps, or a CPU one under
    ``spacy.require_gpu()``, would put CuPy arrays among numpy ones (or the reverse).
    """
    return ops.asarray(torch2xp(tensor, ops=ops))


def _sync(model: Model, bilm: BiLM) -> None:
    """Copy the layer's params (the optimizer's, or loaded ones) into its biLM where they differ."""
    with torch.no_grad():
        for name, param in _trained(bilm).items():
            if not model.has_param(name):
                raise ValueError(f"ElmoFineTune has no trained array {name!r}: initialize the pipeline first")
            value = xp2torch(model.get_param(name), device=param.device) * model.attrs["learn_rate_factor"]
            if not torch.equal(value, param):
                param.copy_(value)  # copy_ bumps the version: stale packs rebuilt


# -- forward and backprop ---------------------------------------------------------------------------


class _Piece(NamedTuple):
    """One biLM input: a window of a doc's token group, and which of its positions the doc keeps."""

    doc: int
    positions: np.ndarray  # the doc's token indices of the window
    keep: slice  # the window's kept columns (windows overlap; each token is kept from one)


def _pieces(component: Any, docs: list[Doc]) -> list[_Piece]:
    pieces = []
    for d, doc in enumerate(docs):
        for group in component.get_positions(doc, component.use_sentences):
            positions = np.asarray(group, dtype=np.intp)
            for start, end, keep_start, keep_end in window_bounds(
                len(positions), component.max_length, component.window_overlap
            ):
                pieces.append(_Piece(d, positions[start:end], slice(keep_start - start, keep_end - start)))
    return pieces


def _forward(model: Model, docs: list[Doc], is_train: bool) -> tuple[list[Floats2d], Callable]:
    component = _component(model)
    bilm = _own_bilm(model)
    _sync(model, bilm)
    trained = _trained(bilm)
    grads_needed = is_train and bool(trained)
    mix = model.layers[0]
    n_outputs, width = bilm.n_layers + 1, bilm.output_dim
    pieces = _pieces(component, docs)
    batches = length_batches([len(p.positions) for p in pieces], component.batch_size, _token_budget(component))
    results: list[tuple[list[int], torch.Tensor]] = []
    inputs: list[Any] = [model.ops.alloc3f(n_outputs, len(doc), width) for doc in docs]
    with torch.enable_grad() if grads_needed else torch.no_grad():
        for batch in batches:
            layers = _run(bilm, [[docs[pieces[i].doc][t].text for t in pieces[i].positions] for i in batch])
            results.append((batch, layers))
            values: Any = _as_ops_array(model.ops, layers.detach())
            for row, i in enumerate(batch):
                piece = pieces[i]
                inputs[piece.doc][:, piece.positions[piece.keep]] = values[:, row, piece.keep]
    outputs, backprop_mix = mix_forward(mix, inputs, is_train, input_grads=grads_needed)

    def backprop(dYs: list[Floats2d]) -> list[Doc]:
        d_inputs: list[Any] = backprop_mix(dYs)
        if not grads_needed:
            return []
        factor = model.attrs["grad_factor"] * model.attrs["learn_rate_factor"]  # the params are the arrays / lr factor
        tensors, grads = [], []
        for batch, layers in results:
            d_layers: Any = model.ops.alloc4f(*layers.shape)
            for row, i in enumerate(batch):
                piece = pieces[i]
                d_layers[:, row, piece.keep] = d_inputs[piece.doc][:, piece.positions[piece.keep]] * factor
            tensors.append(layers)
            grads.append(xp2torch(d_layers, device=layers.device))
        torch.autograd.backward(tensors, grads)
        for name, param in trained.items():
            if param.grad is not None:
                model.inc_grad(name, _as_ops_array(model.ops, param.grad.clone()))
                param.grad = None
        return []

    return outputs, backprop


def _token_budget(component: Any) -> int:
    return int(component.backend.token_budget)


def _run(bilm: BiLM, sentences: list[list[str]]) -> torch.Tensor:
    """``(n_layers + 1, batch, longest, width)`` layers of the sentences, each with its own ``<S>`` / ``</S>``."""
    longest = max(len(s) for s in sentences)
    ids = [bilm.token_encoder.token_ids(s) for s in sentences]
    device = next(bilm.parameters()).device
    char_ids = torch.zeros((len(sentences), longest, ids[0].shape[1]), dtype=torch.long)
    for row, sentence_ids in enumerate(ids):
        char_ids[row, : len(sentence_ids)] = torch.as_tensor(sentence_ids)
    layers, _mask, _state = bilm(char_ids.to(device))
    return layers
