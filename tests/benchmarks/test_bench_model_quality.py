"""benchmarks/bench_model_quality.py's parts: the TREC-6 / SST-5 readers against the data's READMEs, the
bootstrap interval and McNemar test against hand-computed numbers, and the ELMo feature blocks against the backend's
own activations (the small fixture model)."""

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import imported_script

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_model_quality.py"


@pytest.fixture(scope="module")
def bench():
    with imported_script(SCRIPT) as module:
        yield module


def test_trec_coarse_labels_match_the_readme(bench, data_dir):
    task = bench.trec_task(data_dir)
    assert (len(task.train_texts), len(task.test_texts)) == (5452, 500)
    assert Counter(task.train_labels) == {"ABBR": 86, "DESC": 1162, "ENTY": 1250, "HUM": 1223, "LOC": 835, "NUM": 896}
    assert Counter(task.test_labels) == {"ABBR": 9, "DESC": 138, "ENTY": 94, "HUM": 65, "LOC": 81, "NUM": 113}
    assert task.train_texts[0] == "How did serfdom develop in and then leave Russia ?"  # the label and ":fine" dropped


def test_sst5_splits_match_the_readme(bench, data_dir):
    task = bench.sst5_task(data_dir)
    assert (len(task.train_texts), len(task.test_texts)) == (8544, 2210)
    assert [Counter(task.train_labels)[str(k)] for k in range(1, 6)] == [1092, 2218, 1624, 2322, 1288]
    assert [Counter(task.test_labels)[str(k)] for k in range(1, 6)] == [279, 633, 389, 510, 399]
    dev_texts, dev_labels = bench.read_sst5(data_dir / "sst" / "sst5_flat" / "sst_dev.txt")
    assert len(dev_texts) == 1101 and Counter(dev_labels)["1"] == 139
    assert task.test_texts[0] == "Effective but too-tepid biopic"


def test_limited_draws_a_seeded_sample_in_file_order(bench):
    texts = [f"t{i}" for i in range(100)]
    task = bench.Task("t", texts, [f"l{i}" for i in range(100)], texts[:10], [f"l{i}" for i in range(10)])
    small = task.limited(20)
    assert len(small.train_texts) == 20 and small.train_texts != texts[:20]  # not simply the first ones
    assert [int(t[1:]) for t in small.train_texts] == sorted(int(t[1:]) for t in small.train_texts)
    assert [t[1:] for t in small.train_texts] == [label[1:] for label in small.train_labels]  # pairs kept
    assert small.test_texts == texts[:10]  # a split shorter than the limit is kept whole
    assert task.limited(20).train_texts == small.train_texts  # seeded
    assert task.limited(None) is task


def test_a_limited_sst5_sample_keeps_the_label_mix(bench, data_dir):
    # sst_train.txt runs from positive to negative reviews: its first 1,000 sentences hold 0.8% "very negative"
    train = bench.sst5_task(data_dir).limited(1000).train_labels
    assert Counter(train)["1"] / 1000 == pytest.approx(1092 / 8544, abs=0.03)


@pytest.mark.parametrize(
    ("reader", "line"),
    [("read_trec", "no label here"), ("read_sst5", "__label__7\ttoo high"), ("read_sst5", "4 no tab or prefix")],
)
def test_a_malformed_line_is_named(bench, tmp_path, reader, line):
    path = tmp_path / "data.txt"
    path.write_text("DESC:manner How ?\n" if reader == "read_trec" else "__label__2\tfine .\n", encoding="utf-8")
    path.write_text(path.read_text(encoding="utf-8") + line + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"data\.txt:2:"):
        getattr(bench, reader)(path)


def test_mcnemar_exact_against_hand_computed_binomials(bench):
    # A right on 5 texts B got wrong, B right on 1 that A got wrong, both right on 3, both wrong on 1:
    # p = 2 * P(X <= 1), X ~ Binomial(6, 1/2) = 2 * (1 + 6) / 64 = 0.21875
    a = [True] * 5 + [False] + [True] * 3 + [False]
    b = [False] * 5 + [True] + [True] * 3 + [False]
    test = bench.mcnemar(a, b)
    assert (test.only_a, test.only_b) == (5, 1)
    assert test.p_value == pytest.approx(14 / 64)
    assert bench.mcnemar(b, a).p_value == pytest.approx(14 / 64)  # symmetric
    assert bench.mcnemar([True] * 10, [False] * 10).p_value == pytest.approx(2 / 1024)
    assert bench.mcnemar([True, False], [True, False]).p_value == 1.0  # no discordant text: no evidence
    assert bench.mcnemar([True] * 3, [False] * 3).p_value == pytest.approx(0.25)  # 2 * 1/8
    with pytest.raises(ValueError, match="differ in length"):
        bench.mcnemar([True], [True, False])


