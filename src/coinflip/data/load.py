"""Dataset stage: validated CoinFlip records from the bundled splits, local files or a hub cache, and the
subset a `--limit` asks; a bad file stops the run with one line naming the file, the row and the problem."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import random
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from itertools import islice, takewhile
from pathlib import Path
from typing import Any

from ..errors import DataError, short
from .grammar import STEPS_PATTERN, bundled_dir

QUESTION_KEYS = ("question", "inputs")
ANSWER_KEYS = ("answer", "targets")
HALF_PAIR = re.compile("[\ud800-\udfff]")
# a streamed file of at most this many bytes is held while a stratified subset is drawn, and the drawn rows kept:
# read once, not again for the requests (a tenth of a second of the 3,333-row split, 0.6 MB, on a slow machine).
# Bytes, not rows: 20,000 questions of 15,000 people each are 4 GB
HELD_BYTES = 8 * 2**20


@dataclass(frozen=True)
class Record:
    """One question with its YES/NO answer; people and flips are read off the question text."""

    id: int
    question: str
    answer: str
    people: int
    flips: int


@dataclass(frozen=True)
class Dataset:
    """Validated rows and where they came from (`source`, in every report). JSONL and CSV files are
    read again when iterated, so a run over a million generated questions holds none in memory."""

    source: dict[str, Any]
    count: int
    rows: tuple[Record, ...] | None = None
    path: Path | None = None
    ids: tuple[int, ...] | None = None  # a drawn subset (sorted row ids); None: the first `count` rows
    subset: dict[str, object] = field(default_factory=dict)  # how `take` drew it: mode, seed, count, of
    stamp: tuple[int, int, int] | None = None  # the streamed file as hashed: it must not change while read

    def __iter__(self) -> Iterator[Record]:
        rows: Iterable[Record] = self.rows if self.rows is not None else _stream(self.path, self.stamp)  # type: ignore[arg-type]
        if self.ids is None:
            yield from islice(rows, self.count)
            return
        wanted, last = set(self.ids), max(self.ids, default=-1)
        yield from (r for r in takewhile(lambda r: r.id <= last, rows) if r.id in wanted)

    def __len__(self) -> int:
        return self.count

    def take(self, limit: int | float | None, mode: str = "first", seed: int = 0) -> Dataset:
        """The subset a limit (a count, a fraction or None) asks for, seeded. The official test split is ordered
        (4 people, then 2), so by default it is stratified; `first` is EvalScope's first N, `random` its shuffle."""
        total = self.count
        count = total if limit is None else max(1, int(total * limit)) if isinstance(limit, float) else int(limit)
        count = min(count, total)  # EvalScope takes int(n * f) of a fraction
        ids: tuple[int, ...] | None = None
        rows = self.rows
        if count < total and mode == "random":
            order = list(range(total))
            random.Random(f"coinflip-subset:{seed}").shuffle(order)
            ids = tuple(sorted(order[:count]))
        elif count < total and mode != "first":
            held = list(self) if self._small() else None  # then the draw is not read again
            ids = _stratified(self if held is None else held, count, total, seed)
            if held is not None:
                wanted = set(ids)
                rows = tuple(r for r in held if r.id in wanted)
        drawn = {"mode": mode if count < total else "all", "seed": seed, "count": count, "of": total}
        return replace(self, count=count, ids=ids, subset=drawn, rows=rows)

    def _small(self) -> bool:
        """A file of at most HELD_BYTES: a streamed one as it was hashed, or the bundled split."""
        if self.rows is not None or self.path is None:
            return False
        return (self.stamp[1] if self.stamp is not None else self.path.stat().st_size) <= HELD_BYTES


def _stratified(records: Iterable[Record], count: int, total: int, seed: int) -> tuple[int, ...]:
    """By number of people: quotas that grow one question at a time, the next to the stratum furthest below its
    proportional share (ties to the larger), each the first rows of a seeded shuffle: a larger limit holds the
    smaller one's questions, so a resume reuses them. (Largest remainder at each count gives the same quotas for two
    strata, but with three a larger count could give a stratum fewer: the Alabama paradox.)"""
    strata: dict[int, list[int]] = {}
    for r in records:
        strata.setdefault(r.people, []).append(r.id)
    keys = sorted(strata)
    taken = dict.fromkeys(keys, 0)
    for seat in range(1, count + 1):  # O(count x strata): a few ms for the official split
        k = min(keys, key=lambda k: (taken[k] - seat * len(strata[k]) / total, -len(strata[k]), k))
        taken[k] += 1
    chosen: list[int] = []
    for k in keys:
        random.Random(f"coinflip-subset:{seed}:{k}").shuffle(strata[k])
        chosen.extend(strata[k][: taken[k]])
    return tuple(sorted(chosen))


def digest(records: Iterable[Record]) -> tuple[str, int]:
    """The sha256 of the rows' questions and answers, and how many rows there were."""
    digest, count = hashlib.sha256(), 0
    for r in records:
        digest.update(f"{r.question}\t{r.answer}\n".encode())
        count += 1
    return digest.hexdigest(), count


