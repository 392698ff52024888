"""The report step of a run and of a rescore: predictions compacted, then reviews, report and page, each whole."""

from __future__ import annotations

import json
import sys
from array import array
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from .._files import NO_LIMIT, read_regular, replacing
from ..errors import CoinflipError, DataError
from ..jsonl import compact_predictions, iter_predictions, set_aside_lines
from ..models import offline_rest
from ..records import Prediction, Requests, checked_requests, scored, stopped
from ..rundir import RunDir, load_saved_config
from ..secrets import unsaved

if TYPE_CHECKING:
    from ..data.load import Record
    from ..scoring.schema import Report
    from ..scoring.scorer import Scorer
    from .session import Session


def finish(
    run: RunDir, compat: str, show: bool = True, session: Session | None = None, limit: int = NO_LIMIT,
    rescoring: bool = False, truth: Callable[[], Truth] | None = None,
) -> Report:  # fmt: skip
    """Without a `session` that scored its replies as they landed, the saved predictions (up to `limit` bytes:
    a rescore reads no sparse terabyte) are scored, each row's target and people held to `truth` (the run's data,
    where the run has it). A run shows its session's requests (none sent online: none); a rescore, the last
    session's."""
    from ..pages.run_page import write_html
    from ..pages.summary import print_summary
    from ..scoring.report import build_report, write_report
    from ..scoring.schema import checked

    saved = load_saved_config(run.root)
    traffic = (session.traffic or None) if session is not None else None
    if session is not None and session.scorer is not None:
        scorer = session.scorer
        if not session.writer.in_order:
            compact_predictions(run.predictions)
    else:
        held = truth() if truth is not None else _saved_data(saved) if rescoring else None
        scorer = _score_saved(run, saved, compat, limit, held)
    run.own_folders(run.reviews, run.report_json)  # never written through a linked folder either
    with replacing(run.reviews) as reviews:  # under a temporary name, then renamed
        scorer.write_reviews(reviews)
    report = checked(build_report(saved, run.root.name, scorer, compat))  # as read back: each field its type
    record = _requests_record(run, traffic) if traffic is not None or rescoring else None
    if record is not None:  # the last session's requests, kept for a rescore
        report["requests"] = record
    write_report(run.report_json, report)
    if saved["config"].get("html_report", True):
        write_html(run.report_html, report, scorer)
    if show:
        print_summary(report, run.root, page=run.report_html)
        if not report["complete"] and not report.get("errors_ignored"):
            rest = offline_rest(saved["config"], run.root)  # for another tool: no request is sent, no key needed
            keyed = bool(saved["config"].get("api_key")) and not rest
            print(run.resume_hint(keyed, rest, unsaved(saved["config"])), file=sys.stderr)
    return report


def _requests_record(run: RunDir, traffic: dict[str, Any] | None) -> Requests | None:
    """This session's record of requests, saved; without one (a rescore), the last one's, if it reads as one."""
    if traffic is not None:
        run.own_folders(run.requests)  # never written through a linked folder
        with replacing(run.requests) as out:
            out.write((json.dumps(traffic, indent=2) + "\n").encode("utf-8"))
        return cast("Requests", traffic)  # made by models/limits.py describe
    try:
        return checked_requests(json.loads(read_regular(run.requests, 64 * 1024, within=run.root)))
    except (OSError, ValueError, RecursionError):  # UnreadableFile is a ValueError
        return None


