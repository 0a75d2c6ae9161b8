"""Does a model help? Perplexity, TREC-6 / SST-5 accuracy and the two senses of "bank", models side by side.

    python benchmarks/bench_model_quality.py --model default --model MODEL_DIR --json out.json
    python benchmarks/bench_model_quality.py --limit 500   # a quick run on 500 texts of each split

For each ``--model`` (anything ``load_bilm`` and ``ElmoVectorizer`` take: "default", a published name, a folder):

1. WikiText-2 validation and test perplexity (forward, backward, mean), as ``spacy-elmo evaluate MODEL
   valid.txt`` computes it (one line per sentence, whitespace tokens, the model's training length cap), the same
   tokenization for every model; a model without a softmax and vocabulary (a released ELMo) has none and says
   so. ``--splits`` picks the splits (default both).
2. TREC-6 (train 5,452 / test 500, the coarse label) and SST-5 (train 8,544 / test 2,210, sentence level) test
   accuracy of
   - TF-IDF (word 1-2-grams, min_df 2, sublinear tf) + LogisticRegression(C=4): the baseline, no model;
   - StandardScaler + LogisticRegression on ``ElmoVectorizer(model, layers="average")``, pooling "mean" and
     "mean+max", C chosen by 5-fold stratified CV on train from ``ELMO_C``;
   - the same on every layer's own "mean+max" row side by side (a ``FeatureUnion`` of
     ``ElmoVectorizer(model, layers=k, pooling="mean+max")``, k = 0 .. n_layers): the layers unmixed, so that
     the classifier weighs each (the paper's task-specific mix, learned by the linear model);
   - both: the TF-IDF features and the scaled ELMo ("mean") features side by side in one ColumnTransformer,
     C and the ELMo block's weight chosen by the same CV from ``COMBINED_C`` x ``ELMO_WEIGHT``.
   Every accuracy comes with a 95% percentile bootstrap interval over the test texts and McNemar's exact test
   against the TF-IDF baseline on the same texts (p < 0.05: the difference is unlikely to be chance).
3. The senses of "bank" (as ``examples/bank.py`` measures them): per layer, the mean cosine of "bank" between
   two money sentences and between a money and a river sentence, and the gap (money/money - money/river: positive
   when the layer separates the senses). ``senses``: the same over 12 sentences of each sense, with a
   permutation p-value for the gap and how often each "bank" vector's nearest other one has its sense (layer 0
   is context-free: its vectors are all equal, so 0.50 there says nothing).

Prints markdown tables to stdout (progress to stderr); ``--json`` also writes every number. Seeds are fixed
(CV folds and the bootstrap use ``SEED``); nothing is cached on disk (set ``SPACY_ELMO_CACHE_DIR`` to ask for
it). The data is read from ``../shared/data`` beside the checkout (``--data``): see each folder's README.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
SEED = 0
FOLDS = 5
BOOTSTRAP_RESAMPLES = 2000
ELMO_C = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0)
COMBINED_C = (1.0, 4.0, 16.0)
ELMO_WEIGHT = (0.03, 0.1, 0.3, 1.0)  # the scaled ELMo block's weight beside the (L2-normalised) TF-IDF rows
TFIDF_C = 4.0
MAX_ITER = 2000
MONEY = ("The bank will approve your loan .", "She took her savings to the bank .", "The bank raised its rates .")
RIVER = ("They sat on the bank of the river .", "The boat drifted toward the muddy bank .", "Fish swam near the bank .")
# "senses": twelve sentences of each sense, so that a mean is over 66 and 144 pairs, not 3 and 9
MONEY_12 = (
    *MONEY,
    "He opened an account at the bank yesterday .",
    "The bank charged a fee for the transfer .",
    "Robbers broke into the bank at night .",
    "The central bank cut interest rates again .",
    "My bank sent me a new credit card .",
    "The bank lent the company two million dollars .",
    "She works as a teller at the bank .",
    "The bank closed three branches in the city .",
    "They deposited the cheque at the bank on Monday .",
)
RIVER_12 = (
    *RIVER,
    "The children played on the grassy bank of the stream .",
    "Reeds grew along the bank of the lake .",
    "The river overflowed its bank after the storm .",
    "We walked along the north bank of the Thames .",
    "The canoe was pulled up onto the bank .",
    "Willows lined the far bank of the creek .",
    "A heron stood on the bank watching the water .",
    "The soldiers crossed to the east bank of the river .",
    "Erosion has worn away the steep bank .",
)
PERMUTATIONS = 10_000
CHECKS = ("perplexity", "trec", "sst", "bank", "senses")
SPLITS = ("valid", "test")  # the WikiText-2 files perplexity is measured on
DATA_HELP = (
    "no data at {path}: WikiText-2, TREC-6 and SST-5 live in ../shared/data beside the checkout (or pass --data). "
    "WikiText-2 is in GitHub pytorch/examples (word_language_model/data/wikitext-2/), TREC-6 in "
    "harvardnlp/sent-conv-torch (data/raw/TREC.{{train,test}}), SST-5 in prrao87/fine-grained-sentiment "
    "(data/sst/sst_{{train,dev,test}}.txt). Skipping {skipped}."
)


# -- data ------------------------------------------------------------------------------------------


@dataclass
class Task:
    """A text classification task: train and test texts with their labels."""

    name: str
    train_texts: list[str]
    train_labels: list[str]
    test_texts: list[str]
    test_labels: list[str]

    def limited(self, limit: Optional[int], seed: int = SEED) -> Task:
        """``limit`` train and ``limit`` test texts drawn at random (seeded, in file order); all with None.

        Not the first ones: sst_train.txt runs from positive to negative reviews, so its first 5,000 sentences
        hold 5% "very negative" against 13% in the whole file (TF-IDF trained on them: 0.32 on test, not 0.41).
        """
        if limit is None:
            return self
        rng = np.random.default_rng(seed)

        def sample(texts: list[str], labels: list[str]) -> tuple[list[str], list[str]]:
            keep = (
                sorted(rng.choice(len(texts), size=limit, replace=False)) if limit < len(texts) else range(len(texts))
            )
            return [texts[i] for i in keep], [labels[i] for i in keep]

        return Task(self.name, *sample(self.train_texts, self.train_labels), *sample(self.test_texts, self.test_labels))


def read_trec(path: Path) -> tuple[list[str], list[str]]:
    """Questions and their TREC-6 coarse labels (``DESC:manner How did ...`` -> ``DESC``).

    The file is read as Latin-1: train_5500.label has one stray byte (0xF0) that is not UTF-8.
    """
    texts, labels = [], []
    for number, line in enumerate(path.read_text(encoding="latin-1").splitlines(), 1):
        if not line.strip():
            continue
        label, _, text = line.partition(" ")
        coarse, colon, _ = label.partition(":")
        if not colon or not text.strip():
            raise ValueError(f"{path}:{number}: expected 'COARSE:fine question ...', got {line[:60]!r}")
        texts.append(text.strip())
        labels.append(coarse)
    return texts, labels


def read_sst5(path: Path) -> tuple[list[str], list[str]]:
    """Sentences and their SST-5 labels "1".."5" from a ``__label__N<TAB>sentence`` file."""
    texts, labels = [], []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        label, tab, text = line.partition("\t")
        value = label.removeprefix("__label__")
        if not tab or value == label or value not in {"1", "2", "3", "4", "5"}:
            raise ValueError(f"{path}:{number}: expected '__label__1..5<TAB>sentence', got {line[:60]!r}")
        texts.append(text.strip())
        labels.append(value)
    return texts, labels


def trec_task(data: Path) -> Task:
    """TREC-6: train_5500.label / TREC_10.label."""
    train, test = read_trec(data / "trec" / "train_5500.label"), read_trec(data / "trec" / "TREC_10.label")
    return Task("TREC-6", *train, *test)


def sst5_task(data: Path) -> Task:
    """SST-5 at sentence level: train / test of sst5_flat (dev is not used: C is chosen by CV on train)."""
    folder = data / "sst" / "sst5_flat"
    train, test = read_sst5(folder / "sst_train.txt"), read_sst5(folder / "sst_test.txt")
    return Task("SST-5", *train, *test)


# -- statistics ------------------------------------------------------------------------------------


def bootstrap_interval(
    correct: Sequence[bool], resamples: int = BOOTSTRAP_RESAMPLES, seed: int = SEED, level: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap interval of the accuracy over ``resamples`` resamples of the test texts.

    Drawing n texts with replacement from n of which k are right gives Binomial(n, k / n) right ones, so each
    resample's accuracy is drawn as that directly (the same distribution, without an n x resamples index array).
    """
    hits = np.asarray(correct, dtype=bool)
    if hits.size == 0:
        raise ValueError("no predictions to bootstrap")
    rng = np.random.default_rng(seed)
    means = rng.binomial(hits.size, hits.mean(), size=resamples) / hits.size
    low, high = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(low), float(high)


