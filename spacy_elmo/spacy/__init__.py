"""spaCy v3 front end: the ``elmo`` pipeline component, its extensions, hooks and model loader."""
from .architectures import ElmoModelRef, elmo_bilm_v1
from .extensions import install_extensions
from .hooks import set_hooks
from .layers import elmo_scalar_mix_v1
from .pipeline_component import DEFAULT_CONFIG_STR, ElmoComponent, make_elmo

__all__ = ["DEFAULT_CONFIG_STR", "ElmoComponent", "ElmoModelRef", "elmo_bilm_v1", "elmo_scalar_mix_v1", "install_extensions", "make_elmo", "set_hooks"]