def _pick(row: dict[str, Any], keys: Sequence[str], where: str) -> Any:
    for key in keys:
        if key in row:
            return row[key]
    raise DataError(f"{where}: missing field {' or '.join(repr(k) for k in keys)}")


def _iter_records(rows: Iterable[Any], path: Path) -> Iterator[Record]:
    for number, row in enumerate(rows, 1):
        where = f"{path}: row {number}"
        if not isinstance(row, dict):
            raise DataError(f"{where}: expected an object with question/answer, got {type(row).__name__}")
        question, answer = _pick(row, QUESTION_KEYS, where), _pick(row, ANSWER_KEYS, where)
        if not isinstance(question, str) or not question.strip():
            raise DataError(f"{where}: empty or missing question")
        if HALF_PAIR.search(question):  # a JSON escape such as \ud800: no UTF-8 for it, so no prompt or hash
            raise DataError(f"{where}: the question holds half a surrogate pair (\\ud800-\\udfff), not text")
        said = str(answer).strip().upper() if isinstance(answer, (str, bool)) else ""
        label = {"TRUE": "YES", "FALSE": "NO"}.get(said, said)
        if label not in ("YES", "NO"):
            raise DataError(f"{where}: answer must be yes or no, got {short(answer)}")
        text = question.strip()
        steps = STEPS_PATTERN.findall(text)  # every phrasing of the grammar (grammar.py)
        yield Record(number - 1, text, label, len(steps), sum(1 for flip_en, flip_zh in steps if flip_en or flip_zh))


def _read_json(path: Path) -> Iterable[Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except (ValueError, RecursionError) as exc:  # a 5,000-digit number, nesting thousands deep
        raise DataError(f"{path}: not usable JSON ({_why(exc)})") from None
    if isinstance(data, dict) and isinstance(data.get("examples"), list):
        return list(data["examples"])
    if isinstance(data, list):
        return data
    raise DataError(f"{path}: expected a JSON list of rows or an object with an 'examples' list")


def _read_jsonl(path: Path) -> Iterator[Any]:
    with path.open(encoding="utf-8-sig") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}: line {number}: invalid JSON: {exc.msg}") from None
            except (ValueError, RecursionError) as exc:  # a row's number skips blank lines: a line's does not
                raise DataError(f"{path}: line {number}: not usable JSON ({_why(exc)})") from None


def _read_csv(path: Path) -> list[Any]:
    """Read whole under a field limit of 2 GiB (128 KiB by default: a question of 6,000 people), then the
    process's limit is given back: a library's caller may rely on it."""
    before = csv.field_size_limit(2**31 - 1)
    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            reader = csv.DictReader(handle)
            if not reader.fieldnames:
                raise DataError(f"{path}: empty CSV file (no header row)")
            return list(reader)
    finally:
        csv.field_size_limit(before)


def _read_parquet(path: Path) -> list[Any]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(f"{path}: reading Parquet needs pyarrow: pip install pyarrow (the parquet extra)") from None
    try:
        return list(pq.read_table(path).to_pylist())
    except Exception as exc:  # pyarrow raises several unrelated types for corrupt files
        raise DataError(f"{path}: not a readable Parquet file ({type(exc).__name__})") from None


def _why(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return str(exc).split(";")[0][:120] or type(exc).__name__


READERS = {".json": _read_json, ".jsonl": _read_jsonl, ".csv": _read_csv, ".parquet": _read_parquet}
FORMATS = tuple(READERS)


def _checked(path: Path) -> Path:
    try:
        path.stat()
    except OSError as exc:  # missing, a link loop, a name too long
        raise DataError(f"{path}: {'no such file' if exc.errno == 2 else exc.strerror}") from None
    if path.suffix.lower() not in READERS:
        raise DataError(f"{path}: unknown format {path.suffix or '(none)'}; use one of {', '.join(FORMATS)}")
    if not path.is_file():
        raise DataError(f"{path}: not a file")
    return path


def _stamp(path: Path) -> tuple[int, int, int]:
    stat = os.stat(path)
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


def _unchanged(path: Path, stamp: tuple[int, int, int] | None) -> None:
    if stamp is not None and _stamp(path) != stamp:
        raise DataError(f"{path}: changed while being read, so the questions would mix two versions; start again")


def _stream(path: Path, stamp: tuple[int, int, int] | None = None) -> Iterator[Record]:
    """The rows, read again; with `stamp`, none from a file changed since (a rewrite in place mid-run), nor
    its end (one cut short ends the rows early)."""
    try:
        for record in _iter_records(READERS[path.suffix.lower()](path), path):
            _unchanged(path, stamp)
            yield record
        _unchanged(path, stamp)
    except UnicodeDecodeError:
        raise DataError(f"{path}: not UTF-8 text") from None
    except csv.Error as exc:
        raise DataError(f"{path}: not readable CSV ({exc})") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror})") from None


def load_file(path: str | Path) -> list[Record]:
    """One file's rows; the format follows the file's extension."""
    path = _checked(Path(path))
    records = list(_stream(path))
    if not records:
        raise DataError(f"{path}: no rows")
    return records


