"""Tests of spacy_elmo/bilm/: the model, its inference path and engines, its files and precisions."""
