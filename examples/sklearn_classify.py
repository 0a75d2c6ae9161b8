"""Sentence classification with pooled ELMo features vs a TF-IDF baseline (LogisticRegression on both).

    python examples/sklearn_classify.py --dataset trec --model path/to/elmo_dir
    python examples/sklearn_classify.py --dataset sst5 --max-train 2000   # the bundled default model

Datasets are read from ``--data-dir DIR``, a folder holding them as below (by default the spacy-elmo repository's
own copy, ``shared/data`` beside its checkout, where there is one):
``trec`` (TREC-6 coarse question types, 5,452 train / 500 test), ``sst5`` (SST fine-grained
sentiment, 8,544 / 2,210) or ``sst2`` (binary, 6,920 / 1,821). Both are already tokenized
with spaces, so the texts are split on whitespace (``tokenizer=str.split``) rather than re-tokenized.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Optional

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import FeatureUnion, make_pipeline

from spacy_elmo import ElmoVectorizer, WeightFileError, load_bilm

DEFAULT_DATA_DIR = Path(__file__).resolve().parents[2] / "shared" / "data"
Split = tuple[list[str], list[str]]


def read_trec(path: Path) -> Split:
    """``LABEL:fine question ...`` lines; the coarse label is the part before ':' (file is Latin-1)."""
    texts, labels = [], []
    for line in path.read_text(encoding="latin-1").splitlines():
        if line.strip():
            label, text = line.split(" ", 1)
            texts.append(text.strip())
            labels.append(label.split(":", 1)[0])
    return texts, labels


def read_tsv(path: Path) -> Split:
    """``label<TAB>sentence`` lines (SST-5 labels look like ``__label__3``)."""
    texts, labels = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            label, text = line.split("\t", 1)
            texts.append(text.strip())
            labels.append(label.replace("__label__", ""))
    return texts, labels


def load_dataset(name: str, data_dir: Path) -> tuple[Split, Split]:
    if name == "trec":
        return read_trec(data_dir / "trec" / "train_5500.label"), read_trec(data_dir / "trec" / "TREC_10.label")
    if name == "sst5":
        folder = data_dir / "sst" / "sst5_flat"
        return read_tsv(folder / "sst_train.txt"), read_tsv(folder / "sst_test.txt")
    if name == "sst2":
        folder = data_dir / "sst" / "sst2_flat"
        return read_tsv(folder / "sst2_train.tsv"), read_tsv(folder / "sst2_test.tsv")
    raise ValueError(f"unknown dataset {name!r}")


def subsample(texts: list[str], labels: list[str], n: Optional[int], seed: int = 0) -> Split:
    """A seeded random subset of ``n`` examples (the SST files are ordered, so a head would skew the labels)."""
    if n is None or n >= len(texts):
        return texts, labels
    keep = sorted(np.random.default_rng(seed).permutation(len(texts))[:n])
    return [texts[i] for i in keep], [labels[i] for i in keep]


def build_models(args: argparse.Namespace) -> dict:
    """The ELMo pipeline, the TF-IDF baseline and (optionally) both feature sets side by side, one C for all."""

    def elmo(norm: Optional[str] = None) -> ElmoVectorizer:
        return ElmoVectorizer(
            model=args.model,
            layers=args.layers,
            pooling=args.pooling,
            batch_size=args.batch_size,
            device=args.device,
            tokenizer=str.split,
            verbose=True,  # a progress bar while the texts are embedded (the long part of the run)
            norm=norm,
        )

    def logreg() -> LogisticRegression:
        return LogisticRegression(C=args.C, max_iter=3000)

    models = {
        "ELMo + LogisticRegression": make_pipeline(elmo(), logreg()),
        "TF-IDF + LogisticRegression": make_pipeline(TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True), logreg()),
    }
    if args.combined:
        # TF-IDF's rows have unit l2 norm; norm="l2" gives the ELMo rows the same, so neither block outweighs the
        # other (a StandardScaler there gives each ELMo column unit variance: rows about sqrt(n_columns) long)
        both = FeatureUnion(
            [("tfidf", TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True)), ("elmo", elmo(norm="l2"))]
        )
        models["ELMo + TF-IDF + LogisticRegression"] = make_pipeline(both, logreg())
    return models


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", choices=["trec", "sst5", "sst2"], default="trec")
    parser.add_argument(
        "--model", default="default", help="'default', a published name (e.g. original), or an ELMo directory"
    )
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--layers", default="average", help="'average', 'top' or a layer index")
    parser.add_argument("--pooling", default="mean", choices=["mean", "max", "mean+max"])
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--device", default=None, help="e.g. cuda:0 (default: CPU)")
    parser.add_argument("--C", type=float, default=1.0, help="inverse regularisation of LogisticRegression")
    parser.add_argument("--max-train", type=int, default=None, help="a seeded random subset of N training sentences")
    parser.add_argument("--max-test", type=int, default=None, help="a seeded random subset of N test sentences")
    parser.add_argument(
        "--combined",
        action="store_true",
        help="also score TF-IDF and ELMo features side by side (a FeatureUnion with ElmoVectorizer(norm='l2'))",
    )
    args = parser.parse_args()
    if args.layers.lstrip("-").isdigit():
        args.layers = int(args.layers)

    try:  # the data first: reading it takes a moment, loading the model much longer
        (train_x, train_y), (test_x, test_y) = load_dataset(args.dataset, args.data_dir)
    except FileNotFoundError as err:
        parser.exit(
            2,
            (
                f"error: {args.dataset} data not found ({err.filename}; --data-dir is {args.data_dir}).\n"
                f"Point --data-dir at a folder holding trec/train_5500.label + trec/TREC_10.label (TREC-6) or\n"
                f"sst/sst5_flat/sst_train.txt + sst_test.txt (SST-5: 'label<TAB>text' lines).\n"
                f"Public sources: SST-5 via `python -m spacy project assets examples/project --vars.data DIR`\n"
                f"(URLs and checksums in examples/project/project.yml), TREC-6 from GitHub harvardnlp/sent-conv-torch\n"
                f"(data/raw/TREC.train and data/raw/TREC.test, the original train_5500.label and TREC_10.label).\n"
            ),
        )
    try:
        load_bilm(args.model, device=args.device)  # fail early with a clear message; the pipelines share this model
    except WeightFileError as err:
        parser.exit(2, f"error: {err}\n")
    train_x, train_y = subsample(train_x, train_y, args.max_train)
    test_x, test_y = subsample(test_x, test_y, args.max_test)
    sizes = f"{len(train_x)} train / {len(test_x)} test sentences, {len(set(train_y))} classes"
    print(f"{args.dataset}: {sizes}; model={args.model}")
    for name, model in build_models(args).items():
        start = time.perf_counter()
        model.fit(train_x, train_y)
        accuracy = model.score(test_x, test_y)
        print(f"{name:<36} test accuracy {accuracy:.4f}  ({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
