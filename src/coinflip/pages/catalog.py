"""Every run under a work directory (a folder holding configs/task_config.yaml, at any depth) as a run, an
incomplete, broken or foreign folder, never an exception. The directory is untrusted: only plain files inside
their run folder are read, each up to a size (`_files.open_regular`); the walk follows no link out, within a time."""

from __future__ import annotations

import os
import re
import shlex
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from .._files import ROWS_LIMIT, UnreadableFile, inside, open_regular, read_regular
from ..config import BENCHMARK, safe_name
from ..records import Review, key_of, read_prediction, read_review, whole
from ..rundir import CONFIG_FILE, in_use, load_saved_config
from ..scoring.schema import Report, read_report
from .html import text

RUN_PARTS = frozenset({"configs", "predictions", "reviews", "reports", "logs", "batch"})  # a run's own folders
NOT_RUNS = frozenset({"__pycache__"})  # a folder named __proto__ may hold runs; only these never do
MAX_DEPTH = 8
LINE_LIMIT = 64 << 20  # bytes of one line read at a time (a longer one is not a row)
REPORT_LIMIT = 64 << 20  # bytes read of a report (a real one is tens of kilobytes)
SCAN_BUDGET_S = 60.0  # seconds the walk over a work directory may take before it lists the rest as not read
LINKED_OUT = (
    "a link to a folder outside the work directory, not followed: name that folder itself to view or compare it"
)
TOO_DEEP = f"not read: what it holds lies more than {MAX_DEPTH} folders down; name this folder itself to view it"
_STAMP = re.compile(r"^(\d{4})(\d{2})(\d{2})_(\d{2})(\d{2})(\d{2})")


@dataclass
class Found:
    """One folder of a work directory. `kind`: run, incomplete (no report yet), broken, foreign."""

    path: Path
    rel: str  # relative to the work directory, with "/"; "." for the work directory itself
    kind: str
    reason: str = ""
    report: Report = field(default_factory=lambda: Report())
    config: dict[str, Any] = field(default_factory=dict)
    model_dir: str = ""  # the model's folder under predictions/, reviews/, reports/
    live: bool = False  # not complete, and its process holds the run's lock: running now

    def file(self, part: str, suffix: str = "jsonl") -> Path:
        return self.path / part / self.model_dir / f"{BENCHMARK}.{suffix}"


def scan(work_dir: Path, budget_s: float = SCAN_BUDGET_S) -> list[Found]:
    """Every folder found, in path order; those not reached within `budget_s` are one broken entry."""
    root = work_dir.expanduser()
    found: list[Found] = []
    _walk(root, root, 0, _Seen(time.monotonic() + budget_s), found)
    return sorted(found, key=lambda f: f.rel)


@dataclass
class _Seen:
    """Folders visited (one reached twice through links is listed once), and when the walk must stop."""

    deadline: float
    folders: set[tuple[int, int]] = field(default_factory=set)
    late: bool = False


def _walk(root: Path, folder: Path, depth: int, seen: _Seen, out: list[Found]) -> bool:
    """Adds what `folder` holds to `out`; True when it or something below it was listed."""
    if time.monotonic() > seen.deadline:
        if not seen.late:
            seen.late = True
            reason = f"not read: listing the work directory took over {SCAN_BUDGET_S:.0f} s; the folders from here on are left out"
            out.append(Found(folder, _rel(root, folder), "broken", reason))
        return True
    try:
        info = folder.stat()
        if (info.st_dev, info.st_ino) in seen.folders:  # a symlink loop, or the same folder twice: listed once
            return True
        seen.folders.add((info.st_dev, info.st_ino))
        entries = list(os.scandir(folder))
    except OSError as exc:
        out.append(Found(folder, _rel(root, folder), "broken", f"cannot read the folder: {exc.strerror or exc}"))
        return True
    names = {e.name for e in entries}
    is_run = "configs" in names and holds_settings(folder)
    if is_run:
        out.append(read_run(root, folder))
    elif names & {"predictions", "reports", "reviews"}:  # another tool's run, or one that never started
        reason = f"looks like a run folder but has no {CONFIG_FILE}: another tool's output, or a run that never started"
        out.append(Found(folder, _rel(root, folder), "foreign", reason))
        return True
    # a sweep's or probe's data/ holds the sets it generated
    skip = (RUN_PARTS if is_run else NOT_RUNS) | ({"data"} if names & {"sweep.json", "probe.json"} else set())
    if depth >= MAX_DEPTH:  # deeper is not walked, but said: not "not a coinflip run"
        subs = [Path(e.path) for e in entries if not e.name.startswith(".") and e.name not in skip and _is_dir(e, root)]
        if is_run:  # only the runs it holds are named; a folder of the user's in a run is the run's
            out += [Found(sub, _rel(root, sub), "foreign", TOO_DEEP) for sub in subs if holds_settings(sub)]
        elif subs:
            out.append(Found(folder, _rel(root, folder), "foreign", TOO_DEEP))
        return is_run or bool(subs)
    holds_runs = is_run
    empty: list[Path] = []
    for entry in sorted(entries, key=lambda e: e.name):
        if entry.name.startswith(".") or entry.name in skip:
            continue
        sub = Path(entry.path)
        if _links_out(entry, root):  # not walked, but said: a run linked in from elsewhere is named by its own path
            out.append(Found(sub, _rel(root, sub), "foreign", LINKED_OUT))
            holds_runs = True
        if not _is_dir(entry, root):
            continue
        if _walk(root, sub, depth + 1, seen, out):
            holds_runs = True
        elif not (sub / "compare.json").is_file():  # compare's own output is not foreign
            empty.append(sub)
    if holds_runs or folder == root:  # the highest folder without runs is the one worth naming
        out += [Found(sub, _rel(root, sub), "foreign", _foreign_reason(sub)) for sub in empty]
    return holds_runs


