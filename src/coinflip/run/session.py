"""A session of requests: what is still to ask, and what lands: written, and in a fresh run scored, as it lands."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import DEFAULT_BATCH, TaskConfig
from ..jsonl import PredictionIndex, PredictionWriter, index_predictions
from ..models import Reply, Request, backend, limits
from ..models._replies import added, saved_usage
from ..models.predict import Gate, run_requests
from ..records import Prediction, requests_line, sample_key, split_key, stopped
from ..rundir import RunDir
from ..scoring import forced
from ..scoring.calibration import answer_window
from .plan import Plan
from .progress import Progress

if TYPE_CHECKING:
    from ..scoring.scorer import Scorer

log = logging.getLogger("coinflip")


Job = Any  # what a reply completes: a first request's record, or the saved row of a forced answer (`request.forced`)


def _unfinished(plan: Plan, index: PredictionIndex) -> Iterator[tuple[Any, int, list[int]]]:
    """(record, draw, keys) per request to send: `keys` the samples whose forced answer is pending, or none."""
    n = plan.build.choices
    fresh = not index.where and not index.pending  # nothing saved: every request, no key to look up
    for record in plan.dataset:
        for draw in range(plan.config.repeats):
            keys = [] if fresh else [sample_key(record.id, draw * n + i) for i in range(n)]
            if fresh or not all(index.replied(k) for k in keys):
                yield record, draw, []
            elif pending := [k for k in keys if k in index.pending]:
                yield record, draw, pending


def requests_left(plan: Plan, run: RunDir, index: PredictionIndex) -> Iterator[tuple[Job, Request]]:
    build = plan.build
    with run.predictions.open("rb") if index.where else contextlib.nullcontext() as handle:
        for record, draw, pending in _unfinished(plan, index):
            if not pending:
                yield record, _again(build(record, draw), build.choices, index, handle)
            for key in pending:
                assert handle is not None  # opened whenever a row was saved
                row = index.row(handle, key)
                request = build.forced(build(record, draw), row.get("reply") or "", split_key(key)[1])
                yield row, _forced_again(request, row.get("forced"))


def _again(request: Request, choices: int, index: PredictionIndex, handle: Any) -> Request:
    """A draw asked again keeps the choices answered before; what its failed rows cost lands in its new first row."""
    if handle is None:
        return request
    keys = [(r, sample_key(request.id, r)) for r in range(request.repeat, request.repeat + choices)]
    kept = frozenset(r for r, key in keys if index.replied(key))
    paid, seen, filled = None, set[str](), set[str]()
    for _, key in keys:
        if key in index.where:
            row = index.row(handle, key)
            paid = paid if index.replied(key) else added(paid, saved_usage(row.get("usage")))
            if isinstance(source := row.get("source"), str):  # a batch's key; a hand edit may have left anything
                (filled if index.replied(key) else seen).add(source)
    if not (kept or paid or seen):
        return request
    return dataclasses.replace(request, kept=kept, paid=paid, seen=frozenset(seen), filled=frozenset(filled))


def _forced_again(request: Request, forced: Any) -> Request:
    """A forced turn asked again after it failed carries what that cost, and the batch it names (never read again);
    one failed in a batch saved before rows named them (`source`) is read from that batch again instead."""
    source = forced.get("source") if isinstance(forced, dict) and forced.get("error") is not None else False
    if source is False or (source is None and forced.get("batch")):
        return request
    seen = frozenset([source]) if isinstance(source, str) else frozenset()
    return dataclasses.replace(request, paid=saved_usage(forced.get("usage")), seen=seen)


def left(plan: Plan, run: RunDir) -> tuple[PredictionIndex, int]:
    """The predictions file's index (a half-written last line cut) and the samples still to finish."""
    index = index_predictions(run.predictions, repair=True)
    if index.unreadable:
        log.warning("%d saved line(s) hold no prediction: skipped, and moved aside when the run ends", index.unreadable)
    todo = plan.samples  # nothing saved: no pass over the data, which costs 8 ms per thousand questions
    if index.where or index.pending:
        todo = sum(len(pending) or plan.build.choices for _, _, pending in _unfinished(plan, index))
    log.info("%d of %d samples already done; %d to go", plan.samples - todo, plan.samples, todo)
    return index, todo


