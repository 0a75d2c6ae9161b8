"""Tests of the command line (spacy_elmo/cli/) and the package's `python -m` entry points."""
