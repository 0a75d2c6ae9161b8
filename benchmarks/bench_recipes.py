"""Which scikit-learn recipe to put ELMo features in: seven recipes on TREC-6, SST-5 and SST-2, one C grid.

    python benchmarks/bench_recipes.py --cache /tmp/elmo-rows --json recipes.json
    python benchmarks/bench_recipes.py --limit 300   # a quick run on 300 texts of each split

Each recipe is a LogisticRegression on one set of features, its C chosen by 5-fold stratified CV on train from
the same grid (``C_GRID``), then fitted on all of train and scored on test:

- ``tfidf``: TF-IDF (word 1-2-grams, min_df 2, sublinear tf; its rows l2-normalised, as TfidfVectorizer's are);
- ``elmo``: ``ElmoVectorizer()``'s rows as they are (the layer average, mean pooling);
- ``elmo+scaler``: the same through StandardScaler;
- ``elmo(l2)``: ``ElmoVectorizer(norm="l2")``'s rows;
- ``tfidf|elmo``, ``tfidf|elmo+scaler``, ``tfidf|elmo(l2)``: TF-IDF beside each of the three, one LR (a
  FeatureUnion; ``tfidf|elmo+scaler`` is ``examples/sklearn_classify.py --combined``'s recipe).

Tasks: TREC-6 (train 5,452 / test 500), SST-5 (a seeded sample of 3,000 of the 8,544 train sentences, the size of
the news-topic report's training set; all 2,210 test sentences), SST-2 (train 6,920 / test 1,821). The texts are
embedded once per file with ``ElmoVectorizer()`` (``--cache DIR`` keeps the rows as .npy, keyed by the model and a
hash of the texts; SST-2's sentences are SST-5's, looked up); every recipe is fitted on those rows, as a
ColumnTransformer over [text, ELMo columns] (what a FeatureUnion of TfidfVectorizer and ElmoVectorizer computes,
without embedding each CV fold again). ``elmo(l2)`` scales the rows with ``sklearn.preprocessing.Normalizer``: the
rows ``ElmoVectorizer(norm="l2")`` gives (tests/benchmarks/test_bench_recipes.py holds them equal).

The recommended recipe is the one with the best mean CV accuracy on TREC-6's train (``--tune-on``): the test sets,
and SST-5 / SST-2 altogether, play no part in the choice, so its scores there are on data it was not chosen on.
Every accuracy comes with a 95% bootstrap interval over the test texts and McNemar's exact test against TF-IDF
(bench_model_quality's helpers). Prints markdown (progress to stderr); ``--json`` writes every number.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_model_quality import (
    DATA,
    FOLDS,
    MAX_ITER,
    SEED,
    Task,
    bootstrap_interval,
    environment,
    mcnemar,
    sst5_task,
    text_and_features,
    tfidf,
    trec_task,
)

C_GRID = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0)
SST5_TRAIN = 3000  # the news-topic report's training size
RECIPES = ("tfidf", "elmo", "elmo+scaler", "elmo(l2)", "tfidf|elmo", "tfidf|elmo+scaler", "tfidf|elmo(l2)")
TASKS = ("TREC-6", "SST-5", "SST-2")


def read_sst2(path: Path) -> tuple[list[str], list[str]]:
    """Sentences and their SST-2 labels "0" / "1" from a ``{0,1}<TAB>sentence`` file."""
    texts, labels = [], []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        label, tab, text = line.partition("\t")
        if not tab or label not in {"0", "1"}:
            raise ValueError(f"{path}:{number}: expected '0|1<TAB>sentence', got {line[:60]!r}")
        texts.append(text.strip())
        labels.append(label)
    return texts, labels


def sst2_task(data: Path) -> Task:
    folder = data / "sst" / "sst2_flat"
    return Task("SST-2", *read_sst2(folder / "sst2_train.tsv"), *read_sst2(folder / "sst2_test.tsv"))


def tasks(data: Path, limit: Optional[int]) -> list[Task]:
    """TREC-6, SST-5 (train: a seeded sample of ``SST5_TRAIN``) and SST-2; ``limit``: each split at most that many."""
    sst5 = sst5_task(data)
    sample = sst5.limited(SST5_TRAIN)
    sst5 = Task("SST-5", sample.train_texts, sample.train_labels, sst5.test_texts, sst5.test_labels)
    return [task.limited(limit) for task in (trec_task(data), sst5, sst2_task(data))]


# -- the rows --------------------------------------------------------------------------------------


def text_key(texts: Sequence[str]) -> str:
    return hashlib.sha1("\n".join(texts).encode("utf-8")).hexdigest()[:12]


def cache_name(model: str) -> str:
    """A file name part for ``model``: its name, or a folder's last part and a hash of its path (never a path)."""
    if re.fullmatch(r"[A-Za-z0-9_.-]+", model):
        return model
    return f"{re.sub(r'[^A-Za-z0-9_.-]', '_', Path(model).name)}.{text_key([model])[:8]}"


