"""The Batch API on the test server: `/v1/files` and `/v1/batches`, shaped as OpenAI serves them.

A batch answers each line of its input file through the server's own chat route, so a batch
run gets exactly the answers an online run gets. It stays `in_progress` for `delay` seconds
after it is created (its `request_counts.completed` growing with the time), then the lines run
and the batch ends, as a real one does, in one of:
- `completed`: output file (status 200 lines) and error file (lines that failed);
- `expired` (the first `expire` batches): only the first half of the lines answered; the rest
  are in the error file with code `batch_expired`;
- `failed` (the first `fail_batches` batches): nothing ran (a validation error);
- `cancelled` (after POST .../cancel): the lines done by then answered, the rest not.
`fail_every` k makes every k-th line of a batch fail with a 500 the first time its custom_id
is seen, so a second pass completes it. `created` counts the batches created, for tests that
must see exactly one. `hold` ("upload" or "create") holds that call unanswered (the upload
before its file is kept, the creation after its batch is made) until the test clears it, and sets
`reached` when it does: a test kills the client there. `listing` False: no GET /v1/batches (405).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

Response = tuple[int, bytes, dict[str, str]]
Chat = Callable[[dict[str, str], bytes, float, bool], Awaitable[Any]]
ENDPOINTS = ("/v1/chat/completions", "/v1/completions")
ENDED = ("completed", "expired", "failed", "cancelled")


@dataclass
class BatchStore:
    """The server's files and batches, and the settings that shape how batches end."""

    delay: float = 0.0  # seconds a batch stays in progress
    expire: int = 0  # the first N batches expire with half their lines answered
    fail_batches: int = 0  # the first N batches fail validation (nothing runs)
    fail_every: int = 0  # every k-th line fails once (500 in the error file)
    files: dict[str, tuple[str, bytes]] = field(default_factory=dict)  # id -> (purpose, content)
    batches: dict[str, dict[str, Any]] = field(default_factory=dict)
    created: int = 0
    polls: int = 0
    seen_ids: Counter[str] = field(default_factory=Counter)  # how often each custom_id ran
    hold: str = ""  # "upload" or "create": that call waits, unanswered, while this stays so
    reached: threading.Event = field(default_factory=threading.Event)  # set when a call is held
    listing: bool = True  # GET /v1/batches (the list) is served
    _ids: Any = field(default_factory=itertools.count)

    def new_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids):06d}"


def _json(status: int, payload: Any) -> Response:
    return status, json.dumps(payload).encode(), {}


def _error(status: int, message: str) -> Response:
    return _json(status, {"error": {"message": message, "type": "invalid_request_error"}})


