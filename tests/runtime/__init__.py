"""Tests of spacy_elmo/runtime/: the backend, caches, windows, mix and pooling, tokenizers, logging."""
