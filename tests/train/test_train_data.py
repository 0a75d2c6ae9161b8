"""Corpus reading, sentence splitting, vocabulary and batch tensors of the trainer (no training here)."""

import random
from collections import Counter

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from spacy_elmo.bilm.chars import token_to_char_ids
from spacy_elmo.bilm.encoder import CharCNNEncoder
from spacy_elmo.train.corpus.batching import CharCache, Vocabulary, bucket_batches, mixed_sentences, tensorize
from spacy_elmo.train.corpus.sentences import Source, make_sources, read_sentences, split_sentences


def test_split_sentences_after_final_punctuation_and_keeps_closing_quotes():
    tokens = ["He", "said", '"', "stop", ".", '"', "Then", "he", "left", "!", "Why", "?"]
    assert list(split_sentences(tokens, 100)) == [
        ["He", "said", '"', "stop", ".", '"'],
        ["Then", "he", "left", "!"],
        ["Why", "?"],
    ]


def test_split_sentences_cuts_long_sentences():
    tokens = [str(i) for i in range(25)]
    pieces = list(split_sentences(tokens, 10))
    assert [len(p) for p in pieces] == [10, 10, 5]
    assert [token for piece in pieces for token in piece] == tokens


def test_raw_text_joins_wrapped_lines_into_paragraphs(tmp_path):
    path = tmp_path / "book.txt"
    path.write_text("It was a bright\ncold day. The clocks\nwere striking.\n\n\nNew paragraph here\n", encoding="utf-8")
    sentences = list(read_sentences(Source(path, "raw", "whitespace")))
    assert sentences == [
        ["It", "was", "a", "bright", "cold", "day.", "The", "clocks", "were", "striking."],
        ["New", "paragraph", "here"],
    ]
    spacy_sentences = list(read_sentences(Source(path, "raw", "spacy")))
    assert spacy_sentences[0] == ["It", "was", "a", "bright", "cold", "day", "."]
    assert spacy_sentences[1] == ["The", "clocks", "were", "striking", "."]


def test_line_files_skip_blank_lines(tmp_path):
    path = tmp_path / "lines.txt"
    path.write_text(" a b . c d \n \n\n e f \n", encoding="utf-8")
    assert list(read_sentences(Source(path))) == [["a", "b", "."], ["c", "d"], ["e", "f"]]


