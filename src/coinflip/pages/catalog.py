"""Every run under a work directory, read defensively: what the index and `compare WORK_DIR` list.

A run directory is any folder holding configs/task_config.yaml, at any depth (a `--no-timestamp`
run is the work directory itself, and may hold timestamped runs too). Whatever is on disk, a
folder ends up as a run, an incomplete run, a broken one or a foreign folder, never as an
exception: reports are read field by field, because other versions of coinflip write more (or
fewer) fields than this one.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import BENCHMARK, safe_name
from ..records import Review, read_prediction
from ..rundir import CONFIG_FILE, iter_reviews, load_saved_config

RUN_PARTS = frozenset({"configs", "predictions", "reviews", "reports", "logs"})
MAX_DEPTH = 8
_STAMP = re.compile(r"^(\d{4})(\d{2})(\d{2})_(\d{2})(\d{2})(\d{2})")


@dataclass
class Found:
    """One folder of a work directory. `kind`: run, incomplete (no report yet), broken, foreign."""

    path: Path
    rel: str  # relative to the work directory, with "/"; "." for the work directory itself
    kind: str
    reason: str = ""
    report: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    model_dir: str = ""  # the model's folder under predictions/, reviews/, reports/

    def file(self, part: str, suffix: str = "jsonl") -> Path:
        return self.path / part / self.model_dir / f"{BENCHMARK}.{suffix}"


def scan(work_dir: Path) -> list[Found]:
    """Every run, incomplete, broken and foreign folder under `work_dir`, in path order."""
    root = work_dir.expanduser()
    found: list[Found] = []
    _walk(root, root, 0, set(), found)
    return sorted(found, key=lambda f: f.rel)


def runs_of(found: Iterable[Found]) -> list[Found]:
    return [f for f in found if f.kind == "run"]


def _walk(root: Path, folder: Path, depth: int, seen: set[tuple[int, int]], out: list[Found]) -> bool:
    """Adds what `folder` holds to `out`; True when it or something below it was listed."""
    try:
        info = folder.stat()
        if (info.st_dev, info.st_ino) in seen:  # a symlink loop, or the same folder twice: listed once
            return True
        seen.add((info.st_dev, info.st_ino))
        entries = list(os.scandir(folder))
    except OSError as exc:
        out.append(Found(folder, _rel(root, folder), "broken", f"cannot read the folder: {exc.strerror or exc}"))
        return True
    names = {e.name for e in entries}
    is_run = "configs" in names and (folder / CONFIG_FILE).is_file()
    if is_run:
        out.append(read_run(root, folder))
    elif names & {"predictions", "reports", "reviews"}:  # another tool's run, or one that never started
        reason = f"looks like a run folder but has no {CONFIG_FILE}: another tool's output, or a run that never started"
        out.append(Found(folder, _rel(root, folder), "foreign", reason))
        return True
    skip = RUN_PARTS if is_run else set()
    if "sweep.json" in names or "probe.json" in names:
        skip = skip | {"data"}  # a sweep's or a probe's generated sets
    holds_runs = is_run
    empty: list[Path] = []
    for entry in sorted(entries, key=lambda e: e.name):
        if entry.name.startswith((".", "__")) or entry.name in skip or not _is_dir(entry):
            continue
        if depth >= MAX_DEPTH:
            continue
        sub = Path(entry.path)
        if _walk(root, sub, depth + 1, seen, out):
            holds_runs = True
        elif not (sub / "compare.json").is_file():  # compare's own output is not foreign
            empty.append(sub)
    if holds_runs or folder == root:
        for sub in empty:  # the highest folder without runs is the one worth naming
            out.append(Found(sub, _rel(root, sub), "foreign", _foreign_reason(sub)))
    return holds_runs


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False


def _rel(root: Path, folder: Path) -> str:
    return "." if folder == root else folder.relative_to(root).as_posix()


def _foreign_reason(folder: Path) -> str:
    try:
        count = sum(1 for _ in os.scandir(folder))
    except OSError:
        return "not a coinflip run (unreadable)"
    return "an empty folder" if count == 0 else f"not a coinflip run: no {CONFIG_FILE} inside ({count} entries)"


def read_run(root: Path, folder: Path) -> Found:
    """A run folder as a leaderboard row; never raises, whatever its files hold."""
    rel = _rel(root, folder)
    try:
        saved = load_saved_config(folder)
        config = saved["config"] if isinstance(saved.get("config"), dict) else {}
    except Exception as exc:  # noqa: BLE001 - any unreadable config makes a broken run, not a crash
        return Found(folder, rel, "broken", _short(exc))
    try:
        return _with_report(Found(folder, rel, "run", config=config), saved)
    except Exception as exc:  # noqa: BLE001
        return Found(folder, rel, "broken", _short(exc), config=config)


def _with_report(run: Found, saved: dict[str, Any]) -> Found:
    names = [n for n in (run.config.get("model_id"), run.config.get("model")) if isinstance(n, str) and n]
    candidates = [safe_name(n) for n in names]
    reports = run.path / "reports"
    if reports.is_dir():
        candidates += sorted(p.name for p in reports.iterdir() if (p / f"{BENCHMARK}.json").is_file())
    run.model_dir = next((c for c in candidates if (reports / c / f"{BENCHMARK}.json").is_file()), "")
    if not run.model_dir:
        run.model_dir = candidates[0] if candidates else "model"
        done, asked = count_lines(run.file("predictions")), saved.get("samples")
        of = f" of {asked}" if isinstance(asked, int) else ""
        run.kind = "incomplete"
        run.reason = f"no report: stopped before the end ({done}{of} predictions saved); resume it with `coinflip eval --use-cache`, or score what it has with `coinflip rescore`"
        return run
    try:
        report = json.loads(run.file("reports", "json").read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        run.kind, run.reason = (
            "broken",
            f"reports/{run.model_dir}/{BENCHMARK}.json is not valid JSON ({_short(exc)}); `coinflip rescore` rewrites it",
        )
        return run
    if not isinstance(report, dict) or not isinstance(report.get("metrics"), dict):
        run.kind, run.reason = "broken", f"reports/{run.model_dir}/{BENCHMARK}.json holds no metrics"
        return run
    run.report = report
    return run


def count_lines(path: Path) -> int:
    try:
        with path.open("rb") as handle:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b""))
    except OSError:
        return 0


def _short(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def started(run: Found) -> str:
    """When the run started: its report's own stamp if it has one, else its folder's name, else the file's time."""
    for where in (run.report, run.report.get("provenance"), run.config):
        if isinstance(where, dict):
            for key in ("started_at", "started", "created", "date", "timestamp"):
                value = where.get(key)
                if isinstance(value, str) and len(value) >= 10:
                    return value[:19].replace("T", " ")
    stamp = _STAMP.match(run.path.name)
    if stamp:
        y, mo, d, h, mi, s = stamp.groups()
        return f"{y}-{mo}-{d} {h}:{mi}:{s}"
    from datetime import datetime

    try:
        return datetime.fromtimestamp(run.path.joinpath(CONFIG_FILE).stat().st_mtime).strftime("%Y-%m-%d %H:%M:%S")
    except OSError:
        return ""


