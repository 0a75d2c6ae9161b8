"""Tests of spacy_elmo/output/: embedding files (`spacy-elmo embed`)."""