def _split_files(path: Path, split: str) -> list[Path]:
    """A file is the split itself; a directory holds one test.* or Parquet shards, in it or in its data/ folder
    (the hubs' layout), never deeper: `--dataset-path /usr/lib` cannot pick an unrelated test.json."""
    if not path.is_dir():
        return [_checked(path)]
    named: list[Path] = []
    for folder in (path, path / "data"):
        try:
            named += [folder / n for n in sorted(os.listdir(folder)) if n.startswith(split)] if folder.is_dir() else []
        except OSError as exc:  # a folder we may not read is not one without the split
            raise DataError(f"{folder}: cannot list ({exc.strerror})") from None
    candidates = [p for p in named if p.suffix.lower() in FORMATS and not p.is_dir()]  # a broken link is named
    named_as = re.compile(rf"{split}-(\d+)-of-(\d+)(?:-[0-9a-f]+)?\.parquet$")  # -<fingerprint>: older `datasets`
    shards = [p for p in candidates if named_as.match(p.name)]
    numbers = sorted((int(m[1]), int(m[2])) for p in shards if (m := named_as.match(p.name)))  # (i, of n)
    if numbers and numbers != [(i, numbers[0][1]) for i in range(numbers[0][1])]:  # each of n once: else a part
        raise DataError(f"{path}: {split} shards missing (found {', '.join(p.name for p in shards)}); split incomplete")
    found = shards if len(shards) > 1 else [p for p in candidates if re.match(rf"{split}([.-]|$)", p.name)]
    if not found:
        raise DataError(f"{path}: no {split}.* file ({', '.join(FORMATS)}) in it or in its data/ folder")
    if len(found) > 1 and found is not shards:
        raise DataError(f"{path}: several {split} files ({', '.join(p.name for p in found)}); keep one")
    return [_checked(p) for p in found]


def load_split(path: str | Path, split: str) -> list[Record]:
    return _numbered(_split_files(Path(path), split))


def _numbered(files: list[Path]) -> list[Record]:
    """The files' rows as one split, numbered across them (Parquet shards)."""
    return [replace(r, id=i) for i, r in enumerate(r for f in files for r in load_file(f))]


def open_split(path: Path, split: str) -> tuple[Dataset, str]:
    """A validated split and its sha256: kept on disk when it can be streamed, else in memory."""
    files_ = _split_files(path, split)
    if len(files_) == 1 and files_[0].suffix.lower() in (".jsonl", ".csv"):
        stamp = _stamp(files_[0])
        sha, count = digest(_stream(files_[0], stamp))
        if not count:
            raise DataError(f"{files_[0]}: no rows")
        return Dataset({}, count, path=files_[0], stamp=stamp), sha
    records = tuple(_numbered(files_))  # listed once
    return Dataset({}, len(records), rows=records), digest(records)[0]


MANIFEST = "manifest.json"  # rows and sha256 of the shipped splits, so they need no validation pass


def load_dataset(
    split: str = "test",
    path: str | Path | None = None,
    hub: str = "bundled",
    dataset_id: str | None = None,
    cache_dir: str | Path | None = None,
) -> Dataset:
    """One split of the bundled data, a local path, or a hub's local cache."""
    if path is not None:
        path = Path(path).expanduser()  # a config file's `local_path: ~/data`, as --work-dir and --use-cache
        source = {"source": "file", "path": os.path.abspath(path)}  # resolve() raises on a link loop
        dataset, sha = open_split(Path(path), split)
    elif hub == "bundled":
        shipped = json.loads((bundled_dir() / MANIFEST).read_text(encoding="utf-8"))[split]
        source = {"source": "bundled", "path": f"coinflip/_data/{split}.jsonl"}
        dataset, sha = Dataset({}, shipped["rows"], path=bundled_dir() / f"{split}.jsonl"), shipped["sha256"]
    else:
        from .hub import DATASET_ID, fetch

        hub_id = dataset_id or DATASET_ID
        source = {"source": hub, "id": hub_id}
        dataset, sha = open_split(fetch(hub, hub_id, cache_dir), split)
    return replace(dataset, source={**source, "split": split, "rows": dataset.count, "sha256": sha})


def dataset_stats(records: Iterable[Record], template: str) -> dict[str, Any]:
    """Rows, people/flips counts, YES share and 0-shot prompt lengths, as EvalScope's page lists them;
    one streaming pass (whole-number sums), so sets of any size fit."""
    overhead = len(template.format(question=""))
    people: Counter[int] = Counter()
    flips: Counter[int] = Counter()
    rows = yes = total = squares = high = 0
    low = float("inf")
    for r in records:
        rows += 1
        yes += r.answer == "YES"
        people[r.people] += 1
        flips[r.flips] += 1
        length = overhead + len(r.question)
        low, high = min(low, length), max(high, length)
        total += length
        squares += length * length
    if not rows:
        raise DataError("no rows")
    mean, std = total / rows, (rows * squares - total * total) ** 0.5 / rows
    return {
        "rows": rows,
        "people": dict(sorted(people.items())),
        "flips": dict(sorted(flips.items())),
        "yes_share": yes / rows,
        "prompt_length": {"mean": round(mean, 2), "min": int(low), "max": high, "std": round(std, 2)},
    }
