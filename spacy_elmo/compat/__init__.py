"""Drop-in replacements for the APIs of other ELMo tools, on this package's backend.

- :mod:`spacy_elmo.compat.elmoformanylangs`: ``Embedder`` of HIT-SCIR's ELMoForManyLangs
- :mod:`spacy_elmo.compat.simple_elmo`: ``ElmoModel`` of LTG Oslo's simple_elmo (NLPL models)

Only the import changes; docs/migrating-from-*.md say what is identical and what differs.
"""
