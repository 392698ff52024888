"""The run directory: config, predictions (appended and flushed one by one), reviews, reports, log.

Predictions survive any crash: each line is flushed as its sample finishes, a half-written last
line is dropped on reopen, and a resumed run appends only what was missing.
"""

from __future__ import annotations

import json
import os
import re
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from typing import Any, BinaryIO

from .config import BENCHMARK, safe_name
from .errors import ConfigError

CONFIG_FILE = "configs/task_config.yaml"
_OWN_LINE = re.compile(rb'^\{"id": (\d+), .*\}\n$', re.S)


@dataclass(frozen=True)
class RunDir:
    root: Path
    model: str

    @property
    def _m(self) -> str:
        return safe_name(self.model)

    @property
    def config_file(self) -> Path:
        return self.root / CONFIG_FILE

    @property
    def predictions(self) -> Path:
        return self.root / "predictions" / self._m / f"{BENCHMARK}.jsonl"

    @property
    def reviews(self) -> Path:
        return self.root / "reviews" / self._m / f"{BENCHMARK}.jsonl"

    @property
    def report_json(self) -> Path:
        return self.root / "reports" / self._m / f"{BENCHMARK}.json"

    @property
    def report_html(self) -> Path:
        return self.root / "reports" / self._m / f"{BENCHMARK}.html"

    @property
    def log(self) -> Path:
        return self.root / "logs" / "eval_log.log"

    @property
    def server_log(self) -> Path:
        return self.root / "logs" / "llama_server.log"

    @classmethod
    def create(cls, work_dir: Path, model: str) -> RunDir:
        stamp = datetime.now().strftime("%Y%m%d_%H%M%S")
        for n in range(1000):
            root = work_dir / (stamp if n == 0 else f"{stamp}_{n}")
            try:
                root.mkdir(parents=True)
                break
            except FileExistsError:
                continue
            except OSError as exc:
                raise ConfigError(f"cannot create run directory in {work_dir}: {exc.strerror}") from None
        return cls(root, model)

    @classmethod
    def open(cls, path: str | Path) -> RunDir:
        root = Path(path).expanduser()
        saved = load_saved_config(root)
        return cls(root, str(saved["config"]["model"]))

    def save_config(self, config: dict[str, Any], fingerprint: dict[str, Any], samples: int) -> None:
        """`samples` is how many the run asks for, so a report can say what never ran."""
        import yaml

        data = {"config": config, "fingerprint": fingerprint, "samples": samples}
        dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
        text = yaml.dump(data, Dumper=dumper, sort_keys=False, allow_unicode=True)
        _atomic_write(self.config_file, text)


def load_saved_config(root: Path) -> dict[str, Any]:
    import yaml

    path = root / CONFIG_FILE
    if not path.is_file():
        raise ConfigError(f"{root} is not a coinflip run directory (no {CONFIG_FILE})")
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError:
        raise ConfigError(f"{path}: not valid YAML") from None
    if not isinstance(data, dict) or "config" not in data or "fingerprint" not in data:
        raise ConfigError(f"{path}: not a coinflip task config")
    return data


@dataclass
class PredictionIndex:
    """Where the line that counts for each sample starts: `offset` for a reply, `~offset` for an error.

    Plain ints keep it small: a million samples cost tens of MB, and no row is held.
    """

    where: dict[int, int]
    lines: int

    def ok(self, key: int) -> bool:
        return self.where.get(key, -1) >= 0

    def start(self, key: int) -> int:
        """Where the line starts, reply or error."""
        offset = self.where[key]
        return offset if offset >= 0 else ~offset


def index_predictions(path: Path, repair: bool = False) -> PredictionIndex:
    """One pass over the file. A later line for an id wins unless it is an error and the earlier
    one is not; `repair` cuts a half-written last line (a crash mid-write) before appending."""
    where: dict[int, int] = {}
    lines = 0
    if not path.exists():
        return PredictionIndex(where, 0)
    with path.open("r+b" if repair else "rb") as handle:
        offset = 0
        for line in handle:
            if not line.endswith(b"\n"):
                if repair:
                    handle.truncate(offset)
                break
            lines += 1
            found = _OWN_LINE.match(line)  # fast path for lines this module wrote: id first, error last
            if found and line.endswith(b'"error": null}\n'):
                key, ok = int(found[1]), True
            else:
                try:
                    row = json.loads(line)
                    key, ok = int(row["id"]), row.get("error") is None
                except (ValueError, KeyError, TypeError):
                    offset += len(line)
                    continue
            old = where.get(key)
            if old is None or ok or old < 0:
                where[key] = offset if ok else ~offset
            offset += len(line)
    return PredictionIndex(where, lines)