@dataclass
class McNemar:
    """McNemar's exact test on paired predictions: ``only_a`` texts only A got right, ``only_b`` only B."""

    only_a: int
    only_b: int
    p_value: float


def mcnemar(correct_a: Sequence[bool], correct_b: Sequence[bool]) -> McNemar:
    """Exact two-sided McNemar test: under "A and B are as good", the discordant texts split 50/50 (binomial)."""
    a, b = np.asarray(correct_a, dtype=bool), np.asarray(correct_b, dtype=bool)
    if a.shape != b.shape:
        raise ValueError(f"paired predictions differ in length: {a.shape} vs {b.shape}")
    only_a, only_b = int((a & ~b).sum()), int((~a & b).sum())
    n = only_a + only_b
    tail = sum(math.comb(n, k) for k in range(min(only_a, only_b) + 1))
    return McNemar(only_a, only_b, min(1.0, 2 * tail / 2**n))


# -- classifiers -----------------------------------------------------------------------------------


def tfidf() -> Any:
    """The baseline's features: word 1-2-grams seen in 2 texts or more, sublinear term frequency."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    return TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True)


def logistic(c: float = 1.0) -> Any:
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(C=c, max_iter=MAX_ITER)


def cross_validated(pipeline: Any, grid: dict[str, list[Any]]) -> Any:
    """``pipeline`` with the grid's best settings by 5-fold stratified CV accuracy on train (fixed folds)."""
    from sklearn.model_selection import GridSearchCV, StratifiedKFold

    folds = StratifiedKFold(n_splits=FOLDS, shuffle=True, random_state=SEED)
    return GridSearchCV(pipeline, grid, cv=folds, scoring="accuracy", n_jobs=1)


