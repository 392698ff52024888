"""Every sample of a run on one line: question, reply, extracted verdict, target and result, with
the forced answer where one was asked. EvalScope keeps all of this in its reviews file; coinflip
keeps replies in predictions and verdicts in reviews, so `coinflip answers RUN_DIR` joins them.

CSV is for spreadsheets: a text cell that begins with what OWASP lists as a formula's start (`=`,
`+`, `-`, `@`, tab, carriage return) gets a leading apostrophe; every other cell is as written, so
pandas reads the text back. JSONL keeps every value as written.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from .._files import replacing
from .._terminal import printable
from ..errors import DataError
from ..jsonl import index_predictions, iter_reviews
from ..records import Review, escape_line_breaks, key_of
from ..rundir import RunDir

COLUMNS = (
    "id", "repeat", "people", "target", "extracted", "result", "invalid_reason",
    "forced_answer", "p_yes", "error", "question", "reply", "forced_reply",
)  # fmt: skip
FORMATS = ("csv", "jsonl")
_FORMULA = ("=", "+", "-", "@", "\t", "\r")  # OWASP's CSV injection list, no more


def result(review: Review) -> str:
    """right, wrong, invalid (no valid answer) or error (no reply), in coinflip's strict reading."""
    if review.get("error"):
        return "error"
    if review.get("extracted") is None:
        return "invalid"
    return "right" if review.get("correct") else "wrong"


def answers(run: RunDir) -> Iterator[dict[str, Any]]:
    """The joined rows, in the order of the predictions file: scored samples only (a sample whose
    forced answer is pending, or outside the run's questions, has no review and is left out)."""
    if not run.reviews.is_file() or not run.predictions.is_file():
        raise DataError(f"{run.root}: no reviews or predictions to join; `coinflip rescore {run.root}` writes them")
    reviews = {key_of(review): review for review in iter_reviews(run.reviews)}
    index = index_predictions(run.predictions)
    with run.predictions.open("rb") as handle:
        for key in index.where:
            review = reviews.get(key)
            if review is None:
                continue
            row = index.row(handle, key)
            forced = row["forced"] if isinstance(row.get("forced"), dict) else {}
            yield {
                "id": review["id"],
                "repeat": review["repeat"],
                "people": review.get("people"),
                "target": review.get("target"),
                "extracted": review.get("extracted"),
                "result": result(review),
                "invalid_reason": review.get("invalid_reason"),
                "forced_answer": review.get("forced"),
                "p_yes": review.get("p_yes"),
                "error": row.get("error"),
                "question": row.get("question"),
                "reply": row.get("reply"),
                "forced_reply": forced.get("reply"),
            }


def _utf8(text: str) -> str:
    """Text that UTF-8 can encode: half a surrogate pair from a server (kept in the predictions
    file as JSON's escape) is written as that escape, `\\ud800`, which a JSON reader of the JSONL
    reads back as it was; as is, writing it raised UnicodeEncodeError mid-file."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _cell(value: Any) -> Any:
    if isinstance(value, str):
        return "'" + value if value.startswith(_FORMULA) else value
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return value


def write(rows: Iterator[dict[str, Any]], out: IO[str], form: str, terminal: bool = False) -> int:
    """Write `rows` as CSV (with a header) or JSONL; return how many. For a `terminal`, every
    text written is `printable`: a reply, or a list a hand-edited review holds, may carry escape
    sequences (C1 controls and bidi overrides pass through JSON as they are) that would act."""
    show = printable if terminal else _utf8
    count = 0
    if form == "csv":
        writer = csv.writer(out)
        writer.writerow(COLUMNS)
        for row in rows:
            cells = (_cell(row[c]) for c in COLUMNS)
            writer.writerow([show(c) if isinstance(c, str) else c for c in cells])
            count += 1
        return count
    for row in rows:
        line = escape_line_breaks(json.dumps(row, ensure_ascii=False).encode("utf-8", "backslashreplace")).decode()
        out.write(show(line) + "\n")
        count += 1
    return count


def default_path(run: RunDir, form: str) -> Path:
    return run.root / f"answers.{form}"


def save(run: RunDir, path: Path, form: str) -> int:
    """Write the answers to `path` whole (`_files.replacing`); return how many."""
    with replacing(path, "try --out elsewhere") as raw, io.TextIOWrapper(raw, encoding="utf-8", newline="") as out:
        return write(answers(run), out, form)
