"""Tests of spacy_elmo/hub.py: the TF-Hub-style module."""
