"""Embed a text file (one sentence per line) into HDF5, in the layout of AllenNLP's ``allennlp elmo``.

One dataset per line, named by its 0-based line number (or by the sentence itself with
``use_sentence_keys``), holding ``(n_layers + 1, n_tokens, dim)`` for ``"all"`` or
``(n_tokens, dim)`` for ``"top"`` / ``"average"``, plus a ``sentence_to_index`` dataset with
the JSON map sentence -> key (:mod:`.hdf5_layout`, which AllenNLP's ``embed_file`` writes too).
Unlike AllenNLP, a blank line gives an empty ``n_tokens = 0``
array instead of an error, the file is streamed (``windows.embed_segments``: a bounded number of
tokens at a time, flat memory), and the output appears only once it is complete: until then it
is a hidden ``.NAME.PID.partial`` file beside it, removed on failure, Ctrl-C and SIGTERM, or by
the next run if its process was killed outright. A line longer than :data:`MAX_LINE_BYTES` is an
error naming it (an endless line would be read until memory ran out). A failed write (no space left, a file-size
limit) stops the run at once with a :class:`~spacy_elmo.output.write_guard.WriteFailedError` naming the
output (:mod:`.write_guard`: HDF5 never sees the error, so it cannot crash on it).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import (
    IO,
    TYPE_CHECKING,
    AnyStr,
    BinaryIO,
    Callable,
    Optional,
    TypeVar,
)

import numpy as np

from ..groundwork.atomic_write import process_exists
from ..groundwork.file_names import PathLike
from ..runtime.configuration.defaults import DEFAULT_BATCH_SIZE
from ..runtime.configuration.validation import positive_int
from ..runtime.embedding.windows import embed_segments
from ..runtime.features.tokenize import resolve_tokenizer
from .argument_checks import check_output_path
from .hdf5_layout import LineDatasets, check_output_format
from .write_guard import GuardedFile, GuardedHDF5

if TYPE_CHECKING:  # pragma: no cover
    from ..runtime.embedding.backend import ElmoBackend

STDIN = "-"  # the input path that means standard input, as in AllenNLP's `allennlp elmo`

CHUNK_LINES = 2000  # lines handed to an ``embed_chunks`` embedder (e.g. a Dask cluster) at a time
# The longest line read, in bytes (its line break not counted): an input with an endless line (/dev/zero, a
# binary file) is an error naming the line instead of reading until memory runs out. A line is one dataset,
# so 1 MiB of text (~200,000 tokens, several GB of vectors) is far beyond a sentence already.
MAX_LINE_BYTES = 1 << 20

Line = tuple[int, str]  # (0-based line number, text)
T = TypeVar("T")
# token chunks in, their activations out in the same order; the callable moves the progress bar by n sentences
EmbedChunks = Callable[[Iterator[list[list[str]]], Callable[[int], object]], Iterator[list[np.ndarray]]]
# a cluster set up for a loaded model (``spacy-elmo embed --scheduler``: ``cluster.embed_chunks_on``): given the model's
# name, device, precision, the batch size and the model's fingerprint, a context that gives the cluster's embed_chunks
ClusterSetUp = Callable[[str, Optional[str], str, int, str], contextlib.AbstractContextManager[EmbedChunks]]


def embed_file(
    backend: ElmoBackend,
    input_path: PathLike,
    output_path: PathLike,
    *,
    output_format: str = "all",
    batch_size: int = DEFAULT_BATCH_SIZE,
    tokenizer: str = "whitespace",
    use_sentence_keys: bool = False,
    forget_sentences: bool = False,
    progress: bool = False,
    embed_chunks: Optional[EmbedChunks] = None,
) -> dict[str, float]:
    """Write the ELMo vectors of each line of ``input_path`` (``-``: stdin) to ``output_path``; returns counts, seconds.

    ``output_format``: ``"all"`` layers, the ``"top"`` layer, or their ``"average"`` (:mod:`.hdf5_layout`).
    ``tokenizer``: ``"whitespace"`` (the line is already tokenized), ``"spacy"`` (spaCy's English rules) or
    another spaCy language code (:func:`spacy_elmo.runtime.features.tokenize.resolve_tokenizer`).
    ``embed_chunks``: who computes the activations (default: ``backend`` in this process;
    ``spacy_elmo.output.cluster.cluster_chunks``: a Dask cluster); the file is the same either way.
    """
    from tqdm import tqdm

    check_output_format(output_format)
    positive_int(batch_size, "batch_size")
    input_path, output_path = Path(input_path), Path(output_path)
    source = "<stdin>" if _is_stdin(input_path) else str(input_path)  # the input's name in error messages
    check_output_path(output_path)
    split = resolve_tokenizer(tokenizer)
    started = time.perf_counter()
    n_lines = n_tokens = 0
    with _open_input(input_path, output_path) as handle:
        total = _count_lines(handle, source) if progress else None  # the bar's length
        with hdf5_output(output_path) as out, tqdm(total=total, unit="sent", disable=not progress) as bar:
            out.attrs.update(
                model_fingerprint=backend.fingerprint, output_format=output_format, n_output_layers=backend.n_layers + 1
            )
            datasets = LineDatasets(
                out, output_format, source, use_sentence_keys=use_sentence_keys, forget_sentences=forget_sentences
            )
            lines = ((line, split(line[1])) for line in _lines(handle, source))
            if embed_chunks is None:  # lines come back in order; the bar moves per batch
                embedded = embed_segments(backend, lines, batch_size=batch_size, on_progress=bar.update)
            else:
                embedded = _embedded_in_chunks(embed_chunks, lines, bar.update)
            for (number, text), layers in embedded:
                datasets.add(number, text, layers)  # stops on a full disk
                n_tokens += layers.shape[1]
                n_lines += 1
            datasets.finish()
    return {"sentences": n_lines, "tokens": n_tokens, "seconds": time.perf_counter() - started}


def embed_model_file(
    model: str,
    input_path: PathLike,
    output_path: PathLike,
    *,
    device: Optional[str],
    dtype: str,
    cluster: Optional[ClusterSetUp],
    output_format: str,
    batch_size: int,
    tokenizer: str,
    use_sentence_keys: bool,
    forget_sentences: bool,
    progress: bool,
) -> dict[str, float]:
    """:func:`embed_file` with the model that ``model`` names (``spacy-elmo embed``): the tokenizer resolved first (a
    misspelled name and the closest valid ones said before the model loads), then the model loaded once on
    ``device`` in ``dtype``; its precision ("auto" resolved here, once) is the one every worker of ``cluster`` loads,
    whose ``embed_chunks`` then computes the activations (``cluster`` None: this process does)."""
    from ..runtime.embedding.backend import load_bilm

    resolve_tokenizer(tokenizer)
    backend = load_bilm(model, device=device, precision=dtype)
    chosen_dtype = backend.precision.name
    on_cluster = None if cluster is None else cluster(model, device, chosen_dtype, batch_size, backend.fingerprint)
    with on_cluster or contextlib.nullcontext() as embed_chunks:  # (no cluster: embed_chunks None, computed here)
        return embed_file(
            backend,
            input_path,
            output_path,
            output_format=output_format,
            batch_size=batch_size,
            tokenizer=tokenizer,
            use_sentence_keys=use_sentence_keys,
            forget_sentences=forget_sentences,
            progress=progress,
            embed_chunks=embed_chunks,
        )


@contextlib.contextmanager
def hdf5_output(output_path: PathLike) -> Iterator[GuardedHDF5]:
    """The one writer of embedding files (``spacy-elmo embed``, AllenNLP's ``embed_file``): an HDF5 file that appears
    at ``output_path`` only once the block succeeds, and never hands a write error to HDF5.

    It is written as a hidden ``.NAME.PID.partial`` file beside ``output_path`` (removed on any error, Ctrl-C and
    SIGTERM; a dead run's is removed by the next) through a :class:`~.write_guard.GuardedFile`: a full disk or a
    file-size limit raises :class:`~.write_guard.WriteFailedError` naming ``output_path`` at the first dataset
    that failed (or when the file closes), never an HDF5 crash.
    """
    import h5py

    output_path = Path(output_path)
    check_output_path(output_path)
    with (
        _written_atomically(output_path) as temporary,
        _guarded(temporary, output_path) as guarded,
        h5py.File(guarded, "w") as handle,  # closed first: HDF5's last writes are then checked, then renamed
    ):
        yield GuardedHDF5(handle, guarded)


@contextlib.contextmanager
def _guarded(temporary: Path, output_path: Path) -> Iterator[GuardedFile]:
    """The partial file as a :class:`GuardedFile` for h5py: checked once HDF5 has closed it, then closed."""
    guarded = GuardedFile(temporary, shown_as=output_path)
    try:
        yield guarded
        guarded.check()  # HDF5 writes its metadata when the file closes
    finally:
        guarded.close()


def _embedded_in_chunks(
    embed_chunks: EmbedChunks, lines: Iterator[tuple[Line, list[str]]], on_progress: Callable[[int], object]
) -> Iterator[tuple[Line, np.ndarray]]:
    """``(line, layers)`` in order, from an embedder handed ``CHUNK_LINES`` token lists at a time."""
    read: deque[list[Line]] = deque()  # chunks handed out, not yet handed back

    def token_chunks() -> Iterator[list[list[str]]]:
        for chunk in _chunks(lines, CHUNK_LINES):
            read.append([line for line, _ in chunk])
            yield [tokens for _, tokens in chunk]

    for embedded in embed_chunks(token_chunks(), on_progress):
        yield from zip(read.popleft(), embedded)


def _is_stdin(input_path: Path) -> bool:
    """Whether the input is standard input, ``-`` (so is ``./-``, which pathlib shortens to ``-``)."""
    return str(input_path) == STDIN


@contextlib.contextmanager
def _open_input(input_path: Path, output_path: Path) -> Iterator[BinaryIO]:
    """The input's bytes (standard input for ``-``, left open), checked not to be the file the output replaces."""
    if _is_stdin(input_path):
        opened: contextlib.AbstractContextManager[BinaryIO] = contextlib.nullcontext(sys.stdin.buffer)
    elif input_path.exists():
        opened = open(input_path, "rb")  # noqa: SIM115 (entered by the `with opened` below, like stdin's)
    else:
        raise FileNotFoundError(f"input file {input_path} does not exist")
    with opened as handle:
        if _same_file(handle, output_path):
            raise ValueError(f"the output file {output_path} is the input file")
        yield handle


def _same_file(handle: BinaryIO, path: Path) -> bool:
    """Whether ``path`` is the file open in ``handle`` (also through a link, /dev/stdin or ``- < FILE``)."""
    try:
        return os.path.samestat(os.fstat(handle.fileno()), os.stat(path))
    except (OSError, ValueError):  # no such path, or a handle without a file descriptor
        return False


@contextlib.contextmanager
def _written_atomically(output_path: Path) -> Iterator[Path]:
    """A partial file to write, renamed to ``output_path`` if the block succeeds and removed if not (signals too)."""
    _remove_stale_partials(output_path)
    temporary = _partial_path(output_path, os.getpid())
    with _signals_remove(temporary) as interrupted:
        try:
            yield temporary
            if interrupted():  # a Ctrl-C whose KeyboardInterrupt Python dropped: the run still must not publish
                raise KeyboardInterrupt
            os.replace(temporary, output_path)
        finally:
            if temporary.exists():
                temporary.unlink()


def _partial_path(output_path: Path, pid: int) -> Path:
    """The hidden file beside ``output_path`` that process ``pid`` writes (the same folder: the rename is atomic)."""
    return output_path.with_name(f".{output_path.name}.{pid}.partial")


def _remove_stale_partials(output_path: Path) -> None:
    """Remove the partial files of ``output_path`` whose process is gone (SIGKILL, a crash: nothing cleaned up)."""
    try:
        candidates = list(output_path.parent.iterdir())
    except OSError:  # a folder we may write in but not list (mode -wx): no stale file we can see
        return
    for candidate in candidates:
        found = re.search(r"\.(\d+)\.partial$", candidate.name)
        pid = int(found[1]) if found else None
        if pid is not None and candidate.name == _partial_path(output_path, pid).name and not process_exists(pid):
            with contextlib.suppress(OSError):  # another run removed it first, or it is not ours to remove
                candidate.unlink()


@contextlib.contextmanager
def _signals_remove(temporary: Path) -> Iterator[Callable[[], bool]]:
    """While the block runs, SIGTERM and Ctrl-C remove ``temporary`` in their handlers; yields "was Ctrl-C pressed".

    The clean-up cannot wait for an exception to reach a ``finally``: Python drops an exception that a
    signal handler raises while a ``__del__`` or weakref callback runs ("Exception ignored in ..."), and
    a run then blocked on a pipe would wait forever beside its partial file. So SIGTERM removes the file
    and ends the process as its default action would; Ctrl-C removes it and raises KeyboardInterrupt, and
    if Python drops that one, the block still raises it before it would publish the file. A handler is
    set only where the default is in force (a program's own handler, or an ignored signal, stays) and in
    the main thread, the only one Python lets set a handler.
    """
    pressed = threading.Event()

    def on_sigterm(signum: int, frame: object) -> None:
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.raise_signal(signal.SIGTERM)  # the process ends here, with the status a parent expects of SIGTERM
        raise SystemExit(128 + signal.SIGTERM)  # reached only where this thread blocks SIGTERM

    def on_sigint(signum: int, frame: object) -> None:
        pressed.set()
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
        raise KeyboardInterrupt

    ours = {signal.SIGTERM: (signal.SIG_DFL, on_sigterm), signal.SIGINT: (signal.default_int_handler, on_sigint)}
    previous = {signum: signal.getsignal(signum) for signum in ours}
    in_main = threading.current_thread() is threading.main_thread()
    replaced = [signum for signum, (default, _) in ours.items() if in_main and previous[signum] == default]
    for signum in replaced:
        signal.signal(signum, ours[signum][1])
    try:
        yield pressed.is_set
    finally:
        for signum in replaced:
            signal.signal(signum, previous[signum])


def _count_lines(handle: BinaryIO, source: str) -> Optional[int]:
    """Lines left in a seekable input, read an extra time and rewound; None for a pipe, which can be read once."""
    if not handle.seekable():
        return None
    start = handle.tell()
    total = sum(1 for _ in _lines(handle, source))
    handle.seek(start)
    return total


def bounded_lines(handle: IO[AnyStr], source: str) -> Iterator[AnyStr]:
    """The lines of a binary or text file, as iterating it gives them, each read no further than
    :data:`MAX_LINE_BYTES` (+ its line break): a longer one (in UTF-8 bytes) is a ``ValueError`` naming it."""
    for number, line in enumerate(iter(lambda: handle.readline(MAX_LINE_BYTES + 2), handle.read(0))):
        text = line.rstrip(b"\r\n" if isinstance(line, bytes) else "\r\n")
        if len(text) > MAX_LINE_BYTES or (
            isinstance(text, str) and len(text.encode("utf-8", "replace")) > MAX_LINE_BYTES
        ):
            raise ValueError(
                f"{source}, line {number + 1}: longer than {MAX_LINE_BYTES:,} bytes, the most a line may hold "
                "(one sentence per line is expected)"
            )
        yield line


def _lines(handle: BinaryIO, source: str) -> Iterator[tuple[int, str]]:
    """(0-based line number, stripped text); a leading BOM is dropped (utf-8-sig), undecodable bytes are an error,
    and so is a line longer than :data:`MAX_LINE_BYTES` (read no further than that)."""
    for number, raw in enumerate(bounded_lines(handle, source)):
        try:
            yield number, raw.decode("utf-8-sig" if number == 0 else "utf-8").strip()
        except UnicodeDecodeError as err:
            raise ValueError(
                f"{source}, line {number + 1}: not valid UTF-8 ({err.reason} at byte {err.start})"
            ) from None


def _chunks(items: Iterator[T], size: int) -> Iterator[list[T]]:
    """Consecutive lists of ``size`` items (the last one shorter), read lazily."""
    while True:
        chunk = list(itertools.islice(items, size))
        if not chunk:
            return
        yield chunk
