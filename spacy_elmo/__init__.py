"""ELMo contextual word vectors for spaCy v3 and scikit-learn, on one shared PyTorch biLM backend."""

from .about import __version__
from .bilm.weights import WeightFileError
from .runtime.backend import ElmoBackend, load_bilm
from .runtime.mix import layer_weights, mix_layers
from .runtime.pooling import pool

__all__ = [
    "ElmoBackend",
    "ElmoVectorizer",
    "WeightFileError",
    "__version__",
    "layer_weights",
    "load_bilm",
    "mix_layers",
    "pool",
]


def __getattr__(name: str):
    """Import the scikit-learn front end on first use, so ``import spacy_elmo`` does not import sklearn."""
    if name == "ElmoVectorizer":
        from .sklearn import ElmoVectorizer

        return ElmoVectorizer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
