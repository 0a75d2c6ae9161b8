"""Embedding caches keyed by (model fingerprint, token tuple): an in-memory LRU and an sqlite disk cache.

The disk cache is one sqlite3 database in WAL mode: every write is a transaction (a killed writer
leaves nothing behind), several processes can read and write it at once, entries of different
models never mix (the fingerprint is part of the key), each row carries a CRC-32 of its vectors
(a damaged row, whether its bytes or the storage type of any value, is a miss, deleted and recomputed), and the total
size stays under a bound by
evicting the least recently used entries. A cache that cannot be used (a directory that cannot
be created, a file that is not a database) warns once and turns itself off: embedding goes on.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import threading
import time
import warnings
import zlib
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Sequence
from pathlib import Path
from typing import Optional

import numpy as np

from ...groundwork.file_names import PathLike
from ...groundwork.fork_safety import ForkSafeLock, renew_after_fork
from ..configuration.defaults import DEFAULT_DISK_MB, DEFAULT_MEMORY_MB
from ..configuration.validation import disk_mb, memory_mb

DISK_CACHE = "embeddings.sqlite3"  # the disk cache of sentence activations, in its directory
DB_NAME = DISK_CACHE
CACHE_DIR_ENV = "SPACY_ELMO_CACHE_DIR"
CACHE_MB_ENV = "SPACY_ELMO_CACHE_MB"
_BUSY_TIMEOUT_S = 60.0
_TOUCH_AFTER_S = 1.0  # an entry's last-use time is refreshed at most this often
_QUERY_CHUNK = 400  # keys per SELECT (sqlite's default variable limit is 999 or more)
_UNUSABLE = (sqlite3.Error, OSError)  # a cache that raises these turns itself off

logger = logging.getLogger(__name__)  # a child of the "spacy_elmo" logger


class MemoryCache:
    """A thread-safe LRU of float32 arrays bounded by their total size in MiB (0 disables it)."""

    def __init__(self, max_mb: float = DEFAULT_MEMORY_MB) -> None:
        self._items: OrderedDict[Hashable, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self.nbytes = 0
        self.max_mb = max_mb
        renew_after_fork(self)

    @property
    def max_mb(self) -> float:
        return self._max_bytes / 2**20

    @max_mb.setter
    def max_mb(self, value: float) -> None:
        self._max_bytes = int(memory_mb(value, "cache_mb") * 2**20)
        with self._lock:
            self._evict()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: Hashable) -> Optional[np.ndarray]:
        """The cached (read-only) array for ``key``, or ``None``."""
        with self._lock:
            array = self._items.get(key)
            if array is not None:
                self._items.move_to_end(key)
            return array

    def put(self, key: Hashable, array: np.ndarray) -> None:
        """Store a read-only copy of ``array`` unless it alone exceeds the budget."""
        if array.nbytes > self._max_bytes:
            return
        stored = np.array(array, dtype=np.float32, copy=True)
        stored.setflags(write=False)
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.nbytes -= old.nbytes
            self._items[key] = stored
            self.nbytes += stored.nbytes
            self._evict()

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.nbytes = 0

    def _after_fork(self) -> None:
        """In a forked child: a new lock and an empty cache (a parent thread may have been mid-update)."""
        self._lock = threading.Lock()
        self._items = OrderedDict()
        self.nbytes = 0

    def _evict(self) -> None:
        while self.nbytes > self._max_bytes and self._items:
            _, old = self._items.popitem(last=False)
            self.nbytes -= old.nbytes


def tokens_key(tokens: Sequence[str]) -> bytes:
    """sha256 of the token tuple: the token lengths, then the tokens (so boundaries are unambiguous).

    Any ``str`` is encoded, lone surrogates included (``surrogatepass``).
    """
    lengths = ",".join(map(str, map(len, tokens)))
    text = f"{len(tokens)}:{lengths}\x00" + "\x00".join(tokens)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


_SCHEMA = """
CREATE TABLE IF NOT EXISTS vectors (
    id INTEGER PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    key BLOB NOT NULL,
    layers INTEGER NOT NULL,
    tokens INTEGER NOT NULL,
    dim INTEGER NOT NULL,
    data BLOB NOT NULL,
    checksum INTEGER NOT NULL,
    used REAL NOT NULL,
    UNIQUE (fingerprint, key)
);
CREATE INDEX IF NOT EXISTS vectors_used ON vectors (used);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO meta VALUES ('bytes', 0);
CREATE TRIGGER IF NOT EXISTS vectors_added AFTER INSERT ON vectors
    BEGIN UPDATE meta SET value = value + length(NEW.data) WHERE name = 'bytes'; END;