def test_make_sources_names_missing_files_and_bad_options(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nope\.txt"):
        make_sources([tmp_path / "nope.txt"])
    with pytest.raises(FileNotFoundError, match=r"no \*\.txt"):
        make_sources([tmp_path])
    (tmp_path / "x.txt").write_text("a\n")
    with pytest.raises(ValueError, match="tokenizer"):
        make_sources([tmp_path / "x.txt"], tokenizer="nltk")
    assert [s.path.name for s in make_sources([tmp_path])] == ["x.txt"]


def test_vocabulary_orders_by_frequency_and_round_trips(tmp_path):
    counts = Counter({"the": 5, "a": 5, "cat": 2, "rare": 1})
    vocab = Vocabulary.build(counts, max_size=6, min_count=2)
    assert vocab.words == ["<S>", "</S>", "<UNK>", "a", "the", "cat"]
    assert vocab.id("rare") == vocab.id("never seen") == 2
    assert len(Vocabulary.build(counts, max_size=4)) == 4
    vocab.save(tmp_path / "vocab.txt")
    assert Vocabulary.load(tmp_path / "vocab.txt").words == vocab.words
    with pytest.raises(ValueError, match="must start with"):
        Vocabulary(["a", "b", "c"])


def test_bucket_batches_respect_the_token_budget_and_keep_every_sentence():
    rng = random.Random(0)
    sentences = [["w"] * rng.randint(1, 30) for _ in range(500)]
    batches = list(bucket_batches(iter(sentences), token_budget=256, buffer_size=100, rng=random.Random(1)))
    assert sum(len(b) for b in batches) == 500
    for batch in batches:
        assert len(batch) == 1 or len(batch) * (max(len(s) for s in batch) + 2) <= 256
    again = list(bucket_batches(iter(sentences), token_budget=256, buffer_size=100, rng=random.Random(1)))
    assert again == batches


def test_mixed_sentences_interleave_all_sources_reproducibly(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("".join(f"a{i}\n" for i in range(50)))
    b.write_text("".join(f"b{i}\n" for i in range(50)))
    sources = make_sources([a, b])
    mixed = [s[0] for s in mixed_sentences(sources, seed=3)]
    assert sorted(mixed) == sorted([f"a{i}" for i in range(50)] + [f"b{i}" for i in range(50)])
    assert mixed[:50] != [f"a{i}" for i in range(50)]  # interleaved, not one file after the other
    assert [s[0] for s in mixed_sentences(sources, seed=3)] == mixed
    assert [x for x in mixed if x[0] == "a"] == [f"a{i}" for i in range(50)]  # each file keeps its order


def test_tensorize_builds_boundaries_targets_and_unique_chars():
    vocab = Vocabulary(["<S>", "</S>", "<UNK>", "the", "cat"])
    batch = tensorize([["the", "cat", "the"], ["dog"]], vocab)
    assert batch.lengths.tolist() == [5, 3]
    assert batch.word_ids.tolist() == [[0, 3, 4, 3, 1], [0, 2, 1, 0, 0]]
    assert batch.n_words == 4 and batch.n_predictions == 6
    assert batch.chars.shape == (5, 50)  # <S>, </S>, the, cat, dog: each once
    rows = batch.token_index[0, :5].tolist()
    assert rows[1] == rows[3]
    np.testing.assert_array_equal(batch.chars[batch.token_index[1, 1]].numpy(), token_to_char_ids("dog"))


def test_cropped_char_ids_give_exactly_the_full_cnn_output():
    torch.manual_seed(0)
    encoder = CharCNNEncoder([(1, 4), (3, 8), (5, 8)], 4, 262, 1, 6)
    with torch.no_grad():
        for p in encoder.parameters():
            p.normal_()
    vocab = Vocabulary(["<S>", "</S>", "<UNK>"])
    sentences = [["a", "tiny", "sentence"], ["x" * 60, "réservé"]]
    full = tensorize(sentences, vocab)
    cropped = tensorize([["a", "tiny", "sentence"]], vocab, crop_width=5)
    assert cropped.chars.shape[1] == len("sentence") + 2 + 5
    with torch.no_grad():
        expected = encoder(tensorize([["a", "tiny", "sentence"]], vocab).chars)
        torch.testing.assert_close(encoder(cropped.chars), expected, rtol=0, atol=0)
        long_cropped = tensorize(sentences, vocab, crop_width=5)
        assert long_cropped.chars.shape[1] == 50  # a 60-char token keeps all 50 columns
        torch.testing.assert_close(encoder(long_cropped.chars), encoder(full.chars), rtol=0, atol=0)


def test_architecture_from_preset_or_options_file(tmp_path):
    import json

    from spacy_elmo.train.network.presets import PRESETS, build_options

    small = build_options("small")
    assert small.projection_dim == PRESETS["small"]["lstm"]["projection_dim"] and small.cell_clip is None
    custom = json.loads(json.dumps(PRESETS["tiny"]))
    custom["lstm"]["dim"] = 48
    (tmp_path / "arch.json").write_text(json.dumps(custom))
    assert build_options(tmp_path / "arch.json").cell_dim == 48
    del custom["lstm"]["projection_dim"]
    (tmp_path / "bad.json").write_text(json.dumps(custom))
    with pytest.raises(ValueError, match=r"bad\.json.*projection_dim"):
        build_options(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="unknown architecture 'huge'"):
        build_options("huge")


class CharCacheMachine(RuleBasedStateMachine):
    """The trainer's char-id cache against a plain dict: always the token's own ids, never more than its bound."""

    @initialize(max_size=st.integers(0, 6))
    def start(self, max_size: int) -> None:
        self.cache = CharCache(max_size)
        self.seen: dict[str, None] = {}  # the model: the first max_size distinct tokens asked for are kept

    @rule(token=st.one_of(st.sampled_from(["the", "bank", "Zürich", "", "x" * 60]), st.text(max_size=8)))
    def ids(self, token: str) -> None:
        np.testing.assert_array_equal(self.cache(token), token_to_char_ids(token))
        if len(self.seen) < self.cache.max_size:
            self.seen.setdefault(token)

    @invariant()
    def bounded(self) -> None:
        assert list(self.cache.cache) == list(self.seen)
        assert len(self.cache.cache) <= self.cache.max_size


TestCharCacheMachine = CharCacheMachine.TestCase
TestCharCacheMachine.settings = settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
