"""One training run: ``spacy-elmo train``'s arguments as its config, the runner of one or N processes, the trainer,
where a fine-tuning run starts, perplexity, and what a run writes into its output folder."""