def baseline_pipeline() -> Any:
    from sklearn.pipeline import Pipeline

    return Pipeline([("tfidf", tfidf()), ("lr", logistic(TFIDF_C))])


def elmo_pipeline() -> Any:
    """StandardScaler + LR on ELMo features, C by CV."""
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    return cross_validated(Pipeline([("scale", StandardScaler()), ("lr", logistic())]), {"lr__C": list(ELMO_C)})


def combined_pipeline(elmo_dim: int) -> Any:
    """TF-IDF of the text (column 0) beside the scaled ELMo columns (1 ..), one LR; C and the ELMo weight by CV.

    TF-IDF and the scaler are fitted inside each CV fold (one Pipeline), so no test fold leaks into them.
    """
    from sklearn.compose import ColumnTransformer
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    elmo = list(range(1, elmo_dim + 1))
    features = ColumnTransformer([("tfidf", tfidf(), 0), ("elmo", StandardScaler(), elmo)])
    weights = [{"tfidf": 1.0, "elmo": w} for w in ELMO_WEIGHT]
    grid = {"features__transformer_weights": weights, "lr__C": list(COMBINED_C)}
    return cross_validated(Pipeline([("features", features), ("lr", logistic())]), grid)


def text_and_features(texts: list[str], elmo: np.ndarray) -> np.ndarray:
    """One object array: the text in column 0, the ELMo features after it (the combined pipeline's input).

    A plain array, not a pandas DataFrame: with pyarrow loaded (pandas loads it), this environment's interpreter
    crashed at exit after an OpenMP fit.
    """
    rows = np.empty((len(texts), 1 + elmo.shape[1]), dtype=object)
    rows[:, 0] = texts
    rows[:, 1:] = elmo
    return rows


# -- the model's features --------------------------------------------------------------------------


