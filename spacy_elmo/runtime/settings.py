"""The front ends' defaults, typed once: batch size, window length and overlap, per-call token bound, precision.

Every front end (the spaCy component and its config, ``ElmoVectorizer``, ``embed_file`` and the
CLI, ``spacy_elmo.dask``, ``spacy_elmo.hub``, the similarity demo, the compat modules) takes its
defaults from here, so a default changes in one place. The values are the ones the front ends
have always used.
"""

from __future__ import annotations

DEFAULT_BATCH_SIZE = 64  # sentences (or windows) per biLM batch
DEFAULT_MAX_LENGTH = 128  # longest biLM input in tokens: longer sequences are cut into overlapping windows
DEFAULT_OVERLAP = 32  # tokens shared by neighbouring windows
MAX_TOKENS_PER_CALL = 16384  # tokens handed to the backend at once: bounds the memory of raw layers on huge inputs
DEFAULT_DTYPE = "float32"  # the biLM's precision; None in ElmoVectorizer and dask means this one
