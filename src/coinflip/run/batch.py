"""Batch mode: a run's requests through the OpenAI Batch API, resumable at every step.

Each step is saved in the run directory (batch/state.json) before the next is taken:
requests owed -> request lines (JSON Lines, split at the API's limits; their custom_ids kept)
-> uploaded (file id saved) -> batch created (batch id saved) -> polled until it ends -> its
output and error files downloaded -> lines joined to requests by custom_id -> predictions
written as online replies are (the runner's `on_replies`). A killed run, resumed with --use-cache, finds the saved ids
and polls the same batches: a request in a batch that is still open is never sent again.

What a batch did not answer (it expired, failed or was cancelled; a line failed) is recorded as
an error for its sample, then sent again in a new batch, up to RESENDS times in one run, or
online with --batch-rest-online. Forced answers go in the next batch, once the first replies
are in. Offline, `write_requests` writes the request file that `vllm run-batch` reads, and
`read_results` scores the file it writes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._files import read_regular, replacing
from ..config import safe_name
from ..errors import ConfigError, RunIncomplete, storage_error
from ..models.base import Reply, Request
from ..models.batch_api import ENDED, LOST, custom_id_of, read_result, request_line, split_lines
from ..secrets import secret_keys
from .progress import Progress
from .stop import Interrupted, run_until_stopped, stopped_by

if TYPE_CHECKING:
    from ..models.batch_api import BatchAPI
    from ..rundir import RunDir
    from ..scoring.cost import Budget
    from .plan import Plan
    from .runner import Job

log = logging.getLogger("coinflip")
STATE_FILE = "batch/state.json"
STATE_LIMIT = 16 << 20  # bytes of state.json read: a record per batch, a few hundred bytes each
RESENDS = 2  # a request is sent at most 1 + RESENDS times in one run
Work = list[tuple["Job", Request]]
OnReplies = Callable[[list[tuple["Job", Request, Reply]]], None]
FollowUp = Callable[["Job", Request, Reply], list[tuple["Job", Request]]]


def custom_id(job: Job, request: Request) -> str:
    """Stable across runs: question, first repeat, and whether it is the forced follow-up."""
    return f"q{request.id}-r{request.repeat}" + ("-forced" if job.saved is not None else "")


@dataclass
class Submitted:
    """One batch as the run directory records it. The ids are saved the moment they exist."""

    ids: str  # the file of its custom_ids (one a line), relative to the run directory
    count: int
    file_id: str | None = None
    batch_id: str | None = None
    status: str = "new"  # the server's last word: in_progress, completed, expired, failed, cancelled
    collected: bool = False  # its answers are in the predictions file

    @classmethod
    def read(cls, raw: Any) -> Submitted:
        """A saved record, checked field by field (a run directory is not to be trusted)."""
        kinds = {"ids": str, "count": int, "file_id": str, "batch_id": str, "status": str, "collected": bool}
        if not isinstance(raw, dict) or not isinstance(raw.get("count"), int):
            raise ValueError("not a batch record")
        if not re.fullmatch(r"batch/requests-\d+\.ids", str(raw.get("ids"))):
            raise ValueError("an ids file outside the run's batch folder")
        for name, kind in kinds.items():
            if raw.get(name) is not None and not isinstance(raw[name], kind):
                raise ValueError(f"{name} is not a {kind.__name__}")
        return cls(**{f.name: raw[f.name] for f in fields(cls) if f.name in raw})


class State:
    """The run's batches, saved atomically on every change."""

    def __init__(self, run: RunDir) -> None:
        self.run = run
        self.path = run.root / STATE_FILE
        self.batches: list[Submitted] = []
        if not self.path.exists():  # a first batch: its folder is made a real one, never written through a link
            run.own_folders(self.path)
            return
        try:  # a plain file inside the run (a FIFO there would hang the resume), of sane depth
            raw = json.loads(read_regular(self.path, STATE_LIMIT, within=run.root))
            self.batches = [Submitted.read(b) for b in raw["batches"]]
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:  # UnreadableFile: a ValueError
            raise ConfigError(f"{self.path}: not a batch state file ({exc}); move it away to start over") from None

    def save(self) -> None:
        with replacing(self.path) as out:  # a failure to write is StorageError, naming the file
            out.write(json.dumps({"batches": [asdict(b) for b in self.batches]}, indent=1).encode())

    def open(self) -> list[Submitted]:
        return [b for b in self.batches if not b.collected]

    def file(self, name: str) -> Path:
        return self.run.root / "batch" / name


