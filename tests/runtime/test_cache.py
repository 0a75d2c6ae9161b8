"""The embedding caches: in-memory LRU and the sqlite disk cache (processes, killed writers, eviction, fingerprints)."""

import json
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time

import h5py
import numpy as np
import pytest

import spacy_elmo.runtime.embedding.cache
from spacy_elmo import load_bilm
from spacy_elmo.runtime.embedding.cache import CACHE_DIR_ENV, DB_NAME, DiskCache, MemoryCache, tokens_key
from tests.numerics import assert_recomputed_close


@pytest.fixture()
def fresh_model(fixture_dir, tmp_path):
    """A copy of the fixture model at a new path, so load_bilm builds a new backend with default caches."""
    target = tmp_path / "model"
    shutil.copytree(fixture_dir, target)
    return target


@pytest.fixture()
def exact(backend, fixture_sentences):
    """Reference activations computed without any cache (in other batches: compare with assert_recomputed_close)."""
    backend.clear_cache()
    size = backend.memory_cache.max_mb
    backend.configure_cache(cache_mb=0)
    try:
        return {tuple(s): a for s, a in zip(fixture_sentences, backend.embed(fixture_sentences))}
    finally:
        backend.configure_cache(cache_mb=size)


def _no_compute(backend, monkeypatch):
    def fail(batch):
        raise AssertionError(f"computed {len(batch)} sentences that should have come from the cache")

    monkeypatch.setattr(backend, "_embed_batch", fail)


def test_memory_cache_hits_are_equal_private_copies(fresh_model, fixture_sentences, exact, monkeypatch):
    b = load_bilm(fresh_model)
    assert b.memory_cache.max_mb == 256 and b.disk_cache is None
    first = b.embed(fixture_sentences[:5])
    _no_compute(b, monkeypatch)
    second = b.embed(fixture_sentences[:5])
    for a, c, s in zip(first, second, fixture_sentences):
        np.testing.assert_array_equal(a, c)
        assert_recomputed_close(c, exact[tuple(s)])
        assert c.flags.writeable and not np.shares_memory(a, c)
    second[0][:] = 0  # the caller's array is theirs: the cache is unaffected
    np.testing.assert_array_equal(b.embed(fixture_sentences[:1])[0], first[0])


def test_repeated_sentences_are_computed_once(fresh_model, fixture_sentences):
    b = load_bilm(fresh_model, cache_mb=0)
    calls = []
    original = b._embed_batch
    b._embed_batch = lambda batch: calls.append(len(batch)) or original(batch)
    out = b.embed([fixture_sentences[0], fixture_sentences[1], fixture_sentences[0]])
    assert sum(calls) == 2
    np.testing.assert_array_equal(out[0], out[2])
    assert not np.shares_memory(out[0], out[2])


def test_memory_cache_stays_within_its_bound():
    cache = MemoryCache(max_mb=1)
    for i in range(40):
        cache.put(("s", i), np.full((3, 10, 1000), i, dtype=np.float32))  # 120 kB each
        assert cache.nbytes <= 2**20
    assert len(cache) == 8 and cache.get(("s", 0)) is None and cache.get(("s", 39))[0, 0, 0] == 39
    cache.max_mb = 0.25
    assert len(cache) == 2
    cache.put(("big",), np.zeros((3, 100, 1000), dtype=np.float32))  # larger than the budget: not stored
    assert cache.get(("big",)) is None
    with pytest.raises(ValueError, match="cache_mb"):
        cache.max_mb = -1


def test_disk_cache_serves_a_new_process_without_recomputing(
    fresh_model, tmp_path, fixture_sentences, exact, monkeypatch
):
    b = load_bilm(fresh_model, cache_dir=tmp_path / "cache", cache_mb=0)
    b.embed(fixture_sentences[:8])
    assert (tmp_path / "cache" / DB_NAME).is_file() and len(b.disk_cache) == 8
    b.clear_cache()  # memory caches only: as in a new process
    _no_compute(b, monkeypatch)
    for s, a in zip(fixture_sentences[:8], b.embed(fixture_sentences[:8])):
        assert_recomputed_close(a, exact[tuple(s)])


