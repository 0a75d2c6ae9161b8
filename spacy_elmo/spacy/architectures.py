"""Registered, versioned names a ``config.cfg`` can use: the model loader and the scalar-mix architectures.

``@misc = "spacy_elmo.ElmoBiLM.v1"`` names an ELMo model; ``@architectures =
"spacy_elmo.ElmoScalarMix.v2"`` is the trainable mix (``v1`` stays for configs and pipelines
saved with it). setup.cfg's ``spacy_misc`` / ``spacy_architectures`` entry points let spaCy find
them in a process that has not imported spacy_elmo.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple, Union

import torch
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Model
from thinc.types import Floats2d

from ..backend import ElmoBackend, load_bilm
from ..model_files import is_default, is_remote, resolve_model_files
from .layers import LEARNED, LayerChoice, build_scalar_mix


@dataclass(frozen=True)
class ElmoModelRef:
    """Where an ELMo model lives: a directory, ``"default"`` (the bundled model), a published name, an archive or URL.

    Nothing is read until :meth:`load`, so ``spacy.load`` of a saved pipeline never touches the
    original directory (the pipeline carries its own copy, or a reference for default/published models).
    """

    path: str = "default"

    @property
    def is_default(self) -> bool:
        """True for the bundled default model (saved pipelines store only a reference to it)."""
        return is_default(self.path)

    @property
    def is_remote(self) -> bool:
        """True for a published model name or a URL: saved pipelines store the reference, fetched on first use."""
        return is_remote(self.path)

    def files(self) -> Tuple[Path, Path]:
        """The resolved ``(options.json, weights)`` paths; ``WeightFileError`` names what is missing."""
        return resolve_model_files(self.path)

    def load(self, device: Union[None, str, torch.device] = None, dtype: Optional[str] = None) -> ElmoBackend:
        """The shared :class:`ElmoBackend` for this model on ``device`` in ``dtype`` (loaded once per process)."""
        return load_bilm(self.path, device=device, dtype=dtype)


@registry.misc("spacy_elmo.ElmoBiLM.v1")
def elmo_bilm_v1(path: str = "default") -> ElmoModelRef:
    """The ELMo biLM ``path``: a directory (options.json + one .hdf5), ``"default"``, a published name, an archive or URL."""
    return ElmoModelRef(str(path))


def as_model_ref(model: Union[str, "ElmoModelRef", None]) -> ElmoModelRef:
    """Accept a model reference or a plain directory string / ``"default"`` (as in ``config={"model": ...}``)."""
    if isinstance(model, ElmoModelRef):
        return model
    if model is None:
        return ElmoModelRef()
    if isinstance(model, (str, Path)):
        return ElmoModelRef(str(model))
    raise TypeError(f"model={model!r}: expected a directory path, 'default' or spacy_elmo.ElmoBiLM.v1")


def optional_device(device: Optional[str]) -> Optional[str]:
    """Normalise the config's ``device`` (``None``/``""`` mean CPU)."""
    return None if device in (None, "") else str(device)


@registry.architectures("spacy_elmo.ElmoScalarMix.v2")
def elmo_scalar_mix_v2(
    layers: LayerChoice = LEARNED,
    gamma: float = 1.0,
    dropout: float = 0.5,
    l2_coef: float = 0.001,
    do_layer_norm: bool = False,
    anchor_gamma: bool = True,
    upstream: str = "*",
) -> Model[List[Doc], List[Floats2d]]:
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
def elmo_scalar_mix_v1(width: int, n_layers: int, gamma: float = 1.0) -> Model[List[Doc], List[Floats2d]]:
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
