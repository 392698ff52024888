"""OpenAI-compatible chat (or text) completions: many requests in flight, retried with care.

Every attempt waits for a slot at its endpoint's `Limiter` (limits.py): the level of requests in
flight, a pause that a Retry-After asked for, a pace. A refusal (429, or 503/529 "overloaded")
slows the endpoint down and the request waits its turn again: it uses up none of --retries.
What bounds the waiting is the run's patience: when nothing has succeeded for that long while
the endpoint refuses or fails, `complete` raises EndpointBroken (exit 1, resumable).

Retries (exponential backoff with jitter, honouring Retry-After) on other 5xx, timeouts, dropped
connections, framing errors, malformed bodies and empty choices. Never retried:
- 400, 401, 403, 404, 413, 422: a bad key, model name, URL or setting stops the run at once
  (FatalAPIError, exit 2) with the server's own message;
- a wrong endpoint (EndpointError, exit 2): `start()` opens the first connection to every
  replica before the run, so nothing listening, an unknown host, an untrusted TLS certificate or
  a proxy that is down fail in seconds; and it asks each for an HTTP answer (`answers`), so a
  port that resets every connection, or a proxy that sends something other than HTTP, does too
  (a server that answered once and fails later is retried: the run ends with exit 1, resumable);
  so do a 407 from a proxy and a redirect (307/308 to the same scheme, host and port are
  followed, as a POST may be; any other is refused, with its Location shown);
- a reply larger than `max_reply_bytes`, or in a Content-Encoding coinflip does not decode (br,
  zstd: the server ignored `Accept-Encoding: identity`): an error for that sample.
`start()` also asks each server how many requests it serves at once, where it publishes that
(llama.cpp's /props), and keeps to it.

Early stop: when the last K requests to end (K = requests in flight, at least 3 and at most 8)
all ended in an error after their retries, with the same message (digits aside), the endpoint
rather than a sample is broken - whether it never worked or died mid-run: `complete` raises
EndpointBroken (exit 1; the run can be resumed) instead of grinding through every sample.

Latency is the model's time: the attempt that succeeded, not the waits and failures before it.
Errors keep what the server said: "HTTP 500: <its message>" in `Reply.error` and the status in
`Reply.status`. The API key, and any secret-looking extra header, are masked in every message
and in reply text (`_redact.py`).
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import re
import time
from collections import deque
from typing import Any
from urllib.parse import urlencode, urljoin, urlsplit, urlunsplit

import aiohttp
import msgspec

from ..config import run_secrets, shown_url
from ..errors import EndpointBroken, EndpointError, FatalAPIError
from ._http import (
    DEFAULT_MAX_BODY,
    PROBE_BYTES,
    ConnectionPool,
    ReplyTooLarge,
    Response,
    UnknownCoding,
    merge_headers,
    read_at_most,
)
from ._redact import Redactor
from ._replies import BadReply, StreamReply, load_json, one_line, parse_body, server_message
from .base import Reply, Request
from .limits import Limiter, Traffic

FATAL_STATUS = {
    400: ("bad request", "check --generation-config, --model and --api-url"),
    401: ("unauthorized", "check --api-key, --model and --api-url"),
    403: ("forbidden", "check --api-key, --model and --api-url"),
    404: ("not found", "check --model and --api-url"),
    413: ("request too large", "the server refuses prompts this long"),
    422: ("unprocessable", "check --generation-config (e.g. max_tokens) and --model"),
}
BACKOFF_BASE = 0.25
BACKOFF_CAP = 8.0
EARLY_STOP = (3, 8)  # how many last outcomes the early-stop rule looks at: in-flight, within these
MAX_REDIRECTS = 5
PROBE_S = 2.0  # seconds the capacity probe at the start may take
LIMIT_STATUS = (429, 503, 529)  # "too many requests" and "overloaded": slow down, no sample failed
GATEWAY_KEYS = ("extra_body", "extra_headers", "extra_query")
_ENCODER = msgspec.json.Encoder()  # a tenth of json's time, on every request


class RetryableError(Exception):
    def __init__(self, message: str, retry_after: float | None = None, status: int | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.status = status


def endpoint_url(url: str, mode: str = "chat", query: dict[str, Any] | None = None) -> str:
    """Accept a base URL (…/v1), a server root, or the full endpoint; `mode` is chat or completions.
    A query string (`?api-version=...`) stays at the end, with `query` added to it."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    tail = "/chat/completions" if mode == "chat" else "/completions"
    for known in ("/chat/completions", "/completions"):
        if path.endswith(known):
            path = path[: -len(known)]
            break
    else:
        path += "/v1" if not path else ""
    extra = urlencode({k: _query_value(v) for k, v in (query or {}).items()})
    joined = "&".join(q for q in (parts.query, extra) if q)
    return urlunsplit((parts.scheme, parts.netloc, path + tail, joined, ""))


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else json.dumps(value)


