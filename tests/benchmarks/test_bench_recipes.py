"""benchmarks/bench_recipes.py's parts: its recipes over cached rows against the estimators they stand for
(ElmoVectorizer(norm="l2"), a FeatureUnion with TF-IDF; the small fixture model), the SST-2 reader against the
data's README, the choice of the recommended recipe, a quick run end to end."""

import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import imported_script

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_recipes.py"
TEXTS = ["What is the capital of France ?", "a dull , lifeless film .", "How far is the moon ?", "great fun"]


@pytest.fixture(scope="module")
def bench():
    try:
        with imported_script(SCRIPT) as module:
            yield module
    finally:
        sys.modules.pop("bench_model_quality", None)  # the script imports it


def dense(matrix):
    return matrix.toarray() if hasattr(matrix, "toarray") else np.asarray(matrix, dtype=np.float64)


def features(bench, name, texts, rows):
    """What the recipe's ColumnTransformer gives for [text, rows], fitted on them (TF-IDF keeping every word of
    these few texts), as a dense array."""
    step = bench.recipe(name, rows.shape[1]).named_steps["features"]
    if name.startswith("tfidf"):
        step.transformers[0][1].set_params(min_df=1)
    return dense(step.fit_transform(bench.text_and_features(texts, rows)))


@pytest.mark.parametrize(("name", "norm"), [("elmo", None), ("elmo(l2)", "l2")])
def test_the_recipes_over_cached_rows_are_the_feature_unions_they_stand_for(bench, fixture_dir, name, norm):
    """``tfidf|elmo(l2)`` on cached ``ElmoVectorizer()`` rows gives what FeatureUnion(TfidfVectorizer,
    ElmoVectorizer(norm="l2")) gives on the texts; ``tfidf|elmo+scaler`` what the examples' --combined pipeline does."""
    from sklearn.pipeline import FeatureUnion, Pipeline
    from sklearn.preprocessing import StandardScaler

    from spacy_elmo import ElmoVectorizer

    rows = ElmoVectorizer(model=str(fixture_dir)).fit_transform(TEXTS)
    elmo = ElmoVectorizer(model=str(fixture_dir), norm=norm)
    union = FeatureUnion([("tfidf", bench.tfidf().set_params(min_df=1)), ("elmo", elmo)])
    out = features(bench, f"tfidf|{name}", TEXTS, rows)
    np.testing.assert_allclose(out, dense(union.fit_transform(TEXTS)), rtol=1e-5, atol=1e-7)
    scaled = FeatureUnion(
        [
            ("tfidf", bench.tfidf().set_params(min_df=1)),
            ("elmo", Pipeline([("elmo", ElmoVectorizer(model=str(fixture_dir))), ("scale", StandardScaler())])),
        ]
    )
    out = features(bench, "tfidf|elmo+scaler", TEXTS, rows)
    np.testing.assert_allclose(out, dense(scaled.fit_transform(TEXTS)), rtol=1e-4, atol=1e-5)


