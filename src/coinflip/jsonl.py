"""A run's predictions and reviews files: one JSON line a sample, appended and flushed as each lands.
A half-written last line is cut on reopen; a later line wins unless it got less far (records.progress)."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import BinaryIO

from ._files import NO_LIMIT, ROWS_LIMIT, UnreadableFile, open_regular, replacing
from .errors import ConfigError, storage_error
from .records import DONE, ERROR, STARTED, Prediction, Review, dumps, key_of, progress, read_prediction, read_review


@dataclass
class PredictionIndex:
    """Where the line that counts for each sample key starts: `offset` for a reply, `~offset` for an
    error; `pending`: replies whose forced answer is pending; `bad`: where the whole lines that hold no
    prediction start (skipped; compaction moves them aside). Plain ints: a million samples,
    tens of MB."""

    where: dict[int, int]
    lines: int
    pending: set[int] = field(default_factory=set)
    bad: list[int] = field(default_factory=list, compare=False)

    @property
    def unreadable(self) -> int:
        return len(self.bad)

    def replied(self, key: int) -> bool:
        return self.where.get(key, -1) >= 0

    def any_replied(self) -> bool:
        return any(offset >= 0 for offset in self.where.values())

    def start(self, key: int) -> int:
        offset = self.where[key]
        return offset if offset >= 0 else ~offset

    def row(self, handle: BinaryIO, key: int) -> Prediction:
        row = read_prediction(_line_at(handle, self.start(key)))
        assert row is not None  # it was indexed because it read as a prediction
        return row


def index_predictions(path: Path, repair: bool = False, limit: int = NO_LIMIT) -> PredictionIndex:
    """One pass over the file; `repair` cuts a half-written last line (a crash mid-write) before appending;
    a file over `limit` bytes is a ConfigError."""
    index = PredictionIndex({}, 0)
    try:
        with open_regular(path, limit, write=repair) as handle:  # never a FIFO or a device
            offset = 0
            for line in handle:
                if not line.endswith(b"\n"):
                    if repair:
                        handle.truncate(offset)
                    break
                index.lines += 1
                _note(index, line, offset)
                offset += len(line)
    except FileNotFoundError:
        return index
    except UnreadableFile as exc:
        raise ConfigError(str(exc)) from None
    except OSError as exc:
        if repair:
            raise storage_error(path, exc) from None
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    return index


def _note(index: PredictionIndex, line: bytes, offset: int) -> None:
    row = read_prediction(line)
    if row is None:
        if line.strip():  # a blank line holds nothing to keep: compaction drops it
            index.bad.append(offset)
        return
    key, state = key_of(row), progress(row)
    old = index.where.get(key)
    old_state = ERROR if old is None or old < 0 else STARTED if key in index.pending else DONE
    if old is not None and state < old_state:
        return
    index.where[key] = ~offset if state == ERROR else offset
    if state == STARTED:
        index.pending.add(key)
    else:
        index.pending.discard(key)


def compact_predictions(path: Path, limit: int = NO_LIMIT) -> PredictionIndex:
    """One line per sample in key order, through a temporary file (a full disk leaves the original). The lines
    that hold no prediction move to `set_aside(path)`, as they were: the file stays JSON Lines, and a hand edit is
    kept. (A last line without its newline is a write a crash cut short, which a resume cuts too.)"""
    index = index_predictions(path, limit=limit)
    keys = sorted(index.where)
    if index.lines == len(keys) and all(index.start(a) < index.start(b) for a, b in pairwise(keys)):
        return index
    where: dict[int, int] = {}
    try:
        with path.open("rb") as src:
            undo = _move_aside(src, index.bad, set_aside(path))
            try:
                with replacing(path) as dst:
                    for key in keys:
                        where[key] = dst.tell() if index.replied(key) else ~dst.tell()
                        dst.write(_line_at(src, index.start(key)))
            except BaseException:
                undo()  # else the next try would move them aside again, and count them twice
                raise
    except OSError as exc:  # opening or reading the original (the copy's own fail in `replacing`)
        raise storage_error(path, exc) from None
    return PredictionIndex(where, len(where), index.pending)


def _move_aside(src: BinaryIO, offsets: list[int], aside: Path) -> Callable[[], None]:
    """The lines of `src` at `offsets` appended to `aside`, a plain file (never through a link); what takes them
    back off."""
    if not offsets:
        return lambda: None
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
    refused = UnreadableFile(f"{aside}: not a plain file; coinflip writes only those")
    try:
        fd = os.open(aside, flags, 0o644)
    except OSError as exc:
        if exc.errno in (errno.ENXIO, errno.ELOOP):  # a FIFO nobody reads, a link
            raise refused from None
        raise storage_error(aside, exc) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise refused
    with os.fdopen(fd, "r+b", buffering=0) as out:  # unbuffered: what `undo` cuts is all that was written
        before = out.seek(0, os.SEEK_END)

        def undo() -> None:
            with contextlib.suppress(OSError):
                os.truncate(aside, before)

        try:
            if before and os.pread(out.fileno(), 1, before - 1) != b"\n":  # a hand edit's last line: its own
                out.write(b"\n")
            out.writelines(_line_at(src, offset).rstrip(b"\n") + b"\n" for offset in offsets)
            out.flush()
        except OSError as exc:  # a full disk: nothing half-moved stays for the next try to move again
            undo()
            raise storage_error(aside, exc) from None
    return undo


def set_aside(path: Path) -> Path:
    """Where putting a predictions file in order moves its lines that hold no prediction, as they were."""
    return path.with_name(f"{path.stem}.unreadable.txt")


def set_aside_lines(path: Path) -> int:
    """How many lines putting `path` in order has moved aside so far (a report keeps counting them), read as the
    predictions are: a plain file inside their folder, of at most ROWS_LIMIT bytes, a megabyte at a time."""
    try:
        with open_regular(set_aside(path), ROWS_LIMIT, within=path.parent) as aside:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: aside.read(1 << 20), b""))
    except FileNotFoundError:
        return 0
    except OSError as exc:
        raise storage_error(set_aside(path), exc) from None


def _line_at(src: BinaryIO, offset: int) -> bytes:
    src.seek(offset)
    return src.readline()


def iter_predictions(path: Path) -> Iterator[Prediction]:
    with path.open("rb") as handle:
        for line in handle:
            if line.endswith(b"\n") and (row := read_prediction(line)) is not None:
                yield row


def iter_reviews(path: Path, within: Path | None = None, limit: int = NO_LIMIT) -> Iterator[Review]:
    """The readable reviews of a plain file (inside `within`, if given, of at most `limit` bytes), else
    UnreadableFile."""
    with open_regular(path, limit, within) as handle:
        for line in handle:
            if (review := read_review(line)) is not None:
                yield review


def read_predictions(path: Path) -> dict[int, Prediction]:
    """All counting predictions in memory, by sample key (small jobs: a cost budget)."""
    if not path.exists():
        return {}
    index = index_predictions(path)
    with path.open("rb") as handle:
        return {key: index.row(handle, key) for key in index.where}


class PredictionWriter:
    """Appends one JSON line per finished sample. `in_order`: started empty and written in key order,
    so the file needs no compaction. A full disk ends in StorageError; what was flushed stays."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._handle: BinaryIO = path.open("ab")
        except OSError as exc:
            raise storage_error(path, exc) from None
        self.in_order = self._handle.tell() == 0
        self._last = -1

    def write(self, row: Prediction) -> None:
        key = key_of(row)
        self.in_order = self.in_order and key > self._last
        self._last = key
        try:
            self._handle.write(dumps(row))
        except OSError as exc:
            raise storage_error(self.path, exc) from None

    def flush(self) -> None:
        try:
            self._handle.flush()
        except OSError as exc:
            raise storage_error(self.path, exc) from None

    def close(self) -> None:
        """Close; a failed final flush cuts the file back to its last whole line."""
        try:
            self._handle.close()
        except OSError:
            with contextlib.suppress(OSError):
                index_predictions(self.path, repair=True)
