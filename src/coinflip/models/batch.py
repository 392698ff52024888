"""Batch mode as a model backend: the Batch API (as inspect_ai's batcher), resumable at every step from batch/
state.json (`vllm run-batch` elsewhere: offline.py)."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from pathlib import Path
from typing import Annotated, Any

import msgspec

from .._files import read_regular, replacing
from ..config import TaskConfig, safe_name
from ..errors import ConfigError, EndpointBroken, storage_error
from ._replies import added, unkept
from ._request import request_body, split_generation
from .base import Reply, Request, Unanswered
from .batch_api import (
    ENDED,
    LOST,
    TURNAROUND_MAX,
    BatchAPI,
    batch_errors,
    read_answers,
    request_line,
    split_lines,
    turnaround,
)
from .limits import Traffic
from .openai_api import BACKOFF_BASE, BACKOFF_CAP, OpenAIClient
from .predict import Gatherer, custom_id

log = logging.getLogger("coinflip")
STATE_LIMIT = 16 << 20  # bytes of state.json read: a record per batch, a few hundred bytes each
RESENDS = 2  # a request is sent at most 1 + RESENDS times in one run
STATUSES = ("validating", "in_progress", "finalizing", "cancelling", *ENDED)


def request_lines(model: str, mode: str, generation: dict[str, Any], requests: Iterable[Request]) -> Iterator[bytes]:
    generation, extra_body = split_generation(generation)
    for request in requests:
        yield request_line(custom_id(request), mode, request_body(model, mode, generation, request, False, extra_body))


class Submitted(msgspec.Struct):
    """One batch as the run directory records it (read back as declared: it is not trusted)."""

    ids: Annotated[str, msgspec.Meta(pattern=r"^batch/requests-\d+\.ids$")]  # its custom_ids, one a line
    count: int
    file_id: str | None = None
    batch_id: str | None = None
    status: str = "new"  # the server's last word: in_progress, completed, expired, failed, cancelled
    collected: bool = False  # its results are downloaded into the batch folder (or it has none)
    turnaround_s: Annotated[float, msgspec.Meta(ge=0, le=TURNAROUND_MAX)] | None = None  # its answers' latency
    key: str = ""  # random, its own: each row read from it names it (`source`); "" in states saved before keys


class State(msgspec.Struct):
    batches: list[Submitted]


def saved_batches(folder: Path) -> list[Submitted]:
    """The batches `folder`/state.json records (none without one)."""
    state = folder / "state.json"
    if not state.exists():
        return []
    try:  # a plain file inside the run (a FIFO there would hang the resume)
        return msgspec.json.decode(read_regular(state, STATE_LIMIT, within=folder.parent), type=State).batches
    except (OSError, ValueError, msgspec.DecodeError) as exc:
        raise ConfigError(f"{state}: not a batch state file ({exc}); move it away to start over") from None


def batch_ids(folder: Path, batch: Submitted) -> list[str]:
    """The custom_ids a saved batch holds (a plain file inside the run: a FIFO there would hang the resume)."""
    try:
        return read_regular(folder.parent / batch.ids, STATE_LIMIT, within=folder.parent).decode("utf-8").split()
    except (OSError, ValueError):  # UnreadableFile and UnicodeDecodeError are ValueErrors
        return []


def unread(held: list[Submitted], request: Request) -> list[Submitted]:
    """`request`'s saved batches (`held`, in order) after the last one a row names (`seen`; from one a kept row names,
    `filled`, whose other choices may be unsaved): billed, their usage in no row; before keys: the latest."""
    named = request.seen | request.filled
    last = max((i + (b.key in request.seen) for i, b in enumerate(held) if b.key and b.key in named), default=0)
    return [batch for batch in held[last:] if batch.key] if held and held[-1].key else held[-1:]


def result_files(folder: Path, batch: Submitted) -> dict[str, Path]:
    """Where a batch's output and error files are downloaded to (the server's id: never a path out of the run)."""
    return {key: folder / f"{safe_name(str(batch.batch_id))}.{key}.jsonl" for key in ("output", "error")}


def downloaded(folder: Path, batch: Submitted) -> list[Path]:
    """A batch's result files as downloaded (none for one never made: it has no id)."""
    return [p for p in result_files(folder, batch).values() if p.exists()] if batch.batch_id is not None else []


