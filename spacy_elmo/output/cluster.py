"""``spacy-elmo embed --scheduler``: embed_file's chunks computed on a Dask cluster, the same file as in one process.

:func:`embed_chunks_on` is the command's set-up: :func:`connect` gives a ``distributed.Client``
(``local:N`` starts a LocalCluster here) and :func:`cluster_chunks` is
:func:`~spacy_elmo.output.embed_file.embed_file`'s ``embed_chunks`` on it: each chunk of lines is cut
into tasks of at most :data:`EMBED_FILE_TASK_LINES` lines, a few tasks per worker in flight, results
handed back in the file's order. A task carries the model's *name or path* and its fingerprint,
never the weights: each worker loads the model itself (:func:`spacy_elmo.load_bilm`) and refuses to
embed with other model files. Needs the ``[dask]`` extra (``distributed``).
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections import deque
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any, Callable, Optional

import numpy as np

try:  # checked on import, so that a missing extra is named before any work
    import distributed  # noqa: F401
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise ImportError(f"spacy_elmo.output.cluster needs Dask's distributed ({err}), in the [dask] extra") from err

from ..runtime.embedding.backend import load_bilm
from ..runtime.embedding.windows import embed_segments
from .argument_checks import read_scheduler

if TYPE_CHECKING:  # pragma: no cover
    from .embed_file import EmbedChunks

EMBED_FILE_TASK_LINES = 250  # lines per task of `spacy-elmo embed --scheduler` (a 2000-line chunk -> 8 tasks)
WORKER_EXIT_S = 30.0  # how long closing a LocalCluster waits for each worker process to exit before killing it

__all__ = ["EMBED_FILE_TASK_LINES", "WORKER_EXIT_S", "cluster_chunks", "connect", "embed_chunks_on", "local_cluster"]


def connect(scheduler: str) -> tuple[Any, Callable[[], None]]:
    """A ``distributed.Client`` for ``scheduler`` and a function that closes it (and the cluster it started).

    ``local:N`` starts a LocalCluster of N worker processes with one thread each (the dashboard on
    a free port); anything else is a scheduler address such as ``tcp://10.0.0.5:8786``
    (:func:`~.argument_checks.read_scheduler` reads which).
    """
    from distributed import Client

    named = read_scheduler(scheduler)
    if isinstance(named, int):
        opened = ExitStack()
        client = opened.enter_context(local_cluster(named, dashboard_address=":0"))
        return client, opened.close
    try:
        client = Client(named, timeout="20s")
    except (OSError, TimeoutError) as err:
        raise ValueError(f"scheduler {scheduler!r}: cannot connect to a Dask scheduler there ({err})") from err
    return client, client.close


@contextmanager
def embed_chunks_on(
    scheduler: str,
    model: str,
    device: Optional[str],
    dtype: Optional[str],
    batch_size: int,
    fingerprint: str,
    say: Callable[[str], object] = print,
) -> Iterator[EmbedChunks]:
    """``embed_file``'s ``embed_chunks`` on the Dask cluster ``scheduler`` (:func:`connect`, closed on exit), its
    address and dashboard said through ``say`` first (``spacy-elmo embed --scheduler``)."""
    client, close = connect(scheduler)
    try:
        served = importlib.util.find_spec("bokeh") is not None  # the dashboard needs bokeh (in the [dask] extra)
        dashboard = f"dashboard {client.dashboard_link}" if served else "no dashboard (pip install bokeh)"
        say(f"Dask scheduler {client.scheduler.address}, {dashboard}")
        yield cluster_chunks(client, model, device, dtype, batch_size, fingerprint)
    finally:
        close()


@contextmanager
def local_cluster(n_workers: int = 2, worker_exit_s: float = WORKER_EXIT_S, **cluster_options: Any) -> Iterator[Any]:
    """A ``distributed.Client`` on a LocalCluster of ``n_workers`` worker processes here, closed cleanly on exit.

    Each worker runs one thread (``cluster_options`` go to ``LocalCluster``). On exit the client closes, then each
    worker process is given ``worker_exit_s`` seconds to exit, and only then the cluster closes, with nothing left
    to kill: plain ``LocalCluster.close`` kills a worker that takes more than 4 s to exit, with a warning per worker
    ("Worker process still alive after 4.0 seconds, killing"), and a worker that has imported torch can take that
    long on a busy machine. The one definition: ``spacy_elmo.dask.local_cluster`` is this function, and
    ``spacy-elmo embed --scheduler local:N`` starts its cluster with it (:func:`connect`).
    """
    from distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=n_workers, **{"processes": True, "threads_per_worker": 1, **cluster_options})
    try:
        with Client(cluster) as client:
            yield client
        cluster.sync(_close_workers, list(cluster.workers.values()), worker_exit_s)
    finally:
        cluster.close()


async def _close_workers(nannies: list[Any], timeout: float) -> None:
    """Close each worker's nanny, its worker process allowed ``timeout`` seconds to exit (all at once)."""
    await asyncio.gather(*(nanny.close(timeout=timeout) for nanny in nannies))