CREATE TRIGGER IF NOT EXISTS vectors_removed AFTER DELETE ON vectors
    BEGIN UPDATE meta SET value = value - length(OLD.data) WHERE name = 'bytes'; END;
"""


class DiskCache:
    """ELMo activations on disk in ``directory/embeddings.sqlite3``, at most ``max_mb`` MiB of vectors.

    Safe to share between threads and processes. If the database cannot be opened or read (e.g.
    it is not an sqlite file), a warning names the file and the cache turns itself off.
    """

    def __init__(self, directory: PathLike, max_mb: float = DEFAULT_DISK_MB) -> None:
        max_mb = disk_mb(max_mb, "disk_cache_mb")
        self.directory = Path(directory).expanduser().resolve()
        self.path = self.directory / DB_NAME
        self.max_bytes = int(float(max_mb) * 2**20)
        self.disabled = False
        self._lock = threading.Lock()
        self._con: Optional[sqlite3.Connection] = None
        self._pid = -1
        renew_after_fork(self)

    def __repr__(self) -> str:
        return f"DiskCache({str(self.path)!r}, max_mb={self.max_bytes / 2**20:g})"

    def _connection(self) -> sqlite3.Connection:
        if self._con is None or self._pid != os.getpid():  # never reuse a connection across fork
            self.directory.mkdir(parents=True, exist_ok=True)
            self._con, self._pid = _open_database(self.path), os.getpid()
        return self._con

    def _after_fork(self) -> None:
        """In a forked child: a new lock (the connection is already per process)."""
        self._lock = threading.Lock()

    def _fail(self, err: Exception) -> None:
        self.disabled = True
        logger.info("disk cache %s turned off: %s", self.path, err)
        warnings.warn(
            f"spacy_elmo: disk cache {self.path} is unusable and is turned off ({err}); "
            f"delete the file to start a fresh cache",
            RuntimeWarning,
            stacklevel=3,
        )

    def get_many(
        self, fingerprint: str, keys: Sequence[tuple[str, ...]], n_layers: int, dim: int
    ) -> dict[tuple[str, ...], np.ndarray]:
        """Cached arrays ``(n_layers, len(tokens), dim)`` for those ``keys`` (token tuples) that are stored."""
        if self.disabled or not keys:
            return {}
        by_hash = {tokens_key(k): k for k in keys}
        found: dict[tuple[str, ...], np.ndarray] = {}
        bad: list[bytes] = []
        touched: list[int] = []
        now = time.time()
        try:
            with self._lock:
                con = self._connection()
                hashes = list(by_hash)
                for start in range(0, len(hashes), _QUERY_CHUNK):
                    chunk = hashes[start : start + _QUERY_CHUNK]
                    rows = con.execute(
                        f"SELECT id, key, layers, tokens, dim, data, checksum, used FROM vectors WHERE fingerprint = ? "
                        f"AND key IN ({','.join('?' * len(chunk))})",
                        [fingerprint, *chunk],
                    ).fetchall()
                    for row in rows:
                        row_id, key, _layers, _n_tokens, _width, data, _checksum, used = row
                        tokens = by_hash.get(key) if isinstance(key, bytes) else None
                        if tokens is None or not _row_is_sound(row, (n_layers, len(tokens), dim)):
                            bad.append(row_id)  # written by a foreign or broken writer, or damaged since: recompute
                            continue
                        found[tokens] = (
                            np.frombuffer(data, dtype="<f4").reshape(n_layers, len(tokens), dim).astype(np.float32)
                        )
                        if used < now - _TOUCH_AFTER_S:
                            touched.append(row_id)
                if touched or bad:  # mark as recently used (for eviction) and drop broken entries
                    with _transaction(con):
                        for start in range(0, len(touched), _QUERY_CHUNK):
                            ids = touched[start : start + _QUERY_CHUNK]
                            con.execute(
                                f"UPDATE vectors SET used = ? WHERE id IN ({','.join('?' * len(ids))})", [now, *ids]
                            )
                        con.executemany("DELETE FROM vectors WHERE id = ?", [(row_id,) for row_id in bad])
        except _UNUSABLE as err:
            self._fail(err)
            return {}
        return found

    def put_many(self, fingerprint: str, items: Iterable[tuple[tuple[str, ...], np.ndarray]]) -> None:
        """Store arrays in one transaction, then evict the least recently used entries beyond the bound."""
        if self.disabled:
            return
        now = time.time()
        rows = []
        for tokens, array in items:
            array = np.ascontiguousarray(array, dtype="<f4")
            if array.nbytes <= self.max_bytes:
                data = array.tobytes()
                rows.append((fingerprint, tokens_key(tokens), *array.shape, data, zlib.crc32(data), now))
        if not rows:
            return
        try:
            with self._lock:
                con = self._connection()
                with _transaction(con):
                    con.executemany(
                        "INSERT INTO vectors (fingerprint, key, layers, tokens, dim, data, checksum, used) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                        "ON CONFLICT (fingerprint, key) DO UPDATE SET used = excluded.used",
                        rows,
                    )
                    self._evict(con)
        except _UNUSABLE as err:
            self._fail(err)

    def _evict(self, con: sqlite3.Connection) -> None:
        excess = self.total_bytes(con) - self.max_bytes
        if excess <= 0:
            return
        target = excess + self.max_bytes // 10  # free 10% more, so eviction is not on every write
        victims, freed = [], 0
        for row_id, size in con.execute("SELECT id, length(data) FROM vectors ORDER BY used, id"):
            victims.append((row_id,))
            freed += size
            if freed >= target:
                break
        con.executemany("DELETE FROM vectors WHERE id = ?", victims)

    def total_bytes(self, con: Optional[sqlite3.Connection] = None) -> int:
        """Bytes of vector data now stored (all models); 0 for a cache that is turned off."""
        if con is None:
            return self._query("SELECT value FROM meta WHERE name = 'bytes'")
        return int(con.execute("SELECT value FROM meta WHERE name = 'bytes'").fetchone()[0])

    def __len__(self) -> int:
        """Entries now stored (all models); 0 for a cache that is turned off."""
        return self._query("SELECT COUNT(*) FROM vectors")

    def _query(self, sql: str) -> int:
        if self.disabled:
            return 0
        try:
            with self._lock:
                return int(self._connection().execute(sql).fetchone()[0])
        except _UNUSABLE as err:
            self._fail(err)
            return 0

    def clear(self, fingerprint: Optional[str] = None) -> None:
        """Delete every entry (of one model, if ``fingerprint`` is given); nothing to do when turned off."""
        if self.disabled:
            return
        try:
            with self._lock:
                con = self._connection()
                with _transaction(con):
                    if fingerprint is None:
                        con.execute("DELETE FROM vectors")
                    else:
                        con.execute("DELETE FROM vectors WHERE fingerprint = ?", (fingerprint,))
        except _UNUSABLE as err:
            self._fail(err)

    def close(self) -> None:
        with self._lock:
            if self._con is not None and self._pid == os.getpid():
                self._con.close()
            self._con = None


def _row_is_sound(row: tuple[object, ...], shape: tuple[int, int, int]) -> bool:
    """Whether a stored row holds what the schema says, with the expected shape and a matching CRC.

    sqlite columns do not enforce their types: a flipped serial-type byte or another program
    writing the file can leave an integer where bytes belong or text in the timestamp, and such
    a row must be a miss (dropped and recomputed), not a ``TypeError`` in every embed that reads it.
    """
    _, _, layers, n_tokens, width, data, checksum, used = row
    if any(type(value) is not int for value in (layers, n_tokens, width, checksum)) or type(used) not in (int, float):
        return False
    return (
        isinstance(data, bytes)
        and (layers, n_tokens, width) == shape
        and len(data) == 4 * shape[0] * shape[1] * shape[2]
        and zlib.crc32(data) == checksum
    )


def _open_database(path: Path) -> sqlite3.Connection:
    """Connect in WAL mode and create the schema, waiting while another process does the same.

    Two processes opening a new database at once can both hold a read lock and want the write
    lock to switch to WAL; sqlite then fails one of them at once ("database is locked") instead of
    waiting, so that case is retried here for up to the busy timeout.
    """
    deadline = time.monotonic() + _BUSY_TIMEOUT_S
    while True:
        con = sqlite3.connect(str(path), timeout=_BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
        try:
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("PRAGMA synchronous=NORMAL")
            with _transaction(con):
                _create_schema(con)
            return con
        except sqlite3.OperationalError as err:
            con.close()
            if ("locked" not in str(err) and "busy" not in str(err)) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
        except BaseException:
            con.close()
            raise


def _create_schema(con: sqlite3.Connection) -> None:
    """The tables, index and triggers; a table from before row checksums is dropped (it is only a cache)."""
    columns = [row[1] for row in con.execute("PRAGMA table_info(vectors)")]
    if columns and "checksum" not in columns:
        con.execute("DROP TABLE vectors")
        con.execute("DROP TABLE IF EXISTS meta")
    for statement in _statements(_SCHEMA):
        con.execute(statement)


class _transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``, rolled back on any error (so nothing half-written is kept)."""

    def __init__(self, con: sqlite3.Connection) -> None:
        self.con = con

    def __enter__(self) -> sqlite3.Connection:
        self.con.execute("BEGIN IMMEDIATE")
        return self.con

    def __exit__(self, exc_type, exc, tb) -> None:
        self.con.execute("ROLLBACK" if exc_type else "COMMIT")


