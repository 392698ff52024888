"""The test server's Batch API (`/v1/files`, `/v1/batches`, as OpenAI serves them): each line runs through the
chat route once its batch ends (after `delay` seconds, or as `BatchStore`'s settings say)."""

from __future__ import annotations

import asyncio
import email.parser
import email.policy
import itertools
import json
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from .limited import Response, error_json, reply_json

Chat = Callable[[dict[str, str], bytes, float, bool], Awaitable[Any]]
ENDPOINTS = ("/v1/chat/completions", "/v1/completions")
ENDED = ("completed", "expired", "failed", "cancelled")


@dataclass
class BatchStore:
    """The server's files and batches, the settings that shape how batches end, and their routes."""

    delay: float = 0.0  # seconds a batch stays in progress
    expire: int = 0  # the first N batches expire with half their lines answered
    fail_batches: int = 0  # the first N batches fail validation (nothing runs)
    fail_every: int = 0  # every k-th line fails with a 500 the first time its custom_id runs
    files: dict[str, tuple[str, bytes]] = field(default_factory=dict)  # id -> (purpose, content)
    batches: dict[str, dict[str, Any]] = field(default_factory=dict)
    created: int = 0
    polls: int = 0
    seen_ids: Counter[str] = field(default_factory=Counter)  # how often each custom_id ran
    hold: str = ""  # "upload" or "create": that call waits, unanswered, while this stays so (a test kills the client)
    reached: threading.Event = field(default_factory=threading.Event)  # set when a call is held
    listing: bool = True  # GET /v1/batches (the list) is served, else 405
    _ids: Any = field(default_factory=itertools.count)
    chat: Chat | None = None  # the server's chat route, which answers each line

    def new_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids):06d}"

    def keep(self, purpose: str, content: bytes) -> str:
        file_id = self.new_id("file-")
        self.files[file_id] = (purpose, content)
        return file_id

    async def __call__(self, method: str, path: str, headers: dict[str, str], body: bytes, query: str = "") -> Response:
        parts = path.rstrip("/").split("/")
        match method, parts[parts.index("v1") + 1 :] if "v1" in parts else parts[1:]:
            case "POST", ["files"]:
                await self.held("upload")
                return self.upload(headers.get("content-type", ""), body)
            case "GET", ["files", file_id, *rest] if file_id in self.files and rest in ([], ["content"]):
                purpose, content = self.files[file_id]
                return (200, content, {}) if rest else reply_json(200, _file_object(file_id, purpose, content))
            case "POST", ["batches"]:
                answer = self.create(json.loads(body or b"{}"), headers.get("authorization", ""))
                await self.held("create")
                return answer
            case "GET", ["batches"]:
                if not self.listing:
                    return error_json(405, "Method Not Allowed")
                return reply_json(200, self.page(dict(parse_qsl(query))))
            case "GET", ["batches", batch_id] if batch_id in self.batches:
                self.polls += 1
                await self.advance(self.batches[batch_id])
                return reply_json(200, shown(self.batches[batch_id]))
            case "POST", ["batches", batch_id, "cancel"] if batch_id in self.batches:
                batch = self.batches[batch_id]
                if batch["status"] not in ENDED:
                    batch.update(status="cancelling", cancelling_at=int(time.time()))
                return reply_json(200, shown(batch))
        return error_json(404, f"no such file, batch or route: {method} {path}")

    def page(self, params: dict[str, str]) -> dict[str, Any]:
        """A page of the batches, newest first, as OpenAI lists them: `limit` (20 unless told) after the id `after`."""
        listed = sorted(self.batches, reverse=True)
        start = listed.index(params["after"]) + 1 if params.get("after") in listed else 0
        ids = listed[start : start + int(params.get("limit") or 20)]
        ends = {"first_id": ids[0], "last_id": ids[-1]} if ids else {}
        more = start + len(ids) < len(listed)
        return {"object": "list", "data": [shown(self.batches[i]) for i in ids], **ends, "has_more": more}

    async def held(self, step: str) -> None:
        """The test holds this step: it kills the client meanwhile."""
        while self.hold == step:
            self.reached.set()
            await asyncio.sleep(0.01)

    def upload(self, content_type: str, body: bytes) -> Response:
        head = f"Content-Type: {content_type}\r\n\r\n".encode()
        form = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body).iter_parts()
        parts = {p.get_param("name", header="content-disposition"): p.get_payload(decode=True) for p in form}
        content = parts.get("file")
        if parts.get("purpose") != b"batch" or not isinstance(content, bytes):
            return error_json(400, "a batch file needs purpose=batch and a file part")
        return reply_json(200, _file_object(self.keep("batch", content), "batch", content))

    def create(self, request: dict[str, Any], auth: str) -> Response:
        file_id = request.get("input_file_id")
        if file_id not in self.files:
            return error_json(400, f"input_file_id {file_id!r} does not exist")
        if request.get("endpoint") not in ENDPOINTS or request.get("completion_window") != "24h":
            return error_json(400, "endpoint must be /v1/chat/completions or /v1/completions, completion_window 24h")
        self.created += 1
        now = int(time.time())
        total = sum(1 for line in self.files[file_id][1].splitlines() if line.strip())
        batch = {
            **request,  # its input_file_id, endpoint, completion_window and metadata, as checked above
            "id": self.new_id("batch_"),
            "object": "batch",
            "status": "in_progress",
            **dict.fromkeys(("errors", "output_file_id", "error_file_id", "completed_at")),
            "created_at": now,
            "in_progress_at": now,
            "request_counts": {"total": total, "completed": 0, "failed": 0},
            "_started": time.monotonic(),
            "_auth": auth,
            "_number": self.created,
        }
        self.batches[batch["id"]] = batch
        return reply_json(200, shown(batch))

    async def advance(self, batch: dict[str, Any]) -> None:
        """Move the batch on by the clock; at its end, run its lines and write its files."""
        if batch["status"] in ENDED:
            return
        total = batch["request_counts"]["total"]
        share = (time.monotonic() - batch["_started"]) / self.delay if self.delay else 1.0
        if batch["status"] == "cancelling":
            await self.finish(batch, "cancelled", int(total * min(share, 1.0)))
        elif batch["_number"] <= self.fail_batches:
            batch.update(status="failed", failed_at=int(time.time()))
            batch["errors"] = {"object": "list", "data": [{"code": "invalid_request", "message": "refused (test)"}]}
        elif share < 1.0:
            batch["request_counts"]["completed"] = int(total * share)
        else:
            expired = batch["_number"] <= self.expire
            await self.finish(batch, "expired" if expired else "completed", total // 2 if expired else total)

    async def finish(self, batch: dict[str, Any], status: str, done: int) -> None:
        """Answer the first `done` lines; the rest (an expired or cancelled batch) did not run."""
        lines = _lines(self.files[batch["input_file_id"]][1])
        answers = await asyncio.gather(*(self.answer(i, line, batch["_auth"]) for i, line in enumerate(lines[:done])))
        output = [a for ok, a in answers if ok]
        errors = [a for ok, a in answers if not ok]
        message = "This request could not be executed before the completion window expired."
        code = "batch_expired" if status == "expired" else "batch_cancelled"
        errors += [_line(line["custom_id"], None, {"code": code, "message": message}) for line in lines[done:]]
        for kind, found in (("output_file_id", output), ("error_file_id", errors)):
            if found:
                batch[kind] = self.keep("batch_output", b"".join(json.dumps(x).encode() + b"\n" for x in found))
        batch["request_counts"] = {"total": len(lines), "completed": len(output), "failed": len(errors)}
        batch.update({"status": status, f"{status}_at": int(time.time())})

    async def answer(self, index: int, line: dict[str, Any], auth: str) -> tuple[bool, dict[str, Any]]:
        custom_id = str(line.get("custom_id"))
        self.seen_ids[custom_id] += 1
        found: Any = (500, b'{"error": {"message": "internal error (test)", "type": "server_error"}}')
        if not (self.fail_every and index % self.fail_every == 0 and self.seen_ids[custom_id] == 1):
            assert self.chat is not None  # set by the server
            raw, now = json.dumps(line.get("body") or {}).encode(), asyncio.get_running_loop().time()
            found = await self.chat({"authorization": auth}, raw, now, line.get("url") == ENDPOINTS[0])
        status, payload = (found[0], found[1]) if isinstance(found, tuple) else (500, b'{"error": "no answer"}')
        response = {"status_code": status, "request_id": "req_x", "body": json.loads(payload)}
        return status == 200, _line(custom_id, response, None)


def shown(batch: dict[str, Any]) -> dict[str, Any]:
    """A batch as the API shows it (without the server's own bookkeeping)."""
    return {k: v for k, v in batch.items() if not k.startswith("_")}


def _lines(content: bytes) -> list[Any]:
    return [json.loads(line) for line in content.splitlines() if line.strip()]


def _line(custom_id: str, response: dict[str, Any] | None, error: dict[str, Any] | None) -> dict[str, Any]:
    return {"id": f"batch_req_{custom_id}", "custom_id": custom_id, "response": response, "error": error}


def _file_object(file_id: str, purpose: str, content: bytes) -> dict[str, Any]:
    about = {"created_at": int(time.time()), "filename": "batch.jsonl", "purpose": purpose}
    return {"id": file_id, "object": "file", "bytes": len(content), **about}