def cluster_chunks(
    client: Any, model: str, device: Optional[str], dtype: Optional[str], batch_size: int, fingerprint: str
) -> Callable[[Iterator[list[list[str]]], Callable[[int], object]], Iterator[list[np.ndarray]]]:
    """``embed_file``'s ``embed_chunks`` on a Dask cluster: each chunk split into tasks, results in order.

    A few tasks per worker are in flight at a time (memory stays bounded); ``on_progress`` moves
    as tasks finish anywhere on the cluster, in whatever order they finish.
    """
    from distributed import as_completed

    n_workers = max(1, len(client.scheduler_info().get("workers", {})))

    def submit(part: list[list[str]]) -> Any:
        return client.submit(_sentence_chunk, part, model, device, dtype, batch_size, fingerprint, pure=False)

    def run(
        token_chunks: Iterator[list[list[str]]], on_progress: Callable[[int], object]
    ) -> Iterator[list[np.ndarray]]:
        tasks = _TasksInOrder(as_completed(), on_progress)
        for tokens in token_chunks:
            tasks.submit_chunk(submit, _task_parts(tokens, n_workers))
            while tasks.in_flight > 2 * n_workers and tasks.chunks_waiting > 1:  # a few tasks per worker ahead
                yield tasks.next_chunk()
        while tasks.chunks_waiting:
            yield tasks.next_chunk()

    return run


def _task_parts(tokens: list[list[str]], n_workers: int) -> list[list[list[str]]]:
    """A chunk's lines cut into tasks: about one per worker, each at most ``EMBED_FILE_TASK_LINES`` lines (so a
    worker's results stay small and progress moves often)."""
    step = max(1, min(EMBED_FILE_TASK_LINES, -(-len(tokens) // n_workers)))
    return [tokens[start : start + step] for start in range(0, len(tokens), step)]


class _TasksInOrder:
    """The cluster tasks of ``embed_file``'s chunks: results handed back chunk by chunk in the order the chunks came,
    progress counted as each task finishes, in whatever order the cluster finishes them."""

    def __init__(self, finished: Any, on_progress: Callable[[int], object]):
        self._finished = finished  # a distributed.as_completed, given every task
        self._on_progress = on_progress
        self._lines: dict[str, int] = {}  # lines of each task whose result is not taken yet
        self._counted: set[str] = set()  # tasks finished (progress counted) whose result is not taken yet
        self._chunks: deque[list[Any]] = deque()  # per chunk: its futures in order

    @property
    def in_flight(self) -> int:
        """Tasks submitted whose results are not taken yet (they hold memory on the cluster or here)."""
        return len(self._lines)

    @property
    def chunks_waiting(self) -> int:
        """Chunks submitted and not handed back yet."""
        return len(self._chunks)

    def submit_chunk(self, submit: Callable[[list[list[str]]], Any], parts: list[list[list[str]]]) -> None:
        """Submit one chunk's tasks, one per part, and queue the chunk behind those before it."""
        futures = []
        for part in parts:
            future = submit(part)
            self._lines[future.key] = len(part)
            self._finished.add(future)
            futures.append(future)
        self._chunks.append(futures)

    def next_chunk(self) -> list[np.ndarray]:
        """The oldest chunk's results, its lines in order: waits for each of its tasks (counting any others that
        finish meanwhile)."""
        out: list[np.ndarray] = []
        for future in self._chunks.popleft():
            self._wait_for(future)
            out.extend(future.result())
            self._counted.remove(future.key)
            del self._lines[future.key]
        return out

    def _wait_for(self, future: Any) -> None:
        """Count finished tasks, in the order they finish, until ``future`` is among them."""
        while future.key not in self._counted:
            done = next(self._finished)
            self._counted.add(done.key)
            self._on_progress(self._lines[done.key])


# -- on the workers ----------------------------------------------------------------------------


def _sentence_chunk(
    sentences: list[list[str]],
    model: str,
    device: Optional[str],
    dtype: Optional[str],
    batch_size: int,
    fingerprint: str,
) -> list[np.ndarray]:
    """All layers of token sequences for ``embed_file`` on a worker, checked to come from the client's model."""
    backend = load_bilm(model, device=device, precision=dtype)
    if backend.fingerprint != fingerprint:
        raise ValueError(
            f"the model {model!r} on this worker ({backend.weights_path}) is not the one the client loaded "
            f"(fingerprint {backend.fingerprint} != {fingerprint}): give every machine the same model files"
        )
    # as embed_file embeds a line in this process: whole (no windows), <= MAX_TOKENS_PER_CALL tokens per backend call
    return [layers for _, layers in embed_segments(backend, enumerate(sentences), batch_size=batch_size)]