def holds_settings(folder: Path) -> bool:
    """A run's folder: its settings file is there, whatever it is (read_run says what is wrong with it), or its
    configs folder cannot be read (a run told as broken, "cannot read", not as another tool's folder)."""
    try:
        os.lstat(folder / CONFIG_FILE)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError:
        return True
    return True


def _is_dir(entry: os.DirEntry[str], root: Path) -> bool:
    try:
        return entry.is_dir() and (not entry.is_symlink() or inside(Path(entry.path), root))
    except OSError:
        return False


def _links_out(entry: os.DirEntry[str], root: Path) -> bool:
    try:
        return entry.is_symlink() and entry.is_dir() and not inside(Path(entry.path), root)
    except OSError:
        return False


def _rel(root: Path, folder: Path) -> str:
    return "." if folder == root else folder.relative_to(root).as_posix()


def _foreign_reason(folder: Path) -> str:
    try:
        count = sum(1 for _ in os.scandir(folder))
    except OSError:
        return "not a coinflip run (unreadable)"
    entries = "1 entry" if count == 1 else f"{count} entries"
    return "an empty folder" if count == 0 else f"not a coinflip run: no {CONFIG_FILE} inside ({entries})"


def read_run(root: Path, folder: Path) -> Found:
    """Never raises, whatever the folder holds."""
    rel = _rel(root, folder)
    try:
        saved = load_saved_config(folder)  # settings rescore and resume refuse make a broken run here too
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
    if reports.is_dir() and inside(reports, run.path):
        candidates += sorted(p.name for p in reports.iterdir() if os.path.lexists(p / f"{BENCHMARK}.json"))
    run.model_dir = next((c for c in candidates if os.path.lexists(reports / c / f"{BENCHMARK}.json")), "")
    if not run.model_dir:
        run.model_dir = candidates[0] if candidates else "model"
        done, asked = count_lines(run.file("predictions"), run.path), saved.get("samples")
        of = f" of {asked}" if isinstance(asked, int) else ""
        run.kind, run.live = "incomplete", in_use(run.path)
        if run.live:  # not stopped: still going
            run.reason = f"running: {done}{of} predictions saved so far"
            return run
        run.reason = f"no report: stopped before the end ({done}{of} predictions saved); resume it with `coinflip eval --use-cache {shlex.quote(str(run.path))}`, or score what it has with `coinflip rescore`"
        return run
    try:
        report = read_report(read_regular(run.file("reports", "json"), REPORT_LIMIT, within=run.path))
    except UnreadableFile as exc:
        run.kind, run.reason = "broken", _short(exc)
        return run
    where = f"reports/{run.model_dir}/{BENCHMARK}.json"
    if report is None:
        why = "is no JSON object or names a key twice; `coinflip rescore` rewrites it"
        run.kind, run.reason = "broken", f"{where} {why}"
        return run
    if "metrics" not in report:
        run.kind, run.reason = "broken", f"{where} holds no metrics"
        return run
    run.report = _widened(report, saved, run.path)
    run.live = not run.report.get("complete", True) and in_use(run.path)
    return run


def _widened(report: Report, saved: dict[str, Any], root: Path) -> Report:
    """A report of fewer samples than the settings now ask (a resume that widened --limit, stopped before it
    scored: kill -9, a reboot) is of an incomplete run, whatever it says."""
    asked, scored = saved.get("samples"), report.get("counts", {}).get("samples")
    if report.get("complete") is False or not whole(asked) or not whole(scored) or scored >= asked:
        return report
    why = f"its report covers {scored} of the {asked} samples its settings ask: a resume stopped before it scored"
    why += f"; go on with `coinflip eval --use-cache {shlex.quote(str(root))}`, or `coinflip rescore` what it has"
    return {**report, "complete": False, "warnings": [why, *report.get("warnings", [])]}


def count_lines(path: Path, within: Path) -> int:
    try:
        with open_regular(path, ROWS_LIMIT, within) as handle:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b""))
    except (OSError, UnreadableFile):
        return 0


def _lines(path: Path, within: Path | None) -> Iterator[bytes]:
    with open_regular(path, ROWS_LIMIT, within) as handle:
        yield from iter(lambda: handle.readline(LINE_LIMIT), b"")


