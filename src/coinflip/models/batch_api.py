"""The OpenAI Batch API from the client's side: request lines, result lines read through the online `parse_body`,
and the few calls a batch needs (429, 5xx and dropped connections retried)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import random
import re
import sys
import tempfile
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import quote

import aiohttp

from .._files import open_regular, replacing
from .._terminal import one_line
from ..config.declare import ENDPOINTS
from ..errors import EndpointBroken, FatalAPIError, storage_error
from ..records import escape_line_breaks
from ..secrets import shown_url
from ._http import DEFAULT_MAX_BODY, ConnectionPool, merge_headers
from ._redact import Redactor
from ._replies import BadReply, added, dicts, load_json, parse_body, server_message, usage
from ._request import endpoint_url
from ._wire import ReplyTooLarge, UnknownCoding, check_framing, read_at_most, tls_like, undecoded
from .base import Reply
from .openai_api import retry_after

MAX_REQUESTS = 50_000  # the API's limits on one batch
MAX_BYTES = 200 * 1024 * 1024
URLS = {mode: "/v1" + path for mode, path in ENDPOINTS.items()}  # a line's url, a batch's endpoint
LOST = "lost"  # not a status the API sends: the server no longer knows the batch
ENDED = ("completed", "expired", "failed", "cancelled", LOST)
CALL_RETRIES = 6
CONFLICT = "neither is kept (a conflict)"
LIST_PAGES = 50  # pages of GET /batches read to find a batch made before a stop (100 batches a page)
TURNAROUND_MAX = 1e9  # seconds from a batch's creation to its end that a server's dates may say (31 years)


class _Gone(Exception):
    """A 404 (or another status in `gone`) where the caller expects one."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class _Unwritable(Exception):
    """Our disk refused the download (full, read-only): no call again will help, unlike the server's failures."""


def request_line(custom_id: str, mode: str, body: dict[str, Any]) -> bytes:
    line = {"custom_id": custom_id, "method": "POST", "url": URLS[mode], "body": body}
    try:
        return escape_line_breaks(json.dumps(line, ensure_ascii=False).encode()) + b"\n"
    except UnicodeEncodeError:  # half a surrogate pair (a server's reply, sent back to force an answer)
        return json.dumps(line).encode() + b"\n"  # JSON's escape for it, as the online request sends


def split_lines(
    lines: Iterable[bytes], max_requests: int | None = None, max_bytes: int | None = None
) -> Iterator[list[bytes]]:
    """Lines in groups that each fit one batch (by default, the API's limits)."""
    max_requests, max_bytes = max_requests or MAX_REQUESTS, max_bytes or MAX_BYTES
    group: list[bytes] = []
    size = 0
    for line in lines:
        if group and (len(group) >= max_requests or size + len(line) > max_bytes):
            yield group
            group, size = [], 0
        group.append(line)
        size += len(line)
    if group:
        yield group


_CUSTOM_ID = re.compile(rb'"custom_id"\s*:\s*"([A-Za-z0-9_.:-]{1,200})"')


def read_result(raw: bytes, mode: str) -> tuple[str, Reply] | None:
    """A result line as (custom_id, Reply), a failed or unreadable one with its error; None: no result line."""
    try:
        data = load_json(raw)
    except BadReply as exc:
        found = _CUSTOM_ID.search(raw[:4096])
        return None if found is None else (found[1].decode(), Reply(None, error=f"its result line: {exc}"))
    if not (isinstance(data, dict) and isinstance(data.get("custom_id"), str) and data.keys() & {"response", "error"}):
        return None  # a request line too (its custom_id, no response nor error)
    cid, response, error = data["custom_id"], data.get("response"), data.get("error")
    status, body = (response.get("status_code"), response.get("body")) if isinstance(response, dict) else (None, None)
    if isinstance(status, int) and 200 <= status < 300 and not error:
        try:
            reply = parse_body(json.dumps(body).encode(), mode)
        except BadReply as exc:  # billed still, for the usage it reports
            spent = usage(body.get("usage")) if isinstance(body, dict) else None
            return cid, Reply(None, error=str(exc), status=status, usage=spent, batch=spent is not None)
        for choice in (reply, *reply.more):
            choice.batch = True
        return cid, reply
    if isinstance(status, int):
        detail = server_message(json.dumps(body).encode()) if body is not None else ""
        return cid, Reply(None, error=f"HTTP {status}{': ' + detail if detail else ''}", status=status)
    detail = server_message(json.dumps({"error": error}).encode()) if error else "no response"
    code = error.get("code") if isinstance(error, dict) and isinstance(error.get("code"), str) else "batch"
    return cid, Reply(None, error=one_line(f"{code}: {detail}"))