class BatchRoutes:
    """Answers the file and batch routes; `chat` is the server's chat route (headers, body, arrived, chat)."""

    def __init__(self, store: BatchStore, chat: Chat) -> None:
        self.store = store
        self.chat = chat

    async def __call__(self, method: str, path: str, headers: dict[str, str], body: bytes) -> Response:
        parts = path.rstrip("/").split("/")
        tail = parts[parts.index("v1") + 1 :] if "v1" in parts else parts[1:]
        if tail == ["files"] and method == "POST":
            await self.held("upload")
        if tail[:1] == ["files"]:
            return self.files(method, tail[1:], headers, body)
        if tail == ["batches"] and method == "GET" and not self.store.listing:
            return _error(405, "Method Not Allowed")
        if tail[:1] == ["batches"]:
            answer = await self.batches(method, tail[1:], body, headers.get("authorization", ""))
            if tail == ["batches"] and method == "POST":
                await self.held("create")
            return answer
        return _error(404, f"no route {method} {path}")

    async def held(self, step: str) -> None:
        """Wait here while the test holds this step (it kills the client meanwhile)."""
        while self.store.hold == step:
            self.store.reached.set()
            await asyncio.sleep(0.01)

    def files(self, method: str, rest: list[str], headers: dict[str, str], body: bytes) -> Response:
        store = self.store
        if method == "POST" and not rest:
            form = _multipart(headers.get("content-type", ""), body)
            if form.get("purpose") != b"batch" or "file" not in form:
                return _error(400, "a batch file needs purpose=batch and a file part")
            file_id = store.new_id("file-")
            store.files[file_id] = ("batch", form["file"])
            return _json(200, _file_object(file_id, "batch", form["file"]))
        if not rest or rest[0] not in store.files:
            return _error(404, f"no such file: {rest[0] if rest else ''}")
        purpose, content = store.files[rest[0]]
        if method == "GET" and rest[1:] == ["content"]:
            return 200, content, {}
        if method == "GET" and len(rest) == 1:
            return _json(200, _file_object(rest[0], purpose, content))
        return _error(404, "no such file route")

    async def batches(self, method: str, rest: list[str], raw: bytes, auth: str) -> Response:
        store = self.store
        if method == "POST" and not rest:
            return self.create(json.loads(raw or b"{}"), auth)
        if method == "GET" and not rest:
            listed = sorted(store.batches.values(), key=lambda b: b["id"], reverse=True)
            return _json(200, {"object": "list", "data": [shown(b) for b in listed], "has_more": False})
        batch = store.batches.get(rest[0]) if rest else None
        if batch is None:
            return _error(404, "no such batch")
        if method == "GET" and len(rest) == 1:
            store.polls += 1
            await self.advance(batch)
            return _json(200, shown(batch))
        if method == "POST" and rest[1:] == ["cancel"]:
            if batch["status"] not in ENDED:
                batch["status"] = "cancelling"
                batch["cancelling_at"] = int(time.time())
            return _json(200, shown(batch))
        return _error(404, "no such batch route")

    def create(self, request: dict[str, Any], auth: str) -> Response:
        store = self.store
        file_id = request.get("input_file_id")
        if file_id not in store.files:
            return _error(400, f"input_file_id {file_id!r} does not exist")
        if request.get("endpoint") not in ENDPOINTS or request.get("completion_window") != "24h":
            return _error(400, "endpoint must be /v1/chat/completions or /v1/completions, completion_window 24h")
        lines = [line for line in store.files[file_id][1].splitlines() if line.strip()]
        store.created += 1
        batch = {
            "id": store.new_id("batch_"),
            "object": "batch",
            "endpoint": request["endpoint"],
            "errors": None,
            "input_file_id": file_id,
            "completion_window": "24h",
            "status": "in_progress",
            "output_file_id": None,
            "error_file_id": None,
            "created_at": int(time.time()),
            "in_progress_at": int(time.time()),
            "completed_at": None,
            "request_counts": {"total": len(lines), "completed": 0, "failed": 0},
            "metadata": request.get("metadata") or {},
            "_started": time.monotonic(),
            "_auth": auth,
            "_number": store.created,
        }
        store.batches[batch["id"]] = batch
        return _json(200, shown(batch))

    async def advance(self, batch: dict[str, Any]) -> None:
        """Move the batch on by the clock; at its end, run its lines and write its files."""
        if batch["status"] in ENDED:
            return
        store = self.store
        total = batch["request_counts"]["total"]
        share = 1.0 if not self.store.delay else (time.monotonic() - batch["_started"]) / store.delay
        if batch["status"] == "cancelling":
            await self.finish(batch, "cancelled", int(total * min(share, 1.0)))
        elif batch["_number"] <= store.fail_batches:
            batch.update(status="failed", failed_at=int(time.time()))
            batch["errors"] = {"object": "list", "data": [{"code": "invalid_request", "message": "refused (test)"}]}
        elif share < 1.0:
            batch["request_counts"]["completed"] = int(total * share)
        elif batch["_number"] <= store.expire:
            await self.finish(batch, "expired", total // 2)
        else:
            await self.finish(batch, "completed", total)

    async def finish(self, batch: dict[str, Any], status: str, done: int) -> None:
        """Answer the first `done` lines; the rest (an expired or cancelled batch) did not run."""
        store = self.store
        lines = [json.loads(line) for line in store.files[batch["input_file_id"]][1].splitlines() if line.strip()]
        answers = await asyncio.gather(*(self.answer(i, line, batch["_auth"]) for i, line in enumerate(lines[:done])))
        output = [a for ok, a in answers if ok]
        errors = [a for ok, a in answers if not ok]
        code = "batch_expired" if status == "expired" else "batch_cancelled"
        for line in lines[done:]:
            message = "This request could not be executed before the completion window expired."
            errors.append(_line(line["custom_id"], None, {"code": code, "message": message}))
        for kind, found in (("output_file_id", output), ("error_file_id", errors)):
            if found:
                file_id = store.new_id("file-")
                store.files[file_id] = ("batch_output", b"".join(json.dumps(x).encode() + b"\n" for x in found))
                batch[kind] = file_id
        batch["request_counts"] = {"total": len(lines), "completed": len(output), "failed": len(errors)}
        batch["status"] = status
        batch[f"{status}_at"] = int(time.time())

    async def answer(self, index: int, line: dict[str, Any], auth: str) -> tuple[bool, dict[str, Any]]:
        store = self.store
        custom_id = str(line.get("custom_id"))
        store.seen_ids[custom_id] += 1
        if store.fail_every and index % store.fail_every == 0 and store.seen_ids[custom_id] == 1:
            body = {"error": {"message": "internal error (test)", "type": "server_error"}}
            return False, _line(custom_id, {"status_code": 500, "request_id": "req_x", "body": body}, None)
        raw = json.dumps(line.get("body") or {}).encode()
        found = await self.chat(
            {"authorization": auth}, raw, asyncio.get_running_loop().time(), line.get("url") == ENDPOINTS[0]
        )
        status, payload = (found[0], found[1]) if isinstance(found, tuple) else (500, b'{"error": "no answer"}')
        response = {"status_code": status, "request_id": "req_x", "body": json.loads(payload)}
        return status == 200, _line(custom_id, response, None)


def shown(batch: dict[str, Any]) -> dict[str, Any]:
    """A batch as the API shows it (without the server's own bookkeeping)."""
    return {k: v for k, v in batch.items() if not k.startswith("_")}


def _line(custom_id: str, response: dict[str, Any] | None, error: dict[str, Any] | None) -> dict[str, Any]:
    return {"id": f"batch_req_{custom_id}", "custom_id": custom_id, "response": response, "error": error}


def _file_object(file_id: str, purpose: str, content: bytes) -> dict[str, Any]:
    return {
        "id": file_id,
        "object": "file",
        "bytes": len(content),
        "created_at": int(time.time()),
        "filename": "batch.jsonl",
        "purpose": purpose,
    }


def _multipart(content_type: str, body: bytes) -> dict[str, bytes]:
    """The parts of a multipart/form-data body, by name (just what an upload needs)."""
    found = re.search(r'boundary="?([^";]+)"?', content_type)
    if not found:
        return {}
    parts: dict[str, bytes] = {}
    for chunk in body.split(b"--" + found[1].encode())[1:]:
        if chunk.startswith(b"--"):
            break
        head, _, content = chunk.partition(b"\r\n\r\n")
        name = re.search(rb'name="([^"]*)"', head)
        if name:
            parts[name[1].decode()] = content[:-2] if content.endswith(b"\r\n") else content
    return parts