def test_the_l2_recipe_is_the_vectorizers_norm(bench, fixture_dir):
    from spacy_elmo import ElmoVectorizer

    rows = ElmoVectorizer(model=str(fixture_dir)).fit_transform(TEXTS)
    normed = ElmoVectorizer(model=str(fixture_dir), norm="l2").fit_transform(TEXTS)
    np.testing.assert_allclose(features(bench, "elmo(l2)", TEXTS, rows), normed, rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(features(bench, "elmo", TEXTS, rows), rows)


def test_an_unknown_recipe_is_named(bench):
    with pytest.raises(ValueError, match=r"unknown recipe 'tfidf\|bert'"):
        bench.recipe("tfidf|bert", 4)


def test_sst2_matches_the_readme_and_its_sentences_are_sst5s(bench, data_dir):
    task = bench.sst2_task(data_dir)
    assert (len(task.train_texts), len(task.test_texts)) == (6920, 1821)
    assert Counter(task.train_labels) == {"0": 3310, "1": 3610} and Counter(task.test_labels) == {"0": 912, "1": 909}
    sst5 = bench.sst5_task(data_dir)
    assert set(task.train_texts) <= set(sst5.train_texts) and set(task.test_texts) <= set(sst5.test_texts)
    trec, sst5_sample, sst2 = bench.tasks(data_dir, None)
    assert (len(sst5_sample.train_texts), len(sst5_sample.test_texts)) == (bench.SST5_TRAIN, 2210)
    assert (trec.name, sst5_sample.name, sst2.name) == bench.TASKS


def test_the_recommended_recipe_is_the_best_cv_on_the_tuning_task_only(bench):
    def rows(cvs):
        return {"recipes": [{"recipe": r, "cv": cv} for r, cv in zip(bench.RECIPES, cvs)]}

    report = {"tasks": {"TREC-6": rows([0.80, 0.70, 0.75, 0.78, 0.82, 0.81, 0.82]), "SST-5": rows([0.9] * 7)}}
    assert bench.recommended(report, "TREC-6") == "tfidf|elmo"  # a tie: the earlier one
    assert bench.recommended(report, "SST-5") == "tfidf"


def test_a_quick_run_end_to_end(bench, fixture_dir, tmp_path, monkeypatch, capsys):
    """Two recipes on a tiny made-up data folder with the fixture model: every number comes out, the cache is
    written once and read back."""
    data = tmp_path / "data"
    (data / "trec").mkdir(parents=True)
    (data / "sst" / "sst5_flat").mkdir(parents=True)
    (data / "sst" / "sst2_flat").mkdir(parents=True)
    words = ["city", "river", "man", "year", "film", "song"]
    trec = [f"{label}:x What {words[i % 6]} is number {i} ?" for i, label in enumerate(["LOC", "HUM"] * 20)]
    (data / "trec" / "train_5500.label").write_text("\n".join(trec) + "\n", encoding="utf-8")
    (data / "trec" / "TREC_10.label").write_text("\n".join(trec[:10]) + "\n", encoding="utf-8")
    sst = [f"__label__{1 + 3 * (i % 2)}\ta {'good' if i % 2 else 'bad'} film {i} ." for i in range(40)]
    for name in ("sst_train.txt", "sst_test.txt"):
        (data / "sst" / "sst5_flat" / name).write_text("\n".join(sst) + "\n", encoding="utf-8")
    sst2 = [f"{1 if line.startswith('__label__4') else 0}\t{line.split(chr(9))[1]}" for line in sst]
    for name in ("sst2_train.tsv", "sst2_test.tsv"):
        (data / "sst" / "sst2_flat" / name).write_text("\n".join(sst2) + "\n", encoding="utf-8")
    monkeypatch.setattr(bench, "C_GRID", (0.1, 10.0))
    cache, out = tmp_path / "cache", tmp_path / "out.json"
    argv = ["--model", str(fixture_dir), "--data", str(data), "--cache", str(cache), "--json", str(out)]
    assert bench.main([*argv, "--recipes", "tfidf,tfidf|elmo(l2)", "--tasks", "TREC-6,SST-2"]) == 0
    import json

    report = json.loads(out.read_text(encoding="utf-8"))
    assert list(report["tasks"]) == ["TREC-6", "SST-2"] and report["tune_on"] == "TREC-6"
    assert [row["recipe"] for row in report["tasks"]["SST-2"]["recipes"]] == ["tfidf", "tfidf|elmo(l2)"]
    assert report["recommended"] in ("tfidf", "tfidf|elmo(l2)")
    assert len(list(cache.glob("*.npy"))) == 4  # one file of rows per data file
    text = capsys.readouterr().out
    assert "| tfidf\\|elmo(l2) | 1.000 |" in text and "Recommended (best CV accuracy on TREC-6's train)" in text
    mtimes = {path: path.stat().st_mtime_ns for path in cache.glob("*.npy")}
    assert bench.main([*argv, "--recipes", "tfidf|elmo", "--tasks", "SST-5"]) == 0  # read back, not rewritten
    assert {path: path.stat().st_mtime_ns for path in cache.glob("*.npy")} == mtimes
    with pytest.raises(SystemExit):
        bench.main([*argv, "--recipes", "bert"])