def covering(folder: Path, batches: Iterable[Submitted]) -> dict[str, list[Submitted]]:
    """custom_id -> the saved batches (of `batches`, in their order) that hold it."""
    covered: dict[str, list[Submitted]] = {}
    for batch in batches:
        for cid in batch_ids(folder, batch):
            covered.setdefault(cid, []).append(batch)
    return covered


class BatchModel(Gatherer):
    """Requests answered through the Batch API at one endpoint, a batch a round, resumable from `folder`
    (batch/); `online` answers what a batch left (--batch-rest-online) where `admit` lets it (--max-cost)."""

    def __init__(
        self, api: BatchAPI, folder: Path, config: TaskConfig, generation: dict[str, Any],
        online: OpenAIClient | None = None, admit: Callable[[Request, Any], Awaitable[bool]] | None = None,
    ) -> None:  # fmt: skip
        super().__init__()
        self.api, self.folder, self.config, self.generation = api, folder, config, generation
        self.name, self.mode, self.cap = str(config.model), config.api_mode, api.pool.limits.max_body
        self.online, self.admit = online, admit
        self.unsaved = online.unsaved if online is not None else {}  # its online requests' (predict.py)
        self.batches: list[Submitted] = []
        self.covered: dict[str, list[Submitted]] = {}  # custom_id -> the saved batches that hold it, in order
        self.info: dict[str, dict[str, Any]] = {}  # each batch as the server last showed it
        self.refused = 0  # requests a rate limit refused for the whole --patience: owed

    async def start(self) -> None:
        """Read the saved batches (the folder made a real one, never a link), then open the endpoint."""
        state = self.folder / "state.json"
        if self.folder.is_symlink():
            self.folder.unlink()
        try:
            self.folder.mkdir(exist_ok=True)
        except OSError as exc:
            raise storage_error(self.folder, exc) from None
        self.batches = saved_batches(self.folder)
        for batch in self.batches:
            if batch.file_id is None:  # killed before its upload: its requests are simply owed again
                batch.collected = True
                continue
            if batch.batch_id in ("", ".", ".."):  # no id a server gives: found again by its input file
                print(f"note: {state}: batch id {batch.batch_id!r} is not a batch's id; looking for the batch "
                      f"made from {batch.file_id} instead", file=sys.stderr)  # fmt: skip
                batch.batch_id, batch.status = None, "new"
        self.covered = covering(self.folder, [b for b in self.batches if b.file_id is not None])
        await self.api.__aenter__()
        if self.online is not None:
            await self.online.start()

    def _save(self) -> None:
        with replacing(self.folder / "state.json") as out:  # a failure to write is StorageError, naming the file
            out.write(msgspec.json.format(msgspec.json.encode(State(self.batches)), indent=1))

    @property
    def traffic(self) -> Callable[[], Traffic] | None:
        """The requests record of what a batch left that went online (--batch-rest-online); none went: none."""
        return self.online.traffic if self.online is not None and self.online.limiter.traffic.sent else None

    def paid(self, request: Request) -> list[Submitted]:
        """Its saved batches whose usage no row holds: billed, whatever this run does."""
        return unread(self.covered.get(custom_id(request), []), request)

    async def complete(self, request: Request) -> Reply:
        paid = None  # what its sends reported they cost (a line of 200 without an answer too)
        sends, failures, limited = 0, 0, None  # a line refused by a rate limit (429) is sent again, later, as online
        while failures <= RESENDS:  # a refused request is: it spends no resend, only the run's --patience
            reply = await super().complete(request)  # in the round
            paid, sends = added(paid, reply.usage), sends + 1
            if reply.error is None:
                break
            if reply.status == 429 and self.online is None:
                limited = limited or time.monotonic()
                if time.monotonic() - limited <= self.config.patience:
                    await asyncio.sleep(min(BACKOFF_CAP, BACKOFF_BASE * 2 ** min(sends, 16)))
                    continue
                if paid is None:  # refused for the whole patience, nothing billed: it stays owed for a resume
                    self.refused += 1
                    raise Unanswered()
                break
            failures += 1
            if self.online is None:  # sent again in the next round, RESENDS times at most
                continue
            if self.admit is not None and not await self.admit(request, paid):  # what a batch left goes online, if
                if paid is None:  # the run can afford it (what the line billed counts); nothing billed: still owed
                    raise Unanswered()
                reply.error = f"{reply.error}; not sent online: --max-cost leaves no room"  # its row holds `paid`
                break
            answer = await self.online.complete(request)
            answer.usage, answer.source = added(paid, answer.usage), reply.source  # counted, never read again
            answer.attempts += sends  # its usage counts the batch lines too: each bounded by max_tokens
            return answer
        reply.attempts, reply.usage, reply.batch = sends, paid, reply.batch or paid is not None
        return reply

    async def _answers(self, requests: dict[str, Request]) -> dict[str, Reply]:
        held = {cid: self.paid(request) for cid, request in requests.items()}  # each: its sends, in order
        for cid in requests:  # read once: a request sent again goes in a new batch
            self.covered.pop(cid, None)
        fresh = [request for cid, request in requests.items() if not held[cid]]
        for group in split_lines(request_lines(self.name, self.mode, self.generation, fresh)):
            batch = await self._submit(group)
            held.update({str(json.loads(line)["custom_id"]): [batch] for line in group})
        batches = list({id(b): b for sends in held.values() for b in sends}.values())
        await self._poll(batches)
        read = {id(b): await self._collect(b, set(requests)) for b in batches}
        replies: dict[str, Reply] = {}
        for cid, sends in held.items():  # a batch sent before some of its choices were saved: the others (unkept)
            got = [unkept(r, requests[cid]) if not b.key or b.key in requests[cid].filled else r
                   for b in sends if (r := read[id(b)].get(cid))]  # fmt: skip
            if got:  # the latest send's answer, holding what each send before it reported it cost
                got[-1].usage = functools.reduce(added, [r.usage for r in got[:-1]], got[-1].usage)
                replies[cid] = got[-1]
        return replies

    async def _submit(self, group: list[bytes]) -> Submitted:
        """Upload and create one batch, saving each id as it exists (the lines, maybe with secrets, are not)."""
        name = f"requests-{len(self.batches) + 1:03d}.ids"
        ids = [str(json.loads(line)["custom_id"]) for line in group]
        with replacing(self.folder / name) as out:  # never into a FIFO or through a link left there
            out.write(("\n".join(ids) + "\n").encode("utf-8"))
        self.batches.append(batch := Submitted(f"batch/{name}", len(group), key=os.urandom(8).hex()))
        self._save()
        batch.file_id = await self.api.upload(b"".join(group), name.replace(".ids", ".jsonl"))
        self._save()
        await self._create(batch, resumed=False)
        return batch

    async def _create(self, batch: Submitted, resumed: bool = True) -> None:
        """Create the batch from its file; a resumed one is first looked for among the server's batches (its
        file gone from the server, it is lost: its requests are sent again)."""
        assert batch.file_id is not None
        found = await self.api.find(batch.file_id) if resumed else None
        if found is None and resumed and not await self.api.has_file(batch.file_id):
            print(f"note: the server no longer has {batch.file_id}, the input file of a batch not made before the "
                  "last stop: its requests go in a new batch", file=sys.stderr)  # fmt: skip
            batch.status, batch.collected = LOST, True
            self._save()
            return
        if found is None:
            found = await self.api.create(batch.file_id, self.mode, {"coinflip_run": self.folder.parent.name})
        batch.batch_id, batch.status = str(found["id"]), str(found.get("status") or "validating")
        self._save()
        log.info("batch %s created from %s (%d requests)", batch.batch_id, batch.file_id, batch.count)

    async def _poll(self, batches: list[Submitted]) -> None:
        """Poll every open batch until it ends; an unknown status for --patience seconds ends the run."""
        strange: dict[str, float] = {}
        while True:
            for batch in batches:
                if batch.batch_id is None and not batch.collected:
                    await self._create(batch)
                bid = str(batch.batch_id)
                if not batch.collected and (batch.status not in ENDED or bid not in self.info):
                    found = self.info[bid] = await self.api.retrieve(bid)
                    batch.status = str(found.get("status"))
                    if batch.status in STATUSES:
                        strange.pop(bid, None)
                    elif time.monotonic() - strange.setdefault(bid, time.monotonic()) > self.config.patience:
                        raise EndpointBroken(
                            f"batch {batch.batch_id}: its status {repr(found.get('status'))[:40]} is none the Batch "
                            f"API has, for {self.config.patience:g} s (--patience); the batch is saved"
                        )
            self._save()
            if all(b.collected or b.status in ENDED for b in batches):
                return
            await asyncio.sleep(self.config.batch_poll_s)

    async def _collect(self, batch: Submitted, wanted: set[str]) -> dict[str, Reply]:
        """Download the batch's results once, and read the answers for `wanted` (missing: an error why)."""
        info = self.info.get(str(batch.batch_id), {})
        paths = result_files(self.folder, batch)
        if not batch.collected:
            batch.turnaround_s = turnaround(info)  # a resume reads the answers without the server's word
            for key, path in paths.items():
                file_id = info.get(f"{key}_file_id")
                if isinstance(file_id, str) and file_id and not await self.api.download(file_id, path):
                    log.warning("batch %s: its %s file is gone from the server", batch.batch_id, key)
            batch.collected = True
            self._save()
        wanted &= set(batch_ids(self.folder, batch))
        found = downloaded(self.folder, batch)
        replies, counts = read_answers(found, wanted, self.mode, self.cap, self.api.redact)
        missing = f"the batch ended {batch.status} before this request ran"
        if batch.batch_id is None:
            missing = f"the server no longer has {batch.file_id}, the batch's input file"
        elif batch.status == LOST:
            missing = f"the server no longer knows batch {batch.batch_id}"
        elif batch.status == "failed":
            missing = f"the batch failed: {batch_errors(info)}"
        out = {}
        for cid in wanted:
            reply = replies.get(cid) or Reply(None, error=self.api.redact(missing))
            for choice in (reply, *reply.more):
                choice.latency_s, choice.source = batch.turnaround_s, batch.key or None
            out[cid] = reply
        failed = sum(r.error is not None for r in out.values())
        log.info("batch %s ended %s: %d answers, %d failed; %d unreadable lines", batch.batch_id, batch.status,
                 len(out) - failed, failed, counts["unreadable"])  # fmt: skip
        return out

    async def aclose(self) -> None:
        going = [task for task in self.rounds if not task.done()]
        await super().aclose()
        running = [str(b.batch_id) for b in self.batches if b.batch_id and b.status not in ENDED]
        if going and running:
            print(f"note: batches still running at the server, not cancelled: {', '.join(running)}; "
                  "resume the run to collect them", file=sys.stderr)  # fmt: skip
        if self.refused:
            print(f"note: a rate limit (429) refused {self.refused} request(s) for the whole --patience "
                  f"({self.config.patience:g} s); they stay owed", file=sys.stderr)  # fmt: skip
        await self.api.__aexit__()
        if self.online is not None:
            await self.online.aclose()
