"""Parity with the reference ELMo (AllenNLP / bilm-tf fixture outputs)."""

import json

import h5py
import numpy as np
import pytest
import torch

from spacy_elmo.bilm import batch_to_char_ids, load_model

ATOL, RTOL = 1e-6, 1e-5


@pytest.fixture(scope="module")
def model(fixture_dir):
    return load_model(fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5")


@pytest.fixture(scope="module")
def reference_batches(fixture_dir):
    groups = json.loads((fixture_dir / "sentences.json").read_text())
    files = [h5py.File(fixture_dir / f"lm_embeddings_{k}.hdf5", "r") for k in range(3)]
    batches = []
    for i in range(10):
        sentences = [groups[k][i].split() for k in range(3)]
        expected = [np.concatenate(list(f[str(i)][...]), axis=-1) for f in files]
        batches.append((sentences, expected))
    return batches


def test_token_embeddings_match_reference(model, fixture_dir):
    words = (fixture_dir / "vocab_test.txt").read_text(encoding="utf-8").split("\n")
    assert len(words) == 458
    reference = h5py.File(fixture_dir / "elmo_token_embeddings.hdf5", "r")["embedding"][...]
    # as in AllenNLP's test: rows of 50 tokens, the last one padded with all-zero tokens
    rows = [words[i : i + 50] for i in range(0, len(words), 50)]
    with torch.inference_mode():
        ids = torch.as_tensor(batch_to_char_ids(rows))
        ours = model.encode_tokens(ids).reshape(-1, 16)[: len(words)].numpy()
    diff = np.abs(ours - reference).max()
    print(f"token embedding max abs diff: {diff:.3g}")
    np.testing.assert_allclose(ours, reference, atol=ATOL, rtol=RTOL)


@pytest.mark.slow
def test_stateful_replay_matches_all_30_sentences(model, reference_batches):
    state, worst = None, 0.0
    for sentences, expected in reference_batches:
        with torch.inference_mode():
            activations, mask, state = model(torch.as_tensor(batch_to_char_ids(sentences)), state)
        assert mask.sum(dim=1).tolist() == [len(s) for s in sentences]
        for row, reference in enumerate(expected):
            ours = activations[2, row, : len(sentences[row])].numpy()
            worst = max(worst, float(np.abs(ours - reference).max()))
            np.testing.assert_allclose(ours, reference, atol=ATOL, rtol=RTOL)
    print(f"stateful replay max abs diff: {worst:.3g}")


def test_first_batch_matches_in_stateless_mode(model, reference_batches):
    sentences, expected = reference_batches[0]
    with torch.inference_mode():
        activations, _, _ = model(torch.as_tensor(batch_to_char_ids(sentences)))
    for row, reference in enumerate(expected):
        np.testing.assert_allclose(activations[2, row, : len(sentences[row])].numpy(), reference, atol=ATOL, rtol=RTOL)


def test_stateless_mode_really_is_stateless(model, reference_batches):
    """Without carried state, batch 1 differs from the stateful reference (README: by up to ~2.6)."""
    sentences, expected = reference_batches[1]
    with torch.inference_mode():
        activations, _, _ = model(torch.as_tensor(batch_to_char_ids(sentences)))
        again, _, _ = model(torch.as_tensor(batch_to_char_ids(sentences)))
    assert torch.equal(activations, again)
    diff = max(np.abs(activations[2, r, : len(s)].numpy() - expected[r]).max() for r, s in enumerate(sentences))
    assert diff > 1e-2