def _statements(script: str) -> list[str]:
    """Split the schema into statements (trigger bodies contain ';', so split on 'END;' too)."""
    out, current = [], []
    for line in script.strip().splitlines():
        current.append(line)
        text = "\n".join(current).strip()
        if text.endswith("END;") or (text.endswith(";") and "TRIGGER" not in text):
            out.append(text)
            current = []
    return out


_DISK_CACHES: dict[tuple[str, int], DiskCache] = {}
_DISK_LOCK = ForkSafeLock()


def open_disk_cache(directory: PathLike, max_mb: float = DEFAULT_DISK_MB) -> DiskCache:
    """One :class:`DiskCache` object per directory and size bound in this process."""
    resolved = str(Path(directory).expanduser().resolve())
    key = (resolved, int(disk_mb(max_mb, "disk_cache_mb") * 2**20))
    with _DISK_LOCK:
        cache = _DISK_CACHES.get(key)
        if cache is None:
            cache = _DISK_CACHES[key] = DiskCache(resolved, max_mb)
        return cache


def env_cache_dir() -> Optional[str]:
    """The disk cache directory named by ``SPACY_ELMO_CACHE_DIR`` (unset or empty: none)."""
    value = os.environ.get(CACHE_DIR_ENV, "").strip()
    return value or None


def env_disk_mb() -> float:
    """The disk cache bound from ``SPACY_ELMO_CACHE_MB`` (default 4096 MiB), checked as ``disk_cache_mb`` is
    (:func:`~..configuration.validation.disk_mb`: a ``ValueError`` naming the variable)."""
    value = os.environ.get(CACHE_MB_ENV, "").strip()
    if not value:
        return DEFAULT_DISK_MB
    try:
        number: object = float(value)
    except ValueError:
        number = value  # no number: refused below, its text named
    return disk_mb(number, CACHE_MB_ENV)
