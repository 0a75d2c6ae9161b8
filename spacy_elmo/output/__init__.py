"""Output files: `spacy-elmo embed` and AllenNLP's `embed_file` HDF5 layout, written through a guard
that turns a failed write into a named error."""