def _short(exc: BaseException) -> str:
    return text(str(exc) or type(exc).__name__)


def started(run: Found) -> str:
    """Its report's stamp, else its folder's name, else its config's file time."""
    for where in (run.report, run.report.get("provenance"), run.config):
        if isinstance(where, dict):
            for key in ("started_at", "started", "created", "date", "timestamp"):
                value = where.get(key)
                if isinstance(value, str) and len(value) >= 10:
                    return value[:19].replace("T", " ")
    if stamp := _STAMP.match(run.path.name):
        return "{}-{}-{} {}:{}:{}".format(*stamp.groups())
    try:
        return datetime.fromtimestamp(run.path.joinpath(CONFIG_FILE).stat().st_mtime).strftime("%Y-%m-%d %H:%M:%S")
    except OSError:
        return ""


@dataclass
class Answers:
    correct: dict[str, bool]  # by question text: its majority vote (scoring/reducers.py) is right
    # question -> (id, answer, target, people) of its first row; the answer is the majority vote's,
    # or "no majority" for several answers without one
    first: dict[str, tuple[int, str, str, int]]
    predictions: Path
    offsets: dict[int, int]  # where each id's first line starts in the predictions file
    run: Path  # the run folder: the predictions file is read only inside it

    def replies(self, questions: Iterable[str]) -> dict[str, str]:
        """The saved reply (or error) of each question's first row."""
        out: dict[str, str] = {}
        try:
            handle = open_regular(self.predictions, ROWS_LIMIT, self.run)
        except (OSError, UnreadableFile):
            return out
        with handle:
            for q in questions:
                offset = self.offsets.get(self.first[q][0]) if q in self.first else None
                if offset is None:
                    continue
                handle.seek(offset)
                row = read_prediction(handle.readline(LINE_LIMIT))
                if row is None:
                    continue
                error = row.get("error")
                reply = f"[error] {error}" if error is not None else row.get("reply")
                out[q] = reply if isinstance(reply, str) else ""
        return out


def read_answers(run: Found) -> Answers | None:
    """None when its reviews or predictions (then named in its `reason`) cannot be read: left out of pairs."""
    from ..scoring.reducers import Votes, answers_per_question

    try:
        questions, offsets = _questions(run.file("predictions"), run.path)
    except Exception as exc:  # noqa: BLE001
        run.reason = f"its predictions cannot be read (rescore needs them too): {_short(exc)}"
        return None
    try:
        votes = Votes(str(run.report.get("metric_compat", "coinflip")))  # the arithmetic the reviews are in
        first: dict[str, tuple[int, str, str, int]] = {}
        asked: Counter[str] = Counter()  # reviews of each question
        latest: dict[int, Review] = {}  # a sample's last line, as `answers` and a resume read it: one vote each
        asked_of_each = answers_per_question(run.config)  # a repeat the run never asked is no vote (a hand edit)
        for line in _lines(run.file("reviews"), run.path):
            review = read_review(line)
            if review is not None and review["id"] in questions and (review.get("repeat") or 0) < asked_of_each:
                latest[key_of(review)] = review
        for review in latest.values():
            question = questions[review["id"]]
            votes.add(question, review)
            asked[question] += 1
            if question not in first:
                first[question] = (review["id"], _answer(review), str(review.get("target")), _people(review))
    except Exception as exc:  # noqa: BLE001 - unreadable answers leave the run out of pairs, said in its `reason`
        run.reason = f"no readable reviews; run `coinflip rescore {shlex.quote(str(run.path))}` ({_short(exc)})"
        return None
    for question, said in votes.answers().items():  # the answer the verdict is on, where there is one
        if said is not None or asked[question] > 1:
            id_, _, target, people = first[question]
            first[question] = (id_, said or "no majority", target, people)
    return Answers(votes.right(), first, run.file("predictions"), offsets, run.path)


def _people(review: Review) -> int:
    people = review.get("people")
    return people if isinstance(people, int) else 0


def _answer(review: Review) -> str:
    extracted = review.get("extracted")
    if review.get("error"):
        return "error"
    return extracted if extracted in ("YES", "NO") else "invalid"


def _questions(path: Path, within: Path | None = None) -> tuple[dict[int, str], dict[int, int]]:
    """Question text by id, and where each id's first line starts. A text held under several ids is
    several questions, as the report counts them: the second is "text (#2)", with a vote of its own."""
    questions: dict[int, str] = {}
    offsets: dict[int, int] = {}
    position = 0
    for line in _lines(path, within):
        start, position = position, position + len(line)
        row = read_prediction(line)
        if row is None or not isinstance(row.get("question"), str) or row["id"] in questions:
            continue
        questions[row["id"]], offsets[row["id"]] = row["question"], start
    copies: Counter[str] = Counter()
    for id_ in sorted(questions):
        question = questions[id_]
        copies[question] += 1
        if copies[question] > 1:
            questions[id_] = f"{question} (#{copies[question]})"
    return questions, offsets
