"""Dataset stage: load CoinFlip records from the bundled splits, local files or a hub cache.

Every loader validates every row before anything is returned, so a bad file stops the run with
one line naming the file, the row and the problem, and nothing is half-loaded.
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any

from .errors import DataError

QUESTION_KEYS = ("question", "inputs")
ANSWER_KEYS = ("answer", "targets")
FORMATS = (".json", ".jsonl", ".csv", ".parquet")
_FLIPS = re.compile(r"\S flips the coin\.")
_KEEPS = re.compile(r"\S does not flip the coin\.")


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
    """Loaded rows plus where they came from; `source` goes into every report."""

    records: tuple[Record, ...]
    source: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.records)


def make_record(index: int, question: Any, answer: Any, where: str) -> Record:
    if not isinstance(question, str) or not question.strip():
        raise DataError(f"{where}: empty or missing question")
    label = str(answer).strip().upper() if isinstance(answer, (str, bool)) else None
    if label in ("TRUE", "FALSE"):
        label = "YES" if label == "TRUE" else "NO"
    if label not in ("YES", "NO"):
        raise DataError(f"{where}: answer must be yes or no, got {answer!r}")
    text = question.strip()
    flips = len(_FLIPS.findall(text))
    return Record(index, text, label, flips + len(_KEEPS.findall(text)), flips)


def rows_sha256(records: Iterable[Record]) -> str:
    digest = hashlib.sha256()
    for r in records:
        digest.update(f"{r.question}\t{r.answer}\n".encode())
    return digest.hexdigest()


def _pick(row: dict[str, Any], keys: Sequence[str], where: str) -> Any:
    for key in keys:
        if key in row:
            return row[key]
    raise DataError(f"{where}: missing field {' or '.join(repr(k) for k in keys)}")


def _records(rows: Iterable[Any], path: Path) -> list[Record]:
    out: list[Record] = []
    for number, row in enumerate(rows, 1):
        where = f"{path}: row {number}"
        if not isinstance(row, dict):
            raise DataError(f"{where}: expected an object with question/answer, got {type(row).__name__}")
        out.append(make_record(number - 1, _pick(row, QUESTION_KEYS, where), _pick(row, ANSWER_KEYS, where), where))
    if not out:
        raise DataError(f"{path}: no rows")
    return out


def _read_json(path: Path) -> Iterable[Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    if isinstance(data, dict) and isinstance(data.get("examples"), list):
        return list(data["examples"])
    if isinstance(data, list):
        return data
    raise DataError(f"{path}: expected a JSON list of rows or an object with an 'examples' list")


def _read_jsonl(path: Path) -> Iterator[Any]:
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}: row {number}: invalid JSON: {exc.msg}") from None


def _read_csv(path: Path) -> Iterator[Any]:
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        if not reader.fieldnames:
            raise DataError(f"{path}: empty CSV file (no header row)")
        yield from reader


def _read_parquet(path: Path) -> list[Any]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(f"{path}: reading Parquet needs pyarrow: pip install 'coinflip[parquet]'") from None
    try:
        return pq.read_table(path).to_pylist()  # type: ignore[no-any-return]
    except Exception as exc:  # pyarrow raises several unrelated types for corrupt files
        raise DataError(f"{path}: not a readable Parquet file ({type(exc).__name__})") from None


READERS = {".json": _read_json, ".jsonl": _read_jsonl, ".csv": _read_csv, ".parquet": _read_parquet}


def load_file(path: str | Path) -> list[Record]:
    """Read one file of rows; the format follows the file's extension."""
    path = Path(path)
    reader = READERS.get(path.suffix.lower())
    if reader is None:
        raise DataError(f"{path}: unknown format {path.suffix or '(none)'}; use one of {', '.join(FORMATS)}")
    if not path.is_file():
        raise DataError(f"{path}: no such file" if not path.exists() else f"{path}: not a file")
    try:
        return _records(reader(path), path)
    except UnicodeDecodeError:
        raise DataError(f"{path}: not UTF-8 text") from None
    except PermissionError:
        raise DataError(f"{path}: permission denied") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror})") from None


def split_file(directory: Path, split: str) -> Path:
    """The file for `split` in a directory: test.jsonl, data/test-00000-of-00001.parquet, ..."""
    found = sorted(
        p for p in directory.rglob(f"{split}*")
        if p.is_file() and p.suffix.lower() in FORMATS and re.match(rf"{split}([.-]|$)", p.name)
    )
    if not found:
        raise DataError(f"{directory}: no {split}.* file ({', '.join(FORMATS)})")
    if len(found) > 1:
        raise DataError(f"{directory}: several {split} files ({', '.join(p.name for p in found)}); keep one")
    return found[0]


def load_split(path: str | Path, split: str) -> list[Record]:
    """A file is the split itself; a directory holds test.* and validation.*."""
    path = Path(path)
    if path.is_dir():
        shards = sorted(path.rglob(f"{split}-*.parquet"))
        if len(shards) > 1:
            rows = [r for shard in shards for r in load_file(shard)]
            return [Record(i, r.question, r.answer, r.people, r.flips) for i, r in enumerate(rows)]
        return load_file(split_file(path, split))
    return load_file(path)


def bundled_dir() -> Path:
    return Path(str(files("coinflip").joinpath("_data")))


def load_dataset(
    split: str = "test", path: str | Path | None = None, hub: str = "bundled", dataset_id: str | None = None
) -> Dataset:
    """Load one split from the bundled data, a local path, or a hub's local cache."""
    if path is not None:
        records = load_split(path, split)
        source = {"source": "file", "path": str(Path(path).resolve())}
    elif hub == "bundled":
        records = load_split(bundled_dir(), split)
        source = {"source": "bundled", "path": f"coinflip/_data/{split}.jsonl"}
    else:
        from .hub import DATASET_ID, fetch

        hub_id = dataset_id or DATASET_ID
        records = load_split(fetch(hub, hub_id), split)
        source = {"source": hub, "id": hub_id}
    source.update(split=split, rows=len(records), sha256=rows_sha256(records))
    return Dataset(tuple(records), source)


def apply_limit(records: Sequence[Record], limit: int | float | None) -> Sequence[Record]:
    if limit is None:
        return records
    count = max(1, round(len(records) * limit)) if isinstance(limit, float) else int(limit)
    return records[:count]


def dataset_stats(records: Sequence[Record], template: str) -> dict[str, Any]:
    """Rows, people/flips counts, YES share and 0-shot prompt lengths, as EvalScope's page lists them."""
    import statistics

    lengths = [len(template.format(question=r.question)) for r in records]
    people: dict[int, int] = {}
    flips: dict[int, int] = {}
    for r in records:
        people[r.people] = people.get(r.people, 0) + 1
        flips[r.flips] = flips.get(r.flips, 0) + 1
    return {
        "rows": len(records),
        "people": dict(sorted(people.items())),
        "flips": dict(sorted(flips.items())),
        "yes_share": sum(r.answer == "YES" for r in records) / len(records),
        "prompt_length": {
            "mean": round(statistics.fmean(lengths), 2),
            "min": min(lengths),
            "max": max(lengths),
            "std": round(statistics.pstdev(lengths), 2),
        },
    }