def compact_predictions(path: Path) -> PredictionIndex:
    """Rewrite the file as one line per sample in id order, streamed line by line."""
    index = index_predictions(path)
    keys = sorted(index.where)
    offsets = [index.start(k) for k in keys]
    if index.lines == len(offsets) and all(a < b for a, b in pairwise(offsets)):
        return index
    where: dict[int, int] = {}

    def in_order(src: BinaryIO) -> Iterator[bytes]:
        position = 0
        for key, offset in zip(keys, offsets, strict=True):
            line = _line_at(src, offset)
            where[key] = position if index.ok(key) else ~position
            position += len(line)
            yield line

    _rewrite(path, in_order)
    return PredictionIndex(where, len(where))


def _rewrite(path: Path, lines: Callable[[BinaryIO], Iterable[bytes]]) -> None:
    """Replace `path` with the lines `lines` picks out of it, through a temporary file."""
    tmp = path.with_name(path.name + ".tmp")
    with path.open("rb") as src, tmp.open("wb", buffering=1 << 20) as dst:  # a write call per megabyte
        dst.writelines(lines(src))
    os.replace(tmp, path)


def _line_at(src: BinaryIO, offset: int) -> bytes:
    """The line starting at `offset`: one pread for a typical line, no seek, no buffer refill."""
    if not hasattr(os, "pread"):  # Windows
        src.seek(offset)
        return src.readline()
    size = 8192
    while True:
        data = os.pread(src.fileno(), size, offset)
        end = data.find(b"\n")
        if end >= 0:
            return data[: end + 1]
        if len(data) < size:
            return data
        size *= 4


def iter_predictions(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.endswith("\n"):
                yield json.loads(line)


def read_predictions(path: Path) -> dict[int, dict[str, Any]]:
    """All counting predictions in memory, by id (for small jobs such as compare)."""
    if not path.exists():
        return {}
    index = index_predictions(path)
    found: dict[int, dict[str, Any]] = {}
    with path.open("rb") as handle:
        for key in index.where:
            found[key] = json.loads(_line_at(handle, index.start(key)))
    return found


class PredictionWriter:
    """Appends one JSON line per finished sample; `flush` hands them to the OS (the runner does so
    for every batch of replies that land together, before the next turn of the event loop).

    It keeps where each line starts (`offsets`, 8 bytes a sample), so a file it wrote whole can
    be put in id order without reading it again (`compact_written`).
    """

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._handle: BinaryIO = path.open("ab")
        self._position = self._handle.tell()
        self.offsets = array("q")

    def write(self, row: dict[str, Any]) -> None:
        try:
            line = (json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8")
        except UnicodeEncodeError:  # half a surrogate pair from the server: keep it as a \u escape
            line = (json.dumps(row) + "\n").encode("utf-8")
        self.offsets.append(self._position)
        self._position += len(line)
        self._handle.write(line)

    def flush(self) -> None:
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()


def compact_written(path: Path, ids: array[int], offsets: array[int]) -> None:
    """Put a file that one PredictionWriter wrote whole (a fresh run) in id order, from the
    writer's record of where each line starts and the ids written there, in that order:
    no index pass, and arrays instead of a dict."""
    import numpy as np

    keys = np.frombuffer(ids, dtype=np.int32)
    if bool((keys[1:] > keys[:-1]).all()):
        return
    order = np.argsort(keys, kind="stable")
    if bool((keys[order[1:]] == keys[order[:-1]]).any()):  # cannot happen in a fresh run
        compact_predictions(path)
        return
    starts = np.frombuffer(offsets, dtype=np.int64)
    sizes = np.diff(starts, append=path.stat().st_size)

    def in_order(src: BinaryIO) -> Iterator[bytes]:
        for first in range(0, len(order), 4096):  # a slice at a time keeps Python ints few
            part = order[first : first + 4096]
            for start, size in zip(starts[part].tolist(), sizes[part].tolist(), strict=True):
                yield _read_at(src, start, size)

    _rewrite(path, in_order)


def _read_at(src: BinaryIO, offset: int, size: int) -> bytes:
    if hasattr(os, "pread"):
        return os.pread(src.fileno(), size, offset)
    src.seek(offset)  # Windows
    return src.read(size)


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
