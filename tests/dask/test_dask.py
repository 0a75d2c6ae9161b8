# ruff: noqa: E402 (the imports below need dask, which pytest.importorskip checks first)
"""spacy_elmo.dask on a LocalCluster of 2 worker processes: the same rows as ElmoVectorizer, in order;
`embed --scheduler`."""

import atexit
import logging
import pickle
import subprocess
import sys
import time
from contextlib import contextmanager

import h5py
import numpy as np
import pytest

pytest.importorskip("dask", reason="Dask is not installed (pip install -e '.[dask]')")
pytest.importorskip("distributed", reason="dask.distributed is not installed (pip install -e '.[dask]')")

pytestmark = pytest.mark.dask

import dask.array as da
import dask.bag as db
import dask.dataframe as dd
import pandas as pd
from typer.testing import CliRunner

from spacy_elmo import ElmoVectorizer, load_bilm
from spacy_elmo.cli import app
from spacy_elmo.dask import embed_texts, embed_tokens, local_cluster
from spacy_elmo.output.cluster import connect
from spacy_elmo.runtime.features.mix import mix_layers
from tests.numerics import assert_recomputed_close
from tests.output.test_embed_file import assert_same_vectors

GRAPH_BYTES_PER_PARTITION = 4096  # options and the texts themselves; the weights would be megabytes


@pytest.fixture(scope="module")
def client():
    """One LocalCluster (2 worker processes, 1 thread each) for the whole module: starting one takes seconds
    (so the tests that use it are marked slow)."""
    with local_cluster(2, dashboard_address=":0") as client:
        yield client


@pytest.fixture(scope="module")
def texts(fixture_sentences):
    """Texts of varied lengths, a repeat, an empty text and a whitespace-only one, in a known order."""
    lines = [" ".join(s) for s in fixture_sentences]
    return [*lines, "", lines[0], "   ", "one more short text .", *lines[::-1][:5]]


@pytest.mark.slow
def test_bag_rows_equal_the_vectorizer_in_order(client, fixture_dir, texts):
    bag = db.from_sequence(texts, npartitions=3)
    array = embed_texts(bag, model=fixture_dir, pooling="mean+max")
    want = ElmoVectorizer(model=fixture_dir, pooling="mean+max").transform(texts)
    assert isinstance(array, da.Array) and array.dtype == np.float32
    assert array.shape == want.shape and sum(array.chunks[0]) == len(texts) and len(array.chunks[0]) == 3
    got = array.compute()
    assert_recomputed_close(got, want)
    assert not got[texts.index("")].any() and not got[texts.index("   ")].any()  # no tokens: a zero row
    assert set(client.run(_torch_threads).values()) == {1}  # the nanny's OMP_NUM_THREADS=1; nothing of ours changed it
    loaded = client.run(_backends_loaded)  # each worker loaded the model once, whatever number of tasks it ran
    assert set(loaded.values()) <= {0, 1} and sum(loaded.values()) >= 1


def _torch_threads():
    import torch

    return torch.get_num_threads()


def _backends_loaded():
    from spacy_elmo.runtime.embedding import backend

    return len(backend._CACHE)


def test_without_dask_the_error_names_the_extra():
    code = "import sys; sys.modules['dask'] = None; import spacy_elmo.dask"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode != 0 and "pip install -e '.[dask]'" in result.stderr