def test_other_weights_never_get_stale_vectors(fresh_model, tmp_path, fixture_sentences, exact):
    cache_dir = tmp_path / "shared_cache"
    original = load_bilm(fresh_model, cache_dir=cache_dir)
    original.embed(fixture_sentences[:4])
    changed_dir = tmp_path / "changed"
    shutil.copytree(fresh_model, changed_dir)
    with h5py.File(changed_dir / "lm_weights.hdf5", "a") as f:
        f["CNN_proj/b_proj"][0] += 1.0
    changed = load_bilm(changed_dir, cache_dir=cache_dir)
    assert changed.fingerprint != original.fingerprint
    cached_run = changed.embed(fixture_sentences[:4])
    changed.configure_cache(cache_mb=0, cache_dir=False)
    changed.clear_cache()
    uncached = changed.embed(fixture_sentences[:4])
    for s, a, u in zip(fixture_sentences, cached_run, uncached):
        assert_recomputed_close(a, u)
        assert np.abs(a - exact[tuple(s)]).max() > 1e-3
    assert len(original.disk_cache) == 8  # both models' entries, side by side


_WRITER = textwrap.dedent(
    """
    import json, sys
    from spacy_elmo import load_bilm
    model, cache_dir, sentences = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    backend = load_bilm(model, cache_dir=cache_dir, cache_mb=0)
    for start in range(0, len(sentences), 2):  # many small transactions, interleaved with the other process
        backend.embed(sentences[start : start + 2])
    """
)


def test_two_processes_write_one_cache(fresh_model, tmp_path, fixture_sentences, exact, monkeypatch):
    cache_dir = tmp_path / "cache"
    first, second = fixture_sentences[:20], fixture_sentences[10:30]  # 10 sentences in common
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-W",
                "error::RuntimeWarning",
                "-c",
                _WRITER,
                str(fresh_model),
                str(cache_dir),
                json.dumps(part),
            ],
            stderr=subprocess.PIPE,
            text=True,
        )
        for part in (first, second)
    ]
    errors = [p.communicate(timeout=300)[1] for p in procs]  # a writer that turned its cache off fails here
    assert [p.returncode for p in procs] == [0, 0], errors
    con = sqlite3.connect(cache_dir / DB_NAME)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert con.execute("SELECT COUNT(*) FROM vectors").fetchone()[0] == 30
    con.close()
    b = load_bilm(fresh_model, cache_dir=cache_dir, cache_mb=0)
    _no_compute(b, monkeypatch)
    for s, a in zip(fixture_sentences, b.embed(fixture_sentences)):
        assert_recomputed_close(a, exact[tuple(s)])


_KILLED = textwrap.dedent(
    """
    import os, signal, sqlite3, sys
    from spacy_elmo.runtime.embedding.cache import tokens_key
    con = sqlite3.connect(sys.argv[1], isolation_level=None)
    con.execute("BEGIN IMMEDIATE")
    con.execute(
        "INSERT INTO vectors (fingerprint, key, layers, tokens, dim, data, checksum, used) "
        "VALUES (?, ?, 3, 1, 32, ?, 0, 0)",
        (sys.argv[2], tokens_key(sys.argv[3].split()), b"half-written"),
    )
    os.kill(os.getpid(), signal.SIGKILL)  # dies inside the transaction
    """
)


def test_killed_writer_leaves_no_entry(fresh_model, tmp_path, fixture_sentences, exact):
    cache_dir = tmp_path / "cache"
    b = load_bilm(fresh_model, cache_dir=cache_dir, cache_mb=0)
    b.embed(fixture_sentences[:2])
    victim = fixture_sentences[5]
    proc = subprocess.run(
        [sys.executable, "-c", _KILLED, str(cache_dir / DB_NAME), b.fingerprint, " ".join(victim)], timeout=120
    )
    assert proc.returncode == -9
    assert len(b.disk_cache) == 2  # the killed transaction is gone
    assert_recomputed_close(b.embed([victim])[0], exact[tuple(victim)])
    assert len(b.disk_cache) == 3  # and the database still takes writes


