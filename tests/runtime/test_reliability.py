"""Regressions from probing the backend as a hostile or unlucky user would: fork, threads, memory, caches."""

import os
import shutil
import sqlite3
import threading
import time
import warnings

import numpy as np
import pytest
import spacy
import torch
from typer.testing import CliRunner

import spacy_elmo.runtime.embedding.backend
import spacy_elmo.runtime.embedding.torch_runner
from spacy_elmo import load_bilm
from spacy_elmo.runtime.embedding.cache import CACHE_DIR_ENV, DB_NAME, DiskCache
from tests.numerics import assert_recomputed_close


@pytest.fixture()
def fresh_model(fixture_dir, tmp_path):
    """A copy of the fixture model at a new path, so load_bilm builds a new backend."""
    target = tmp_path / "model"
    shutil.copytree(fixture_dir, target)
    return target


def _wait_for_child(pid: int, timeout: float = 60.0) -> int:
    """The child's exit status, or kill it and fail when it hangs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    pytest.fail("the forked child hung")


# -- item 2: fork while another thread is inside embed ----------------------------------------------


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_fork_while_another_thread_embeds_does_not_deadlock_the_child(fresh_model, fixture_sentences):
    backend = load_bilm(fresh_model, cache_mb=0)
    parent = os.getpid()
    inside, release = threading.Event(), threading.Event()
    real = backend.model.contextualize_vectors

    def blocking(*args, **kwargs):
        if os.getpid() == parent:  # the parent's worker thread parks here, holding the backend's lock
            inside.set()
            release.wait(30)
        return real(*args, **kwargs)

    backend.model.contextualize_vectors = blocking
    worker = threading.Thread(target=backend.embed, args=([fixture_sentences[0]],))
    worker.start()
    try:
        assert inside.wait(30)
        pid = os.fork()
        if pid == 0:  # the child: its copy of the lock was held by a thread that does not exist here
            code = 1
            try:
                out = backend.embed([["The", "bank", "."]])
                code = 0 if out[0].shape == (3, 3, 32) and np.isfinite(out[0]).all() else 1
            finally:
                os._exit(code)
        assert _wait_for_child(pid) == 0
    finally:
        release.set()
        worker.join()
        del backend.model.contextualize_vectors


# -- item 7: torch's thread count is never changed for other threads --------------------------------


@pytest.mark.skipif(torch.get_num_threads() < 2, reason="needs torch on 2 or more threads")
def test_threads_started_during_an_embed_keep_the_process_thread_count(fresh_model, fixture_sentences):
    backend = load_bilm(fresh_model, cache_mb=0)
    expected = torch.get_num_threads()
    inside_counts = []
    real = backend.model.contextualize_vectors

    def recording(*args, **kwargs):
        inside_counts.append(torch.get_num_threads())
        time.sleep(0.002)  # give the probe threads time to start while the limit is active
        return real(*args, **kwargs)

    backend.model.contextualize_vectors = recording
    seen = []
    stop = threading.Event()

    def probe():
        while not stop.is_set() and len(seen) < 100:
            t = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
            t.start()
            t.join()

    prober = threading.Thread(target=probe)
    try:
        prober.start()
        for sentence in fixture_sentences * 2:  # one sentence per call: small work, run on one thread
            backend.embed([sentence])
            backend.clear_cache()
    finally:
        stop.set()
        prober.join()
        del backend.model.contextualize_vectors
    assert set(inside_counts) == {1}  # small batches still run single-threaded in the calling thread
    assert seen and set(seen) == {expected}, f"{seen.count(1)} of {len(seen)} new threads saw 1 thread"
    assert torch.get_num_threads() == expected


def test_eight_threads_on_one_backend_give_the_serial_results(fresh_model, fixture_sentences):
    backend = load_bilm(fresh_model, cache_mb=0)
    groups = [fixture_sentences[i::8] for i in range(8)]
    serial = [backend.embed(group) for group in groups]
    results = [None] * 8
    errors = []

    def work(i):
        try:
            for _ in range(3):
                results[i] = backend.embed(groups[i], batch_size=3)
        except Exception as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for got, expected in zip(results, serial):
        assert len(got) == len(expected)
        for a, b in zip(got, expected):
            assert_recomputed_close(a, b)  # other batch compositions than the serial run


# -- item 9: numpy running out of memory is retried in halves like torch -----------------------------


def test_numpy_memory_error_in_a_batch_is_retried_in_halves(fresh_model, fixture_sentences, monkeypatch):
    backend = load_bilm(fresh_model, cache_mb=0)
    expected = backend.embed(fixture_sentences[:8], batch_size=8)
    real = spacy_elmo.runtime.embedding.torch_runner.batch_token_vectors  # the torch runner's char-CNN step
    sizes = []

    def tight(cache, batch):
        sizes.append(len(batch))
        if len(batch) > 2:
            np.empty(1 << 62, dtype=np.uint8)  # numpy's own MemoryError, as from the char-id step
        return real(cache, batch)

    monkeypatch.setattr(spacy_elmo.runtime.embedding.torch_runner, "batch_token_vectors", tight)
    monkeypatch.setattr(backend, "_warned_oom", False)
    with pytest.warns(ResourceWarning, match="retrying in halves"):
        got = backend.embed(fixture_sentences[:8], batch_size=8)
    assert sizes[0] == 8 and max(sizes[1:]) <= 4
    for a, b in zip(got, expected):
        assert_recomputed_close(a, b)


# -- item 3: a cache directory that cannot be used ---------------------------------------------------


def test_cache_dir_under_a_regular_file_warns_and_embeds(
    fresh_model, tmp_path, monkeypatch, backend, fixture_sentences
):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(CACHE_DIR_ENV, str(blocker / "cache"))
    b = load_bilm(fresh_model)
    assert b.disk_cache is not None
    with pytest.warns(RuntimeWarning, match="disk cache .* unusable"):
        out = b.embed(fixture_sentences[:2])
    for got, want in zip(out, backend.embed(fixture_sentences[:2])):
        assert_recomputed_close(got, want)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # turned off: no further warnings, no errors
        assert b.embed(fixture_sentences[2:3])[0].shape[1] == len(fixture_sentences[2])
        assert len(b.disk_cache) == 0 and b.disk_cache.total_bytes() == 0
        b.clear_cache(disk=True)


def test_spacy_component_and_cli_embed_with_an_unusable_cache_dir(fixture_dir, tmp_path, monkeypatch):
    from spacy_elmo.cli import app

    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    monkeypatch.setenv(CACHE_DIR_ENV, str(blocker / "cache"))
    model = tmp_path / "model"
    shutil.copytree(fixture_dir, model)  # a new backend, which reads the environment variable
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": str(model)})
    with pytest.warns(RuntimeWarning, match="unusable"):
        assert nlp("The bank .")._.elmo_layers.shape == (3, 3, 32)
    text = tmp_path / "in.txt"
    text.write_text("a b c\nd e\n", encoding="utf-8")
    shutil.copytree(fixture_dir, tmp_path / "model2")
    result = CliRunner().invoke(
        app, ["embed", str(text), str(tmp_path / "out.hdf5"), "--model", str(tmp_path / "model2")]
    )
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out.hdf5").is_file()


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_cache_dir_without_permission_warns(fresh_model, tmp_path, fixture_sentences):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    b = load_bilm(fresh_model, cache_dir=locked / "cache")
    with pytest.warns(RuntimeWarning, match="unusable"):
        assert len(b.embed(fixture_sentences[:1])) == 1


def test_len_total_bytes_and_clear_on_a_corrupt_database(tmp_path):
    (tmp_path / DB_NAME).write_bytes(b"this is not an sqlite database" * 100)
    cache = DiskCache(tmp_path)
    with pytest.warns(RuntimeWarning, match="unusable"):
        assert len(cache) == 0
    assert cache.disabled and cache.total_bytes() == 0
    cache.clear()  # no error: the cache is off
    assert (tmp_path / DB_NAME).read_bytes().startswith(b"this is not")  # the user's file is left alone


# -- item 10: a damaged row is a miss -------------------------------------------------------------


def test_flipped_byte_in_a_stored_row_is_recomputed(fresh_model, tmp_path, fixture_sentences, monkeypatch):
    cache_dir = tmp_path / "cache"
    b = load_bilm(fresh_model, cache_dir=cache_dir, cache_mb=0)
    first = b.embed(fixture_sentences[:1])[0]
    con = sqlite3.connect(cache_dir / DB_NAME)
    (data,) = con.execute("SELECT data FROM vectors").fetchone()
    damaged = bytearray(data)
    damaged[len(damaged) // 2] ^= 0x40  # same length, one bit of one float changed
    with con:
        con.execute("UPDATE vectors SET data = ?", (bytes(damaged),))
    calls = []
    real = b._embed_batch
    monkeypatch.setattr(b, "_embed_batch", lambda batch: calls.append(len(batch)) or real(batch))
    again = b.embed(fixture_sentences[:1])[0]
    assert calls == [1]  # a miss: computed again, not served damaged
    np.testing.assert_array_equal(again, first)  # same sentence, same batch shape: the same computation
    (stored,) = con.execute("SELECT data FROM vectors").fetchone()
    assert stored == data  # the good row replaced the damaged one
    con.close()


@pytest.mark.parametrize(
    "column, value",
    [
        ("data", 7),
        ("data", "text, not bytes"),
        ("used", "yesterday"),
        ("layers", "three"),
        ("checksum", b"\x01"),
        ("dim", 1.5),
    ],
)
def test_a_row_with_a_wrongly_typed_value_is_a_miss(
    fresh_model, tmp_path, fixture_sentences, monkeypatch, column, value
):
    """sqlite does not enforce column types: a damaged row (flipped serial-type byte, a foreign writer) is
    recomputed."""
    cache_dir = tmp_path / "cache"
    b = load_bilm(fresh_model, cache_dir=cache_dir, cache_mb=0)
    first = b.embed(fixture_sentences[:1])[0]
    con = sqlite3.connect(cache_dir / DB_NAME)
    (data,) = con.execute("SELECT data FROM vectors").fetchone()
    with con:
        con.execute(f"UPDATE vectors SET {column} = ?", (value,))
    calls = []
    real = b._embed_batch
    monkeypatch.setattr(b, "_embed_batch", lambda batch: calls.append(len(batch)) or real(batch))
    np.testing.assert_array_equal(b.embed(fixture_sentences[:1])[0], first)
    assert calls == [1]  # a miss: dropped and computed again
    rows = con.execute("SELECT data, typeof(used), typeof(layers) FROM vectors").fetchall()
    assert rows == [(data, "real", "integer")]  # the damaged row is gone, a good one took its place
    con.close()


def test_a_cache_from_before_checksums_is_replaced(tmp_path):
    con = sqlite3.connect(tmp_path / DB_NAME)
    con.execute(
        "CREATE TABLE vectors (id INTEGER PRIMARY KEY, fingerprint TEXT NOT NULL, key BLOB NOT NULL, "
        "layers INTEGER NOT NULL, tokens INTEGER NOT NULL, dim INTEGER NOT NULL, data BLOB NOT NULL, "
        "used REAL NOT NULL, UNIQUE (fingerprint, key))"
    )
    con.execute("INSERT INTO vectors VALUES (1, 'fp', x'00', 1, 1, 1, x'00000000', 0)")
    con.commit()
    con.close()
    cache = DiskCache(tmp_path)
    cache.put_many("fp", [(("a",), np.ones((1, 1, 4), dtype=np.float32))])
    assert len(cache) == 1 and cache.total_bytes() == 16
    np.testing.assert_array_equal(cache.get_many("fp", [("a",)], 1, 4)[("a",)], np.ones((1, 1, 4)))
