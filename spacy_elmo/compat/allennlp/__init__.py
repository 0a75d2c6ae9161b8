"""AllenNLP 0.9's ELMo API on this package's biLM: change the import line, keep the numbers.

::

    # from allennlp.modules.elmo import Elmo, batch_to_ids
    # from allennlp.commands.elmo import ElmoEmbedder
    from spacy_elmo.compat.allennlp import Elmo, ElmoEmbedder, batch_to_ids

Plain PyTorch: nothing here imports AllenNLP, spaCy or scikit-learn. The defaults reproduce
AllenNLP's outputs to float32 rounding, its stateful LSTM included (each batch row's state is
carried to the next call; ``reset_states()`` forgets it); ``stateful=False`` gives this package's
batch-invariant vectors instead. See docs/migrating-from-allennlp.md.
"""

from .command import main
from .embedder import DEFAULT_BATCH_SIZE, DEFAULT_OPTIONS_FILE, DEFAULT_WEIGHT_FILE, ElmoEmbedder
from .modules import Elmo, ElmoTokenEmbedder, ScalarMix, _ElmoBiLm, _ElmoCharacterEncoder
from .stateful_lstm import ElmoLstm
from .util import ConfigurationError, add_sentence_boundary_token_ids, batch_to_ids, remove_sentence_boundaries

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_OPTIONS_FILE",
    "DEFAULT_WEIGHT_FILE",
    "ConfigurationError",
    "Elmo",
    "ElmoEmbedder",
    "ElmoLstm",
    "ElmoTokenEmbedder",
    "ScalarMix",
    "_ElmoBiLm",
    "_ElmoCharacterEncoder",
    "add_sentence_boundary_token_ids",
    "batch_to_ids",
    "main",
    "remove_sentence_boundaries",
]