def embedded(model: str, name: str, texts: list[str], cache: Optional[Path]) -> np.ndarray:
    """``ElmoVectorizer(model=model)``'s rows of ``texts``, read from or written to ``cache`` when given."""
    from spacy_elmo.sklearn import ElmoVectorizer

    path = None if cache is None else cache / f"{cache_name(model)}-{name}-{text_key(texts)}.npy"
    if path is not None and path.exists():
        rows = np.load(path)
        if rows.shape[0] == len(texts):
            return rows
    start = time.perf_counter()
    rows = ElmoVectorizer(model=model).fit_transform(texts)
    print(f"  embedded {name}: {len(texts)} texts in {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    if path is not None:
        cache.mkdir(parents=True, exist_ok=True)
        np.save(path, rows)
    return rows


def row_table(model: str, data: Path, cache: Optional[Path]) -> dict[str, np.ndarray]:
    """Text -> row for every text of the data files (SST-2's sentences are SST-5's: one embedding serves both)."""
    trec, sst5 = trec_task(data), sst5_task(data)
    table: dict[str, np.ndarray] = {}
    for name, texts in (
        ("trec-train", trec.train_texts),
        ("trec-test", trec.test_texts),
        ("sst5-test", sst5.test_texts),
        ("sst5-train", sst5.train_texts),
    ):
        table.update(zip(texts, embedded(model, name, texts, cache)))
    return table


def rows_of(texts: list[str], table: dict[str, np.ndarray], model: str) -> np.ndarray:
    missing = sorted({t for t in texts if t not in table})
    if missing:
        table.update(zip(missing, embedded(model, f"{len(missing)} texts", missing, None)))
    return np.stack([table[t] for t in texts])


# -- the recipes -----------------------------------------------------------------------------------


def recipe(name: str, elmo_dim: int) -> Any:
    """The pipeline of one recipe over [text, ELMo columns] rows (``text_and_features``), C left to the grid."""
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import Normalizer, StandardScaler

    columns = list(range(1, elmo_dim + 1))
    elmo_part: dict[str, Callable[[], Any]] = {
        "elmo": lambda: "passthrough",
        "elmo+scaler": StandardScaler,
        "elmo(l2)": lambda: Normalizer("l2"),  # = ElmoVectorizer(norm="l2")'s rows
    }
    parts = []
    for part in name.split("|"):
        if part == "tfidf":
            parts.append(("tfidf", tfidf(), 0))
        elif part in elmo_part:
            parts.append(("elmo", elmo_part[part](), columns))
        else:
            raise ValueError(f"unknown recipe {name!r}: choose from {', '.join(RECIPES)}")
    features = ColumnTransformer(parts)
    return Pipeline([("features", features), ("lr", LogisticRegression(max_iter=MAX_ITER))])


def cross_validated(pipeline: Any) -> Any:
    from sklearn.model_selection import GridSearchCV, StratifiedKFold

    folds = StratifiedKFold(n_splits=FOLDS, shuffle=True, random_state=SEED)
    return GridSearchCV(pipeline, {"lr__C": list(C_GRID)}, cv=folds, scoring="accuracy", n_jobs=1)


@dataclass
class Result:
    recipe: str
    accuracy: float
    interval: tuple[float, float]
    c: float
    cv: float
    cv_std: float
    correct: np.ndarray
    seconds: float

    def as_dict(self, baseline: Optional[Result]) -> dict[str, Any]:
        row: dict[str, Any] = {
            "recipe": self.recipe,
            "accuracy": round(self.accuracy, 4),
            "ci95": [round(x, 4) for x in self.interval],
            "C": self.c,
            "cv": round(self.cv, 4),
            "cv_std": round(self.cv_std, 4),
            "seconds": round(self.seconds, 1),
        }
        if baseline is not None and baseline is not self:
            test = mcnemar(self.correct, baseline.correct)
            row["vs_tfidf"] = round(self.accuracy - baseline.accuracy, 4)
            row["mcnemar"] = {"only_this": test.only_a, "only_tfidf": test.only_b, "p": float(f"{test.p_value:.3g}")}
        return row


def score(name: str, task: Task, x_train: np.ndarray, x_test: np.ndarray) -> Result:
    """C by CV on train, fit on train, predict test (one thread: see bench_model_quality.score)."""
    from threadpoolctl import threadpool_limits

    start = time.perf_counter()
    search = cross_validated(recipe(name, x_train.shape[1] - 1))
    with threadpool_limits(limits=1):
        search.fit(x_train, task.train_labels)
        correct = np.asarray(search.predict(x_test)) == np.asarray(task.test_labels)
    best = search.best_index_
    result = Result(
        name,
        float(correct.mean()),
        bootstrap_interval(correct),
        float(search.best_params_["lr__C"]),
        float(search.best_score_),
        float(search.cv_results_["std_test_score"][best]),
        correct,
        time.perf_counter() - start,
    )
    print(
        f"  {task.name} {name}: {result.accuracy:.4f} C={result.c:g} (CV {result.cv:.4f}) ({result.seconds:.0f} s)",
        file=sys.stderr,
        flush=True,
    )
    return result


def run_task(task: Task, recipes: Sequence[str], table: dict[str, np.ndarray], model: str) -> dict[str, Any]:
    print(f"{task.name}: train {len(task.train_texts)}, test {len(task.test_texts)}", file=sys.stderr, flush=True)
    x_train = text_and_features(task.train_texts, rows_of(task.train_texts, table, model))
    x_test = text_and_features(task.test_texts, rows_of(task.test_texts, table, model))
    results = [score(name, task, x_train, x_test) for name in recipes]
    baseline = next((r for r in results if r.recipe == "tfidf"), None)
    majority = max(task.test_labels.count(label) for label in set(task.test_labels)) / len(task.test_labels)
    return {
        "train": len(task.train_texts),
        "test": len(task.test_texts),
        "majority": round(majority, 4),
        "recipes": [r.as_dict(baseline) for r in results],
    }


def recommended(report: dict[str, Any], tune_on: str) -> str:
    """The recipe with the best mean CV accuracy on ``tune_on``'s train (ties: the earlier, simpler one)."""
    rows = report["tasks"][tune_on]["recipes"]
    return max(rows, key=lambda row: (row["cv"], -RECIPES.index(row["recipe"])))["recipe"]


# -- report ----------------------------------------------------------------------------------------


def cell(text: str) -> str:
    """``text`` in a markdown table cell (its ``|`` escaped)."""
    return text.replace("|", "\\|")


def markdown(report: dict[str, Any]) -> str:
    lines: list[str] = []
    for name, result in report["tasks"].items():
        lines += [
            f"{name} (train {result['train']:,}, test {result['test']:,}; majority class {result['majority']:.3f}): "
            "test accuracy, C by 5-fold CV on train",
            "",
            "| recipe | accuracy | 95% interval | vs TF-IDF | McNemar p (only this / only TF-IDF right) | C "
            "| CV accuracy |",
            "|---|---|---|---|---|---|---|",
        ]
        for row in result["recipes"]:
            low, high = row["ci95"]
            if "mcnemar" in row:
                test = row["mcnemar"]
                versus = f"{row['vs_tfidf']:+.3f} | {test['p']:.3g} ({test['only_this']} / {test['only_tfidf']})"
            else:
                versus = "- | -"
            mark = "**" if row["recipe"] == report.get("recommended") else ""
            lines.append(
                f"| {mark}{cell(row['recipe'])}{mark} | {row['accuracy']:.3f} | [{low:.3f}, {high:.3f}] | {versus} "
                f"| {row['C']:g} | {row['cv']:.3f} ± {row['cv_std']:.3f} |"
            )
        lines.append("")
    if "recommended" in report:
        lines.append(f"Recommended (best CV accuracy on {report['tune_on']}'s train): `{report['recommended']}`")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="default", help="the model ElmoVectorizer embeds with (default: bundled)")
    parser.add_argument("--data", type=Path, default=DATA, help="the shared data folder (default ../shared/data)")
    parser.add_argument("--limit", type=int, help="only N train and N test texts of each task (a seeded sample)")
    parser.add_argument("--recipes", default=",".join(RECIPES), help=f"comma-separated subset of {','.join(RECIPES)}")
    parser.add_argument("--tasks", default=",".join(TASKS), help=f"comma-separated subset of {','.join(TASKS)}")
    parser.add_argument("--tune-on", default="TREC-6", choices=TASKS, help="the task whose train CV picks a recipe")
    parser.add_argument("--cache", type=Path, help="keep the ELMo rows here as .npy (embedded once per file)")
    parser.add_argument("--json", type=Path, help="also write every number here")
    args = parser.parse_args(argv)
    recipes = [r for r in args.recipes.split(",") if r]
    names = [t for t in args.tasks.split(",") if t]
    unknown = sorted(set(recipes) - set(RECIPES)) + sorted(set(names) - set(TASKS))
    if unknown or not recipes or not names:
        parser.error(f"unknown or no recipes/tasks {unknown}: choose from {','.join(RECIPES)} / {','.join(TASKS)}")
    if args.limit is not None and args.limit < FOLDS * 6:
        parser.error(f"--limit {args.limit}: too few texts for {FOLDS}-fold CV over 6 classes (30 or more)")
    if not args.data.is_dir():
        parser.error(f"no data at {args.data}: TREC-6 and SST live in ../shared/data beside the checkout (--data)")
    report: dict[str, Any] = {"environment": environment(), "limit": args.limit, "model": args.model}
    report["environment"]["command"] = " ".join(["benchmarks/bench_recipes.py", *(argv or sys.argv[1:])])
    # whole files once (cached); a quick --limit run without a cache embeds only the texts it samples
    table = row_table(args.model, args.data, args.cache) if args.cache or args.limit is None else {}
    chosen = [task for task in tasks(args.data, args.limit) if task.name in names]
    report["tasks"] = {task.name: run_task(task, recipes, table, args.model) for task in chosen}
    if args.tune_on in report["tasks"]:
        report["tune_on"] = args.tune_on
        report["recommended"] = recommended(report, args.tune_on)
    env = report["environment"]
    print(f"CPU: {env['cpu']}\ncommit {env['commit']}, {env['utc']} UTC: {env['command']}\n")
    print(markdown(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