def request_body(
    model: str,
    mode: str,
    generation: dict[str, Any],
    request: Request,
    stream: bool = False,
    extra_body: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON body of one request, online or as a line of a batch file: `generation` without
    the gateway keys (see `split_generation`), `extra_body` last."""
    body: dict[str, Any] = {"model": model}
    if mode == "chat":
        body["messages"] = request.messages
    else:  # a plain completion gets the same text: system prompt, blank line, prompt
        body["prompt"] = "\n\n".join(m["content"] for m in request.messages)
    body.update(generation)
    body.update(request.params)
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    body.update(extra_body or {})
    return body


def split_generation(generation: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The settings sent in the body, and `extra_body` (headers and query go elsewhere)."""
    return {k: v for k, v in generation.items() if k not in GATEWAY_KEYS}, dict(generation.get("extra_body") or {})


class EarlyStop:
    """The last `needed` final outcomes all errors of one kind (digits aside): a broken endpoint,
    whether it never worked or died mid-run."""

    def __init__(self, needed: int) -> None:
        self.needed = needed
        self.recent: deque[str | None] = deque(maxlen=needed)

    def success(self) -> None:
        self.recent.append(None)

    def failure(self, message: str) -> bool:
        """True when this failure completes the pattern."""
        self.recent.append(re.sub(r"\d+(\.\d+)?", "#", message))
        return len(self.recent) == self.needed and len(set(self.recent)) == 1 and self.recent[0] is not None


class OpenAIClient:
    """One model behind one or more replicas, over chat completions or plain completions (`mode`);
    each request goes to the replica with fewest in flight."""

    def __init__(
        self,
        model: str,
        urls: list[str],
        api_key: str | None = None,
        generation: dict[str, Any] | None = None,
        timeout: float = 120.0,
        retries: int = 5,
        concurrency: int = 32,
        backoff_base: float = BACKOFF_BASE,
        mode: str = "chat",
        stream: bool = False,
        max_reply_bytes: int = DEFAULT_MAX_BODY,
        patience: float = 300.0,
    ) -> None:
        generation = dict(generation or {})
        extra_headers = {str(k): str(v) for k, v in (generation.get("extra_headers") or {}).items()}
        self.name = model
        self.mode = mode
        self.stream = stream
        self.urls = [endpoint_url(u, mode, generation.get("extra_query")) for u in urls]
        self.limits = {url: Limiter(concurrency) for url in self.urls}
        self.patience = patience
        self.last_success = time.monotonic()  # counted from the start: patience bounds a run that never answers too
        self.trouble = False  # a refusal or failure since the last success
        self.last_word = ""  # the latest failure, as the server said it
        self.holding = 0  # requests held back by a limit now (not by --eval-batch-size)
        self.held_since = 0.0
        self.waited_s = 0.0  # wall time during which some request was held back by a limit
        self._freed: asyncio.Future[None] | None = None
        self.generation, self.extra_body = split_generation(generation)
        self.retries = retries
        self.backoff_base = backoff_base
        self.early_stop = EarlyStop(min(max(concurrency, EARLY_STOP[0]), EARLY_STOP[1]))
        self.answered = False  # any reply yet: before one, a web page means a wrong --api-url
        headers = {"Content-Type": "application/json", "User-Agent": "coinflip"}
        if stream:
            headers["Accept"] = "text/event-stream"
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._pool = ConnectionPool(
            merge_headers(headers, extra_headers), timeout, max_body=max_reply_bytes, sink=lambda: StreamReply(mode)
        )
        self.redact = Redactor([*run_secrets(api_key, generation, urls), *self._pool.proxy_secrets(self.urls)])

    async def start(self) -> None:
        """Open the first connection to every replica now (kept for the first request): a wrong
        endpoint fails here, in seconds, with EndpointError."""
        try:
            await asyncio.gather(*(self._pool.check(url) for url in self.urls))
            published = await asyncio.gather(*(self._published_slots(url) for url in self.urls))
            await asyncio.gather(*(self._pool.answers(url) for url in self.urls))  # those the probes did not hear
        except FatalAPIError as exc:
            raise type(exc)(self.redact(str(exc))) from None
        for url, slots in zip(self.urls, published, strict=True):
            if slots is not None:
                self.limits[url].serves(slots)

    async def _published_slots(self, url: str) -> int | None:
        """How many requests the server says it serves at once, where it says so: llama.cpp's server
        publishes `total_slots` at /props; the Python llama.cpp server (llama-cpp-python), which
        serves one request at a time behind a lock, names itself by owning its models as "me" at
        /v1/models. Anything else - no such route, a gateway, a slow or odd answer, a proxy on the
        way (it need not see more than the run's requests) - is None: the limits then learn it by
        watching. Both GETs go together (one on the connection `check` opened): one round trip at
        the start, not two, for a server that publishes neither."""
        target = self._pool.target(url)
        if target.proxy is not None:
            return None
        path = target.url.path
        root = path.split("/v1/")[0] if "/v1/" in path else ""
        props, models = await asyncio.gather(
            self._get_json(target, root + "/props"), self._get_json(target, root + "/v1/models")
        )
        slots = slots_in(props)
        if slots is None and one_at_a_time(models):
            slots = 1
        return slots

    async def _get_json(self, target: Any, path: str) -> Any:
        """A server's JSON answer to a GET of `path`, or None for anything else."""
        options = {k: v for k, v in target.options.items() if k in ("headers", "ssl")}
        try:
            async with self._pool.session.get(
                target.url.with_path(path).with_query(None),
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=PROBE_S),
                **options,
            ) as answer:
                self._pool.heard(target)
                if answer.status != 200:
                    return None
                return load_json(await read_at_most(answer.content, PROBE_BYTES))  # as every reply is read
        except (OSError, BadReply, asyncio.TimeoutError, aiohttp.ClientError):  # ReplyTooLarge is an OSError
            return None

    def _body(self, request: Request) -> bytes:
        body = request_body(self.name, self.mode, self.generation, request, self.stream, self.extra_body)
        try:
            return _ENCODER.encode(body)
        except UnicodeEncodeError:  # half a surrogate pair (a server's reply, sent back to force an answer)
            return json.dumps(body).encode()

    async def complete(self, request: Request) -> Reply:
        body = self._body(request)
        message, status, failures, attempts = "", None, 0, 0
        while True:
            url, sent, done_before = await self._slot()
            attempts += 1
            limiter, wait, outcome, reply = self.limits[url], None, "failed", None
            try:
                reply = await self._attempt(url, body)
                outcome = "ok"
            except RetryableError as exc:
                message, status, wait = str(exc), exc.status, exc.retry_after
                outcome = "rejected" if status in LIMIT_STATUS else "failed"
            except (ReplyTooLarge, UnknownCoding) as exc:
                message, status = str(exc), None
                outcome = "final"
            except (asyncio.TimeoutError, TimeoutError) as exc:  # one class since Python 3.11
                message, status, outcome = f"{type(exc).__name__}: {exc}".rstrip(": "), None, "timeout"
            except OSError as exc:
                message, status = f"{type(exc).__name__}: {exc}".rstrip(": "), None
            except FatalAPIError as exc:
                raise type(exc)(self.redact(str(exc))) from None
            finally:
                self._settle(limiter, outcome, sent, wait, reply, done_before)
            if reply is not None:
                reply.latency_s = time.monotonic() - sent  # the model's time: not the wait, not the failures
                reply.attempts = attempts
                self.early_stop.success()
                self.answered = True
                return self.redact.reply(reply)
            self.last_word = self.redact(one_line(message))
            if outcome == "rejected":  # slow down, not a failure: bounded by the run's patience
                self._check_patience(time.monotonic())
                continue
            failures += 1
            if outcome == "final" or failures > self.retries:
                return self._failed(message, status, sent, attempts)
            limiter.traffic.retried += 1
            await asyncio.sleep(self._delay(failures, wait))

    def _settle(
        self, limiter: Limiter, outcome: str, sent: float, wait: float | None, reply: Reply | None, done_before: int
    ) -> None:
        """Tell the endpoint's limiter how an attempt ended, and wake the requests waiting on it."""
        now = time.monotonic()
        self.trouble = outcome != "ok"
        if outcome == "ok":
            usage = reply.usage if reply is not None else None
            limiter.succeeded(now, sent, int((usage or {}).get("completion_tokens") or 0))
            self.last_success = now
        elif outcome == "rejected":
            limiter.rejected(now, sent, wait)
        elif outcome == "timeout":
            limiter.timed_out(now, sent, limiter.traffic.succeeded - done_before)
        else:
            limiter.failed()
        if self._freed is not None and not self._freed.done():
            self._freed.set_result(None)
        self._freed = None

    async def _slot(self) -> tuple[str, float, int]:
        """Wait until an endpoint may take a new request (its level, pause and pace allow it); the
        least busy of those that may. Returns it, the moment the request goes, and how many requests
        it had answered by then."""
        now = time.monotonic()
        url = min(self.urls, key=lambda u: (self.limits[u].delay(now), self.limits[u].in_flight))
        counted = False  # held by a limit, not by the setting (--eval-batch-size): counted in waited_s
        try:
            while self.limits[url].delay(now) > 0:
                counted = self._held(counted, self.limits[url].limiting(now), now)
                self._check_patience(now)
                if self._freed is None:
                    self._freed = asyncio.get_running_loop().create_future()
                await asyncio.wait([self._freed], timeout=min(self.limits[url].delay(now), 1.0))
                now = time.monotonic()
                url = min(self.urls, key=lambda u: (self.limits[u].delay(now), self.limits[u].in_flight))
        finally:
            self._held(counted, False, time.monotonic())
        self.limits[url].send(now)
        return url, now, self.limits[url].traffic.succeeded

    def _held(self, was: bool, now_held: bool, now: float) -> bool:
        """Count the wall time during which some request is held back by a limit."""
        if now_held != was:
            self.holding += 1 if now_held else -1
            if now_held and self.holding == 1:
                self.held_since = now
            elif not now_held and not self.holding:
                self.waited_s += now - self.held_since
        return now_held

    def _check_patience(self, now: float) -> None:
        """Nothing has succeeded for `patience` seconds while the endpoint refused or failed: stop
        (resumable) rather than wait without end."""
        if self.trouble and now - self.last_success > self.patience:
            raise EndpointBroken(
                f"no request has succeeded for {self.patience:g} s (patience), the endpoint still "
                f"refusing or failing; its last word: {self.last_word}"
            )

    def traffic(self) -> Traffic:
        """What went to the endpoints and came back, summed over replicas."""
        total = Traffic()
        for limiter in self.limits.values():
            total = total.add(limiter.traffic)
        total.waited_s = self.waited_s + (time.monotonic() - self.held_since if self.holding else 0.0)
        return total

    def _failed(self, message: str, status: int | None, sent: float, attempts: int) -> Reply:
        message = self.redact(one_line(message))
        if self.early_stop.failure(message):
            raise EndpointBroken(
                f"the last {self.early_stop.needed} requests all failed the same way after "
                f"{self.retries} retries, so the endpoint, not a sample, is broken: {message}"
            )
        return Reply(text=None, latency_s=time.monotonic() - sent, attempts=attempts, error=message, status=status)

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        backoff = min(BACKOFF_CAP, self.backoff_base * 2 ** (attempt - 1)) * random.uniform(0.5, 1.5)
        return float(max(backoff, retry_after)) if retry_after is not None else backoff

    async def _attempt(self, url: str, body: bytes) -> Reply:
        response = await self._pool.post(url, body, self.stream)
        for _ in range(MAX_REDIRECTS):
            if response.status not in (307, 308):
                break
            url = self._redirect(url, response)
            response = await self._pool.post(url, body, self.stream)
        return self._read(url, response)

    def _redirect(self, url: str, response: Response) -> str:
        """Follow a 307/308 to the same scheme, host and port; refuse any other."""
        location = _location(url, response)
        if location != url and _origin(location) == _origin(url):
            return location
        raise _refused_redirect(url, response)

    def _read(self, url: str, response: Response) -> Reply:
        status = response.status
        if 200 <= status < 300:
            if not self.answered and _web_page(response):
                raise EndpointError(
                    f"{shown_url(url)} answered with a web page, not the OpenAI API: check --api-url "
                    "(it usually ends in /v1, e.g. http://127.0.0.1:8000/v1)"
                )
            try:
                if isinstance(response.events, StreamReply):
                    return response.events.reply(response.sent)
                return parse_body(response.body, self.mode)
            except BadReply as exc:
                raise RetryableError(str(exc), status=status) from None
        if 300 <= status < 400:  # one the loop did not follow, or one redirect too many
            raise _refused_redirect(url, response)
        detail = server_message(response.body)
        if status == 407:
            raise EndpointError(
                f"the proxy wants credentials (407{': ' + detail if detail else ''}): put them in the proxy "
                "URL, http://user:password@host:port"
            )
        if status in FATAL_STATUS:
            reason, hint = FATAL_STATUS[status]
            raise FatalAPIError(
                f"{shown_url(url)} answered {status} {reason}{': ' + detail if detail else ''} - {hint}"
            )
        headers = response.headers
        retry = limit_wait(headers) if status in LIMIT_STATUS else retry_after(headers.get("retry-after"))
        raise RetryableError(f"HTTP {status}{': ' + detail if detail else ''}", retry, status)

    async def aclose(self) -> None:
        await self._pool.aclose()


