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
from typing import Any, BinaryIO

from .errors import KEPT, ConfigError, DataError, storage_error

NO_LIMIT = 1 << 62
SETTINGS_LIMIT = 16 << 20  # bytes of a settings or prices file read (a task config is a few hundred)
_BOMS = ((b"\xff\xfe\x00\x00", "utf-32-le"), (b"\x00\x00\xfe\xff", "utf-32-be"), (b"\xff\xfe", "utf-16-le"),
         (b"\xfe\xff", "utf-16-be"), (b"\xef\xbb\xbf", "utf-8-sig"))  # fmt: skip
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


def parse_yaml(text: str) -> Any:
    """A YAML (or JSON) document without anchors and aliases: a kilobyte of aliases can stand
    for billions of nodes. Any error is a yaml.YAMLError (or RecursionError)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    if "*" in text and any(isinstance(event, yaml.AliasEvent) for event in yaml.parse(text, Loader=loader)):
        raise yaml.YAMLError("it uses YAML aliases (*name), which settings may not")
    return yaml.load(text, Loader=loader)


def read_settings(path: Path, limit: int = SETTINGS_LIMIT, within: Path | None = None) -> Any:
    """The one reader of YAML and JSON files (a task config, a run's saved settings, a prices
    table): a plain file of at most `limit` bytes, UTF-8 or UTF-16/32 with a byte order mark (what
    some Windows editors save), JSON by its own parser (a .json file), no YAML aliases. Every
    failure is one ConfigError line naming the file, but FileNotFoundError, which the caller words."""
    import json

    import yaml

    try:
        raw = read_regular(path, limit, within)
    except UnreadableFile as exc:
        raise ConfigError(str(exc)) from None
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None
    encoding = next((name for bom, name in _BOMS if raw.startswith(bom)), "utf-8")
    try:
        text = raw.decode(encoding).lstrip("\ufeff")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not {encoding.upper()} text; save it as UTF-8") from None
    if "\0" in text:  # UTF-16 or UTF-32 without a byte order mark
        raise ConfigError(f"{path}: holds NUL characters (UTF-16 without a byte order mark?); save it as UTF-8")
    kind = "JSON" if path.suffix.lower() == ".json" else "YAML"
    try:
        return json.loads(text) if kind == "JSON" else parse_yaml(text)
    except (ValueError, yaml.YAMLError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        first = (str(exc) or type(exc).__name__).splitlines()[0]
        raise ConfigError(f"{path}: not valid {kind} ({first})") from None