class Truth:
    """The data's answer, people and flips of each question the run asks, 9 bytes a question: a saved row's copies
    are held to them (a hand-edited target scored a wrong answer right, a people count made a group of its own)."""

    def __init__(self, records: Iterable[Record]) -> None:
        self.answer, self.people, self.flips = bytearray(), array("I"), array("I")  # answer 0: not asked
        for r in records:
            if (more := r.id + 1 - len(self.answer)) > 0:
                self.answer += bytes(more)
                self.people.frombytes(bytes(4 * more))
                self.flips.frombytes(bytes(4 * more))
            self.answer[r.id], self.people[r.id], self.flips[r.id] = 1 + (r.answer == "YES"), r.people, r.flips

    def fixed(self, p: Prediction) -> Prediction:
        """`p`, or a copy with the data's target, people and flips where it holds others (a field left out stays)."""
        i = p["id"]
        if i >= len(self.answer) or not self.answer[i]:
            return p
        data = {"target": "YES" if self.answer[i] == 2 else "NO", "people": self.people[i], "flips": self.flips[i]}
        if all(p.get(k) == v for k, v in data.items() if k == "target" or k in p):
            return p
        return {**p, **data}  # type: ignore[typeddict-item]


def _saved_data(saved: dict[str, Any]) -> Truth | None:
    """A rescore holds the rows to the run's data where it is at hand and cheap to read (bundled, a local file or a
    hub's complete cache of at most HELD_BYTES: a rescore of 20 rows read a 570 MB set twice; never a download) and
    reads back with the hash the run saw; elsewhere (large, moved, changed, not cached) they are scored as saved."""
    from ..data.hub import DATASET_ID, MARKER, cache_dir
    from ..data.load import HELD_BYTES, load_dataset

    config, seen = saved["config"], saved["fingerprint"].get("dataset")
    path, hub, hub_id, cached = (config.get(k) for k in ("dataset_path", "dataset_hub", "dataset_id", "dataset_dir"))
    if path and isinstance(seen, dict) and seen.get("source") == "file":  # as the run saw it: the typed path was
        path = seen.get("path") or path  # relative to where it ran
    hub = hub or "bundled"
    if path or hub != "bundled":
        folder = Path(str(path)).expanduser() if path else cache_dir(hub, str(hub_id or DATASET_ID), cached)
        if not (path or (folder / MARKER).exists()) or not _small(folder, HELD_BYTES):
            return None
    try:
        data = load_dataset(str(config.get("split") or "test"), path, hub, hub_id, cached)
    except (CoinflipError, OSError):
        return None
    return Truth(data) if isinstance(seen, dict) and data.source.get("sha256") == seen.get("sha256") else None


def _small(path: Path, most: int) -> bool:
    """A data file, or a folder (of splits, a hub's cache), of at most `most` bytes in all."""
    try:
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        return sum(p.stat().st_size for p in files) <= most
    except OSError:
        return False


def _score_saved(run: RunDir, saved: dict[str, Any], compat: str, limit: int, truth: Truth | None) -> Scorer:
    from ..scoring.reducers import answers_per_question, choices
    from ..scoring.scorer import Scorer

    index = compact_predictions(run.predictions, limit)
    if not index.where:
        raise DataError(f"{run.predictions}: no predictions to score")
    asked = run.asks(saved)
    answers = answers_per_question(saved["fingerprint"])  # as the report counts repeats
    scorer = Scorer(compat=compat, choices=choices(saved["fingerprint"]))
    scorer.unreadable += set_aside_lines(run.predictions)  # lines that hold no prediction, moved out of the rows
    for p in iter_predictions(run.predictions):
        if not asked(p["id"]):
            scorer.outside.add(p)  # not scored, but paid for: the cost covers it
            if isinstance(forced := p.get("forced"), dict):
                scorer.outside.add(forced)
            continue
        if (p.get("repeat") or 0) >= answers:  # a repeat the run never asked (a hand edit, another run's line)
            continue
        if stopped(p):  # what a request the run stopped was billed: paid for, not a sample
            scorer.outside.add(p)
            continue
        if truth is not None and (fixed := truth.fixed(p)) is not p:
            p, scorer.corrected = fixed, scorer.corrected + 1
        if scored(p):
            scorer.add(p)
        else:  # its forced answer is pending: not scored yet, but its reply was paid for (and a stopped forced turn)
            scorer.usage.add(p)
            if isinstance(forced := p.get("forced"), dict) and forced.get("usage"):
                scorer.outside.add(forced)
    return scorer