class Session:
    """Where replies land: written (flushed a batch at a time), counted, and in a fresh run (`live`) scored.
    Left for the report: `traffic`, `scorer`, and `writer.in_order` (in key order: no compaction)."""

    def __init__(self, plan: Plan, run: RunDir, todo: int, live: bool, lands: bool = True) -> None:
        config = plan.config
        self.plan, self.live = plan, live
        self.writer = PredictionWriter(run.predictions if lands else Path(os.devnull))  # none lands: no file
        shown = False if not lands or config.quiet and config.progress is None else config.progress
        self.progress = Progress(todo, f"coin_flip {config.name}", shown)
        self.scorer: Scorer | None = None
        self.traffic: dict[str, Any] = {}  # what went to the endpoints
        self.pending = 0  # samples written with their forced answer pending (scoring/forced.py)
        self.started = time.perf_counter()
        self.outcome: dict[str, Any] | None = None  # what a model that handed its requests elsewhere did instead

    def on_replies(self, landed: list[tuple[Job, Request, Reply]]) -> None:
        config = self.plan.config
        if self.live and self.scorer is None:  # imported here, once the first requests are out
            from ..scoring.scorer import Scorer

            self.scorer = Scorer(compat=config.metric_compat, choices=self.plan.build.choices)
        finished = 0  # samples done: one whose forced answer is pending finishes later
        for job, request, reply in landed:
            if request.forced:
                paid = dataclasses.replace(reply, usage=added(reply.usage, request.paid), source=_named(reply, request))
                rows = [forced.answered(job, paid)]  # holding what its failed tries before cost
            else:
                rows = first_rows(job, request, reply, self.plan.build.choices, config.force_answer)
            for row in rows:
                self.writer.write(row)
                if stopped(row):  # paid for, asked again on resume
                    if self.scorer is not None:
                        self.scorer.outside.add(row)
                    continue
                if not forced.scored(row):
                    self.pending += 1
                    continue
                finished += 1
                if self.scorer is not None:
                    self.scorer.add(row)
            self.pending -= request.forced  # a forced answer: one pending sample fewer
            if reply.error:
                log.warning("sample %d failed after %d attempts: %s", request.id, reply.attempts, reply.error)
        self.writer.flush()
        self.progress.advance(finished)

    def follow_up(self, job: Job, request: Request, reply: Reply) -> list[tuple[Job, Request]]:
        """The forced answer's request for each choice of a first reply that holds no answer."""
        build = self.plan.build
        if not self.plan.config.force_answer or request.forced or reply.error:
            return []
        out = []
        got = [reply, *reply.more]  # a server may send more than n
        for repeat, choice in zip(placed(request, build.choices), got, strict=False):
            if forced.needed(choice.text):
                row = prediction_row(job, repeat, request, choice)
                out.append((row, build.forced(request, choice.text or "", repeat)))
        return out

    async def send(
        self, opened: Any, concurrency: int, work: Iterator[tuple[Job, Request]], budget: Gate | None
    ) -> None:
        """Never more workers than samples to finish (a forced answer follows its first reply in the same
        worker); each its own for a model that gathers requests (a batch). `traffic` is kept on a stop too."""
        async with opened as model:
            todo = self.progress.total
            workers = todo if getattr(model, "gathers", False) else min(concurrency, todo)
            try:
                await run_requests(model, work, workers, self.on_replies, self.follow_up, budget)
            finally:
                sent = getattr(model, "traffic", None)  # a server's client has it; a baseline sends nothing
                if sent is not None:
                    self.traffic.update(limits.describe(sent(), concurrency))
        self.outcome = getattr(model, "outcome", None)

    def close(self) -> None:
        self.progress.close()
        self.writer.close()
        if self.pending:  # a forced answer still pending (a stop): scored from the file, which counts what it spent
            self.scorer = None
        log.info("finished %d samples in %.2f s", self.progress.done, time.perf_counter() - self.started)
        if self.traffic:
            log.info("%s", requests_line(self.traffic))
            for hint in self.traffic["hints"]:
                log.warning("%s", hint)


