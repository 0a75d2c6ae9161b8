"""Train and fine-tune ELMo biLMs on raw text; export them in the standard options.json + HDF5 layout."""

from .batching import Vocabulary
from .corpus import Source, make_sources
from .evaluate import evaluate, load_language_model, perplexity_on
from .network import LanguageModel
from .presets import PRESETS, build_options
from .trainer import TrainConfig, Trainer, train

__all__ = [
    "PRESETS",
    "LanguageModel",
    "Source",
    "TrainConfig",
    "Trainer",
    "Vocabulary",
    "build_options",
    "evaluate",
    "load_language_model",
    "make_sources",
    "perplexity_on",
    "train",
]