def test_bootstrap_interval_matches_the_normal_approximation(bench):
    assert bench.bootstrap_interval([True] * 50) == (1.0, 1.0)
    hits = np.arange(10_000) % 2 == 0  # accuracy 0.5 on 10,000 texts: 0.5 +- 1.96 * sqrt(0.25 / 10,000)
    low, high = bench.bootstrap_interval(hits)
    assert low == pytest.approx(0.5 - 0.0098, abs=0.0015) and high == pytest.approx(0.5 + 0.0098, abs=0.0015)
    assert bench.bootstrap_interval(hits) == (low, high)  # seeded
    with pytest.raises(ValueError, match="no predictions"):
        bench.bootstrap_interval([])


def test_the_combined_input_keeps_text_and_features_apart(bench):
    rows = bench.text_and_features(["a b", "c"], np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32))
    assert rows.shape == (2, 3) and list(rows[:, 0]) == ["a b", "c"]
    assert rows[:, 1:].astype(np.float32).tolist() == [[1.0, 2.0], [3.0, 4.0]]


def test_markdown_names_the_baseline_and_each_model(bench):
    system = {"system": "ELMo mean", "accuracy": 0.8, "ci95": [0.7, 0.9], "chosen": "C=0.1 (CV 0.790)",
              "vs_tfidf": -0.05, "mcnemar": {"only_this": 2, "only_tfidf": 7, "p": 0.1797}}  # fmt: skip
    valid = {"forward": 150.0, "backward": 149.0, "mean": 149.5, "predictions": 217646}
    report = {
        "perplexity": {"valid": {"default": valid},
                       "test": {"default": {"forward": 138.0, "backward": 136.9, "mean": 137.4, "predictions": 251269},
                                "original": {"none": "no softmax"}}},
        "perplexity_shared": {"test": {"default": {"forward": 120.5, "backward": 119.25, "mean": 119.87,
                                                   "predictions": 230001}}},
        "tasks": {"TREC-6": {"train": 5452, "test": 500, "models": {"default": {"systems": [system]}},
                             "tfidf": {"accuracy": 0.85, "ci95": [0.82, 0.88]}}},
    }  # fmt: skip
    text = bench.markdown(report)
    assert text.index("WikiText-2 valid ppl") < text.index("| default | 150.00 | 149.00 | 149.50 | 217,646 |")
    assert text.index("WikiText-2 test ppl") < text.index("| default | 138.00 | 136.90 | 137.40 | 251,269 |")
    assert "| original | no softmax |" in text
    assert (
        "The same on test, counting only the predictions of words every model's vocabulary holds" in text
        and "| default | 120.50 | 119.25 | 119.87 | 230,001 |" in text
    )
    assert "| TF-IDF + LR (C=4) | - | 0.850 | [0.820, 0.880] |" in text
    assert "| ELMo mean | default | 0.800 | [0.700, 0.900] | -0.050 | 0.18 (2 / 7) | C=0.1 (CV 0.790) |" in text


@pytest.mark.parametrize("splits", ["train", "", "valid,dev"])
def test_an_unknown_wikitext_split_is_refused_before_any_work(bench, splits, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--checks", "perplexity", "--splits", splits])
    err = capsys.readouterr().err
    assert f"--splits {splits!r}: choose from valid,test" in err


def test_the_sense_gap_against_hand_computed_means(bench):
    """Mean over pairs of two sense-0 rows minus the mean over sense-0 / sense-1 pairs, from a cosine matrix."""
    cos = np.array(
        [
            [1.0, 0.8, 0.1, 0.3],
            [0.8, 1.0, 0.2, 0.4],
            [0.1, 0.2, 1.0, 0.9],
            [0.3, 0.4, 0.9, 1.0],
        ]
    )
    assert bench._sense_gap(cos, np.array([0, 0, 1, 1])) == pytest.approx(0.8 - (0.1 + 0.3 + 0.2 + 0.4) / 4)
    # senses shuffled: rows 0 and 2 together
    assert bench._sense_gap(cos, np.array([0, 1, 0, 1])) == pytest.approx(0.1 - (0.8 + 0.3 + 0.2 + 0.9) / 4)


def test_the_feature_blocks_are_the_pooled_layers_of_the_backends_activations(bench, fixture_dir):
    from spacy_elmo import load_bilm

    texts = [["The", "bank", "approved", "the", "loan", "."], ["We", "sat", "on", "the", "river", "bank", "."]]
    features = bench.elmo_features(str(fixture_dir), texts, progress=False)
    for i, layers in enumerate(load_bilm(fixture_dir).embed(texts)):  # (n_layers + 1, tokens, dim)
        average = layers.mean(axis=0)
        np.testing.assert_allclose(features["mean"][i], average.mean(axis=0), rtol=1e-5, atol=1e-6)
        mean_max = np.concatenate([average.mean(axis=0), average.max(axis=0)])
        np.testing.assert_allclose(features["mean+max"][i], mean_max, rtol=1e-5, atol=1e-6)
        per_layer = np.concatenate([np.concatenate([layer.mean(axis=0), layer.max(axis=0)]) for layer in layers])
        np.testing.assert_allclose(features["per layer"][i], per_layer, rtol=1e-5, atol=1e-6)