def lines_for(plan: Plan, work: Iterable[tuple[Job, Request]]) -> Iterable[tuple[str, bytes]]:
    """(custom_id, request line) for each request, its body built as an online request's is."""
    from ..models.openai_api import request_body, split_generation

    generation, extra_body = split_generation(plan.generation)
    model, mode = str(plan.config.model), plan.config.api_mode
    for job, request in work:
        body = request_body(model, mode, generation, request, False, extra_body)
        yield custom_id(job, request), request_line(custom_id(job, request), mode, body)


def write_requests(plan: Plan, run: RunDir, work: Iterable[tuple[Job, Request]]) -> dict[str, Any]:
    """Offline: the owed requests as one JSON Lines file for `vllm run-batch` (or a provider's console)."""
    from .runner import resume_hint

    path = Path(str(plan.config.batch_write)).expanduser()
    secret = secret_keys(plan.generation.get("extra_body"))  # what the saved config masks, a request file would carry
    if secret:
        raise ConfigError(
            f"generation_config extra_body {secret} look like secrets (every text is, but under the keys of "
            "config.PLAIN_KEYS; the run directory masks them), which a request file would carry"
        )
    count = 0
    try:
        with path.open("wb") as handle:
            for _, line in lines_for(plan, work):
                handle.write(line)
                count += 1
    except OSError as exc:
        raise storage_error(path, exc) from None
    hint = resume_hint(run).replace("resume with: ", "")
    print(
        f"wrote {count} requests to {path}; run them, e.g. vllm run-batch -i {path} -o results.jsonl "
        f"--model {plan.config.model}, then score them with: {hint} --batch-results results.jsonl",
        file=sys.stderr,
    )
    return {"complete": count == 0, "batch_written": {"path": str(path), "requests": count}, "run": str(run.root)}


def read_results(plan: Plan, work: Iterable[tuple[Job, Request]], on_replies: OnReplies) -> None:
    """Offline: join a result file made elsewhere to the owed requests and record each answer."""
    path = Path(str(plan.config.batch_results)).expanduser()
    owed = {custom_id(job, request): (job, request) for job, request in work}
    landed, unknown, unreadable = [], 0, 0
    try:
        with path.open("rb") as handle:
            for raw in handle:
                found = read_result(raw, plan.config.api_mode)
                if found is None:
                    unreadable += raw.strip() != b""
                elif found[0] not in owed:
                    unknown += 1
                else:
                    job, request = owed.pop(found[0])
                    landed.append((job, request, found[1]))
    except OSError as exc:
        raise ConfigError(f"--batch-results {path}: cannot read ({exc.strerror})") from None
    on_replies(landed)
    failed = sum(reply.error is not None for _, _, reply in landed)
    print(
        f"note: {len(landed)} answers read from {path} ({failed} failed); {unknown} lines not owed by this run, "
        f"{unreadable} unreadable; {len(owed)} requests still owed (write them with --batch-write)",
        file=sys.stderr,
    )


def send_batches(
    plan: Plan,
    run: RunDir,
    url: str | None,
    work: Iterable[tuple[Job, Request]],
    on_replies: OnReplies,
    follow_up: FollowUp,
    budget: Budget | None = None,
) -> Work:
    """Send `work` through the Batch API; returns what is left for an online pass (--batch-rest-online).
    `budget` (--max-cost) decides what is submitted and counts what the batches answered."""
    from ..models._http import megabytes
    from ..models.batch_api import BatchAPI
    from ..secrets import run_secrets
    from .runner import resume_hint

    config = plan.config
    if not url:
        raise ConfigError(f"--batch needs a server: {config.model} answers in-process")
    state = State(run)
    secrets = run_secrets(config.api_key, plan.generation, config.api_url)
    api = BatchAPI(url, config.api_key, plan.generation, config.timeout, secrets, megabytes(config.max_reply_mb))
    sender = _Sender(plan, state, api, on_replies, follow_up, budget)
    try:
        return run_until_stopped(sender.run(list(work)))
    except Interrupted as exc:
        running = ", ".join(str(b.batch_id) for b in state.open() if b.batch_id)
        stopped = stopped_by(exc)
        if running:
            stopped += f"; batches still running at the server, not cancelled: {running}; to collect them"
        raise RunIncomplete(f"{stopped}, {resume_hint(run)}") from None