def _web_page(response: Response) -> bool:
    """An HTML page (a web UI's root, a login or captive portal) where JSON or a stream was due."""
    kind = response.headers.get("content-type", "").lower()
    return "text/html" in kind or (response.events is None and response.body.lstrip()[:1] == b"<")


def _location(url: str, response: Response) -> str:
    """Where a redirect points; a Location that is no URL (`http://[::1/x`) as sent, never followed."""
    location = response.headers.get("location", "").strip()
    try:
        return urljoin(url, location)
    except ValueError:
        return location


def _origin(url: str) -> tuple[str, str, int | None] | None:
    try:
        parts = urlsplit(url)
        return parts.scheme, (parts.hostname or ""), parts.port
    except ValueError:  # a port that is not a number
        return None


def _refused_redirect(url: str, response: Response) -> EndpointError:
    location = _location(url, response) if response.headers.get("location") else ""
    return EndpointError(
        f"{shown_url(url)} redirects ({response.status}) to {shown_url(location) or '(no Location)'}; "
        "give the final URL as --api-url"
    )


def retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date), capped at a minute."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        from email.utils import parsedate_to_datetime  # rare: most servers send seconds

        try:
            seconds = parsedate_to_datetime(value).timestamp() - (time.time() if now is None else now)
        except (TypeError, ValueError, IndexError):
            return None
    if seconds != seconds:  # NaN
        return None
    return min(max(seconds, 0.0), 60.0)


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


def limit_wait(headers: Any) -> float | None:
    """How long a refusal asks to wait: retry-after-ms, Retry-After (seconds or an HTTP date), or
    OpenAI's x-ratelimit-reset-requests/-tokens ("1s", "6m0s", "20ms"; the sooner of the two)."""
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
    """A Go-style duration as OpenAI writes its reset headers: 1s, 6m0s, 20ms, 1h2m3.5s."""
    if not value:
        return None
    text = value.strip().lower()
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return retry_after(text)  # a plain number of seconds
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    return sum(float(n) * scale[u] for n, u in parts)


def one_at_a_time(found: Any) -> bool:
    """Whether /v1/models came from the Python llama.cpp server, which owns every model as "me"."""
    models = found.get("data") if isinstance(found, dict) else None
    return (
        isinstance(models, list)
        and bool(models)
        and all(isinstance(m, dict) and m.get("owned_by") == "me" for m in models)
    )


def slots_in(found: Any) -> int | None:
    """The number of slots in what a server published at /props (llama.cpp's `total_slots`)."""
    slots = found.get("total_slots") if isinstance(found, dict) else None
    if isinstance(slots, int) and not isinstance(slots, bool) and 1 <= slots <= 4096:
        return slots
    return None
