"""Windows, token-bounded embedding calls, length batches: spacy_elmo/runtime/embedding/windows.py, and the spaCy side's
positions."""

import itertools
import random

import numpy as np
import pytest
import spacy
from spacy.tokens import Doc

from spacy_elmo.runtime.configuration.validation import positive_int
from spacy_elmo.runtime.embedding.windows import embed_segments, length_batches, window_bounds
from spacy_elmo.spacy import sentence_positions
from spacy_elmo.train.corpus.batching import bucket_batches
from tests.numerics import assert_recomputed_close


@pytest.mark.parametrize(
    "n,max_length,overlap", [(0, 4, 1), (3, 4, 1), (4, 4, 0), (10, 4, 2), (11, 4, 1), (57, 8, 3), (100, 7, 6)]
)
def test_windows_tile_the_sequence_once(n, max_length, overlap):
    bounds = window_bounds(n, max_length, overlap)
    kept = [i for _, _, ks, ke in bounds for i in range(ks, ke)]
    assert kept == list(range(n))
    for start, end, keep_start, keep_end in bounds:
        assert 0 <= start <= keep_start <= keep_end <= end <= n and end - start <= max_length
    for (_, e0, _, _), (s1, _, _, _) in zip(bounds, bounds[1:]):
        assert s1 < e0 and e0 - s1 >= overlap  # consecutive windows share at least `overlap` tokens


def test_overlap_is_split_in_the_middle():
    # windows [0,6) [4,10): the two shared tokens 4, 5 go one to each window
    assert window_bounds(10, 6, 2) == [(0, 6, 0, 5), (4, 10, 5, 10)]


def test_max_length_none_is_one_window_of_the_whole_sequence():
    """None means no windows (the spaCy component's ``max_length = null``, which ElmoFineTune reads too)."""
    assert window_bounds(1000, None, 32) == [(0, 1000, 0, 1000)]
    assert window_bounds(0, None, 32) == []


@pytest.mark.parametrize("max_length,overlap", [(0, 0), (4, 4), (4, -1), (4.0, 1), (True, 0)])
def test_bad_window_config(max_length, overlap):
    with pytest.raises(ValueError, match=r"max_length|window_overlap"):
        window_bounds(10, max_length, overlap)


def test_positions_follow_sentences_and_skip_whitespace():
    nlp = spacy.blank("en")
    doc = Doc(
        nlp.vocab,
        words=["A", "b", "\n", "C", "d", "e", "f", "g"],
        sent_starts=[True, False, False, True, False, False, False, False],
    )
    assert sentence_positions(doc) == [[0, 1], [3, 4, 5, 6, 7]]
    # with max_length=3, overlap=1 the second sentence becomes two windows, positions (3, 4, 5) and (5, 6, 7)
    assert window_bounds(2, 3, 1) == [(0, 2, 0, 2)]
    assert window_bounds(5, 3, 1) == [
        (0, 3, 0, 2),
        (2, 5, 2, 5),
    ]  # token 5 sits at the edge of both windows: the later one wins
    assert sentence_positions(doc, use_sentences=False) == [[0, 1, 3, 4, 5, 6, 7]]
    assert sentence_positions(Doc(nlp.vocab, words=[])) == []
    assert sentence_positions(nlp("   ")) == []


# -- embed_segments: the one way every front end embeds ------------------------------------------


class FakeBackend:
    """Layer 0 holds each token's value (tokens are numbers), layer 1 its index inside the window it came in."""

    n_layers, dim = 1, 2

    def __init__(self):
        self.calls = []

    def embed(self, sentences, *, batch_size=None, on_progress=None):
        sentences = [list(s) for s in sentences]
        self.calls.append(sentences)
        if on_progress is not None:
            on_progress(len(sentences))
        out = []
        for s in sentences:
            layers = np.zeros((2, len(s), 2), dtype=np.float32)
            layers[0] = np.asarray([float(t) for t in s], dtype=np.float32)[:, None]
            layers[1] = np.arange(len(s), dtype=np.float32)[:, None]
            out.append(layers)
        return out