def elmo_features(model: str, texts: list[str], progress: bool) -> dict[str, np.ndarray]:
    """Pooled ELMo rows: the layer average's "mean" and "mean+max" from one pass ("mean" is the first half of
    "mean+max"), and "per layer": every layer's "mean+max" row, side by side (layer 0 first).

    The first rows are also embedded with ``pooling="mean"`` and compared, so a change of the column order
    would stop the run instead of giving wrong features.
    """
    from sklearn.pipeline import FeatureUnion

    from spacy_elmo.sklearn import ElmoVectorizer

    average = ElmoVectorizer(model=model, layers="average", pooling="mean+max", verbose=progress)
    both = average.fit_transform(texts)
    dim = both.shape[1] // 2
    probe = ElmoVectorizer(model=model, layers="average", pooling="mean").fit_transform(texts[:16])
    if not np.allclose(probe, both[:16, :dim], rtol=1e-5, atol=1e-6):
        raise RuntimeError('pooling="mean+max" no longer starts with the "mean" columns: cannot reuse its rows')
    # each layer's own row: the backend's sentence cache (bounded) spares the passes it still holds, not all
    layers = FeatureUnion(
        [
            (f"layer{k}", ElmoVectorizer(model=model, layers=k, pooling="mean+max"))
            for k in range(len(average.layer_weights_))
        ]
    )
    return {"mean": both[:, :dim], "mean+max": both, "per layer": layers.fit_transform(texts)}


@dataclass
class Scored:
    """One system's test predictions, scored."""

    system: str
    accuracy: float
    interval: tuple[float, float]
    chosen: str
    correct: np.ndarray
    seconds: float

    def as_dict(self, baseline: Optional[Scored]) -> dict[str, Any]:
        row: dict[str, Any] = {
            "system": self.system,
            "accuracy": round(self.accuracy, 4),
            "ci95": [round(x, 4) for x in self.interval],
            "chosen": self.chosen,
            "seconds": round(self.seconds, 1),
        }
        if baseline is not None and baseline is not self:
            test = mcnemar(self.correct, baseline.correct)
            row["vs_tfidf"] = round(self.accuracy - baseline.accuracy, 4)
            row["mcnemar"] = {"only_this": test.only_a, "only_tfidf": test.only_b, "p": float(f"{test.p_value:.3g}")}
        return row


def score(system: str, estimator: Any, x_train: Any, y_train: list[str], x_test: Any, y_test: list[str]) -> Scored:
    """Fit on train, predict test; the interval by bootstrap; the settings CV chose, if any.

    scikit-learn runs on one thread here: on a shared 2-core machine its OpenMP threads' waiting made each
    LogisticRegression fit on TF-IDF features about 15x slower than one thread (53 s vs 3.5 s on SST-5).
    """
    from threadpoolctl import threadpool_limits

    start = time.perf_counter()
    with threadpool_limits(limits=1):
        estimator.fit(x_train, y_train)
        correct = np.asarray(estimator.predict(x_test)) == np.asarray(y_test)
    chosen = ""
    if hasattr(estimator, "best_params_"):
        params = estimator.best_params_
        chosen = f"C={params['lr__C']:g}"
        if "features__transformer_weights" in params:
            chosen += f", ELMo weight {params['features__transformer_weights']['elmo']:g}"
        chosen += f" (CV {estimator.best_score_:.3f})"
    seconds = time.perf_counter() - start
    result = Scored(system, float(correct.mean()), bootstrap_interval(correct), chosen, correct, seconds)
    print(f"  {system}: {result.accuracy:.4f} {chosen} ({seconds:.0f} s)", file=sys.stderr, flush=True)
    return result


def classify(task: Task, models: list[str], progress: bool) -> dict[str, Any]:
    """The baseline once, then each model's ELMo and combined systems, on one task."""
    print(f"{task.name}: train {len(task.train_texts)}, test {len(task.test_texts)}", file=sys.stderr, flush=True)
    y_train, y_test = task.train_labels, task.test_labels
    baseline = score("TF-IDF", baseline_pipeline(), task.train_texts, y_train, task.test_texts, y_test)
    out: dict[str, Any] = {
        "train": len(task.train_texts),
        "test": len(task.test_texts),
        "tfidf": baseline.as_dict(None),
        "models": {},
    }
    for model in models:
        start = time.perf_counter()
        train = elmo_features(model, task.train_texts, progress)
        test = elmo_features(model, task.test_texts, progress)
        embed_seconds = time.perf_counter() - start
        print(f"  {model}: embedded in {embed_seconds:.0f} s", file=sys.stderr, flush=True)
        rows = [
            score(f"ELMo {pooling}", elmo_pipeline(), train[pooling], y_train, test[pooling], y_test)
            for pooling in ("mean", "mean+max")
        ]
        rows.append(
            score("ELMo per layer, mean+max", elmo_pipeline(), train["per layer"], y_train, test["per layer"], y_test)
        )
        combined = combined_pipeline(train["mean"].shape[1])
        x_train = text_and_features(task.train_texts, train["mean"])
        x_test = text_and_features(task.test_texts, test["mean"])
        rows.append(score("TF-IDF + ELMo mean", combined, x_train, y_train, x_test, y_test))
        out["models"][model] = {
            "embed_seconds": round(embed_seconds, 1),
            "systems": [r.as_dict(baseline) for r in rows],
        }
    return out


