"""The front ends' and the backend's defaults, typed once: batches, windows, the per-call token bound, precision,
the layer mix and the caches.

Every front end (the spaCy component and its config, ``ElmoVectorizer``, ``embed_file`` and the
CLI, ``spacy_elmo.dask``, ``spacy_elmo.hub``, the similarity demo, ``mix_layers``) and the backend
(``ElmoBackend``, its caches) take their defaults from here, so a default changes in one place
(tests/runtime/test_settings.py fails on a default spelled as a literal instead). Not here: the compat
modules' defaults, which are those of the tools they
stand in for (simple_elmo's ``max_batch_size=32``); training's, in ``train/config.py``; internal
tuning with no setting of its own (the disk cache's busy timeout, ``spacy/pipeline_component``'s
``INIT_EMBED_DOCS``), next to the code it tunes.
"""

from __future__ import annotations

DEFAULT_BATCH_SIZE = 64  # sentences (or windows) per biLM batch
DEFAULT_PIPE_BATCH_SIZE = 128  # docs per batch in the spaCy component's pipe (their sentences share biLM batches)
DEFAULT_TOKEN_BUDGET = 4096  # padded tokens per biLM batch (longest sentence x rows): ElmoBackend.token_budget
DEFAULT_MAX_LENGTH = 128  # longest biLM input in tokens: longer sequences are cut into overlapping windows
DEFAULT_OVERLAP = 32  # tokens shared by neighbouring windows
MAX_TOKENS_PER_CALL = 16384  # tokens handed to the backend at once: bounds the memory of raw layers on huge inputs
DEFAULT_DTYPE = "float32"  # the biLM's precision; None in ElmoVectorizer and dask means this one
DEFAULT_LAYERS = "average"  # the layer mix: equal weights over all layers (runtime/features/mix.py)
DEFAULT_GAMMA = 1.0  # the mix's scale (and the initial gamma of the spaCy mix layers)
DEFAULT_MEMORY_MB = 256.0  # the backend's in-memory LRU of sentence activations, MiB (load_bilm's cache_mb)
DEFAULT_DISK_MB = 4096.0  # the disk cache's bound, MiB (disk_cache_mb; SPACY_ELMO_CACHE_MB overrides it)
DEFAULT_TOKEN_CACHE = 20000  # char-CNN token vectors kept between batches (token_cache_size)
DEFAULT_POOLING = "mean"  # how ElmoVectorizer and spacy_elmo.dask pool token vectors into one row per text