@pytest.mark.parametrize("max_length,overlap,max_tokens", [(None, 0, 7), (6, 2, 6), (4, 1, 9), (5, 4, 16384)])
def test_embed_segments_stitches_windows_in_order_under_the_token_bound(max_length, overlap, max_tokens):
    lengths = [3, 0, 14, 1, 6, 9, 2]
    segments = [(f"key{k}", [str(100 * k + i) for i in range(n)]) for k, n in enumerate(lengths)]
    backend = FakeBackend()
    done, tokens_done = [], []
    out = list(
        embed_segments(
            backend,
            iter(segments),
            max_length=max_length,
            overlap=overlap,
            max_tokens=max_tokens,
            on_progress=done.append,
            on_tokens=tokens_done.append,
        )
    )
    assert [key for key, _ in out] == [key for key, _ in segments]  # in order, keys handed back
    windows = [w for call in backend.calls for w in call]
    assert sum(done) == len(windows)
    # a progress bar over tokens: one count per backend call, each token once (a long segment's windows too)
    assert len(tokens_done) == len(backend.calls) and sum(tokens_done) == sum(lengths)
    for call in backend.calls:
        assert len(call) == 1 or sum(max(1, len(w)) for w in call) <= max_tokens
    for (_, tokens), (_, layers) in zip(segments, out):
        assert layers.shape == (2, len(tokens), 2) and layers.dtype == np.float32
        np.testing.assert_array_equal(layers[0, :, 0], [float(t) for t in tokens])
        bounds = (
            [(0, len(tokens), 0, len(tokens))]
            if max_length is None
            else window_bounds(len(tokens), max_length, overlap)
        )
        for start, end, keep_start, keep_end in bounds:  # each token from the window whose kept part holds it
            assert end - start <= (max_length or len(tokens))
            np.testing.assert_array_equal(layers[1, keep_start:keep_end, 0], np.arange(keep_start, keep_end) - start)
    # consecutive windows share calls: the calls hold the windows in input order
    expected = [
        [str(t) for t in tokens[start:end]]
        for _, tokens in segments
        for start, end, _, _ in (
            [(0, len(tokens), 0, 0)]
            if max_length is None or len(tokens) <= max_length
            else window_bounds(len(tokens), max_length, overlap)
        )
    ]
    assert windows == expected


def test_embed_segments_reads_its_input_lazily():
    pulled = []

    def endless():
        for k in itertools.count():
            pulled.append(k)
            yield k, ["1", "2", "3"]

    first = next(embed_segments(FakeBackend(), endless(), max_tokens=30))
    assert first[0] == 0 and len(pulled) == 11  # ten segments fill a call; the eleventh starts the next one


def test_embed_segments_checks_its_settings():
    with pytest.raises(ValueError, match="max_tokens=0"):
        list(embed_segments(FakeBackend(), [("a", ["1"])], max_tokens=0))
    with pytest.raises(ValueError, match="window_overlap=3"):
        list(embed_segments(FakeBackend(), [("a", ["1"])], max_length=3, overlap=3))


def test_embed_segments_equals_backend_embed(backend, fixture_sentences):
    sentences = fixture_sentences[:6]
    got = dict(embed_segments(backend, enumerate(sentences)))
    for i, layers in enumerate(backend.embed(sentences)):
        assert_recomputed_close(got[i], layers)


# -- length_batches: the backend's and training's batches -----------------------------------------


def test_length_batches_longest_first_under_rows_and_budget():
    lengths = [3, 0, 7, 7, 2, 5, 9, 1]
    assert length_batches(lengths, 2, 20) == [
        [6, 2],
        [3, 5],
        [0, 4],
        [7],
    ]  # ties in input order, the empty item left out
    assert length_batches(lengths, None, 20) == [[6, 2], [3, 5], [0, 4, 7]]  # rows x longest <= 20
    assert length_batches([50, 3], None, 20) == [[0], [1]]  # one item over the budget is a batch alone
    assert length_batches([], 4, 20) == []


def test_training_batches_are_length_batches_with_their_markers():
    rng = random.Random(0)
    sentences = [["w"] * rng.randint(1, 40) for _ in range(200)]
    for i, sentence in enumerate(sentences):
        sentence[0] = str(i)
    expected = [[sentences[i] for i in batch] for batch in length_batches([len(s) + 2 for s in sentences], None, 256)]
    assert list(bucket_batches(iter(sentences), token_budget=256, buffer_size=1000)) == expected


# -- the settings checks ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -3, True, 1.5, "2", None])
def test_positive_int_names_a_bad_value(value):
    with pytest.raises(ValueError, match=f"batch_size={value!r}: expected a positive integer"):
        positive_int(value, "batch_size")


def test_positive_int_takes_numpy_integers():
    assert positive_int(np.int64(3), "n") == 3 and type(positive_int(np.int64(3), "n")) is int


def test_check_precision_names_the_precision_asked_for():
    import torch

    from spacy_elmo.runtime.configuration.validation import check_precision

    assert [
        check_precision(d) for d in (None, "half", "bf16", "float", "qint8", "auto", torch.int8, torch.bfloat16)
    ] == [
        "float32",
        "float16",
        "bfloat16",
        "float32",
        "int8",
        "auto",
        "int8",
        "bfloat16",
    ]
    for bad in ("int4", torch.float64, 3):
        with pytest.raises(ValueError, match=r"precision must be one of \['bfloat16', 'float16', 'float32', 'int8', "):
            check_precision(bad)


def test_optional_windows_checks_what_check_window_config_checks():
    from spacy_elmo.runtime.configuration.validation import check_window_config, optional_windows

    assert optional_windows(None, 5) == (None, 5) and optional_windows(np.int64(8), np.int64(2)) == (8, 2)
    for max_length, overlap in ((4, 4), (4, -1), (4, True)):
        with pytest.raises(
            ValueError, match=r"window_overlap=.*: expected an integer in \[0, 3\] \(below max_length=4\)"
        ):
            check_window_config(max_length, overlap)
    with pytest.raises(ValueError, match="max_length=0: expected a positive integer"):
        optional_windows(0, 0)