# -- perplexity and "bank" -------------------------------------------------------------------------


def perplexity(model: str, data: Path, split: str = "test", shared_with: Sequence[str] = ()) -> dict[str, Any]:
    """WikiText-2 perplexity on ``split`` as ``spacy-elmo evaluate`` computes it, or why there is none;
    ``shared_with``: counting only the predictions of words every one of these models' vocabularies holds
    (``--shared-vocab``)."""
    from spacy_elmo.bilm.weights import WeightFileError
    from spacy_elmo.train import evaluate

    start = time.perf_counter()
    try:
        result = evaluate(model, [data / "wikitext-2" / f"{split}.txt"], shared_with=shared_with)
    except WeightFileError as err:
        return {"none": str(err)}
    result = {k: round(v, 3) if isinstance(v, float) else v for k, v in result.items()}
    result["seconds"] = round(time.perf_counter() - start, 1)
    print(f"{model}: {split} perplexity {result}", file=sys.stderr, flush=True)
    return result


def bank_senses(model: str) -> list[dict[str, Any]]:
    """Per layer (and the equal mix): mean cosine of "bank" over money/money pairs and money/river pairs, the gap."""
    from itertools import combinations, product

    from spacy_elmo import load_bilm
    from spacy_elmo.similarity import word_similarity

    backend = load_bilm(model)

    def cosines(pairs: list[tuple[str, str]]) -> dict[str, list[float]]:
        by_layer: dict[str, list[float]] = {}
        for a, b in pairs:
            for label, value in word_similarity(backend, a, b, "bank").layers:
                by_layer.setdefault(label, []).append(value)
        return by_layer

    same, other = cosines(list(combinations(MONEY, 2))), cosines(list(product(MONEY, RIVER)))
    rows = []
    for label in same:
        money, river = float(np.mean(same[label])), float(np.mean(other[label]))
        rows.append({"layer": label, "money/money": round(money, 4), "money/river": round(river, 4),
                     "gap": round(money - river, 4)})  # fmt: skip
    return rows


def bank_senses_12(model: str, seed: int = 0) -> list[dict[str, Any]]:
    """Per layer, over 12 money and 12 river sentences: the mean "bank" cosine of money/money, river/river and
    money/river pairs, the gap money/money - money/river with a permutation p-value (the 24 sentences' senses
    shuffled ``PERMUTATIONS`` times, one-sided), and how often a "bank" vector's nearest other one has its sense."""
    from spacy_elmo import load_bilm
    from spacy_elmo.runtime.embedding.windows import embed_segments
    from spacy_elmo.runtime.features.mix import mix_layers

    backend = load_bilm(model)
    sentences = [s.split() for s in (*MONEY_12, *RIVER_12)]
    sense = np.array([0] * len(MONEY_12) + [1] * len(RIVER_12))
    layers = [layers for _, layers in embed_segments(backend, enumerate(sentences))]
    vectors = {f"layer {k}": np.stack([x[k, s.index("bank")] for x, s in zip(layers, sentences)])
               for k in range(layers[0].shape[0])}  # fmt: skip
    vectors["mix (equal weights)"] = np.stack([mix_layers(x)[s.index("bank")] for x, s in zip(layers, sentences)])
    rng = np.random.default_rng(seed)
    shuffles = [rng.permutation(sense) for _ in range(PERMUTATIONS)]
    money, river = sense == 0, sense == 1
    others = ~np.eye(len(sense), dtype=bool)  # for each vector, the other 23
    rows = []
    for label, v in vectors.items():
        unit = v / np.linalg.norm(v, axis=1, keepdims=True)
        cos = unit @ unit.T
        observed = _sense_gap(cos, sense)
        p = (1 + sum(_sense_gap(cos, labels) >= observed for labels in shuffles)) / (1 + PERMUTATIONS)
        nearest = np.where(others, cos, -np.inf).argmax(axis=1)
        rows.append({
            "layer": label,
            "money/money": round(_mean_within(cos, money), 4),
            "river/river": round(_mean_within(cos, river), 4),
            "money/river": round(float(cos[np.ix_(money, river)].mean()), 4),
            "gap": round(observed, 4),
            "p": round(p, 4),
            "nearest_same_sense": round(float((sense[nearest] == sense).mean()), 3),
        })  # fmt: skip
    return rows


