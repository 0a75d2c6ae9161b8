"""What the folders a run writes hold, and how a run holds one: one run per folder (a file lock), the paths its files
record, checkpoint and softmax files without pickle, the stages ``metrics.json`` records, the model card."""
