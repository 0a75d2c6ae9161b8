"""The names of the files the package writes or reads in its folders, the one place they are spelled (a model
folder's, a training run's, a prepared corpus's, an adaptation's, the spaCy component's save, the disk cache), and
:data:`PathLike`, what the package takes as a file's path.

A foreign format's own names stay with its one reader: ELMoForManyLangs' ``config.json``, ``char.dic``, ... in
``manylangs_reader.py``; the download cache's bookkeeping suffixes in ``sources/download.py``.
Lives in ``bilm/`` because the weight files are read and written here; everything else imports them from here.
"""

from __future__ import annotations

import os
from typing import Union

PathLike = Union[str, "os.PathLike[str]"]


# a model folder
OPTIONS = "options.json"
WEIGHTS = "weights.hdf5"
WEIGHT_NAMES = (
    WEIGHTS,
    "lm_weights.hdf5",
    "model.hdf5",
)  # looked for in this order (model.hdf5: NLPL zips); else the only *.hdf5
VOCAB = "vocab.txt"
METRICS = "metrics.json"
MODEL_CARD = "README.md"  # the model card of a trained model (train/output_folder/model_card.py)
# a training run: the model folder's files, and
CHECKPOINT = "checkpoint.safetensors"
SOFTMAX = "softmax.safetensors"
LEGACY_CHECKPOINT = "checkpoint.pt"  # older versions' pickles: refused by name, never read
LEGACY_SOFTMAX = "softmax.pt"
# a prepared corpus (train/corpus/prepare.py writes it, train/corpus/shards.py reads it)
CORPUS_MANIFEST = "corpus.json"
CORPUS_COUNTS = "counts.tsv"
SHARD_NAME = "shard-{index:05d}.txt"  # the index-th shard (train.corpus.shards.shard_name)
SOURCE_INFO = "source-info.json"  # provenance (repository, commit, licence, ...) beside a source's text
# a domain adaptation's output folder (spacy/adapt.py), besides the training run's files
ADAPTATION = "adaptation.json"  # what was adapted on, perplexity before / after
ADAPT_TEXT_DIR = "task_text"  # the docs' text, one doc per line, in:
ADAPT_TRAIN_TEXT = "train.txt"
ADAPT_DEV_TEXT = "dev.txt"
# the spaCy component's saved model folder: where its model's files are, and their fingerprints
COMPONENT_MODEL = "model.json"
# the disk cache of sentence activations (runtime/cache.py), in its directory
DISK_CACHE = "embeddings.sqlite3"