def test_without_distributed_embed_on_a_cluster_names_the_extra(fixture_dir, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("a b c\n", encoding="utf-8")
    argv = ["spacy-elmo", "embed", str(source), str(tmp_path / "out.hdf5"), "--model", str(fixture_dir)]
    code = (
        "import sys; sys.modules['distributed'] = None; from spacy_elmo.cli import main; "
        f"sys.argv = {[*argv, '--no-progress', '--scheduler', 'local:2']!r}; main()"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 2 and "pip install -e '.[dask]'" in result.stderr, result.stderr
    assert "--scheduler local:2" in result.stderr and not (tmp_path / "out.hdf5").exists()


@pytest.mark.slow
def test_series_of_texts_and_bag_of_token_lists(client, fixture_dir, texts):
    series = dd.from_pandas(pd.Series(texts, name="text"), npartitions=4)
    want = ElmoVectorizer(model=fixture_dir, layers="top").transform(texts)
    assert_recomputed_close(embed_texts(series, model=fixture_dir, layers="top").compute(), want)
    tokens = [t.split() for t in texts]
    bag = db.from_sequence(tokens, npartitions=2)
    got = embed_texts(bag, model=fixture_dir, layers="top", lengths=False)
    assert np.isnan(got.shape[0])  # lengths=False: chunks unknown until computed
    assert_recomputed_close(got.compute(), ElmoVectorizer(model=fixture_dir, layers="top").transform(tokens))


@pytest.mark.slow
def test_empty_input_gives_an_empty_array(client, fixture_dir, backend):
    array = embed_texts(db.from_sequence([], npartitions=1), model=fixture_dir)
    assert array.shape == (0, backend.dim) and array.compute().shape == (0, backend.dim)


def test_graph_carries_the_model_name_not_the_weights(fixture_dir, texts):
    import cloudpickle

    array = embed_texts(db.from_sequence(texts, npartitions=3), model=fixture_dir, lengths=[len(texts) - 2, 1, 1])
    size = len(cloudpickle.dumps(dict(array.__dask_graph__())))
    text_bytes = sum(len(t) for t in texts)
    assert size < text_bytes + 3 * GRAPH_BYTES_PER_PARTITION, size
    with pytest.raises(ValueError, match="3 partitions"):
        embed_texts(db.from_sequence(texts, npartitions=3), model=fixture_dir, lengths=[1, 2])


def test_partitions_show_no_progress_bar_of_their_own(fixture_dir, texts, monkeypatch):
    """Dask says its own progress (dashboard, dask.diagnostics): a partition shows no vectorizer bar, even on a
    terminal and for long work (here: all of it, the delay set to nothing)."""
    import io

    from spacy_elmo.runtime.features import progress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    embed_texts(db.from_sequence(texts, npartitions=2), model=fixture_dir).compute(scheduler="sync")
    embed_tokens(db.from_sequence(texts, npartitions=2), model=fixture_dir).compute(scheduler="sync")
    assert terminal.getvalue() == ""


@pytest.mark.slow
def test_token_records_in_order(client, fixture_dir, backend, texts):
    tokens = [t.split() for t in texts]
    records = embed_tokens(db.from_sequence(tokens, npartitions=3), model=fixture_dir, layers="average").compute()
    assert [r["tokens"] for r in records] == tokens
    for record, layers in zip(records, backend.embed(tokens)):
        assert record["vectors"].dtype == np.float32 and record["vectors"].shape == (len(record["tokens"]), backend.dim)
        assert_recomputed_close(record["vectors"], mix_layers(layers, "average"))
    # strings: the vectorizer's own tokenization, and the mean of a text's token vectors is its pooled row
    bag = embed_tokens(dd.from_pandas(pd.Series(texts), npartitions=2), model=fixture_dir)
    arrays = bag.pluck("vectors").compute()
    pooled = ElmoVectorizer(model=fixture_dir).transform(texts)
    assert len(arrays) == len(texts) and arrays[texts.index("")].shape == (0, backend.dim)
    means = np.stack([a.mean(axis=0) if len(a) else np.zeros(backend.dim, np.float32) for a in arrays])
    assert_recomputed_close(means, pooled)


@pytest.mark.slow
def test_workers_fill_the_disk_cache_given(client, fixture_dir, texts, tmp_path):
    from spacy_elmo.runtime.embedding.cache import open_disk_cache

    cache_dir = tmp_path / "elmo-cache"
    fresh = [" ".join(reversed(t.split())) + " again" for t in texts[:6]]  # not in the workers' memory caches
    bag = db.from_sequence(fresh, npartitions=2)
    first = embed_texts(bag, model=fixture_dir, cache_dir=cache_dir).compute()
    assert len(open_disk_cache(cache_dir)) == len(set(fresh))
    assert_recomputed_close(embed_texts(bag, model=fixture_dir, cache_dir=cache_dir).compute(), first)
    client.run(_no_disk_cache, str(fixture_dir))  # the workers' shared backends keep a cache_dir: drop it


def _no_disk_cache(model):
    from spacy_elmo import load_bilm

    load_bilm(model, cache_dir=False)


def test_wrong_inputs_are_named(fixture_dir, texts):
    with pytest.raises(TypeError, match="dask Bag or a dask DataFrame Series"):
        embed_texts(texts, model=fixture_dir)
    frame = dd.from_pandas(pd.DataFrame({"text": texts}), npartitions=2)
    with pytest.raises(TypeError, match=r"df\['text'\]"):
        embed_texts(frame, model=fixture_dir)
    with pytest.raises(ValueError, match="pooling"):
        embed_texts(db.from_sequence(texts), model=fixture_dir, pooling="median")


@pytest.mark.slow
def test_parallel_post_fit_pipeline(client, fixture_dir, texts):
    pytest.importorskip("dask_ml", reason="dask-ml is not installed")
    from dask_ml.wrappers import ParallelPostFit
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    labels = [i % 2 for i in range(len(texts))]
    pipeline = make_pipeline(ElmoVectorizer(model=fixture_dir), LogisticRegression())
    wrapped = ParallelPostFit(pipeline, predict_meta=np.array([0]), predict_proba_meta=np.zeros((0, 2))).fit(
        texts, labels
    )
    assert len(pickle.dumps(wrapped)) < 20_000  # the vectorizer pickles without the model
    frame = dd.from_pandas(pd.DataFrame({"text": texts}), npartitions=3)
    assert_recomputed_close(wrapped.predict_proba(frame).compute(), wrapped.estimator.predict_proba(texts))
    column = da.from_array(np.asarray(texts, dtype=object)[:, None], chunks=(7, 1))
    assert list(wrapped.predict(column).compute()) == list(wrapped.estimator.predict(texts))


@pytest.mark.slow
def test_cli_local_cluster_file_equals_the_single_process_file(fixture_dir, fixture_sentences, tmp_path, client):
    lines = [" ".join(s) for s in fixture_sentences] * 3
    lines.insert(2, "")
    source = tmp_path / "in.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    runner = CliRunner()
    base = ["embed", str(source), "--model", str(fixture_dir), "--no-progress"]
    single = runner.invoke(app, [*base[:2], str(tmp_path / "single.hdf5"), *base[2:]])
    assert single.exit_code == 0, single.output
    on_cluster = runner.invoke(app, [*base[:2], str(tmp_path / "local.hdf5"), *base[2:], "--scheduler", "local:2"])
    assert on_cluster.exit_code == 0, on_cluster.output
    assert "Dask scheduler tcp://" in on_cluster.output and "dashboard" in on_cluster.output
    assert_same_vectors(tmp_path / "single.hdf5", tmp_path / "local.hdf5")
    address = client.scheduler.address  # an existing cluster, by address
    by_address = runner.invoke(
        app, [*base[:2], str(tmp_path / "remote.hdf5"), *base[2:], "--average", "--scheduler", address]
    )
    assert by_address.exit_code == 0, by_address.output
    runner.invoke(app, [*base[:2], str(tmp_path / "single-average.hdf5"), *base[2:], "--average"])
    assert_same_vectors(tmp_path / "single-average.hdf5", tmp_path / "remote.hdf5")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".partial")) == []


