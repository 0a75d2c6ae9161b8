"""The ELMo biLM in PyTorch (no spaCy or scikit-learn imports here)."""

from .chars import batch_to_char_ids, token_to_char_ids, tokens_to_char_ids
from .model import BiLM, BiLMOptions
from .weights import WeightFileError, load_model, read_options, save_model

__all__ = [
    "BiLM",
    "BiLMOptions",
    "WeightFileError",
    "batch_to_char_ids",
    "load_model",
    "read_options",
    "save_model",
    "token_to_char_ids",
    "tokens_to_char_ids",
]