def _mean_within(cos: np.ndarray, members: np.ndarray) -> float:
    """Mean cosine over the pairs of two different ``members`` (``cos``: all pairs, ``members``: a bool mask)."""
    within = cos[np.ix_(members, members)]
    return float(within[~np.eye(len(within), dtype=bool)].mean())


def _sense_gap(cos: np.ndarray, labels: np.ndarray) -> float:
    """Mean cosine over pairs of two sense-0 sentences minus over sense-0 / sense-1 pairs (``cos``: all pairs)."""
    money = labels == 0
    return _mean_within(cos, money) - float(cos[np.ix_(money, ~money)].mean())


# -- report ----------------------------------------------------------------------------------------


def markdown(report: dict[str, Any]) -> str:
    """The tables RESULTS.md holds: perplexity, accuracy per task, "bank" per layer."""
    lines: list[str] = []
    for split, by_model in report.get("perplexity", {}).items():
        lines += [
            f"| model | WikiText-2 {split} ppl forward | backward | mean | predicted tokens |",
            "|---|---|---|---|---|",
        ]
        for model, ppl in by_model.items():
            if "none" in ppl:
                lines.append(f"| {model} | no softmax | - | - | - |")
            else:
                values = f"{ppl['forward']:.2f} | {ppl['backward']:.2f} | {ppl['mean']:.2f} | {ppl['predictions']:,}"
                lines.append(f"| {model} | {values} |")
        lines.append("")
    for split, by_model in report.get("perplexity_shared", {}).items():
        lines += [
            f"The same on {split}, counting only the predictions of words every model's vocabulary holds "
            "(and sentence ends):",
            "",
            "| model | forward | backward | mean | predicted tokens counted |",
            "|---|---|---|---|---|",
        ]
        for model, ppl in by_model.items():
            values = f"{ppl['forward']:.2f} | {ppl['backward']:.2f} | {ppl['mean']:.2f} | {ppl['predictions']:,}"
            lines.append(f"| {model} | {values} |")
        lines.append("")
    for task in ("TREC-6", "SST-5"):
        if task not in report.get("tasks", {}):
            continue
        result = report["tasks"][task]
        lines += [
            f"{task} (train {result['train']:,}, test {result['test']:,}): test accuracy [95% bootstrap interval]",
            "",
            "| features | model | accuracy | 95% interval | vs TF-IDF | McNemar p (only this / only TF-IDF right) "
            "| chosen by 5-fold CV |",
            "|---|---|---|---|---|---|---|",
        ]
        base = result["tfidf"]
        lines.append(
            f"| TF-IDF + LR (C={TFIDF_C:g}) | - | {base['accuracy']:.3f} | {_interval(base)} | - | - | fixed |"
        )
        for model, systems in result["models"].items():
            for row in systems["systems"]:
                test = row["mcnemar"]
                lines.append(
                    f"| {row['system']} | {model} | {row['accuracy']:.3f} | {_interval(row)} | {row['vs_tfidf']:+.3f} "
                    f"| {test['p']:.3g} ({test['only_this']} / {test['only_tfidf']}) | {row['chosen']} |"
                )
        lines.append("")
    if "bank" in report:
        lines += ['"bank": mean cosine over money/money pairs and money/river pairs', ""]
        lines += ["| model | layer | money/money | money/river | gap |", "|---|---|---|---|---|"]
        for model, rows in report["bank"].items():
            for row in rows:
                values = f"{row['money/money']:.3f} | {row['money/river']:.3f} | {row['gap']:+.3f}"
                lines.append(f"| {model} | {row['layer']} | {values} |")
    if "senses" in report:
        lines += [
            "",
            f'"bank" over {len(MONEY_12)} money and {len(RIVER_12)} river sentences: mean cosines, the gap '
            f"money/money - money/river (p: {PERMUTATIONS:,} shuffles of the senses), nearest other same sense",
            "",
        ]
        lines += ["| model | layer | money/money | river/river | money/river | gap (p) | nearest same sense |",
                  "|---|---|---|---|---|---|---|"]  # fmt: skip
        for model, rows in report["senses"].items():
            for row in rows:
                lines.append(
                    f"| {model} | {row['layer']} | {row['money/money']:.3f} | {row['river/river']:.3f} | "
                    f"{row['money/river']:.3f} | {row['gap']:+.3f} ({row['p']:.3g}) | {row['nearest_same_sense']:.2f} |"
                )
    return "\n".join(lines)


