"""Train and fine-tune ELMo biLMs on raw text; export them in the standard options.json + HDF5 layout.

The public names are imported on first use (PEP 562): ``spacy_elmo.train.config`` and the command line's
argument checks do not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..groundwork.lazy_exports import lazy_exports

if TYPE_CHECKING:  # pragma: no cover
    from .config import TrainConfig
    from .corpus.batching import Vocabulary
    from .corpus.sentences import Source, make_sources
    from .network.language_model import LanguageModel
    from .network.presets import PRESETS, build_options
    from .run.evaluation import evaluate, load_language_model, perplexity_on
    from .run.trainer import Trainer, train

# each public name -> the module that defines it, imported when the name is first used (no name here is also a
# submodule's: ``from spacy_elmo.train import evaluate`` is the function, whatever was imported before)
_HOMES = {
    "PRESETS": ".network.presets",
    "LanguageModel": ".network.language_model",
    "Source": ".corpus.sentences",
    "TrainConfig": ".config",
    "Trainer": ".run.trainer",
    "Vocabulary": ".corpus.batching",
    "build_options": ".network.presets",
    "evaluate": ".run.evaluation",
    "load_language_model": ".run.evaluation",
    "make_sources": ".corpus.sentences",
    "perplexity_on": ".run.evaluation",
    "train": ".run.trainer",
}

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


__getattr__, __dir__ = lazy_exports(__name__, _HOMES, globals())
