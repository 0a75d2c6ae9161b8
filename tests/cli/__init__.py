"""Tests of spacy_elmo/cli.py and the package's `python -m` entry points."""
