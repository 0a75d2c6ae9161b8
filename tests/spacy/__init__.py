"""Tests of spacy_elmo/spacy/: the elmo component, its layers, saving, adaptation and `spacy train`."""
