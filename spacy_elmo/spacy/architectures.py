"""Registered, versioned names a ``config.cfg`` can use: the model loader and the scalar mix.

``@misc = "spacy_elmo.ElmoBiLM.v1"`` names an ELMo model; ``@architectures =
"spacy_elmo.ElmoScalarMix.v2"`` is the trainable mix (``v1`` stays for configs and pipelines
saved with it); ``@architectures = "spacy_elmo.ElmoFineTune.v1"`` is the same mix over the
layer's own copy of the biLM, whose chosen parts the task's gradient trains. The component's own default,
``@misc = "spacy_elmo.sentence_positions.v1"``, is registered beside it (``pipeline_component.py``), as spaCy
registers spancat's suggesters beside spancat. pyproject.toml's
``spacy_misc`` / ``spacy_architectures`` entry points let spaCy find
them in a process that has not imported spacy_elmo.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Union

from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import CupyOps, Model, get_current_ops
from thinc.types import Floats2d
from thinc.util import get_torch_default_device

from ..runtime.configuration.defaults import DEFAULT_GAMMA
from ..runtime.embedding.backend import ElmoBackend, load_bilm
from ..sources.model_paths import (
    bundled_name,
    check_model_folder,
    check_model_name,
    is_default,
    is_remote,
    resolve_model_files,
)
from .mix_layer import LEARNED, LayerChoice, build_scalar_mix

if TYPE_CHECKING:
    import torch  # torch is imported where a fine-tuning layer is built (fine_tune.py), never at import


@dataclass(frozen=True)
class ElmoModelRef:
    """Where an ELMo model lives: a directory, ``"default"`` (the bundled model) or a bundled version's name
    (``"default-v1"``), a published name, an archive or URL.

    Nothing is read until :meth:`load`, so ``spacy.load`` of a saved pipeline never reads the original
    directory (the pipeline carries its own copy, or a reference for default/published models); only a
    mistyped model name and a folder that is there but holds no model (its files' names) are refused at once
    (:func:`~spacy_elmo.sources.model_paths.check_model_name`,
    :func:`~spacy_elmo.sources.model_paths.check_model_folder`).
    """

    path: str = "default"

    def __post_init__(self) -> None:
        check_model_name(self.path)  # a mistyped name ("orignal") fails at add_pipe, not at the first doc
        check_model_folder(self.path)  # so does a folder that holds no model (its files' names only)

    @property
    def is_default(self) -> bool:
        """True for the bundled default model (saved pipelines store only a reference to it)."""
        return is_default(self.path)

    @property
    def bundled_name(self) -> Optional[str]:
        """``"default"`` or a bundled version's name (``"default-v1"``) for a bundled model, else ``None``."""
        return bundled_name(self.path)

    @property
    def is_remote(self) -> bool:
        """True for a published model name or a URL: saved pipelines store the reference, fetched on first use."""
        return is_remote(self.path)

    def files(self) -> tuple[Path, Path]:
        """The resolved ``(options.json, weights)`` paths; ``WeightFileError`` names what is missing."""
        return resolve_model_files(self.path)

    def load(self, device: Union[str, "torch.device", None] = None, precision: Optional[str] = None) -> ElmoBackend:
        """The shared :class:`ElmoBackend` for this model on ``device`` in ``precision`` (loaded once per process);
        ``device=None``: thinc's current ops' device (:func:`component_device`)."""
        return load_bilm(self.path, device=component_device(device), precision=precision)


@registry.misc("spacy_elmo.ElmoBiLM.v1")
def elmo_bilm_v1(path: str = "default") -> ElmoModelRef:
    """The ELMo biLM ``path``: a directory (options.json + one .hdf5, or an ELMoForManyLangs model), ``"default"``,
    a published name, an archive or URL."""
    return ElmoModelRef(str(path))


def as_model_ref(model: Union[str, ElmoModelRef, None]) -> ElmoModelRef:
    """Accept a model reference or a plain directory string / ``"default"`` (as in ``config={"model": ...}``)."""
    if isinstance(model, ElmoModelRef):
        return model
    if model is None:
        return ElmoModelRef()
    if isinstance(model, (str, Path)):
        return ElmoModelRef(str(model))
    raise TypeError(f"model={model!r}: expected a directory path, 'default' or spacy_elmo.ElmoBiLM.v1")


def component_device(device: Union[str, "torch.device", None]) -> Union[str, "torch.device", None]:
    """The torch device an ``elmo`` component loads its biLM on: ``device`` when set; for ``None``, the device of
    thinc's current ops, so ``spacy.require_gpu()`` / ``spacy train --gpu-id N`` put the biLM on that GPU.

    Under ``CupyOps``: ``"cuda:N"``, thinc's own choice of torch device (the GPU ``require_gpu`` made current for
    CuPy and torch alike); under any other ops (numpy, Apple's MPS): ``None``, the CPU.
    """
    if device is not None:
        return device
    if not isinstance(get_current_ops(), CupyOps):
        return None
    try:
        return str(get_torch_default_device())
    except (AssertionError, RuntimeError) as err:  # torch without CUDA: an AssertionError; no GPU: a RuntimeError
        raise ValueError(
            f"thinc's current ops are CupyOps (spacy.require_gpu() or spacy train --gpu-id), but torch sees no CUDA "
            f'device ({err}): install a CUDA build of torch, or set the elmo component\'s device = "cpu"'
        ) from err


@registry.architectures("spacy_elmo.ElmoScalarMix.v2")
def elmo_scalar_mix_v2(
    layers: LayerChoice = LEARNED,
    gamma: float = DEFAULT_GAMMA,
    dropout: float = 0.5,
    l2_coef: float = 0.001,
    do_layer_norm: bool = False,
    anchor_gamma: bool = True,
    upstream: str = "*",
) -> Model[list[Doc], list[Floats2d]]:
    """ELMo's task-specific mix ``gamma * sum_j w_j h_j`` as a tok2vec layer; width and layers come from the model.

    layers (str | int): "mix" = learned w = softmax(s) (the paper); or fixed: "average", "top", a layer index
        (0 = the context-free token layer; negative counts from the top). gamma is learned in every case.
    gamma (float): initial gamma.
    dropout (float): dropout on the mixed vectors while training (0.5: AllenNLP's Elmo default).
    l2_coef (float): the paper's regulariser lambda * ||s||^2 on the mix scalars, added once per update; it
        pulls the weights toward equal (0.001: the paper's small lambda, preferred in its Table 2; 0 turns it off).
    do_layer_norm (bool): normalise each layer of each doc to mean 0, variance 1 before mixing (AllenNLP's option).
    anchor_gamma (bool): the optimizer's L2 / weight decay pulls gamma toward its initial value, not toward 0.
    upstream (str): name of the elmo component to read from; "*" = the one before this component.
    """
    return build_scalar_mix(
        layers=layers,
        gamma=gamma,
        dropout=dropout,
        l2_coef=l2_coef,
        do_layer_norm=do_layer_norm,
        anchor_gamma=anchor_gamma,
        upstream=upstream,
    )


@registry.architectures("spacy_elmo.ElmoScalarMix.v1")
def elmo_scalar_mix_v1(width: int, n_layers: int, gamma: float = DEFAULT_GAMMA) -> Model[list[Doc], list[Floats2d]]:
    """The learned mix with the model's ``width`` (2 x projection_dim) and ``n_layers`` stated; superseded by v2.

    No dropout, regulariser or layer norm; the optimizer's L2 pulls gamma toward 0. Kept so configs and
    pipelines saved with v1 load and predict as before.
    """
    if width < 1 or n_layers < 0:
        raise ValueError(f"width={width}, n_layers={n_layers}: expected width >= 1 and n_layers >= 0")
    return build_scalar_mix(
        layers=LEARNED,
        gamma=gamma,
        dropout=0.0,
        l2_coef=0.0,
        do_layer_norm=False,
        anchor_gamma=False,
        upstream="*",
        width=width,
        n_outputs=n_layers + 1,
    )


@registry.architectures("spacy_elmo.ElmoFineTune.v1")
def elmo_fine_tune_v1(
    trainable: str = "top",
    grad_factor: float = 1.0,
    learn_rate_factor: float = 0.05,
    layers: LayerChoice = LEARNED,
    gamma: float = DEFAULT_GAMMA,
    dropout: float = 0.5,
    l2_coef: float = 0.001,
    anchor_gamma: bool = True,
    upstream: str = "*",
) -> Model[list[Doc], list[Floats2d]]:
    """ElmoScalarMix.v2's mix over the layer's own float32 copy of the biLM, fine-tuned end to end with the task.

    trainable (str): the biLM parts the task's gradient trains: "none" (frozen, as ElmoScalarMix.v2), "top" (the
        top LSTM layer of each direction), "lstm" (every LSTM layer), "all" (the char CNN too).
    grad_factor (float): scales the gradient that reaches the biLM (as spacy-transformers' grad_factor; 0 = frozen).
    learn_rate_factor (float): the biLM's learning rate as a fraction of the task's (discriminative fine-tuning);
        with Adam, spaCy's default, the biLM's weights move by this fraction of the task layers' step.
    layers, gamma, dropout, l2_coef, anchor_gamma, upstream: as in ElmoScalarMix.v2 (dropout is on the ELMo
        vectors, as the paper's; no layer norm).
    The biLM comes from the ``elmo`` component's model files (precision "float32"); the shared backend other
    pipelines use is never changed. The trained arrays are saved with the pipeline.
    """
    from .fine_tune import build_fine_tune  # torch and thinc's torch bridge: only for a fine-tuning layer

    mix = build_scalar_mix(
        layers=layers,
        gamma=gamma,
        dropout=dropout,
        l2_coef=l2_coef,
        do_layer_norm=False,
        anchor_gamma=anchor_gamma,
        upstream=upstream,
    )
    return build_fine_tune(trainable=trainable, grad_factor=grad_factor, learn_rate_factor=learn_rate_factor, mix=mix)
