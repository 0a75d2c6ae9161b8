"""Tests of spacy_elmo/compat/: the AllenNLP, simple_elmo and ELMoForManyLangs APIs against the peers' numbers."""
