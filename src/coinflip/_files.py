"""Reading and writing files in a run or work directory that anyone may have written.

A run directory is untrusted: a file may be a FIFO (opening it for reading waits for a writer),
a device (/dev/zero never ends), a symlink to somewhere else entirely, or a sparse file of a
terabyte. Every read of a saved file goes through `open_regular`: it opens without blocking,
reads only a regular file, only inside the folder it belongs to, and only up to a size. Every
file coinflip writes whole (a report, a page, the reviews) is written through `replacing`.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from .errors import KEPT, DataError, storage_error

NO_LIMIT = 1 << 62
_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"),
          (stat.S_ISSOCK, "a socket"))  # fmt: skip


class UnreadableFile(DataError):
    """A saved file that is not a plain file inside its folder, or larger than what is read of it."""


def inside(path: Path, folder: Path) -> bool:
    """Whether `path`, symlinks resolved, lies within `folder` (symlinks resolved too)."""
    real, top = os.path.realpath(path), os.path.realpath(folder)
    return real == top or real.startswith(top.rstrip(os.sep) + os.sep)


def open_regular(path: Path, limit: int = NO_LIMIT, within: Path | None = None, write: bool = False) -> BinaryIO:
    """`path` opened for binary reading (`write`: reading and writing), or UnreadableFile saying
    why not; FileNotFoundError when there is nothing there."""
    if within is not None and not inside(path, within):
        raise UnreadableFile(f"{path}: a link to outside {within}; coinflip reads only files inside the run")
    flags = (os.O_RDWR if write else os.O_RDONLY) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags | getattr(os, "O_BINARY", 0))
    except IsADirectoryError:
        raise UnreadableFile(f"{path}: a folder, not a file") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = next((name for test, name in _KINDS if test(info.st_mode)), "not a plain file")
            raise UnreadableFile(f"{path}: {kind}, not a plain file; coinflip reads only plain files")
        if info.st_size > limit:
            raise UnreadableFile(f"{path}: {info.st_size:,} bytes, more than the {limit:,} read of such a file")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "r+b" if write else "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: Path, limit: int, within: Path | None = None) -> bytes:
    """The whole of a plain file of at most `limit` bytes (see `open_regular`)."""
    with open_regular(path, limit, within) as handle:
        return handle.read(limit + 1)[:limit]


@contextlib.contextmanager
def replacing(path: Path, hint: str = KEPT) -> Iterator[BinaryIO]:
    """A file that takes `path`'s place once written whole, so a reader never sees half of it.
    It is written first under a hidden name beside it, made new (a link or FIFO someone left
    there is removed, never written through or waited on; the process id keeps two processes
    writing one page apart), then renamed over `path` (a link there is replaced, not followed).
    On any failure the original stays as it was, the temporary file goes, and an OSError becomes
    StorageError, naming the file, with `hint` saying what the user can do."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.unlink(missing_ok=True)
        with open(tmp, "xb", buffering=1 << 20) as out:  # a write call per megabyte
            yield out
        os.replace(tmp, path)
    except OSError as exc:
        raise storage_error(path, exc, hint) from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
