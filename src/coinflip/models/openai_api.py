"""OpenAI-compatible completions, many in flight: a refusal (429, 503/529) slows the `Limiter` and uses
none of --retries; other failures are retried with backoff, FATAL_STATUS ones fail the run."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import math
import random
import re
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import msgspec

from .._terminal import one_line
from ..config import KEY_AGAIN
from ..errors import EndpointBroken, EndpointError, FatalAPIError
from ..secrets import run_secrets, shown_url
from ._http import DEFAULT_MAX_BODY, ConnectionPool, Response, merge_headers
from ._redact import Redactor
from ._replies import BadReply, StreamReply, added, foreign_json, parse_body, server_message, usage_of
from ._request import endpoint_url, published_slots, redirect, request_body, split_generation, web_page
from ._wire import ReplyTooLarge, UnknownCoding
from .base import Reply, Request
from .limits import Limiter, Traffic

log = logging.getLogger("coinflip")

FATAL_STATUS = {
    400: ("bad request", "check --generation-config, --model and --api-url"),
    401: ("unauthorized", "check --api-key, --model and --api-url"),
    403: ("forbidden", "check --api-key, --model and --api-url"),
    404: ("not found", "check --model and --api-url"),
    405: ("method not allowed", "check --api-url"),  # a web server serving files, or a route only for GET
    413: ("request too large", "the server refuses prompts this long"),
    422: ("unprocessable", "check --generation-config (e.g. max_tokens) and --model"),
    501: ("not implemented", "check --api-url"),  # a server that takes no POST (Python's http.server)
}
BACKOFF_BASE = 0.25
BACKOFF_CAP = 8.0
EARLY_STOP = (3, 8)  # how many last outcomes the early-stop rule looks at: in-flight, within these
MAX_REDIRECTS = 5
LIMIT_STATUS = (429, 503, 529)  # "too many requests" and "overloaded": slow down, no sample failed
SAMPLE_STATUS = (400, 413, 422)  # once the endpoint has answered, a refusal of this request (a prompt past the
# model's context), so the sample's error: fatal, a resume would stop at it every time
_ENCODER = msgspec.json.Encoder()  # a tenth of json's time, on every request
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_WORD = re.compile(r"[\w.-]+")  # one holding a digit is a number or an id (req_7f3a..., a UUID): it does not count


class RetryableError(Exception):
    def __init__(
        self, message: str, retry_after: float | None = None, status: int | None = None, usage: Any = None
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.status = status
        self.usage: dict[str, int] | None = usage  # what a 2xx that was no answer says it cost


class Refused(RetryableError):
    """A SAMPLE_STATUS refusal of one request: its sample's error, never sent again."""


class EarlyStop:
    """The last `needed` final outcomes all errors of one kind (words holding digits aside): a broken endpoint."""

    def __init__(self, needed: int) -> None:
        self.needed = needed
        self.recent: deque[str | None] = deque(maxlen=needed)

    def success(self) -> None:
        self.recent.append(None)

    def failure(self, message: str) -> bool:
        self.recent.append(_WORD.sub(lambda m: "#" if any(c.isdigit() for c in m[0]) else m[0], message))
        return len(self.recent) == self.needed and len(set(self.recent)) == 1 and self.recent[0] is not None