def turnaround(info: dict[str, Any]) -> float | None:
    """Seconds from the batch's creation to its end, as the server dates them (its answers' latency); None: no
    dates, or ones that cannot be (past TURNAROUND_MAX: in mixed units)."""
    start = info.get("created_at")
    ends = [info.get(f"{s}_at") for s in ENDED]
    end = max((e for e in ends if isinstance(e, int | float) and not isinstance(e, bool)), default=None)
    if isinstance(start, int | float) and not isinstance(start, bool) and end is not None:
        with contextlib.suppress(OverflowError):  # dates past any float (400 digits) tell nothing
            seconds = float(end - start)
            return seconds if 0 <= seconds <= TURNAROUND_MAX else None
    return None


def read_answers(
    paths: list[Path], wanted: set[str] | None, mode: str, cap: int, redact: Redactor
) -> tuple[dict[str, Reply], Counter[str]]:
    """The answers in a batch's result files (for `wanted` custom_ids, None: all), masked (two good ones: a conflict
    error), and counts of the conflicts and of the lines for other requests and the unreadable ones."""
    found, counts = read_lines(paths, wanted, mode, cap)
    return {cid: redact.reply(joined(cid, [r for _, r in each], counts)) for cid, each in found.items()}, counts


def read_lines(
    paths: list[Path], wanted: set[str] | None, mode: str, cap: int, lines: Counter[str] | None = None
) -> tuple[dict[str, list[tuple[str, Reply]]], Counter[str]]:
    """Each custom_id's result lines, in file order, each with its key (a hash of the line: the same line read again,
    from a file read again or two files put together, has the same key). With `lines` (a user's result file, whose
    lines it counts), a line given twice is one answer; a Batch API's output line twice was billed twice."""
    found: dict[str, list[tuple[str, Reply]]] = {}
    counts: Counter[str] = Counter()
    for path in paths:
        with open_regular(path) as handle:
            for raw in capped_lines(handle, cap):
                result = read_result(raw, mode)
                if result is None or (wanted is not None and result[0] not in wanted):
                    counts["unreadable" if result is None else "other"] += bool(raw.strip())
                    continue
                key = "line:" + hashlib.sha256(raw.rstrip(b"\r\n")).hexdigest()[:16]
                each = found.setdefault(result[0], [])
                if lines is None or all(key != seen for seen, _ in each):  # a file put in twice: once
                    each.append((key, result[1]))
                    if lines is not None:
                        lines[result[0]] += 1
    return found, counts


def joined(cid: str, replies: list[Reply], counts: Counter[str]) -> Reply:
    """One answer of a custom_id's lines: each line billed counts; two good ones are a conflict (an error)."""
    kept: Reply | None = None
    for reply in replies:
        before = kept
        if before is not None and before.error is None and reply.error is None:
            error = f"two answers for {cid} in the batch's results; {CONFLICT}"
            reply = Reply(None, error=error, usage=reply.usage, batch=True)
            counts["conflicts"] += 1
        elif before is not None and (reply.error is not None or CONFLICT in (before.error or "")):
            reply, before = before, reply  # the one kept
        reply.usage = added(reply.usage, before.usage if before else None)
        kept = reply
    assert kept is not None, "a custom_id without lines"
    return kept


def capped_lines(handle: BinaryIO, cap: int) -> Iterator[bytes]:
    """The lines of a result file, at most `cap` bytes held: a longer one becomes a short error line."""
    while line := handle.readline(cap + 1):
        if len(line) <= cap or line.endswith(b"\n"):
            yield line
            continue
        while (rest := handle.readline(1 << 20)) and not rest.endswith(b"\n"):
            pass
        found = _CUSTOM_ID.search(line[:4096])
        message = f"its result line is larger than the reply cap ({cap / 1048576:g} MB, --max-reply-mb); skipped"
        error = {"code": "too_large", "message": message}
        yield json.dumps({"custom_id": found[1].decode() if found else None, "error": error}).encode() + b"\n"


