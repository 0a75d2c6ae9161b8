"""Tests of spacy_elmo/groundwork/: file names and whole-file writes, excerpts, feature probes."""
