"""The ONNX runner's LSTM stacks: one graph per direction, run on two threads or one after the other, each row's steps
only as long as the row (segments of steps over the rows still running), the rows put back in the order given."""

from __future__ import annotations

import multiprocessing
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spacy_elmo.onnx import OnnxBiLM
from spacy_elmo.onnx.graph import DIRECTIONS
from spacy_elmo.onnx.manifest import GRAPH_FILES
from spacy_elmo.output.onnx_export import export_onnx

WORDS = [
    "the",
    "cat",
    "sat",
    "on",
    "a",
    "mat",
    "while",
    "seven",
    "quick",
    "foxes",
    "jumped",
    "over",
    "lazy",
    "dogs",
    "and",
    "it",
    "rained",
    "all",
    "day",
]


@pytest.fixture(scope="module")
def export(tmp_path_factory, fixture_dir) -> Path:
    folder = tmp_path_factory.mktemp("onnx") / "fixture"
    export_onnx(fixture_dir, folder)
    return folder


def _sentences(lengths: list[int]) -> list[list[str]]:
    return [[WORDS[(i * 7 + j) % len(WORDS)] for j in range(n)] for i, n in enumerate(lengths)]


def test_the_folder_holds_one_lstm_graph_per_direction(export):
    assert set(GRAPH_FILES) == {"token_encoder", *DIRECTIONS}
    assert all((export / name).is_file() for name in GRAPH_FILES.values())


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(lengths=st.lists(st.integers(1, 14), min_size=1, max_size=9))
def test_rows_of_any_lengths_in_any_order_give_what_each_gives_alone(export, lengths):
    """The graphs sort the rows longest first, run each segment of steps over the rows still running and put the rows
    back: any order of any lengths (ties, one length, one row) gives each sentence its layers alone."""
    runner = OnnxBiLM(export, token_cache_size=0, threads=2)
    batch = _sentences(lengths)
    together = runner.layers(batch)
    for sentence, layers in zip(batch, together):
        alone = runner.layers([sentence])[0]
        assert layers.shape == alone.shape == (runner.n_layers + 1, len(sentence), runner.dim)
        np.testing.assert_allclose(layers, alone, atol=1e-6 * max(1.0, float(np.abs(alone).max())), rtol=0)


def test_one_thread_and_two_give_the_same_layers(export):
    """Two threads run the directions at the same time, one runs them one after the other: the same numbers (each
    direction's graph runs on one thread either way)."""
    batch = _sentences([5, 12, 1, 9, 12, 3])
    one, two = (OnnxBiLM(export, token_cache_size=0, threads=n).layers(batch) for n in (1, 2))
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)
    assert "at the same time" in OnnxBiLM(export, token_cache_size=0, threads=2).describe()
    assert "one after the other" in OnnxBiLM(export, token_cache_size=0, threads=1).describe()


def _layers_in_child(runner: OnnxBiLM, batch: list[list[str]], queue: multiprocessing.Queue) -> None:
    queue.put(runner.layers(batch))


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs fork")
def test_a_forked_child_computes_the_same(export):
    """The parent's second-direction thread does not exist in a forked child: the child starts its own work there
    (one direction after the other) instead of waiting forever on the parent's pool."""
    runner = OnnxBiLM(export, token_cache_size=0, threads=2)
    batch = _sentences([4, 9, 2])
    expected = runner.layers(batch)  # the pool thread now exists in the parent
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_layers_in_child, args=(runner, batch, queue))
    child.start()
    got = queue.get(timeout=120)
    child.join(timeout=60)
    assert child.exitcode == 0
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)


def test_a_folder_missing_a_direction_is_told_which_file_it_lacks(export, tmp_path):
    """A folder with the manifest but not every graph (e.g. one written with a single contextualizer graph) is an
    export folder that load_bilm names the missing file of, in one line, not a folder of no known format."""
    from spacy_elmo import load_bilm
    from spacy_elmo.onnx import OnnxFolderError

    folder = tmp_path / "one-graph"
    shutil.copytree(export, folder)
    (folder / GRAPH_FILES["forward"]).rename(folder / "contextualizer.onnx")
    with pytest.raises(OnnxFolderError, match=f"no {GRAPH_FILES['forward']}, so not a whole ONNX export") as err:
        load_bilm(folder)
    assert "\n" not in str(err.value)


def test_threads_calling_at_once_get_their_own_layers(export):
    """Several threads share one runner (a web service's workers): the second-direction thread serves them in turn,
    and each caller gets the layers of its own batch."""
    from concurrent.futures import ThreadPoolExecutor

    runner = OnnxBiLM(export, token_cache_size=1000, threads=2)
    batches = [_sentences(lengths) for lengths in ([3, 8, 1], [12], [5, 5, 5, 2], [9, 4], [1], [7, 11, 6])]
    expected = [runner.layers(batch) for batch in batches]
    with ThreadPoolExecutor(4) as callers:
        got = list(callers.map(runner.layers, batches * 3))
    for layers, reference in zip(got, expected * 3):
        for a, b in zip(layers, reference):
            np.testing.assert_array_equal(a, b)
