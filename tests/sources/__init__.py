"""Tests of spacy_elmo/sources/: what a model name means, the bundled and published models, downloads."""