class BatchAPI:
    """Files and batches at one endpoint, as an async context manager; `max_body`: the most bytes read
    of an answer, an error's, or a result file's line."""

    def __init__(
        self, url: str, api_key: str | None, generation: dict[str, Any], timeout: float, secrets: list[str | None],
        max_body: int = DEFAULT_MAX_BODY, retries: int = CALL_RETRIES,
    ) -> None:  # fmt: skip
        chat, _, self.query = endpoint_url(url, "chat", generation.get("extra_query")).partition("?")
        self.base = chat.removesuffix(ENDPOINTS["chat"])  # the API's root: …/v1
        extra = {str(k): str(v) for k, v in (generation.get("extra_headers") or {}).items()}
        auth = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout, self.retries = timeout, retries
        self.pool = ConnectionPool(merge_headers({"User-Agent": "coinflip"}, auth, extra), timeout, max_body=max_body)
        proxy = self.pool.proxy_secrets(url)
        self.redact = Redactor([*secrets, *proxy], keys=[api_key, *proxy])

    async def __aenter__(self) -> BatchAPI:
        """A wrong endpoint fails here, in one line."""
        try:
            await self.pool.check(self._url("/files"))
            await self.pool.answers(self._url("/files"))
        except BaseException as exc:
            await self.pool.aclose()
            if isinstance(exc, FatalAPIError):  # a proxy's error may echo its credentials
                raise type(exc)(self.redact(str(exc))) from None
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.pool.aclose()

    def _url(self, path: str) -> str:
        return f"{self.base}{path}" + (f"?{self.query}" if self.query else "")

    async def upload(self, content: bytes, name: str) -> str:
        def form() -> Any:
            data = aiohttp.FormData()
            data.add_field("purpose", "batch")
            data.add_field("file", content, filename=name, content_type="application/jsonl")
            return data

        return str(self._id_of(await self._call("POST", "/files", form=form), "POST /files")["id"])

    async def create(self, file_id: str, mode: str, metadata: dict[str, str]) -> dict[str, Any]:
        """The batch made from `file_id`; a try that went unanswered may have made it, so it is looked for first."""
        body = {"input_file_id": file_id, "endpoint": URLS[mode], "completion_window": "24h", "metadata": metadata}
        made = functools.partial(self.find, file_id, "after POST /batches went unanswered")
        return self._id_of(await self._call("POST", "/batches", body=body, made=made), "POST /batches")

    async def retrieve(self, batch_id: str) -> dict[str, Any]:
        """The batch; one the server no longer knows (404) has status `lost`."""
        try:
            return await self._call("GET", f"/batches/{quote(batch_id, safe='')}", gone=(404,))
        except _Gone:
            return {"id": batch_id, "status": LOST}

    async def find(self, file_id: str, when: str = "before the last stop") -> dict[str, Any] | None:
        """A batch already made from this input file (a run killed while creating it), if any: the list's
        pages (newest first) are read up to LIST_PAGES, as many batches may have been made since."""
        params: dict[str, Any] = {"limit": 100}
        for _ in range(LIST_PAGES):
            try:
                listed = await self._call("GET", "/batches", params=params, gone=(404, 405))
            except _Gone as exc:
                print(f"note: cannot check for a batch made from {file_id} {when} ({exc}): "
                      "its requests go in a new batch", file=sys.stderr)  # fmt: skip
                return None
            data = dicts(listed.get("data"))  # the page's batches (not a list: none)
            for batch in data:
                if batch.get("input_file_id") == file_id:
                    return self._id_of(batch, "GET /batches")
            last = data[-1].get("id") if data else None
            if listed.get("has_more") is not True or not isinstance(last, str) or last == params.get("after"):
                return None
            params["after"] = last
        print(f"note: no batch made from {file_id} among the newest {LIST_PAGES * 100} at the server: "
              "its requests go in a new batch", file=sys.stderr)  # fmt: skip
        return None

    async def has_file(self, file_id: str) -> bool:
        """Whether the server still has this file (a 404: it dropped it; a 405: it does not show files, so it may)."""
        try:
            await self._call("GET", f"/files/{quote(file_id, safe='')}", gone=(404, 405))
        except _Gone as exc:
            return exc.status != 404
        return True

    async def download(self, file_id: str, dest: Path) -> bool:
        """A result file into `dest` (raw into a nameless file beside it), lines capped and masked; False when gone."""
        try:
            held = tempfile.TemporaryFile(dir=dest.parent)  # noqa: SIM115 - the with below closes it
        except OSError as exc:  # a full disk, a read-only folder: one line naming where, not a traceback
            raise storage_error(dest.parent, exc) from None
        with held as raw:
            try:
                await self._call("GET", f"/files/{quote(file_id, safe='')}/content", into=raw, gone=(404,))
            except _Gone:
                return False
            except _Unwritable as exc:
                raise storage_error(dest.parent, exc.args[0]) from None
            raw.seek(0)
            with replacing(dest) as out:
                for line in capped_lines(raw, self.pool.limits.max_body):
                    out.write(self.redact(line.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape"))
        return True

    def _id_of(self, found: dict[str, Any], call: str) -> dict[str, Any]:
        """What the server made, with its id checked: text, or the server is no Batch API."""
        server_id = found.get("id")
        if not isinstance(server_id, str) or server_id in ("", ".", ".."):
            shown = one_line(repr(found), 200)
            raise FatalAPIError(self.redact(f"{call} answered without an id ({shown}): is it a Batch API?"))
        return found

    async def _call(
        self, method: str, path: str, body: Any = None, form: Any = None, into: BinaryIO | None = None,
        gone: tuple[int, ...] = (), params: dict[str, Any] | None = None,
        made: Callable[[], Awaitable[dict[str, Any] | None]] | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """One call, retried on 429, 5xx and dropped connections; others are fatal (`gone`: _Gone). `made`: what
        a try that timed out, dropped or got a 5xx may have made, looked for before the next try (then returned)."""
        message, url = "", self._url(path)
        target = self.pool.target(url)  # its options: headers per request, proxy from the environment
        for attempt in range(self.retries + 1):
            wait = min(8.0, 0.25 * 2**attempt) * random.uniform(0.5, 1.5)
            unsure = True  # the server may have done what was asked, but for a 429
            try:
                data = form() if form is not None else None
                timeout = aiohttp.ClientTimeout(sock_connect=self.timeout, sock_read=self.timeout)  # no total: files
                async with self.pool.session.request(method, url, json=body, data=data, params=params, timeout=timeout,
                                                     allow_redirects=False, **target.options) as response:  # fmt: skip
                    self.pool.heard(target)  # an HTTP answer: the scheme is right
                    check_framing(response.headers)
                    if response.status < 300:
                        return await self._read(response, into, f"{method} {path}")
                    detail = await self._error_detail(response)
                    message = f"{method} {path} answered {response.status}{': ' + detail if detail else ''}"
                    if 300 <= response.status < 400:  # refused, as online: it would take a gateway's headers along
                        message += f" to {shown_url(response.headers.get('location', ''))}; give the final --api-url"
                    if response.status in gone:
                        raise _Gone(message, response.status)
                    if response.status == 404 and path in ("/files", "/batches"):
                        message += " - this server does not serve the Batch API: run without --batch, or write "
                        message += "the requests with --batch-write for vllm run-batch"
                    if response.status != 429 and response.status < 500:
                        raise FatalAPIError(self.redact(message))
                    wait = max(wait, retry_after(response.headers.get("retry-after")) or 0.0)
                    unsure = response.status != 429
            except (TimeoutError, aiohttp.ClientError, OSError, BadReply) as exc:
                coding = exc if isinstance(exc, UnknownCoding) else undecoded(exc)
                if coding is not None:  # the server would encode it so again
                    raise EndpointBroken(self.redact(f"the Batch API's answer to {method} {path}: {coding}")) from None
                message = f"{method} {path}: {type(exc).__name__}: {exc}".rstrip(": ")
                if tls_like(exc):  # a hang-up or a TLS record, a wrong scheme if no answer came before
                    wrong = await self.pool.wrong_scheme(target)
                    if wrong is not None:
                        raise wrong from None
            if attempt < self.retries:
                await asyncio.sleep(wait)
                if made is not None and unsure and (found := await made()) is not None:
                    return found
        raise EndpointBroken(self.redact(one_line(f"the Batch API did not answer: {message}")))

    async def _body(self, response: Any) -> bytes:
        """At most `max_body` bytes within --timeout (the session's timeouts bound only gaps: files)."""
        return await asyncio.wait_for(read_at_most(response.content, self.pool.limits.max_body), self.timeout)

    async def _error_detail(self, response: Any) -> str:
        """What an error answer says, from at most `max_body` bytes of it read within --timeout."""
        try:
            return server_message(await self._body(response))
        except ReplyTooLarge as exc:
            return str(exc)
        except TimeoutError:
            return f"its body did not end within {self.timeout:g} s"

    async def _read(self, response: Any, into: BinaryIO | None, call: str) -> dict[str, Any]:
        """A JSON answer (too large: EndpointBroken, no retry), or a file's content streamed to `into`."""
        if into is not None:
            into.seek(0)
            into.truncate()  # what an attempt before wrote
            async for chunk in response.content.iter_chunked(1 << 16):
                try:
                    into.write(chunk)
                except OSError as exc:
                    raise _Unwritable(exc) from None
            return {}
        try:
            raw = await self._body(response)
        except ReplyTooLarge as exc:
            raise EndpointBroken(self.redact(f"the Batch API's answer to {call}: {exc}")) from None
        found = load_json(raw)
        if not isinstance(found, dict):
            raise BadReply("the Batch API answered with something other than a JSON object")
        return found


def batch_errors(info: dict[str, Any]) -> str:
    """Why a batch failed, as the server says (its first three errors)."""
    errors = info.get("errors")
    data = errors.get("data") if isinstance(errors, dict) else None
    messages = [str(e.get("message")) for e in dicts(data)]
    return "; ".join(messages[:3]) or "no reason given"
