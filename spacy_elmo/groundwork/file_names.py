"""The names of the files the package writes or reads in its folders, the one place they are spelled (a model
folder's, a training run's, a prepared corpus's), and :data:`PathLike`, what the package takes as a file's path.

A folder that one module owns keeps its names there: the spaCy component's save in ``spacy/saved_model.py``, an
adaptation's in ``spacy/adapt.py``, the disk cache's in ``runtime/embedding/cache.py``. A foreign format's own names
stay with its one reader: ELMoForManyLangs' ``config.json``, ``char.dic``, ... in ``bilm/manylangs_reader.py``; the
download cache's bookkeeping suffixes in ``sources/download.py``.
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
