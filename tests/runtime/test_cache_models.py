"""The embedding caches (spacy_elmo.runtime.embedding.cache) against plain-dict models over random call sequences.

Hypothesis state machines drive each cache through random puts, gets, clears and bound changes, and compare it
after every call with a dict that does what the docstrings promise: the in-memory LRU holds exactly the most
recently used arrays that fit its byte bound; the disk cache never returns an array other than the last one stored
under its key and model, keeps every entry while all fit its bound, and stays within it.
"""

import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, rule

from spacy_elmo.runtime.embedding.cache import DiskCache, MemoryCache

MACHINE_SETTINGS = settings(
    max_examples=30, stateful_step_count=20, deadline=None, suppress_health_check=list(HealthCheck)
)
KEYS = st.lists(st.sampled_from(["a", "b", "bank", "the", "Zürich", "", " "]), min_size=1, max_size=3).map(tuple)
FINGERPRINTS = st.sampled_from(["model-a", "model-b"])


def array_for(shape: tuple[int, int, int], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


class MemoryCacheMachine(RuleBasedStateMachine):
    put_keys = Bundle("put_keys")

    @initialize(max_kib=st.integers(0, 16))
    def start(self, max_kib: int) -> None:
        self.cache = MemoryCache(max_kib / 1024)
        self.lru: dict[tuple[str, ...], np.ndarray] = {}  # the model: oldest use first

    def _fit(self) -> None:
        budget = int(self.cache.max_mb * 2**20)
        while sum(a.nbytes for a in self.lru.values()) > budget:
            del self.lru[next(iter(self.lru))]

    @rule(target=put_keys, key=KEYS, width=st.integers(1, 200), seed=st.integers(0, 3))
    def put(self, key: tuple[str, ...], width: int, seed: int) -> tuple[str, ...]:
        array = array_for((3, len(key), width), seed)
        self.cache.put(key, array)
        array[...] = -1  # the cache keeps its own copy
        if 3 * len(key) * width * 4 <= int(self.cache.max_mb * 2**20):  # alone over the bound: not stored
            self.lru.pop(key, None)
            self.lru[key] = array_for((3, len(key), width), seed)
            self._fit()
        return key

    @rule(key=st.one_of(KEYS, put_keys))
    def get(self, key: tuple[str, ...]) -> None:
        got = self.cache.get(key)
        if key not in self.lru:
            assert got is None
            return
        np.testing.assert_array_equal(got, self.lru[key])
        assert not got.flags.writeable
        self.lru[key] = self.lru.pop(key)

    @rule(max_kib=st.integers(0, 8))
    def new_bound(self, max_kib: int) -> None:
        self.cache.max_mb = max_kib / 1024
        self._fit()

    @rule()
    def clear(self) -> None:
        self.cache.clear()
        self.lru.clear()

    @invariant()
    def same_entries_in_the_same_order_of_use(self) -> None:
        assert list(self.cache._items) == list(self.lru)
        assert self.cache.nbytes == sum(a.nbytes for a in self.lru.values()) <= self.cache.max_mb * 2**20


TestMemoryCacheMachine = MemoryCacheMachine.TestCase
TestMemoryCacheMachine.settings = settings(MACHINE_SETTINGS, max_examples=200)  # cheap: numpy copies only


class DiskCacheMachine(RuleBasedStateMachine):
    """One sqlite cache per run; ``stored`` is every (model, key) -> array last put, ``bound`` its byte bound."""

    stored_keys = Bundle("stored_keys")

    @initialize(max_kib=st.integers(1, 16))
    def start(self, max_kib: int) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="disk-cache-model-"))
        self.cache = DiskCache(self.directory, max_kib / 1024)
        self.stored: dict[tuple[str, tuple[str, ...]], np.ndarray] = {}  # the first array put (ON CONFLICT keeps it)
        self.later: dict[tuple[str, tuple[str, ...]], list[np.ndarray]] = {}  # arrays put again under a stored key
        self.complete = True  # every array ever put (and not cleared) fits the bound together: nothing evicted
        self.widths: dict[str, int] = {}  # a fingerprint names one model, so one width (a blob of another is damaged)

    def teardown(self) -> None:
        if hasattr(self, "cache"):
            self.cache.close()
            shutil.rmtree(self.directory, ignore_errors=True)

    @rule(
        target=stored_keys,
        fingerprint=FINGERPRINTS,
        keys=st.lists(KEYS, min_size=1, max_size=4, unique=True),
        width=st.integers(1, 200),
        seed=st.integers(0, 3),
    )
    def put_many(self, fingerprint: str, keys: list[tuple[str, ...]], width: int, seed: int) -> tuple[str, tuple]:
        width = self.widths.setdefault(fingerprint, width)
        arrays = [array_for((3, len(key), width), seed + i) for i, key in enumerate(keys)]
        self.cache.put_many(fingerprint, zip(keys, arrays))
        for key, array in zip(keys, arrays):
            if array.nbytes > self.cache.max_bytes:  # alone over the bound: not stored
                continue
            if (fingerprint, key) not in self.stored:
                self.stored[fingerprint, key] = array
            else:  # kept as it is, or stored anew if it was evicted meanwhile
                self.later.setdefault((fingerprint, key), []).append(array)
        if sum(a.nbytes for a in self.stored.values()) > self.cache.max_bytes:
            self.complete = False
        return fingerprint, keys[0]

    @rule(fingerprint=FINGERPRINTS, keys=st.lists(KEYS, min_size=1, max_size=6, unique=True))
    def get_many(self, fingerprint: str, keys: list[tuple[str, ...]]) -> None:
        self._check(fingerprint, keys)

    @rule(entry=stored_keys)
    def get_stored(self, entry: tuple[str, tuple[str, ...]]) -> None:
        self._check(entry[0], [entry[1]])

    def _check(self, fingerprint: str, keys: list[tuple[str, ...]]) -> None:
        widths = {a.shape[2] for (fp, key), a in self.stored.items() if fp == fingerprint and key in keys}
        for width in widths or {1}:
            found = self.cache.get_many(fingerprint, keys, 3, width)
            for key, array in found.items():  # never another key's or another model's array
                if self.complete or not any(np.array_equal(array, a) for a in self.later.get((fingerprint, key), [])):
                    np.testing.assert_array_equal(array, self.stored[fingerprint, key])
            if self.complete:
                expected = {
                    k for (fp, k), a in self.stored.items() if fp == fingerprint and k in keys and a.shape[2] == width
                }
                assert set(found) == expected

    @rule(fingerprint=st.one_of(st.none(), FINGERPRINTS))
    def clear(self, fingerprint) -> None:
        self.cache.clear(fingerprint)
        self.stored = {k: a for k, a in self.stored.items() if fingerprint is not None and k[0] != fingerprint}
        self.later = {k: a for k, a in self.later.items() if k in self.stored}
        self.complete = self.complete or not self.stored

    @invariant()
    def within_its_bound(self) -> None:
        if hasattr(self, "cache"):
            assert not self.cache.disabled
            assert self.cache.total_bytes() <= self.cache.max_bytes
            assert len(self.cache) <= len(self.stored)
            if self.complete:
                assert len(self.cache) == len(self.stored)


TestDiskCacheMachine = pytest.mark.slow(DiskCacheMachine.TestCase)
DiskCacheMachine.TestCase.settings = MACHINE_SETTINGS
