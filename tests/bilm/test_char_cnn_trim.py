"""The char CNN skips trailing padding columns and buckets words by length: same numbers as the full 50 columns."""

import pytest
import torch

from spacy_elmo.bilm import inference
from spacy_elmo.bilm.chars import MAX_CHARS_PER_TOKEN, tokens_to_char_ids
from spacy_elmo.bilm.encoder import BUCKET_ROWS, CharCNNEncoder, content_lengths, trim_padding
from tests.numerics import assert_recomputed_close

FILTERS = [(1, 4), (2, 8), (3, 16), (4, 32), (5, 64)]


def full_width_reference(encoder: CharCNNEncoder, char_ids: torch.Tensor) -> torch.Tensor:
    """The textbook char CNN: every filter over all 50 columns, max over time, activation, highway, projection."""
    chars = encoder.char_embed(char_ids).transpose(1, 2)
    x = torch.cat([encoder.activation(conv(chars).max(dim=-1).values) for conv in encoder.convs], dim=-1)
    for highway in encoder.highways:
        x = highway(x)
    return encoder.projection(x)


def make_encoder(seed: int = 0) -> CharCNNEncoder:
    torch.manual_seed(seed)
    encoder = CharCNNEncoder(FILTERS, char_embed_dim=4, n_characters=262, n_highway=2, projection_dim=16)
    with torch.no_grad():
        encoder.char_embed.weight.normal_()
        encoder.char_embed.weight[0].zero_()
    return encoder


def word_list(n: int):
    words = [("abcdefghij" * 5)[: 1 + (i * 7) % 23] + str(i) for i in range(n)]
    words[3] = "x" * 48  # fills all 50 columns: no trailing padding at all
    words[5] = "é" * 30  # 60 bytes, cut to 48
    return [*words, "<S>", "</S>", "a"]


def test_trim_keeps_max_width_padding_columns():
    ids = torch.as_tensor(tokens_to_char_ids(["ab", "abcd"]))  # BOW + 4 bytes + EOW = 6 columns of content
    assert content_lengths(ids).tolist() == [4, 6]
    assert trim_padding(ids, 5).shape == (2, 6 + 5)
    long_word = torch.as_tensor(tokens_to_char_ids(["y" * 48]))
    assert trim_padding(long_word, 5).shape == (1, MAX_CHARS_PER_TOKEN)
    padding_tokens = torch.zeros(3, MAX_CHARS_PER_TOKEN, dtype=torch.long)
    assert trim_padding(padding_tokens, 5).shape == (3, 5)


# the two ways to run the encoder: the reference path (conv1d) and the inference path (one matmul)
PATHS = {"reference": lambda encoder, ids: encoder(ids), "inference": inference.token_vectors_without_autograd}


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("n_words", [7, 40, 2 * BUCKET_ROWS + 37])
def test_trimmed_and_bucketed_cnn_equals_full_width(n_words, path):
    encoder = make_encoder()
    words = word_list(n_words)
    ids = torch.as_tensor(tokens_to_char_ids(words))
    ids = torch.cat([ids, torch.zeros(2, MAX_CHARS_PER_TOKEN, dtype=torch.long)])  # padding tokens too
    with torch.no_grad():
        expected = full_width_reference(encoder, ids)
        got = PATHS[path](encoder, ids)
    assert got.shape == expected.shape
    assert_recomputed_close(got, expected)


@pytest.mark.parametrize("path", sorted(PATHS))
def test_short_batch_without_the_long_word_equals_full_width(path):
    encoder = make_encoder(1)
    ids = torch.as_tensor(tokens_to_char_ids(["a", "to", "the", "bank", "."]))
    assert trim_padding(ids, encoder.max_width).shape[1] < MAX_CHARS_PER_TOKEN
    with torch.no_grad():
        assert_recomputed_close(PATHS[path](encoder, ids), full_width_reference(encoder, ids))


def test_gradients_match_full_width():
    words = word_list(2 * BUCKET_ROWS + 5)
    ids = torch.as_tensor(tokens_to_char_ids(words))
    grads = []
    for forward in (lambda e: e(ids), lambda e: full_width_reference(e, ids)):
        encoder = make_encoder(2)
        (forward(encoder) ** 2).sum().backward()
        grads.append({name: p.grad.clone() for name, p in encoder.named_parameters()})
    for name in grads[0]:
        assert_recomputed_close(grads[0][name], grads[1][name], err_msg=name)


@pytest.mark.parametrize("path", sorted(PATHS))
def test_forward_buckets_large_batches(path, monkeypatch):
    encoder = make_encoder()
    ids = torch.as_tensor(tokens_to_char_ids(word_list(2 * BUCKET_ROWS)))
    widths = []
    name = "convolve" if path == "reference" else "convolve_as_matmul"  # the kernel each path convolves with
    real_convolve = getattr(encoder, name)
    monkeypatch.setattr(encoder, name, lambda part: widths.append(len(part)) or real_convolve(part))
    with torch.no_grad():
        PATHS[path](encoder, ids)
    assert len(widths) == 3 and max(widths) == BUCKET_ROWS


@pytest.mark.parametrize("path", sorted(PATHS))
def test_no_tokens_gives_an_empty_result(path):
    encoder = make_encoder()
    with torch.no_grad():
        assert PATHS[path](encoder, torch.zeros(0, MAX_CHARS_PER_TOKEN, dtype=torch.long)).shape == (0, 16)