class _Sender:
    """One run's passes: submit what is owed, poll until every open batch ends, collect, repeat."""

    def __init__(
        self, plan: Plan, state: State, api: BatchAPI, on_replies: OnReplies, follow_up: FollowUp, budget: Budget | None
    ) -> None:
        self.plan = plan
        self.config = plan.config
        self.state = state
        self.api = api
        self.on_replies = on_replies
        self.follow_up = follow_up
        self.owed: dict[str, tuple[Job, Request]] = {}
        self.sends: Counter[str] = Counter()
        self.shown = False if self.config.quiet and self.config.progress is None else self.config.progress
        self.budget = budget
        self.info: dict[str, dict[str, Any]] = {}  # each batch as the server last showed it

    async def run(self, work: Work) -> Work:
        self.owed = {custom_id(job, request): (job, request) for job, request in work}
        for batch in self.state.open():
            if batch.file_id is None:  # killed before its upload: its requests are simply owed again
                batch.collected = True
        opened = self.state.open()
        covered = set().union(*(self._ids(b) for b in opened))
        queue = [cid for cid in self.owed if cid not in covered]
        waiting = len(self.owed) - len(queue)  # in batches a killed session left running: owed, not yet priced
        online: Work = []
        async with self.api:
            while queue or opened:
                if queue and self.config.batch_rest_online and any(self.sends[c] for c in queue):
                    online += [self.owed[c] for c in queue]
                    queue = []
                opened += await self._submit(self._affordable(queue, waiting))
                queue, waiting = [], 0
                await self._poll(opened)
                for batch in opened:
                    queue += await self._collect(batch)
                opened = []
        return online

    def _ids(self, batch: Submitted) -> list[str]:
        root = self.state.run.root
        try:  # a plain file inside the run: a FIFO there would hang the resume
            return read_regular(root / batch.ids, STATE_LIMIT, within=root).decode("utf-8").split()
        except (OSError, ValueError):  # UnreadableFile and UnicodeDecodeError are ValueErrors
            return []

    def _affordable(self, queue: list[str], waiting: int = 0) -> list[str]:
        """The requests that fit --max-cost, at the mean cost so far (or an estimate), after the
        `waiting` ones already in running batches (a resume's: they will cost as much)."""
        if self.budget is None or not queue:
            return queue
        kept: list[str] = []
        for cid in queue:
            if not self.budget.fits(self.owed[cid][1], waiting + len(kept)):
                self.budget.stopped = True
                break
            kept.append(cid)
        return kept

    async def _submit(self, queue: list[str]) -> list[Submitted]:
        """Upload and create a batch for each group of lines that fits the API's limits. The lines
        stay in memory (their bodies may hold a gateway's secrets); the run directory keeps their ids."""
        if not queue:
            return []
        made = []
        lines = (line for _, line in lines_for(self.plan, (self.owed[c] for c in queue)))
        for group in split_lines(lines):
            name = f"requests-{len(self.state.batches) + 1:03d}.ids"
            ids = [custom_id_of(line) or "" for line in group]
            with replacing(self.state.file(name)) as out:  # never into a FIFO or through a link left there
                out.write(("\n".join(ids) + "\n").encode("utf-8"))
            batch = Submitted(f"batch/{name}", len(group))
            self.state.batches.append(batch)
            self.state.save()
            batch.file_id = await self.api.upload(b"".join(group), name.replace(".ids", ".jsonl"))
            self.state.save()
            await self._start(batch)
            made.append(batch)
        self.sends.update(queue)
        return made

    async def _start(self, batch: Submitted) -> None:
        """Create the batch from its uploaded file, saving its id at once; a batch made just before
        a kill is found by its input file, not made again."""
        if batch.file_id is not None and batch.batch_id is None:
            found = await self.api.find(batch.file_id)
            if found is None:
                found = await self.api.create(
                    batch.file_id, self.config.api_mode, {"coinflip_run": self.state.run.root.name}
                )
            batch.batch_id, batch.status = str(found["id"]), str(found.get("status") or "validating")
            self.state.save()
            log.info("batch %s created from %s (%d requests)", batch.batch_id, batch.file_id, batch.count)

    async def _poll(self, opened: list[Submitted]) -> None:
        """Poll every open batch until it ends, with a progress bar from its request counts."""
        for batch in opened:
            if batch.batch_id is None:
                await self._start(batch)
        total = sum(b.count for b in opened)
        bar = Progress(total, f"batch {self.config.name}", self.shown)
        shown = 0
        try:
            while True:
                for batch in opened:
                    if batch.status not in ENDED or batch.batch_id not in self.info:
                        found = await self.api.retrieve(str(batch.batch_id))
                        self.info[str(batch.batch_id)] = found
                        batch.status = str(found.get("status"))
                self.state.save()
                done = sum(_counted(self.info[str(b.batch_id)]) for b in opened)
                if done > shown:
                    bar.advance(min(done, total) - shown)
                    shown = min(done, total)
                if all(b.status in ENDED for b in opened):
                    return
                await asyncio.sleep(self.config.batch_poll_s)
        finally:
            bar.close()

    async def _collect(self, batch: Submitted) -> list[str]:
        """Download what the batch answered, record it, and return what must be sent again."""
        info = self.info.get(str(batch.batch_id), {})
        replies: dict[str, Reply] = {}
        for key in ("output_file_id", "error_file_id"):
            file_id = info.get(key)
            if isinstance(file_id, str) and file_id:
                name = safe_name(str(batch.batch_id))  # the server's id: never a path (../) out of the run
                dest = self.state.file(f"{name}.{key.split('_')[0]}.jsonl")
                if not await self.api.download(file_id, dest):
                    log.warning("batch %s: its %s is gone from the server", batch.batch_id, key)
                    continue
                with dest.open("rb") as handle:
                    for raw in handle:
                        found = read_result(raw, self.config.api_mode)
                        if found is not None and (found[0] not in replies or replies[found[0]].error):
                            replies[found[0]] = found[1]
        turnaround = _turnaround(info)
        missing = f"the batch ended {batch.status} before this request ran"
        if batch.status == LOST:
            missing = f"the server no longer knows batch {batch.batch_id}"
        if batch.status == "failed":
            missing = f"the batch failed: {_errors(info)}"
        landed, again = [], []
        for cid in self._ids(batch):
            if cid not in self.owed:
                continue
            job, request = self.owed.pop(cid)
            reply = replies.get(cid) or Reply(None, error=missing)
            reply.latency_s, reply.attempts = turnaround, max(1, self.sends[cid])
            for more in reply.more:
                more.latency_s = turnaround
            landed.append((job, request, reply))
            if reply.error is not None and self.sends[cid] <= RESENDS:
                self.owed[cid] = (job, request)
                again.append(cid)
            elif reply.error is None:
                for pair in self.follow_up(job, request, reply):
                    self.owed[custom_id(*pair)] = pair
                    again.append(custom_id(*pair))
        self.on_replies(landed)
        if self.budget is not None:
            self.budget.answered += len(landed)
            for _, _, reply in landed:
                self.budget.add(reply.usage)
        batch.collected = True
        self.state.save()
        failed = sum(reply.error is not None for _, _, reply in landed)
        log.info("batch %s ended %s: %d answers, %d failed", batch.batch_id, batch.status, len(landed) - failed, failed)
        return again


def _counted(info: dict[str, Any]) -> int:
    counts = info.get("request_counts")
    done = [counts.get(k) for k in ("completed", "failed")] if isinstance(counts, dict) else []
    return sum(n for n in done if isinstance(n, int) and not isinstance(n, bool) and n > 0)


def _turnaround(info: dict[str, Any]) -> float:
    """Seconds from the batch's creation to its end, as the server dates them (else 0)."""
    start = info.get("created_at")
    ends = [info.get(f"{s}_at") for s in ENDED]
    end = max((e for e in ends if isinstance(e, int | float) and not isinstance(e, bool)), default=None)
    if isinstance(start, int | float) and end is not None:
        return float(max(0.0, end - start))
    return 0.0


def _errors(info: dict[str, Any]) -> str:
    errors = info.get("errors")
    data = errors.get("data") if isinstance(errors, dict) else None
    messages = [str(e.get("message")) for e in data or [] if isinstance(e, dict)]
    return "; ".join(messages[:3]) or "no reason given"
