"""Batch mode elsewhere, as model backends: `RequestFile` writes the lines `vllm run-batch` reads (--batch-write),
`ResultsFile` reads the lines it writes (--batch-results); nothing is sent from here."""

from __future__ import annotations

import asyncio
import hashlib
import json
import shlex
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from .._terminal import one_line
from ..config import TaskConfig
from ..errors import ConfigError, storage_error
from ..secrets import secret_keys
from ._redact import Redactor
from ._request import request_body, split_generation
from .base import Reply, Request, Unanswered
from .batch_api import CONFLICT, joined, read_lines, request_line
from .predict import custom_id


class Bodies:
    """A request's body as a request file holds it, and its custom_id there: its key in the run and a hash of the
    body, so an answer to another body (another run's of the same model, or this run's before its settings
    changed) is never taken for this request's."""

    def __init__(self, config: TaskConfig, generation: dict[str, Any]) -> None:
        self.model, self.mode = str(config.model), config.api_mode
        self.generation, self.extra_body = split_generation(generation)

    def body(self, request: Request) -> dict[str, Any]:
        return request_body(self.model, self.mode, self.generation, request, False, self.extra_body)

    def key(self, request: Request, body: dict[str, Any]) -> str:
        text = json.dumps(body, sort_keys=True, ensure_ascii=True).encode()
        return f"{custom_id(request)}.{hashlib.sha256(text).hexdigest()[:12]}"


class RequestFile:
    """--batch-write: each owed request, as it comes, a line of a file for `vllm run-batch` (`hint`: how to score
    the answers; `kept`: what a failure keeps); each stays owed, nothing sent, spent or reported (`outcome` instead)."""

    def __init__(self, config: TaskConfig, generation: dict[str, Any], hint: str, kept: str) -> None:
        if secret := secret_keys(generation.get("extra_body")):  # what the saved config masks, a file would carry
            raise ConfigError(f"generation_config extra_body {secret} look like secrets (every text is, but under the "
                              "keys of config.PLAIN_KEYS), which a request file would carry")  # fmt: skip
        self.path, self.hint, self.kept = Path(str(config.batch_write)).expanduser(), hint, kept
        self.model, self.bodies = config.model, Bodies(config, generation)
        self.count, self.closed = 0, False
        self.outcome: dict[str, Any] | None = None
        try:
            self.handle = self.path.open("wb")
        except OSError as exc:
            raise storage_error(self.path, exc, self.kept) from None

    async def complete(self, request: Request) -> Reply:
        body = self.bodies.body(request)
        try:
            self.handle.write(request_line(self.bodies.key(request, body), self.bodies.mode, body))
        except OSError as exc:
            raise storage_error(self.path, exc, self.kept) from None
        self.count += 1
        raise Unanswered()  # it stays owed: the file's answers score it (--batch-results)

    async def end(self) -> None:
        """All are in (none too): the file closed, and what to do with it, unless a stop came as it was closed."""
        await self.aclose()
        await asyncio.sleep(0)  # a stop that came as it was written ends the run here: its line the only one
        path, model = shlex.quote(str(self.path)), shlex.quote(str(self.model))  # commands to paste: quoted
        said = f"wrote {self.count} requests to {path}; run them, e.g. vllm run-batch -i {path} -o results.jsonl"
        said += f" --model {model}, then score them with: {self.hint}"
        print(one_line(said if self.count else f"wrote no requests to {path}: the run owes none"), file=sys.stderr)
        self.outcome = {"complete": self.count == 0, "batch_written": {"path": str(self.path), "requests": self.count}}

    async def aclose(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                self.handle.close()  # its buffer written
            except OSError as exc:
                raise storage_error(self.path, exc, self.kept) from None


class ResultsFile:
    """--batch-results: answers from `vllm run-batch -o FILE`, read at the first request; one it lacks stays owed."""

    def __init__(self, path: Path, bodies: Bodies, cap: int, redact: Redactor) -> None:
        self.name, self.path, self.bodies, self.cap, self.redact = str(path), path, bodies, cap, redact
        self.replies: dict[str, list[tuple[str, Reply]]] | None = None  # each custom_id's lines not asked for yet
        self.keys: dict[str, list[str]] = {}  # the custom_ids of each request's key (one per body answered)
        self.counts: Counter[str] = Counter()
        self.lines: Counter[str] = Counter()  # the file's lines for each custom_id

    async def complete(self, request: Request) -> Reply:
        if self.replies is None:
            try:  # a plain file only: /dev/zero, /dev/urandom or a FIFO is UnreadableFile (exit 2)
                self.replies, read = read_lines([self.path], None, self.bodies.mode, self.cap, self.lines)
                self.counts["unreadable"] = read["unreadable"]  # conflicts: among the answers asked for only
            except OSError as exc:
                raise ConfigError(f"--batch-results {self.path}: cannot read ({exc.strerror})") from None
            for cid in self.replies:
                self.keys.setdefault(cid.partition(".")[0], []).append(cid)
        recorded = {key for source in request.seen | request.filled for key in source.split()}
        mine = self.bodies.key(request, self.bodies.body(request))  # (files written before keys had bodies: the id)
        cid = mine if mine in self.replies else custom_id(request)
        found = self.replies.pop(cid, [])
        for other in self.keys.get(custom_id(request), []):  # an answer to another body: another run's
            self.counts["foreign"] += len(self.replies.pop(other, []))
        lines = [(key, r) for key, r in found if key not in recorded]
        self.counts["again"] += len(found) - len(lines)
        if not lines:  # none, or only lines a row holds already (their usage counted, their choices kept)
            self.counts["owed"] += 1
            raise Unanswered()
        reply = self.redact.reply(joined(cid, [r for _, r in lines], Counter()))
        self.counts["read"] += 1
        for choice in (reply, *reply.more):
            choice.latency_s = None  # answered elsewhere, at a time the file does not say
            choice.source = " ".join(key for key, _ in lines)  # never read again for its rows
        self.counts["failed"] += reply.error is not None
        self.counts["conflicts"] += CONFLICT in (reply.error or "")
        return reply

    async def end(self) -> None:
        """All are in (no stop, no error: the counts are whole), what the file held."""
        c = self.counts
        failed = f" ({c['failed']} of them failed here)" if c["failed"] else ""  # a failed line is asked again
        if self.replies is not None:  # it was read
            print(f"note: {c['read']} answers read from {self.path} ({c['failed']} failed, {c['conflicts']} with "
                  f"two answers); {sum(self.lines[cid] for cid in self.replies)} lines for requests not owed now, "
                  f"{c['unreadable']} unreadable, {c['again']} recorded before (read once only), {c['foreign']} "
                  "answering other prompts or settings under an owed request's id (another run's: not recorded); "
                  f"{c['owed'] + c['failed']} requests still owed{failed} (write them with --batch-write)",
                  file=sys.stderr)  # fmt: skip

    async def aclose(self) -> None:
        return None
