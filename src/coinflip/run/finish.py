"""The report step of a run and of a rescore: predictions compacted, then reviews, report and page, each whole."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any, cast

from .._files import NO_LIMIT, read_regular, replacing
from ..errors import DataError
from ..jsonl import compact_predictions, iter_predictions
from ..models import offline_rest
from ..records import Requests, checked_requests, scored
from ..rundir import RunDir, load_saved_config

if TYPE_CHECKING:
    from ..scoring.schema import Report
    from ..scoring.scorer import Scorer
    from .session import Session


def finish(
    run: RunDir, compat: str, show: bool = True, session: Session | None = None, limit: int = NO_LIMIT,
    rescoring: bool = False,
) -> Report:  # fmt: skip
    """Without a `session` that scored its replies as they landed, the saved predictions (up to `limit` bytes:
    a rescore reads no sparse terabyte) are scored. A run shows its session's requests (none sent online: none);
    a rescore, the last session's."""
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
        scorer = _score_saved(run, saved, compat, limit)
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
            print(run.resume_hint(bool(saved["config"].get("api_key")) and not rest, rest), file=sys.stderr)
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


def _score_saved(run: RunDir, saved: dict[str, Any], compat: str, limit: int) -> Scorer:
    from ..scoring.report import answers_per_question, choices
    from ..scoring.scorer import Scorer

    index = compact_predictions(run.predictions, limit)
    if not index.where:
        raise DataError(f"{run.predictions}: no predictions to score")
    asked = run.asks(saved)
    answers = answers_per_question(saved["fingerprint"])  # as the report counts repeats
    scorer = Scorer(compat=compat, choices=choices(saved["fingerprint"]))
    scorer.unreadable += index.unreadable  # lines that hold no prediction: counted, and asked again on resume
    for p in iter_predictions(run.predictions):
        if not asked(p["id"]):
            scorer.outside.add(p)  # not scored, but paid for: the cost covers it
            if isinstance(forced := p.get("forced"), dict):
                scorer.outside.add(forced)
            continue
        if (p.get("repeat") or 0) >= answers:  # a repeat the run never asked (a hand edit, another run's line)
            continue
        if scored(p):
            scorer.add(p)
        else:  # its forced answer is pending: not scored yet, but its reply was paid for
            scorer.usage.add(p)
    return scorer
