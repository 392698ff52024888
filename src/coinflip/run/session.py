"""A session of requests: what is still to ask, and what lands, written and scored as it lands.

The runner opens the run and hands each session's work to the model; `Session` turns each reply
into the predictions file's rows (a forced follow-up where --force-answer asks for one) and, in
a fresh run, into the scores the report is built from.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..config import DEFAULT_BATCH, TaskConfig
from ..jsonl import PredictionIndex, PredictionWriter, index_predictions
from ..models import Reply, Request, is_local, limits
from ..models.predict import Gate, run_requests
from ..records import Prediction, sample_key, split_key
from ..rundir import RunDir
from ..scoring import forced
from ..scoring.calibration import answer_window
from .plan import Plan
from .progress import Progress

if TYPE_CHECKING:
    from ..scoring.scorer import Scorer

log = logging.getLogger("coinflip")


@dataclass(frozen=True)
class Job:
    """One request's worth of work: a first request (`saved` None) or a forced follow-up."""

    record: Any
    saved: Prediction | None = None


def _unfinished(plan: Plan, index: PredictionIndex) -> Iterator[tuple[Any, int, list[int]]]:
    """(record, draw, keys) for each request still to send, in question order: `keys` empty for a
    whole request (a choice missing or failed), else the samples whose forced answer is pending."""
    n = plan.build.choices
    fresh = not index.where and not index.pending  # nothing saved: every request, no key to look up
    for record in plan.dataset:
        for draw in range(plan.config.repeats):
            if fresh:
                yield record, draw, []
                continue
            keys = [sample_key(record.id, draw * n + i) for i in range(n)]
            if not all(index.replied(k) for k in keys):
                yield record, draw, []
            elif index.pending:
                pending = [k for k in keys if k in index.pending]
                if pending:
                    yield record, draw, pending


def requests_left(plan: Plan, run: RunDir, index: PredictionIndex) -> Iterator[tuple[Job, Request]]:
    """The requests still to send: first requests, and forced follow-ups whose first reply is kept."""
    build = plan.build
    with run.predictions.open("rb") if index.pending else contextlib.nullcontext() as handle:
        for record, draw, pending in _unfinished(plan, index):
            if not pending:
                yield Job(record), build(record, draw)
            for key in pending:
                assert handle is not None  # opened whenever a forced answer is pending
                row = index.row(handle, key)
                request = build.forced(build(record, draw), row.get("reply") or "", split_key(key)[1])
                yield Job(record, row), request


def samples_left(plan: Plan, index: PredictionIndex) -> int:
    """Samples still to finish: a reply or a forced answer to get (what the progress bar counts).
    Nothing saved yet: all of them, without a pass over the data (it was validated when opened;
    a pass costs as much as 8 ms per thousand questions, before the first request goes)."""
    if not index.where and not index.pending:
        return plan.samples
    return sum(len(pending) or plan.build.choices for _, _, pending in _unfinished(plan, index))


def left(plan: Plan, run: RunDir) -> tuple[PredictionIndex, int]:
    """The predictions file's index (a half-written last line cut) and the samples still to finish."""
    index = index_predictions(run.predictions, repair=True)
    if index.unreadable:
        log.warning("%d saved line(s) hold no prediction and were skipped; asked again", index.unreadable)
    todo = samples_left(plan, index)
    log.info("%d of %d samples already done; %d to go", plan.samples - todo, plan.samples, todo)
    return index, todo