@dataclass
class Answers:
    """A run's verdicts by question text, read from its reviews and predictions."""

    correct: dict[str, bool]  # one verdict per question: its majority vote (scoring/reducers.py) is right
    first: dict[str, tuple[int, str, str, int]]  # question -> (id, answer, target, people) of its first row
    predictions: Path
    offsets: dict[int, int]  # where each id's first line starts in the predictions file

    def replies(self, questions: Iterable[str]) -> dict[str, str]:
        """The saved reply (or error) of each question's first row, read line by line where it is."""
        out: dict[str, str] = {}
        with self.predictions.open("rb") as handle:
            for q in questions:
                offset = self.offsets.get(self.first[q][0]) if q in self.first else None
                if offset is None:
                    continue
                handle.seek(offset)
                row = read_prediction(handle.readline())
                if row is None:
                    continue
                error = row.get("error")
                reply = f"[error] {error}" if error is not None else row.get("reply")
                out[q] = reply if isinstance(reply, str) else ""
        return out


def read_answers(run: Found) -> Answers | None:
    """None when the run's reviews or predictions cannot be read (the run is then left out of pairs)."""
    try:
        questions, offsets = _questions(run.file("predictions"))
        votes: dict[str, list[int]] = {}  # question -> [YES answers, NO answers, target is YES]
        first: dict[str, tuple[int, str, str, int]] = {}
        for review in iter_reviews(run.file("reviews")):
            question = questions.get(review["id"])
            if question is None:
                continue
            answer = _answer(review)
            count = votes.setdefault(question, [0, 0, review.get("target") == "YES"])
            count[0] += answer == "YES"
            count[1] += answer == "NO"
            if question not in first:
                first[question] = (review["id"], answer, str(review.get("target")), _people(review))
    except Exception:  # noqa: BLE001 - unreadable answers leave the run out of pairs, nothing more
        return None
    from ..scoring.reducers import majority_right

    return Answers(majority_right(votes), first, run.file("predictions"), offsets)


def _people(review: Review) -> int:
    people = review.get("people")
    return people if isinstance(people, int) else 0


def _answer(review: Review) -> str:
    extracted = review.get("extracted")
    if review.get("error"):
        return "error"
    return extracted if extracted in ("YES", "NO") else "invalid"


def _questions(path: Path) -> tuple[dict[int, str], dict[int, int]]:
    """Question text by id, and where each id's first line starts."""
    questions: dict[int, str] = {}
    offsets: dict[int, int] = {}
    position = 0
    with path.open("rb") as handle:
        for line in handle:
            start, position = position, position + len(line)
            row = read_prediction(line)
            if row is None or not isinstance(row.get("question"), str) or row["id"] in questions:
                continue
            questions[row["id"]], offsets[row["id"]] = row["question"], start
    return questions, offsets
