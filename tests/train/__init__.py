"""Tests of spacy_elmo/train/: training a biLM, its data, devices, precisions and files."""