class Session:
    """Where replies land: each is written as it lands (flushed a batch at a time), counted on the
    progress bar, and in a fresh run (`live`) scored, so the report is ready with the last reply.
    What it leaves for the report: what went to the endpoints (`traffic`), the scores (`scorer`),
    and whether every sample was written once and in key order (then the file needs no compaction)."""

    def __init__(self, plan: Plan, writer: PredictionWriter, progress: Progress, live: bool) -> None:
        self.plan, self.writer, self.progress, self.live = plan, writer, progress, live
        self.scorer: Scorer | None = None
        self.traffic: dict[str, Any] | None = None
        self.pending = 0  # samples written with their forced answer pending (scoring/forced.py)
        self.started = time.perf_counter()

    def on_replies(self, landed: list[tuple[Job, Request, Reply]]) -> None:
        config = self.plan.config
        if self.live and self.scorer is None:  # imported here, once the first requests are out
            from ..scoring.scorer import Scorer

            self.scorer = Scorer(compat=config.metric_compat)
        finished = 0  # samples done: one whose forced answer is pending finishes later
        for job, request, reply in landed:
            if job.saved is None:
                rows = first_rows(job.record, request, reply, self.plan.build.choices, config.force_answer)
            else:
                rows = [forced.answered(job.saved, reply)]
            for row in rows:
                self.writer.write(row)
                if not forced.scored(row):
                    self.pending += 1
                    continue
                finished += 1
                if self.scorer is not None:
                    self.scorer.add(row)
            self.pending -= job.saved is not None  # a forced answer: one pending sample fewer
            if reply.error:
                log.warning("sample %d failed after %d attempts: %s", request.id, reply.attempts, reply.error)
        self.writer.flush()
        self.progress.advance(finished)

    def follow_up(self, job: Job, request: Request, reply: Reply) -> list[tuple[Job, Request]]:
        """The forced answer's request for each choice of a first reply that holds no answer."""
        build = self.plan.build
        if not self.plan.config.force_answer or job.saved is not None or reply.error:
            return []
        out = []
        for i, choice in enumerate([reply, *reply.more][: build.choices]):  # a server may send more
            if forced.needed(choice.text):
                row = prediction_row(job.record, request.repeat + i, request, choice)
                out.append((Job(job.record, row), build.forced(request, choice.text or "", request.repeat + i)))
        return out

    @property
    def in_order(self) -> bool:
        return self.writer.in_order

    def close(self, traffic: dict[str, Any]) -> None:
        self.progress.close()
        self.writer.close()
        self.traffic = traffic or None
        if self.pending:  # a forced answer still pending (a stop): scored from the file, which counts what it spent
            self.scorer = None
        log.info("finished %d samples in %.2f s", self.progress.done, time.perf_counter() - self.started)
        if traffic:
            log.info("%s", limits.line(traffic))
            for hint in traffic["hints"]:
                log.warning("%s", hint)


def concurrency_for(config: TaskConfig) -> int:
    """Requests in flight: the user's number, or 32; a local llama.cpp server gets its slots."""
    if config.eval_batch_size is not None:
        if is_local(config) and config.eval_batch_size > 1:
            print("note: llama.cpp serves one request at a time; sending them one by one", file=sys.stderr)
        return config.eval_batch_size
    return DEFAULT_BATCH


def room_for(connections: int) -> None:
    """Thousands of requests in flight need as many sockets: raise the soft limit on open files
    toward the hard one (a common soft limit is 1,024)."""
    try:
        import resource
    except ImportError:  # Windows
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = connections + 256
    if soft != resource.RLIM_INFINITY and soft < wanted:
        ceiling = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (ceiling, hard))


async def send(
    opened: Any,
    concurrency: int,
    work: Iterator[tuple[Job, Request]],
    on_replies: Any,
    follow_up: Any,
    todo: int,
    traffic: dict[str, Any],
    budget: Gate | None = None,
) -> None:
    """Send `work` to the model `opened` gives; never more workers than samples to finish (a
    forced answer follows its first reply in the same worker), whatever --eval-batch-size says,
    and each its own worker for a model that gathers requests (a batch). `traffic` gets what
    went to the endpoints (also when the run stops early)."""
    async with opened as model:
        workers = todo if getattr(model, "gathers", False) else min(concurrency, todo)
        try:
            await run_requests(model, work, workers, on_replies, follow_up, budget)
        finally:
            sent = getattr(model, "traffic", None)  # a server's client has it; a baseline sends nothing
            if sent is not None:
                traffic.update(limits.describe(sent(), concurrency))


def first_rows(record: Any, request: Request, reply: Reply, choices: int, force: bool) -> list[Prediction]:
    """One row per choice; a choice the server did not return is an error row (resumed later)."""
    got = [reply, *reply.more][:choices] if reply.error is None else [reply] * choices
    rows = []
    for i in range(choices):
        if i < len(got):
            choice = got[i]
        else:
            choice = Reply(None, error=f"the server returned {len(got)} of n={choices} choices; use --repeats")
        row = prediction_row(record, request.repeat + i, request, choice)
        if force and row["error"] is None and forced.needed(row["reply"]):
            row["forced"] = forced.PENDING.copy()
        rows.append(row)
    return rows


def prediction_row(record: Any, repeat: int, request: Request, reply: Reply) -> Prediction:
    row: Prediction = {
        "id": record.id,
        "repeat": repeat,
        "target": record.answer,
        "people": record.people,
        "flips": record.flips,
        "question": record.question,
        "prompt": request.prompt,
        "reply": reply.text,
        "reasoning": reply.reasoning,
        "finish_reason": reply.finish_reason,
        "usage": reply.usage,
        "latency_s": round(reply.latency_s, 6),
        "attempts": reply.attempts,
        "error": reply.error,
    }
    if reply.ttft_s is not None:
        row["ttft_s"] = round(reply.ttft_s, 6)
    window = answer_window(reply.logprobs)
    if window is not None:
        row["answer_logprobs"] = window
    if reply.status is not None and reply.error is not None:
        row["status"] = reply.status
    if reply.batch:
        row["batch"] = True
    return row