class OpenAIClient:
    """One model behind one endpoint, over chat completions or plain completions (`mode`)."""

    def __init__(
        self, model: str, url: str, api_key: str | None = None, generation: dict[str, Any] | None = None,
        timeout: float = 120.0, retries: int = 5, concurrency: int = 32, backoff_base: float = BACKOFF_BASE,
        mode: str = "chat", stream: bool = False, max_reply_bytes: int = DEFAULT_MAX_BODY, patience: float = 300.0,
        probe: bool = True,
    ) -> None:  # fmt: skip
        generation = dict(generation or {})
        extra_headers = {str(k): str(v) for k, v in (generation.get("extra_headers") or {}).items()}
        self.name, self.mode, self.stream, self.patience = model, mode, stream, patience
        self.url = endpoint_url(url, mode, generation.get("extra_query"))
        self.limiter = Limiter(concurrency, probe=probe)
        self.trouble = False  # a refusal or failure since the last success
        self.trouble_since = 0.0  # when the first of them came: patience counts from then, not from the last
        # success (a reply may take longer than the patience)
        self.last_word = ""  # the latest failure, as the server said it
        self.holding, self.held_since = 0, 0.0  # requests held back by a limit now (not by --eval-batch-size)
        self.waited_s = 0.0  # wall time during which some request was held back by a limit
        self._line: deque[asyncio.Event] = deque()  # requests waiting for the limiter, first come first sent
        self.generation, self.extra_body = split_generation(generation)
        self.retries, self.backoff_base = retries, backoff_base
        self.early_stop = EarlyStop(min(max(concurrency, EARLY_STOP[0]), EARLY_STOP[1]))
        self.answered = False  # any reply yet: before one, a web page means a wrong --api-url
        self.answered_before = False  # the run holds replies from this endpoint (a resume): SAMPLE_STATUS is a sample's
        self.unsaved: dict[int, Reply] = {}  # by id(request): the row for what its failed attempts were billed, should
        # the run stop (a signal, --patience) before it is answered or given up
        self.again: Callable[[Request, dict[str, int] | None], bool] | None = None  # --max-cost, on each retry
        headers = {"Content-Type": "application/json", "User-Agent": "coinflip"}
        if stream:
            headers["Accept"] = "text/event-stream"
        self.keyed = bool(api_key)
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._pool = ConnectionPool(merge_headers(headers, extra_headers), timeout, max_body=max_reply_bytes)
        proxy = self._pool.proxy_secrets(self.url)
        self.redact = Redactor([*run_secrets(api_key, generation, url), *proxy], keys=[api_key, *proxy])

    async def start(self) -> None:
        """Open the first connection now: a wrong endpoint fails here, in seconds, with EndpointError."""
        try:
            await self._pool.check(self.url)
            slots = await published_slots(self._pool, self.url)
            await self._pool.answers(self.url)  # unless the probes heard it
        except FatalAPIError as exc:
            raise type(exc)(self.redact(str(exc))) from None
        if slots is not None:
            self.limiter.serves(slots)

    def _body(self, request: Request) -> bytes:
        body = request_body(self.name, self.mode, self.generation, request, self.stream, self.extra_body)
        try:
            return _ENCODER.encode(body)
        except UnicodeEncodeError:  # half a surrogate pair (a server's reply, sent back to force an answer)
            return json.dumps(body).encode()

    async def complete(self, request: Request) -> Reply:
        body = self._body(request)
        message, status, failures, attempts = "", None, 0, 0
        wasted: dict[str, int] | None = None  # what failed attempts reported they cost: the reply's usage counts it
        while True:
            sent, done_before = await self._slot()
            attempts += 1
            wait, outcome, reply, spent = None, "failed", None, None
            try:
                reply = await self._attempt(self.url, body)
                outcome = "ok"
            except RetryableError as exc:
                message, status, wait = str(exc), exc.status, exc.retry_after
                spent, wasted = exc.usage, added(wasted, exc.usage)
                outcome = "final" if isinstance(exc, Refused) else "rejected" if status in LIMIT_STATUS else "failed"
            except (ReplyTooLarge, UnknownCoding) as exc:
                message, status = str(exc), None
                outcome = "final"
            except OSError as exc:  # TimeoutError included
                message, status = f"{type(exc).__name__}: {exc}".rstrip(": "), None
                outcome = "timeout" if isinstance(exc, TimeoutError) else "failed"
            except FatalAPIError as exc:
                raise type(exc)(self.redact(str(exc))) from None
            finally:
                self._settle(outcome, sent, wait, reply, done_before)
            if reply is not None:
                self.unsaved.pop(id(request), None)
                reply.latency_s = time.monotonic() - sent  # the model's time: not the wait, not the failures
                reply.attempts = attempts
                reply.usage = added(reply.usage, wasted)
                self.early_stop.success()
                self.answered = True
                return self.redact.reply(reply)
            self.last_word = self.redact(one_line(message))
            if wasted:
                error = f"the run stopped before an answer; the last failed attempt: {self.last_word}"
                self.unsaved[id(request)] = Reply(
                    None, usage=wasted, latency_s=None, attempts=attempts, error=error, stopped=True
                )
            failures += outcome != "rejected"  # a refusal slows down, uses no retry: bounded by the run's patience
            billed = outcome != "rejected" or spent is not None  # a plain 429 bills nothing: it waits, it stays owed
            capped = outcome != "final" and failures <= self.retries and billed and not self._may_retry(request, spent)
            if outcome == "final" or failures > self.retries or capped:  # a billed refusal counts before the next
                message += "; not retried: --max-cost leaves no room for another attempt" if capped else ""
                failed = dataclasses.replace(self._failed(message, status, sent, attempts), usage=wasted)
                self.unsaved.pop(id(request), None)
                if self.early_stop.failure(failed.error or ""):
                    self.unsaved[id(request)] = failed  # its row, as those that failed so before got theirs
                    raise EndpointBroken(
                        f"the last {self.early_stop.needed} requests all failed the same way after "
                        f"{self.retries} retries, so the endpoint, not a sample, is broken: {failed.error}"
                    )
                return failed
            if outcome == "rejected":
                self._check_patience(time.monotonic())
                continue
            self.limiter.traffic.retried += 1
            log.info("sample %d: attempt %d failed, retrying: %s", request.id, attempts, self.last_word)
            self._check_patience(time.monotonic())  # failing every request: as bounded as refusing them
            await asyncio.sleep(self._delay(failures, wait))

    def _may_retry(self, request: Request, spent: dict[str, int] | None) -> bool:
        """--max-cost (`again`): a failed attempt's reported cost counts now, and another must still fit."""
        return self.again is None or self.again(request, spent)

    def _settle(self, outcome: str, sent: float, wait: float | None, reply: Reply | None, done_before: int) -> None:
        limiter, now = self.limiter, time.monotonic()
        if outcome != "ok" and not self.trouble:
            self.trouble_since = now
        self.trouble = outcome != "ok"
        if outcome == "ok":
            usage = reply.usage if reply is not None else None
            limiter.succeeded(now, sent, int((usage or {}).get("completion_tokens") or 0))
        elif outcome == "rejected":
            limiter.rejected(now, sent, wait)
        elif outcome == "timeout":
            limiter.timed_out(now, sent, limiter.traffic.succeeded - done_before)
        else:
            limiter.failed()
        if self._line:
            self._line[0].set()

    async def _slot(self) -> tuple[float, int]:
        """Wait in line until the limiter lets a request go; when it goes, and how many had succeeded by then.
        First come, first sent: only the first in line watches the clock, a settled request wakes it, and each
        that goes wakes the next (a wake-up for every waiter on every reply cost as much CPU as the requests)."""
        limiter, now = self.limiter, time.monotonic()
        if not self._line and limiter.delay(now) <= 0:
            limiter.send(now)
            return now, limiter.traffic.succeeded
        me, counted = asyncio.Event(), False  # counted: held by a limit, not by --eval-batch-size (waited_s)
        self._line.append(me)
        try:
            while self._line[0] is not me or limiter.delay(now) > 0:
                counted = self._held(counted, limiter.limiting(now), now)
                self._check_patience(now)
                me.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(limiter.delay(now), 1.0) if self._line[0] is me else None):
                        await me.wait()
                now = time.monotonic()
        finally:
            self._line.remove(me)
            if self._line:  # the next in line looks: it goes too where there is room, or watches the clock
                self._line[0].set()
            self._held(counted, False, time.monotonic())
        limiter.send(now)
        return now, limiter.traffic.succeeded

    def _held(self, was: bool, now_held: bool, now: float) -> bool:
        if now_held != was:
            self.holding += 1 if now_held else -1
            if now_held and self.holding == 1:
                self.held_since = now
            elif not now_held and not self.holding:
                self.waited_s += now - self.held_since
        return now_held

    def _check_patience(self, now: float) -> None:
        if self.trouble and now - self.trouble_since > self.patience:
            raise EndpointBroken(
                f"no request has succeeded for {self.patience:g} s (patience), the endpoint still "
                f"refusing or failing; its last word: {self.last_word}"
            )

    def traffic(self) -> Traffic:
        waited = self.waited_s + (time.monotonic() - self.held_since if self.holding else 0.0)
        return dataclasses.replace(self.limiter.traffic, waited_s=waited)

    def _failed(self, message: str, status: int | None, sent: float, attempts: int) -> Reply:
        message = self.redact(one_line(message))
        return Reply(text=None, latency_s=time.monotonic() - sent, attempts=attempts, error=message, status=status)

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        backoff = min(BACKOFF_CAP, self.backoff_base * 2 ** min(attempt - 1, 64)) * random.uniform(0.5, 1.5)
        return float(max(backoff, retry_after)) if retry_after is not None else backoff

    async def _attempt(self, url: str, body: bytes) -> Reply:
        for hop in range(MAX_REDIRECTS + 1):
            response = await self._pool.post(url, body, StreamReply(self.mode) if self.stream else None)
            if not 300 <= response.status < 400:
                return self._read(url, response)
            url = redirect(url, response, follow=hop < MAX_REDIRECTS)  # refused: any other, or one too many
        raise AssertionError("unreachable")

    def _read(self, url: str, response: Response) -> Reply:
        status = response.status
        if 200 <= status < 300:
            if web_page(response):  # at the first reply a wrong URL; later a proxy's or portal's login page too
                said = (
                    f"{shown_url(url)} answered with a web page, not the OpenAI API: {server_message(response.body)}; "
                    "check --api-url (it usually ends in /v1, e.g. http://127.0.0.1:8000/v1) or a proxy in between"
                )
                if not self.answered:
                    raise EndpointError(said)
                raise RetryableError(said, status=status)
            try:
                if response.events is not None:
                    return response.events.reply(response.sent)
                return parse_body(response.body, self.mode)
            except BadReply as exc:  # an error object may name a refusal: then it is one, as its status would be
                first = not (self.answered or self.answered_before)  # the run holds no reply of this endpoint
                if first and response.events is None and foreign_json(response.body):
                    raise EndpointError(  # another JSON API (a health check, a stub) where the first answer was due
                        f"{shown_url(url)} answered with JSON that is no completion: {server_message(response.body)}"
                        "; check --api-url (it usually ends in /v1, e.g. http://127.0.0.1:8000/v1)"
                    ) from None
                spent = response.events.usage if response.events is not None else usage_of(response.body)
                named = exc.status if exc.status in LIMIT_STATUS else status  # any other code: no status that came
                raise retryable(str(exc), named, response.headers, spent) from None
        detail = server_message(response.body)
        if status == 407:
            raise EndpointError(
                f"the proxy wants credentials (407{': ' + detail if detail else ''}): put them in the proxy "
                "URL, http://user:password@host:port"
            )
        if status in FATAL_STATUS:
            reason, hint = FATAL_STATUS[status]
            hint = f"no API key was sent: {KEY_AGAIN}" if status == 401 and not self.keyed else hint
            said = f"{shown_url(url)} answered {status} {reason}{': ' + detail if detail else ''}"
            if status in SAMPLE_STATUS and (self.answered or self.answered_before):
                raise Refused(said, status=status)
            raise FatalAPIError(f"{said} - {hint}")
        raise retryable(f"HTTP {status}{': ' + detail if detail else ''}", status, response.headers)

    async def aclose(self) -> None:
        await self._pool.aclose()