def _interval(row: dict[str, Any]) -> str:
    low, high = row["ci95"]
    return f"[{low:.3f}, {high:.3f}]"


def environment() -> dict[str, Any]:
    """The CPU, torch, scikit-learn, the commit and the date the figures came from."""
    import sklearn
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench import cpu_description

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return {
        "cpu": cpu_description(),
        "torch": torch.__version__,
        "scikit-learn": sklearn.__version__,
        "commit": commit.stdout.strip() or "unknown",
        "utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "command": " ".join(["benchmarks/bench_model_quality.py", *sys.argv[1:]]),
    }


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", action="append", help="a model (repeat to compare; default: the bundled one)")
    parser.add_argument("--data", type=Path, default=DATA, help="the shared data folder (default ../shared/data)")
    parser.add_argument("--limit", type=int, help="only N train and N test texts of each task (a seeded sample)")
    parser.add_argument("--checks", default=",".join(CHECKS), help=f"comma-separated subset of {','.join(CHECKS)}")
    parser.add_argument("--splits", default=",".join(SPLITS), help="WikiText-2 splits for perplexity (valid,test)")
    parser.add_argument("--json", type=Path, help="also write every number here")
    parser.add_argument("--progress", action="store_true", help="a progress bar while embedding")
    args = parser.parse_args(argv)
    models = args.model or ["default"]
    checks = [c for c in args.checks.split(",") if c]
    unknown = sorted(set(checks) - set(CHECKS))
    if unknown:
        parser.error(f"unknown check(s) {unknown}: choose from {','.join(CHECKS)}")
    splits = [s for s in args.splits.split(",") if s]
    if not splits or set(splits) - set(SPLITS):
        parser.error(f"--splits {args.splits!r}: choose from {','.join(SPLITS)}")
    if args.limit is not None and args.limit < FOLDS * 6:
        parser.error(f"--limit {args.limit}: too few texts for {FOLDS}-fold CV over 6 classes (30 or more)")
    if not args.data.is_dir():
        skipped = [c for c in checks if c not in ("bank", "senses")]
        print(DATA_HELP.format(path=args.data, skipped=", ".join(skipped) or "nothing"), file=sys.stderr)
        checks = [c for c in checks if c in ("bank", "senses")]
    report: dict[str, Any] = {"environment": environment(), "limit": args.limit, "models": models}
    if "perplexity" in checks:
        report["perplexity"] = {
            split: {model: perplexity(model, args.data, split) for model in models} for split in splits
        }
        trained = [model for model in models if "none" not in report["perplexity"][splits[0]][model]]
        if len(trained) > 1:  # other vocabularies: also on the predictions of the words all of them know
            report["perplexity_shared"] = {
                split: {
                    model: perplexity(model, args.data, split, [m for m in trained if m != model]) for model in trained
                }
                for split in splits
            }
    tasks = [
        make(args.data).limited(args.limit)
        for check, make in (("trec", trec_task), ("sst", sst5_task))
        if check in checks
    ]
    if tasks:
        report["tasks"] = {task.name: classify(task, models, args.progress) for task in tasks}
    if "bank" in checks:
        report["bank"] = {model: bank_senses(model) for model in models}
    if "senses" in checks:
        report["senses"] = {model: bank_senses_12(model) for model in models}
    env = report["environment"]
    print(f"CPU: {env['cpu']}\ncommit {env['commit']}, {env['utc']} UTC: {env['command']}\n")
    print(markdown(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
