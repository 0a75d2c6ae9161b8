"""spaCy v3 front end: the ``elmo`` pipeline component, its extensions, hooks, model loader, position getter,
the trainable mix and the fine-tuning layer."""

from .architectures import (
    ElmoModelRef,
    elmo_bilm_v1,
    elmo_fine_tune_v1,
    elmo_scalar_mix_v1,
    elmo_scalar_mix_v2,
)
from .extensions import StaleLayersError, install_extensions, stored_layers
from .hooks import NoElmoLayersWarning, set_hooks
from .mix_layer import LearnedMix, learned_mix
from .pipeline_component import DEFAULT_CONFIG_STR, ElmoComponent, make_elmo, sentence_positions

__all__ = [
    "DEFAULT_CONFIG_STR",
    "ElmoComponent",
    "ElmoModelRef",
    "LearnedMix",
    "NoElmoLayersWarning",
    "StaleLayersError",
    "elmo_bilm_v1",
    "elmo_fine_tune_v1",
    "elmo_scalar_mix_v1",
    "elmo_scalar_mix_v2",
    "install_extensions",
    "learned_mix",
    "make_elmo",
    "sentence_positions",
    "set_hooks",
    "stored_layers",
]
