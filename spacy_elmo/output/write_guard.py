"""A binary file for h5py that never hands a write error to HDF5, so a full disk is a clear error, not a crash.

When a write fails (no space left, the file-size limit), HDF5 reports it from wherever the write
happened to be flushed: mostly from ``__dealloc__`` of some object, where h5py can only print
"Exception ignored", and the process later dies with SIGSEGV when the file is closed. Through
:class:`GuardedFile` (h5py's ``fileobj`` driver) HDF5 never sees the error: the first failed
write is remembered, it and every later write are dropped, and :meth:`GuardedFile.check` raises
:class:`WriteFailedError` naming the path. :class:`GuardedHDF5` checks after each dataset it creates,
and its writer (``embed_file.hdf5_output``, for ``spacy-elmo embed`` and AllenNLP's ``embed_file``
alike) after closing, then deletes the (incomplete) file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

from ..groundwork.atomic_write import WriteFailedError, write_failed

if TYPE_CHECKING:  # pragma: no cover
    import h5py

__all__ = ["GuardedFile", "GuardedHDF5", "WriteFailedError"]


class GuardedFile:
    """``path`` opened for writing, with the methods h5py's ``fileobj`` driver calls; write errors are held back."""

    def __init__(
        self, path: Union[str, os.PathLike[str]], shown_as: Optional[Union[str, os.PathLike[str]]] = None
    ) -> None:
        self.path = Path(path)
        self.shown_as = (
            Path(shown_as) if shown_as is not None else self.path
        )  # the name in the error (the output, not a temporary)
        # unbuffered: a write fails where it happens; the handle outlives __init__ (close() closes it)
        self._file = open(self.path, "w+b", buffering=0)  # noqa: SIM115
        self._error: Optional[OSError] = None

    @property
    def failed(self) -> bool:
        """Whether a write has failed (everything written since was dropped)."""
        return self._error is not None

    def check(self) -> None:
        """Raise :class:`WriteFailedError` if a write has failed (its reason and the path in the message)."""
        if self._error is not None:
            raise write_failed(self._error, self.shown_as)

    # -- what h5py's fileobj driver needs ---------------------------------------------------------

    def read(self, size: int = -1) -> bytes:
        return self._file.read(size)

    def readinto(self, buffer: bytearray | memoryview) -> int:
        return self._file.readinto(buffer) or 0

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        return self._file.seek(offset, whence)

    def tell(self) -> int:
        return self._file.tell()

    def write(self, data: bytes | memoryview) -> int:
        view = memoryview(data).cast("B")
        start = self._file.tell()
        if self._error is None:
            try:
                done = 0
                while done < len(view):  # a write near a size limit may be partial: the rest then fails
                    done += self._file.write(view[done:]) or 0
                return len(view)
            except OSError as err:
                self._error = err
        self._file.seek(start + len(view))  # dropped, but HDF5 is told it was written: it stays consistent
        return len(view)

    def truncate(self, size: Optional[int] = None) -> int:
        if self._error is None:
            try:
                return self._file.truncate(size)
            except OSError as err:
                self._error = err
        return self._file.tell() if size is None else size

    def flush(self) -> None:
        if self._error is None:
            try:
                self._file.flush()
            except OSError as err:
                self._error = err

    def close(self) -> None:
        self._file.close()


class GuardedHDF5:
    """An HDF5 file open for writing on a :class:`GuardedFile`: a dataset whose write failed raises
    :class:`WriteFailedError` at once, so a run stops at the first failed write instead of computing the rest."""

    def __init__(self, file: h5py.File, guard: GuardedFile) -> None:
        self.file = file
        self.guard = guard

    @property
    def attrs(self) -> Any:
        """The file's attributes (written when it closes, checked then)."""
        return self.file.attrs

    def __contains__(self, name: str) -> bool:
        return name in self.file

    def create_dataset(self, name: str, *args: Any, **kwargs: Any) -> h5py.Dataset:
        """``h5py.File.create_dataset``, then :meth:`GuardedFile.check`."""
        dataset = self.file.create_dataset(name, *args, **kwargs)
        self.guard.check()
        return dataset
