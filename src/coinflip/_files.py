"""Files anyone may have written (a FIFO, a device, a link out, a sparse terabyte): every read goes through
`open_regular` (a plain file inside its folder, up to a size), every file written whole through `replacing`."""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from .errors import KEPT, ConfigError, DataError, short, storage_error

try:
    import fcntl
except ImportError:  # Windows: no advisory locks
    fcntl = None  # type: ignore[assignment]

NO_LIMIT = 1 << 62
ROWS_LIMIT = 1 << 30  # bytes read of a predictions or reviews file by rescore and the index (a million samples fit)
LOCKS = fcntl is not None  # advisory file locks (flock) exist here
_NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS)  # flock's answers where a file system has no locks
SETTINGS_LIMIT = 16 << 20  # bytes of a settings or prices file read (a task config is a few hundred)
_BOMS = ((b"\xff\xfe\x00\x00", "utf-32-le"), (b"\x00\x00\xfe\xff", "utf-32-be"), (b"\xff\xfe", "utf-16-le"),
         (b"\xfe\xff", "utf-16-be"), (b"\xef\xbb\xbf", "utf-8-sig"))  # fmt: skip
_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"),
          (stat.S_ISSOCK, "a socket"))  # fmt: skip


class UnreadableFile(DataError):
    """A saved file not a plain file inside its folder, or larger than what is read of it."""


def inside(path: Path, folder: Path) -> bool:
    real, top = os.path.realpath(path), os.path.realpath(folder)
    return real == top or real.startswith(top.rstrip(os.sep) + os.sep)


def special(path: Path) -> bool:
    """Something at `path` neither a plain file nor a folder: a link, FIFO, socket or device (/dev/stdout is
    a link, to a file where output is redirected)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def open_regular(path: Path, limit: int = NO_LIMIT, within: Path | None = None, write: bool = False) -> BinaryIO:
    """`path` opened for binary reading (`write`: and writing), or UnreadableFile saying why not."""
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
    with open_regular(path, limit, within) as handle:
        return handle.read(limit + 1)[:limit]


@contextlib.contextmanager
def replacing(path: Path, hint: str = KEPT) -> Iterator[BinaryIO]:
    """Made under a hidden name beside `path` (a link or FIFO there removed), renamed over it once whole; on
    failure the original stays, and an OSError is StorageError naming the file, `hint` saying what to do."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.unlink(missing_ok=True)
        with open(tmp, "xb", buffering=1 << 20) as out:  # a write call per megabyte
            yield out
        os.replace(tmp, path)
    except OSError as exc:
        if exc.filename == str(tmp):  # the user knows the file, not the draft beside it
            exc.filename = str(path)
        raise storage_error(path, exc, hint) from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def read_settings(path: Path, limit: int = SETTINGS_LIMIT, within: Path | None = None) -> Any:
    """The one reader of YAML and JSON files: UTF-8, or UTF-16/32 with a byte order mark (Windows
    editors); every failure one ConfigError line naming the file, but FileNotFoundError."""
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
    loader = _unique_loader()
    try:  # no YAML aliases: a kilobyte of them can stand for billions of nodes
        if kind == "JSON":
            return json.loads(text, object_pairs_hook=unique_keys, parse_float=exact_float)
        if "*" in text and any(isinstance(event, yaml.AliasEvent) for event in yaml.parse(text, loader)):
            raise yaml.YAMLError("it uses YAML aliases (*name), which settings may not")
        return yaml.load(text, Loader=loader)
    except (ValueError, yaml.YAMLError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        first = (str(exc) or type(exc).__name__).splitlines()[0]
        raise ConfigError(f"{path}: not valid {kind} ({first})") from None


class Underflow(ValueError):
    """A number too small for a float, which would read it as 0."""

    def __init__(self, text: str) -> None:
        super().__init__(f"{text} is too small a number for a float, which would read it as 0")


def exact_float(text: str) -> float:
    """A number written as text, refused where no float holds it: `limit: 1e-400` read as 0 is every question."""
    value = float(text)
    if value == 0 and not_zero(text):
        raise Underflow(text)
    return value


def not_zero(text: str) -> bool:
    """Whether a number's text has a digit other than 0 before its exponent (any script's: float takes them)."""
    return any(c.isdecimal() and int(c) for c in text.lower().partition("e")[0])


class KeyTwice(ValueError):
    """An object (a mapping) names a key twice; `at`: the position of its second pair."""

    def __init__(self, key: Any, at: int) -> None:
        super().__init__(f"the key {short(key)} is given twice")
        self.at = at


def unique_keys(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
    """A JSON object as a dict, refused if it names a key twice: json and YAML readers let the last one win
    silently, so a setting given twice in one file would be half ignored."""
    seen: set[Any] = set()
    for at, (key, _) in enumerate(pairs):
        if key in seen:
            raise KeyTwice(key, at)
        seen.add(key)
    return dict(pairs)


@functools.cache
def _unique_loader() -> Any:
    """PyYAML's safe loader (its C parser where built) that refuses a mapping naming a key twice, as `unique_keys`
    does for JSON, and merge keys (<<), which without aliases (refused) only hide a key given twice."""
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class Loader(base):  # type: ignore[misc, valid-type]
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            if merge := next((key for key, _ in node.value if key.tag == "tag:yaml.org,2002:merge"), None):
                line = f"line {merge.start_mark.line + 1}"
                raise yaml.constructor.ConstructorError(
                    None, None, f"it uses a merge key (<<, {line}), which settings may not"
                )
            mapping = super().construct_mapping(node, deep)
            if len(mapping) < len(node.value):
                try:
                    unique_keys([(self.construct_object(key, deep=True), None) for key, _ in node.value])
                except KeyTwice as exc:
                    line = node.value[exc.at][0].start_mark.line + 1
                    raise yaml.constructor.ConstructorError(None, None, f"{exc}, again on line {line}") from None
            return mapping

    def construct_float(loader: Any, node: Any) -> float:
        value = base.construct_yaml_float(loader, node)
        if value == 0 and not_zero(str(node.value)):  # YAML's own spellings (0_.0, 0:0.0) are zeros
            raise yaml.constructor.ConstructorError(None, None, str(Underflow(node.value)), node.start_mark)
        return float(value)

    Loader.add_constructor("tag:yaml.org,2002:float", construct_float)
    return Loader


def flock(file: Any, wait: bool = False) -> bool | None:
    """An exclusive lock on an open file (or its descriptor), or waiting for one: True taken, False held
    elsewhere (without waiting), None: no locks here (Windows, some network file systems)."""
    if fcntl is None:
        return None
    try:
        fcntl.flock(file, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    except OSError as exc:
        if exc.errno in _NO_LOCKS:
            return None
        raise
    return True
