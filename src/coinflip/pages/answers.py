"""`coinflip answers`: every sample on one line, replies and verdicts joined as EvalScope's reviews hold them;
a CSV cell that starts like a formula (OWASP's list) gets a leading apostrophe, all else is as written."""

from __future__ import annotations

import csv
import io
import json
import os
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from .._files import ROWS_LIMIT, replacing, special
from .._terminal import one_line, printable
from ..errors import ConfigError, DataError, storage_error
from ..jsonl import PredictionIndex, index_predictions, iter_reviews, set_aside_lines
from ..records import Review, escape_line_breaks, key_of, split_key, stopped
from ..rundir import RunDir, load_saved_config, run_holding
from .catalog import RUN_PARTS

COLUMNS = (
    "id", "repeat", "people", "target", "extracted", "result", "invalid_reason",
    "forced_answer", "p_yes", "error", "question", "reply", "forced_reply",
)  # fmt: skip
_FORMULA = ("=", "+", "-", "@", "\t", "\r")  # OWASP's CSV injection list, no more


def result(review: Review) -> str:
    """right, wrong, invalid (no valid answer) or error (no reply), read strictly."""
    if review.get("error"):
        return "error"
    if review.get("extracted") is None:
        return "invalid"
    return "right" if review.get("correct") else "wrong"


@dataclass
class Left:
    """What `answers` left out, counted as it writes: said after the count, so a short file says why."""

    unscored: int = 0  # predictions of questions the run asks, without a review
    pending: int = 0  # replies whose forced answer is pending: no review until a resume asks it
    unreadable: int = 0  # saved lines that hold no prediction
    stopped: int = 0  # requests the run stopped between attempts: rows of what they were billed, still owed

    def line(self, run: RunDir) -> str:
        rescore = f"`coinflip rescore {shlex.quote(str(run.root))}` scores them"
        counted = [
            (self.unscored, f"saved predictions without a review ({rescore})"),
            (self.pending, "replies whose forced answer is pending (a resume asks it)"),
            (self.stopped, "requests a stop cut off between attempts (a resume asks them)"),
            (self.unreadable, "saved lines that hold no prediction"),
        ]
        kept = [f"{n} {what}" for n, what in counted if n]
        return one_line("left out " + "; ".join(kept)) if kept else ""


def answers(run: RunDir, left: Left | None = None) -> Iterator[dict[str, Any]]:
    """In the predictions' order; a sample without a review (forced answer pending) is left out, in `left`."""
    for path in (run.reviews, run.predictions):
        if os.path.lexists(path) and not path.is_file():  # a FIFO there is not "no reviews": named, as rescore does
            raise DataError(f"{path}: not a plain file (a FIFO, a device or a broken link); coinflip reads only those")
    if not run.reviews.is_file() or not run.predictions.is_file():
        raise DataError(f"{run.root}: no reviews or predictions to join; `coinflip rescore {run.root}` writes them")
    left = Left() if left is None else left
    reviews = {key_of(review): review for review in iter_reviews(run.reviews, run.root, ROWS_LIMIT)}
    index, asked = index_predictions(run.predictions, limit=ROWS_LIMIT), _asked(run)  # a sparse terabyte: refused
    left.unreadable = index.unreadable + set_aside_lines(run.predictions)
    return _joined(run, reviews, index, asked, left)  # read whole before a line is written: a refusal is all


def _joined(
    run: RunDir, reviews: dict[int, Review], index: PredictionIndex, asked: Callable[[int], bool], left: Left
) -> Iterator[dict[str, Any]]:
    with run.predictions.open("rb") as handle:
        for key in index.where:
            review = reviews.get(key)
            if review is None and (key in index.pending or not asked(split_key(key)[0])):
                left.pending += key in index.pending
                continue
            row = index.row(handle, key)
            if stopped(row) or review is None:  # stopped: owed, whatever an older review said
                left.stopped += stopped(row)
                left.unscored += not stopped(row)
                continue
            forced = row["forced"] if isinstance(row.get("forced"), dict) else {}
            own: dict[str, Any] = {c: row.get(c) for c in ("error", "question", "reply")}
            own["repeat"] = row.get("repeat") or 0  # rows of versions before repeats have none
            own.update(result=result(review), forced_answer=review.get("forced"), forced_reply=forced.get("reply"))
            yield {c: own[c] if c in own else review.get(c) for c in COLUMNS}  # the rest as the review has it


def _asked(run: RunDir) -> Callable[[int], bool]:
    """The questions the run asks, for what `answers` leave out; a damaged subset.json (rescore's to refuse): all."""
    try:
        return run.asks(load_saved_config(run.root))
    except ConfigError:
        return lambda _: True


def _utf8(text: str) -> str:
    """Half a surrogate pair is written as its escape, `\\ud800` (as is, it raised mid-file)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _cell(value: Any) -> Any:
    if isinstance(value, str):
        return "'" + value if value.startswith(_FORMULA) else value
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return value


def write(rows: Iterator[dict[str, Any]], out: IO[str], form: str, terminal: bool = False) -> int:
    """CSV (with a header) or JSONL; how many. For a `terminal`, all text is `printable` (no escape acts)."""
    show = printable if terminal else _utf8
    writer = csv.writer(out)
    if form == "csv":
        writer.writerow(COLUMNS)
    count = 0
    for row in rows:
        count += 1
        if form == "csv":
            cells = [_cell(row[key]) for key in COLUMNS]
            writer.writerow([show(c) if isinstance(c, str) else c for c in cells])
        else:
            line = json.dumps(row, ensure_ascii=False).encode("utf-8", "backslashreplace")
            out.write(show(escape_line_breaks(line).decode()) + "\n")
    return count


def default_path(run: RunDir, form: str) -> Path:
    return run.root / f"answers.{form}"


def save(run: RunDir, path: Path, form: str, given: bool = False, left: Left | None = None) -> int:
    """Into a new file that takes `path`'s place; a device, FIFO or link the user `given` (--out /dev/stdout, a
    pipe) is written into, as the shell would: replaced, a file took the place of /dev/null (as root) or a pipe."""
    held = run_holding(path) if given else None
    if held is not None and path.resolve().relative_to(held).parts[0] in RUN_PARTS:
        raise ConfigError(
            f"--out {path}: a file of the run {held}, among its answers, settings and reports: write it elsewhere"
        )
    if given and special(path):
        try:
            with open(path, "w", encoding="utf-8", newline="") as out:
                return write(answers(run, left), out, form)
        except OSError as exc:
            raise storage_error(path, exc, "try --out elsewhere") from None
    with replacing(path, "try --out elsewhere") as raw, io.TextIOWrapper(raw, encoding="utf-8", newline="") as out:
        return write(answers(run, left), out, form)
