"""Tests of spacy_elmo/sklearn.py: ElmoVectorizer."""