@pytest.mark.parametrize("scheduler", ["local:0", "local:two", "local", "not an address", "tcp://"])
def test_bad_scheduler_is_a_clear_error(scheduler, fixture_dir, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("a b c\n", encoding="utf-8")
    result = CliRunner().invoke(
        app, ["embed", str(source), str(tmp_path / "out.hdf5"), "--model", str(fixture_dir), "--scheduler", scheduler]
    )
    assert result.exit_code == 2 and "scheduler" in result.output and "local:N" in result.output
    assert not (tmp_path / "out.hdf5").exists()
    with pytest.raises(ValueError, match="local:N"):
        connect(scheduler)


@contextmanager
def cli_cluster(n_workers):
    """The cluster of `spacy-elmo embed --scheduler local:N`, closed as the command closes it."""
    client, close = connect(f"local:{n_workers}")
    try:
        yield client
    finally:
        close()


class Said(logging.Handler):
    """Every message a logger (and its children) handles."""

    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def test_local_cluster_has_one_definition():
    """The Dask front end's local_cluster is the one ``spacy-elmo embed --scheduler local:N`` starts its cluster with
    (output/cluster.py), not a second spelling of it."""
    from spacy_elmo.output import cluster

    assert local_cluster is cluster.local_cluster
    assert local_cluster.__module__ == "spacy_elmo.output.cluster"


@pytest.mark.slow
@pytest.mark.parametrize("opened", [local_cluster, cli_cluster])
def test_a_local_cluster_closes_without_killing_a_worker_that_exits_slowly(opened):
    """distributed's own close kills a worker process still there after 4 s, with a warning per worker; a worker
    that has imported torch can take that long on a busy machine. Here each one's exit takes longer for sure."""
    said, nanny_log = Said(), logging.getLogger("distributed.nanny")
    nanny_log.addHandler(said)
    try:
        with opened(2) as client:
            assert len(client.run(atexit.register, time.sleep, 4.5)) == 2  # each worker sleeps at exit
            start = time.perf_counter()
        waited = time.perf_counter() - start
    finally:
        nanny_log.removeHandler(said)
    assert not [m for m in said.messages if "still alive" in m or "killing" in m], said.messages
    assert waited >= 4.5  # the workers were given their time, not killed


@pytest.mark.slow
def test_cli_cluster_run_keeps_the_chosen_precision(fixture_dir, fixture_sentences, tmp_path, client):
    # The workers must load the same precision as the client, or every task would fail its model check.
    source = tmp_path / "in.txt"
    source.write_text("\n".join(" ".join(s) for s in fixture_sentences) + "\n", encoding="utf-8")
    base = ["embed", str(source), "--model", str(fixture_dir), "--no-progress", "--dtype", "bfloat16"]
    on_cluster = CliRunner().invoke(
        app, [*base[:2], str(tmp_path / "bf16.hdf5"), *base[2:], "--scheduler", client.scheduler.address]
    )
    assert on_cluster.exit_code == 0, on_cluster.output
    with h5py.File(tmp_path / "bf16.hdf5", "r") as out:
        assert out.attrs["model_fingerprint"] == load_bilm(fixture_dir, dtype="bfloat16").fingerprint
        assert out.attrs["model_fingerprint"] != load_bilm(fixture_dir).fingerprint
        exact = load_bilm(fixture_dir).embed(fixture_sentences)
        for i, layers in enumerate(exact):
            scale = np.abs(layers).max()
            assert np.abs(out[str(i)][()] - layers).max() <= 2.5e-2 * scale  # tests/bilm/test_precision.py's bf16 bound


def test_the_client_reads_the_width_from_the_options_never_the_model(fixture_dir, texts, monkeypatch, backend):
    import spacy_elmo.dask as elmo_dask

    def refuse(*args, **kwargs):
        raise AssertionError("the client loaded the model")

    monkeypatch.setattr(elmo_dask, "load_bilm", refuse)
    bag = db.from_sequence(texts, npartitions=2)
    array = embed_texts(bag, model=fixture_dir, pooling="mean+max", lengths=False)
    assert array.shape[1] == 2 * backend.dim and array.dtype == np.float32
    embed_tokens(bag, model=fixture_dir)
    with pytest.raises(ValueError, match="this model has 3 layers"):  # the parameters are still checked here
        embed_texts(bag, model=fixture_dir, layers=5, lengths=False)
    with pytest.raises(ValueError, match="dtype"):
        embed_tokens(bag, model=fixture_dir, dtype="float8")
    # layers="all": every layer side by side, the width the vectorizer's feature names count, from the options
    wide = embed_texts(bag, model=fixture_dir, layers="all", pooling="mean+max", lengths=False)
    assert wide.shape[1] == 2 * (backend.n_layers + 1) * backend.dim
    assert wide.shape[1] == len(
        ElmoVectorizer(model=fixture_dir, layers="all", pooling="mean+max").get_feature_names_out()
    )
    with pytest.raises(TypeError, match="unexpected setting 'pooling'"):  # a setting embed_tokens does not take
        embed_tokens(bag, model=fixture_dir, pooling="max")


def test_all_layers_rows_equal_the_vectorizer(fixture_dir, backend, texts):
    """Without a cluster (the synchronous scheduler): ``layers="all"`` rows and token records, as the vectorizer."""
    bag = db.from_sequence(texts, npartitions=2)
    want = ElmoVectorizer(model=fixture_dir, layers="all").transform(texts)
    got = embed_texts(bag, model=fixture_dir, layers="all").compute(scheduler="sync")
    assert got.shape == want.shape == (len(texts), (backend.n_layers + 1) * backend.dim)
    assert_recomputed_close(got, want)
    records = embed_tokens(bag, model=fixture_dir, layers="all").compute(scheduler="sync")
    assert all(r["vectors"].shape == (len(r["tokens"]), (backend.n_layers + 1) * backend.dim) for r in records)


class _FakeCluster:
    """A stand-in ``distributed.Client`` for ``cluster_chunks``: ``submit`` runs the task at once (its result: each
    sentence's tokens as an array) and remembers which tasks are in flight (submitted, result not yet taken)."""

    def __init__(self, n_workers: int):
        self.n_workers = n_workers
        self.parts: list[list[list[str]]] = []
        self.in_flight: set[str] = set()
        self.most_in_flight = 0

    def scheduler_info(self):
        return {"workers": {f"tcp://worker-{i}": {} for i in range(self.n_workers)}}

    def submit(self, function, part, *args, pure):
        import spacy_elmo.output.cluster as cluster_module

        assert function is cluster_module._sentence_chunk and args == ("m", "cpu", "float32", 8, "fp") and pure is False
        cluster, key = self, f"task-{len(self.parts)}"

        class Future:
            def result(self):
                cluster.in_flight.discard(key)
                return [np.asarray(sentence) for sentence in part]

        future = Future()
        future.key = key
        self.parts.append(part)
        self.in_flight.add(key)
        self.most_in_flight = max(self.most_in_flight, len(self.in_flight))
        return future


class _NewestFirst:
    """``distributed.as_completed`` as a cluster may answer: the tasks finish in another order than submitted."""

    def __init__(self):
        self.pending = []

    def add(self, future):
        self.pending.append(future)

    def __next__(self):
        return self.pending.pop()


def test_cluster_chunks_keeps_the_order_bounds_the_tasks_in_flight_and_counts_progress(monkeypatch):
    import distributed

    from spacy_elmo.output.cluster import EMBED_FILE_TASK_LINES, cluster_chunks

    monkeypatch.setattr(distributed, "as_completed", _NewestFirst)
    cluster = _FakeCluster(n_workers=2)
    sizes = [2 * EMBED_FILE_TASK_LINES + 100, 3, 0, 1, *[10] * 20]
    chunks = [[[f"c{c}s{s}", "x"] for s in range(n)] for c, n in enumerate(sizes)]
    progress: list[int] = []
    run = cluster_chunks(cluster, "m", "cpu", "float32", 8, "fp")
    out = []
    for i, embedded in enumerate(run(iter(chunks), progress.append)):
        assert [list(a) for a in embedded] == chunks[i]  # chunk i, its sentences in order
        assert sum(progress) >= sum(sizes[: i + 1])  # its tasks were counted as they finished
        out.append(embedded)
    assert len(out) == len(chunks) and sum(progress) == sum(sizes) and not cluster.in_flight
    # each chunk is split into tasks of at most EMBED_FILE_TASK_LINES lines, about one per worker
    assert [len(p) for p in cluster.parts[:6]] == [EMBED_FILE_TASK_LINES, EMBED_FILE_TASK_LINES, 100, 2, 1, 1]
    assert all(len(p) == 5 for p in cluster.parts[6:])
    # at most 2 tasks per worker ahead, plus the chunk being submitted (the largest: 3 tasks); not all 46 at once
    assert cluster.most_in_flight <= 2 * 2 + 3


def test_norm_rows_equal_the_vectorizer(fixture_dir, texts):
    """Without a cluster: ``norm="l2"`` rows as the vectorizer's (unit rows, zeros for texts with no tokens);
    embed_tokens takes no norm (no rows)."""
    bag = db.from_sequence(texts, npartitions=2)
    want = ElmoVectorizer(model=fixture_dir, norm="l2").transform(texts)
    got = embed_texts(bag, model=fixture_dir, norm="l2").compute(scheduler="sync")
    assert_recomputed_close(got, want)
    kept = [i for i, text in enumerate(texts) if text.strip()]
    np.testing.assert_allclose(np.linalg.norm(got[kept], axis=1), 1.0, rtol=1e-5)
    assert not got[texts.index("")].any()
    with pytest.raises(ValueError, match="norm='l3'"):
        embed_texts(bag, model=fixture_dir, norm="l3")
    with pytest.raises(TypeError, match="unexpected setting 'norm'"):
        embed_tokens(bag, model=fixture_dir, norm="l2")
