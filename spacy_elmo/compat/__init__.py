"""Drop-in replacements for the APIs of other ELMo tools, on this package's biLM and backend.

- :mod:`spacy_elmo.compat.allennlp`: AllenNLP 0.9's ELMo (``Elmo``, ``batch_to_ids``, ``ElmoEmbedder``, the
  ``allennlp elmo`` command); plain PyTorch: nothing there imports AllenNLP, spaCy or scikit-learn
- :mod:`spacy_elmo.compat.elmoformanylangs`: ``Embedder`` of HIT-SCIR's ELMoForManyLangs
- :mod:`spacy_elmo.compat.simple_elmo`: ``ElmoModel`` of LTG Oslo's simple_elmo (NLPL models)

Only the import changes; docs/migrating-from-*.md say what is identical and what differs.
"""