def test_broken_entry_is_recomputed(fresh_model, tmp_path, fixture_sentences, exact):
    cache_dir = tmp_path / "cache"
    b = load_bilm(fresh_model, cache_dir=cache_dir, cache_mb=0)
    b.embed(fixture_sentences[:1])
    con = sqlite3.connect(cache_dir / DB_NAME)
    with con:
        con.execute("UPDATE vectors SET data = substr(data, 1, 100)")
    con.close()
    assert_recomputed_close(b.embed(fixture_sentences[:1])[0], exact[tuple(fixture_sentences[0])])
    con = sqlite3.connect(cache_dir / DB_NAME)
    (size,) = con.execute("SELECT length(data) FROM vectors").fetchone()
    assert size == 4 * 3 * len(fixture_sentences[0]) * 32  # replaced by a good entry
    con.close()


def test_corrupt_database_file_warns_and_still_embeds(fresh_model, tmp_path, fixture_sentences, exact):
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    (cache_dir / DB_NAME).write_bytes(b"this is not an sqlite database" * 100)
    b = load_bilm(fresh_model, cache_dir=cache_dir, cache_mb=0)
    with pytest.warns(RuntimeWarning, match="disk cache .* unusable"):
        out = b.embed(fixture_sentences[:2])
    for s, a in zip(fixture_sentences, out):
        assert_recomputed_close(a, exact[tuple(s)])


def test_disk_cache_evicts_least_recently_used(tmp_path, monkeypatch):
    monkeypatch.setattr(
        spacy_elmo.runtime.embedding.cache, "_TOUCH_AFTER_S", 0.0
    )  # refresh last-use times on every read
    cache = DiskCache(tmp_path, max_mb=0.1)  # 104857 bytes: 8 entries of 12000 bytes fit
    arrays = {(f"s{i}",): np.full((3, 1, 1000), i, dtype=np.float32) for i in range(20)}
    items = list(arrays.items())
    cache.put_many("fp", items[:5])
    time.sleep(0.01)
    assert cache.get_many("fp", [items[0][0]], 3, 1000)  # s0 is now used more recently than s1..s4
    time.sleep(0.01)
    cache.put_many("fp", items[5:8])  # 8 entries, 96000 bytes: nothing evicted
    assert len(cache) == 8
    cache.put_many("fp", items[8:9])  # over the bound: evict the LRU entries, 10% below the bound
    stored = cache.get_many("fp", list(arrays), 3, 1000)
    assert sorted(k[0] for k in stored) == sorted(["s0", "s3", "s4", "s5", "s6", "s7", "s8"])
    cache.put_many("fp", items[9:])
    assert cache.total_bytes() <= 0.1 * 2**20
    stored = cache.get_many("fp", list(arrays), 3, 1000)
    assert ("s19",) in stored and 4 <= len(stored) <= 8
    for key, value in stored.items():
        np.testing.assert_array_equal(value, arrays[key])
    assert cache.total_bytes() == 12000 * len(cache)
    assert cache.get_many("other-fingerprint", list(arrays), 3, 1000) == {}
    with pytest.raises(ValueError, match="disk_cache_mb"):
        DiskCache(tmp_path, max_mb=0)


def test_environment_variable_turns_on_the_disk_cache(fresh_model, tmp_path, monkeypatch, fixture_sentences):
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "from_env"))
    b = load_bilm(fresh_model)
    assert b.disk_cache is not None and b.disk_cache.directory == (tmp_path / "from_env").resolve()
    b.embed(fixture_sentences[:1])
    assert len(b.disk_cache) == 1
    assert tokens_key(["a", "b"]) != tokens_key(["a b"])
    load_bilm(fresh_model, cache_dir=False)
    assert b.disk_cache is None


def test_token_keys_keep_boundaries_and_take_any_string(fresh_model, tmp_path):
    keys = [("a", "b"), ("a b",), ("a\x00b",), ("a", "", "b"), ("ab",), ("a\x00", "b"), ()]
    assert len({tokens_key(k) for k in keys}) == len(keys)
    odd = ["caf\udce9", "\ud800x"]  # lone surrogates, e.g. from os.fsdecode of bad bytes
    b = load_bilm(fresh_model, cache_dir=tmp_path / "odd")
    first = b.embed([odd])[0]
    b.clear_cache()  # memory only: the next call reads the disk cache
    again = b.embed([odd])[0]
    assert len(b.disk_cache) == 1 and np.array_equal(first, again)
    load_bilm(fresh_model, cache_dir=False)