def retryable(message: str, status: int, headers: Any, usage: dict[str, int] | None = None) -> RetryableError:
    """A failure to retry, with the wait the server asked for: a refusal (LIMIT_STATUS) says it in more ways."""
    wait = limit_wait(headers) if status in LIMIT_STATUS else retry_after(headers.get("retry-after"))
    return RetryableError(message, wait, status, usage)


def retry_after(value: str | None, now: float | None = None) -> float | None:
    """A Retry-After as RFC 9110 has it (ASCII digits or an HTTP date, not `1.5`), capped at a minute."""
    if value is None:
        return None
    if value.isascii() and value.isdigit():
        return min(float(value), 60.0)
    from email.utils import parsedate_to_datetime  # rare: most servers send seconds

    try:
        seconds = parsedate_to_datetime(value).timestamp() - (time.time() if now is None else now)
    except (TypeError, ValueError, IndexError, OverflowError):  # a year past datetime's: OverflowError
        return None
    return min(max(seconds, 0.0), 60.0)


def limit_wait(headers: Any) -> float | None:
    """retry-after-ms, Retry-After, or the sooner of OpenAI's x-ratelimit-reset-requests/-tokens."""
    try:
        ms = float(headers.get("retry-after-ms", "nan"))
    except ValueError:
        ms = math.nan
    if math.isfinite(ms):
        return min(max(ms / 1000.0, 0.0), 60.0)
    seconds = retry_after(headers.get("retry-after"))
    if seconds is not None:
        return seconds
    resets = [_duration(headers.get(f"x-ratelimit-reset-{kind}")) for kind in ("requests", "tokens")]
    known = [r for r in resets if r is not None]
    return min(min(known), 60.0) if known else None


def _duration(value: str | None) -> float | None:
    """A Go-style duration, as OpenAI's reset headers: 1s, 6m0s, 20ms, 1h2m3.5s."""
    if not value:
        return None
    text = value.strip().lower()
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return retry_after(text)  # a plain number of seconds
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    return sum(float(n) * scale[u] for n, u in parts)
