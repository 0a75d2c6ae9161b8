"""Drop-in replacements for other ELMo libraries' APIs, on this package's biLM.

``spacy_elmo.compat.allennlp``: AllenNLP 0.9's ELMo (``Elmo``, ``batch_to_ids``, ``ElmoEmbedder``,
the ``allennlp elmo`` command). Plain PyTorch: nothing here imports AllenNLP, spaCy or scikit-learn.
"""
