"""The text a run trains on: text files' layouts, their sentences of tokens, the vocabulary and the batches, and
prepared corpora (``spacy-elmo prepare-corpus`` writes them, :mod:`.shards` reads them back as batches)."""
