"""ELMo contextual word vectors for spaCy v3 and scikit-learn, on one shared PyTorch biLM backend.

The public names are imported on first use (PEP 562), so ``import spacy_elmo`` (and the command line, before it
has checked its arguments) does not import torch, spaCy or scikit-learn.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .about import __version__
from .groundwork.lazy_exports import lazy_exports

if TYPE_CHECKING:  # pragma: no cover
    from .bilm.weights import WeightFileError
    from .runtime.embedding.backend import ElmoBackend, load_bilm
    from .runtime.features.mix import layer_weights, mix_layers
    from .runtime.features.pooling import pool
    from .sklearn import ElmoVectorizer

# what a torch-free service of ONNX exports installs (docs/serving.md), as a path pip's -r takes
SERVING_REQUIREMENTS = str(Path(__file__).with_name("serving_requirements.txt"))

# each public name -> the module that defines it, imported when the name is first used
_HOMES = {
    "ElmoBackend": ".runtime.embedding.backend",
    "ElmoVectorizer": ".sklearn",
    "WeightFileError": ".bilm.weights",
    "layer_weights": ".runtime.features.mix",
    "load_bilm": ".runtime.embedding.backend",
    "mix_layers": ".runtime.features.mix",
    "pool": ".runtime.features.pooling",
}

__all__ = [
    "SERVING_REQUIREMENTS",
    "ElmoBackend",
    "ElmoVectorizer",
    "WeightFileError",
    "__version__",
    "layer_weights",
    "load_bilm",
    "mix_layers",
    "pool",
]


__getattr__, __dir__ = lazy_exports(__name__, _HOMES, globals())