def concurrency_for(config: TaskConfig) -> int:
    if config.eval_batch_size is not None:
        if backend(config) == "local" and config.eval_batch_size > 1:
            print("note: llama.cpp serves one request at a time; sending them one by one", file=sys.stderr)
        return config.eval_batch_size
    return DEFAULT_BATCH


def room_for(connections: int) -> int:
    """Thousands of requests in flight need as many sockets: the soft limit on open files (often 1,024) goes up;
    past the hard limit, fewer go at once. How many may."""
    with contextlib.suppress(ImportError, ValueError, OSError):  # no `resource` on Windows
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        wanted = connections + 256
        if soft != resource.RLIM_INFINITY and soft < wanted:
            ceiling = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (ceiling, hard))
            if ceiling < wanted:
                fits = max(1, ceiling - 256)
                print(f"note: the limit on open files ({hard}) allows {fits} requests in flight", file=sys.stderr)
                return fits
    return connections


def first_rows(record: Any, request: Request, reply: Reply, choices: int, force: bool) -> list[Prediction]:
    """One row per choice not answered before (the first holds the reply's usage); a choice the server did not
    return is an error row (asked again on resume)."""
    repeats = placed(request, choices)
    unpaid = dataclasses.replace(reply, usage=None)  # an error's usage (its retries') counts once, in its first row
    got = [reply, *reply.more][: len(repeats)] if reply.error is None else [reply, *[unpaid] * (len(repeats) - 1)]
    text = f"the server returned {len(reply.more) + 1} of n={choices} choices; use --repeats"
    missing = Reply(None, error=text, source=reply.source)  # names its batch (read): a resume asks for it anew
    got += [missing] * (len(repeats) - len(got))
    rows = [prediction_row(record, repeat, request, choice) for repeat, choice in zip(repeats, got, strict=True)]
    for row in rows:
        if force and row["error"] is None and forced.needed(row["reply"]):
            row["forced"] = forced.PENDING.copy()
    return rows


def placed(request: Request, choices: int) -> list[int]:
    """The repeats a reply's choices fill, in order: those of its n not answered before."""
    return [r for r in range(request.repeat, request.repeat + choices) if r not in request.kept]


def first_open(request: Request) -> int:
    """The repeat a reply's first choice fills (its usage's row)."""
    repeat = request.repeat
    while repeat in request.kept:
        repeat += 1
    return repeat


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
        "usage": added(reply.usage, request.paid) if repeat == first_open(request) else reply.usage,
        "latency_s": None if reply.latency_s is None else round(reply.latency_s, 6),
        "attempts": reply.attempts,
        "error": reply.error,
    }
    if reply.ttft_s is not None:
        row["ttft_s"] = round(reply.ttft_s, 6)
    if (window := answer_window(reply.logprobs)) is not None:
        row["answer_logprobs"] = window
    if reply.status is not None and reply.error is not None:
        row["status"] = reply.status
    if reply.batch:
        row["batch"] = True
    if reply.stopped:
        row["stopped"] = True
    if source := _named(reply, request):
        row["source"] = source
    return row


def _named(reply: Reply, request: Request) -> str | None:
    """The last batch whose usage a reply's row holds (its own, or the one its failed row named): never read again."""
    return reply.source or (min(request.seen) if len(request.seen) == 1 else None)
