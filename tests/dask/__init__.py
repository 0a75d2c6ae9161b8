"""Tests of spacy_elmo/dask.py: embedding on a Dask cluster."""
