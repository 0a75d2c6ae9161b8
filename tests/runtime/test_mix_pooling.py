import numpy as np
import pytest

from spacy_elmo.runtime.features.mix import layer_weights, mix_layers
from spacy_elmo.runtime.features.pooling import pool, pooled_dim

LAYERS = np.arange(3 * 2 * 2, dtype=np.float32).reshape(3, 2, 2)  # (layers, tokens, dim)


def test_average_top_and_index():
    np.testing.assert_allclose(mix_layers(LAYERS, "average"), LAYERS.mean(axis=0))
    np.testing.assert_array_equal(mix_layers(LAYERS, "top"), LAYERS[2])
    np.testing.assert_array_equal(mix_layers(LAYERS, 0), LAYERS[0])
    np.testing.assert_array_equal(mix_layers(LAYERS, -2), LAYERS[1])


def test_scalar_mix_is_softmax_times_gamma():
    s = [0.0, np.log(2.0), np.log(5.0)]  # softmax -> 1/8, 2/8, 5/8
    expected = 0.5 * (LAYERS[0] / 8 + 2 * LAYERS[1] / 8 + 5 * LAYERS[2] / 8)
    np.testing.assert_allclose(mix_layers(LAYERS, s, gamma=0.5), expected, rtol=1e-6)
    assert mix_layers(LAYERS, s).dtype == np.float32


@pytest.mark.parametrize("bad", ["bottom", 3, -4, [1.0, 2.0], [1.0, float("nan"), 0.0], True])
def test_bad_layer_specs(bad):
    with pytest.raises((ValueError, TypeError), match="layers"):
        layer_weights(bad, 3)


def test_pooling():
    v = np.array([[1.0, -2.0], [3.0, 4.0]], dtype=np.float32)
    np.testing.assert_array_equal(pool(v, "mean"), [2.0, 1.0])
    np.testing.assert_array_equal(pool(v, "max"), [3.0, 4.0])
    np.testing.assert_array_equal(pool(v, "mean+max"), [2.0, 1.0, 3.0, 4.0])
    assert pooled_dim(2, "mean+max") == 4
    empty = pool(np.zeros((0, 2), dtype=np.float32), "mean+max")
    assert empty.shape == (4,) and not empty.any()
    with pytest.raises(ValueError, match="pooling='sum'"):
        pool(v, "sum")


def test_one_layer_spec_check_before_the_model_is_known():
    from spacy_elmo.runtime.features.mix import check_layer_spec

    assert check_layer_spec("top") == "top" and check_layer_spec(np.int64(-1)) == -1
    assert check_layer_spec((1, np.float32(0.5), "2")) == [1.0, 0.5, 2.0]
    # an index as text is that index: spaCy 3.7's config validation hands ``layers = 0`` over as "0"
    assert check_layer_spec("0") == 0 and check_layer_spec("-2") == -2 and check_layer_spec("+1") == 1
    for bad, error in [
        ("bottom", ValueError),
        (True, TypeError),
        ([1.0, True], ValueError),
        ([1.0, float("nan")], ValueError),
        ([1.0, None], TypeError),
        (2.5, TypeError),
        ("1.5", ValueError),
        ("", ValueError),
        ("0x1", ValueError),
    ]:
        with pytest.raises(error, match="layers="):
            check_layer_spec(bad)
        with pytest.raises(error, match="layers="):  # layer_weights runs the same check first
            layer_weights(bad, 3)


def test_one_gamma_check():
    """``mix.check_gamma`` is the component's check (and the one any front end with a gamma setting uses)."""
    from spacy_elmo.runtime.features.mix import check_gamma
    from spacy_elmo.spacy import ElmoComponent

    assert check_gamma(2) == 2.0 and isinstance(check_gamma(np.float32(0.5)), float)
    for bad in [float("nan"), float("inf"), True, "1.0", None]:
        with pytest.raises(ValueError, match="gamma="):
            check_gamma(bad)
    spacy = pytest.importorskip("spacy")
    with pytest.raises(ValueError, match="gamma=nan"):
        ElmoComponent(spacy.blank("en").vocab, gamma=float("nan"))


def test_all_keeps_every_layer_side_by_side_and_has_no_weights():
    from spacy_elmo.runtime.features.mix import mixed_width

    activations = np.arange(3 * 2 * 4, dtype=np.float32).reshape(3, 2, 4)  # (layers, tokens, dim)
    side_by_side = mix_layers(activations, "all")
    assert side_by_side.shape == (2, 12) and side_by_side.dtype == np.float32
    np.testing.assert_array_equal(side_by_side[1], np.concatenate([activations[k, 1] for k in range(3)]))
    np.testing.assert_array_equal(mix_layers(activations, "all", gamma=2.0), 2 * side_by_side)
    assert mixed_width("all", 3, 4) == 12 and mixed_width("average", 3, 4) == 4
    with pytest.raises(ValueError, match="'all' keeps every layer side by side and has no weights"):
        layer_weights("all", 3)
    with pytest.raises(ValueError, match="this model has 3 layers"):
        mixed_width(5, 3, 4)
