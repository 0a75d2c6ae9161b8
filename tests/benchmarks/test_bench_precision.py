"""benchmarks/bench_precision.py's shared parts: the one error measure every mode reports, and the per-product mode's
rounding, which must reach the reference path's real LSTM products (a product it missed would read as exact)."""

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import imported_script

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "allennlp_elmo"


@pytest.fixture(scope="module")
def bench():
    with imported_script(ROOT / "benchmarks" / "bench_precision.py") as module:
        yield module


@pytest.fixture(scope="module")
def fixture_model(bench):
    return bench.reference_model(str(FIXTURE))


def test_the_error_is_per_layer_over_the_layers_scale_across_sentences(bench):
    exact = [np.zeros((2, 3, 4), np.float32), np.zeros((2, 5, 4), np.float32)]
    exact[0][0, 0, 0], exact[1][0, 1, 1], exact[1][1, 4, 3] = 2.0, -4.0, 0.5  # scales: layer 0 4.0, layer 1 0.5
    low = [a.copy() for a in exact]
    low[0][0, 2, 2] += 0.4  # layer 0, the first sentence
    low[1][1, 0, 0] -= 0.05  # layer 1, the second sentence
    worst, scale = bench.layer_errors(low, exact)
    assert worst == pytest.approx([0.4, 0.05]) and scale == pytest.approx([4.0, 0.5])
    assert bench.relative_errors(low, exact) == pytest.approx([0.1, 0.1])


@pytest.mark.parametrize("rounding", [{"in": "wa"}, {"st": "w"}, {"pr": "a"}, {"in": "b", "st": "b", "pr": "b"}])
def test_rounded_products_reach_the_reference_paths_products(bench, fixture_model, rounding):
    model = fixture_model
    sentence = [["The", "bank", "approved", "the", "loan", "."]]
    exact = bench.reference_layers(model, sentence)
    with bench.RoundedProducts(model, {}) as untouched:
        same = bench.reference_layers(model, sentence)
    with bench.RoundedProducts(model, rounding) as products:
        low = bench.reference_layers(model, sentence)
    assert untouched.rounded == 0 and np.array_equal(same[0], exact[0])
    # both directions' 2 layers: the input projection once per layer, the other two once per step (the 6 tokens and
    # the sentence's two boundary markers)
    per_layer = {"in": 1, "st": len(sentence[0]) + 2, "pr": len(sentence[0]) + 2}
    assert products.rounded == 2 * 2 * sum(per_layer[role] for role in rounding)
    assert 0 < bench.relative_errors(low, exact).max() < 0.1
