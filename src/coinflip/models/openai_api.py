"""OpenAI-compatible chat completions: many requests in flight, retried with care.

Retries (exponential backoff with jitter, honouring Retry-After) on 429, 5xx, timeouts, dropped
connections, malformed bodies and empty choices. 400/401/403/404 are never retried: a bad key,
model name or URL stops the run at once.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from typing import Any
from urllib.parse import urlsplit

from ..errors import FatalAPIError
from ._http import ConnectionPool
from .base import Reply, Request

FATAL_STATUS = {400: "bad request", 401: "unauthorized", 403: "forbidden", 404: "not found"}
BACKOFF_BASE = 0.25
BACKOFF_CAP = 8.0


class RetryableError(Exception):
    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def endpoint_url(url: str, mode: str = "chat") -> str:
    """Accept a base URL (…/v1), a server root, or the full endpoint; `mode` is chat or completions."""
    url = url.rstrip("/")
    tail = "/chat/completions" if mode == "chat" else "/completions"
    for known in ("/chat/completions", "/completions"):
        if url.endswith(known):
            return url[: -len(known)] + tail
    path = urlsplit(url).path
    return url + ("/v1" if path in ("", "/") else "") + tail


def redact(text: str, secret: str | None) -> str:
    return text.replace(secret, "***") if secret and len(secret) >= 4 else text


class OpenAIChat:
    """One model behind one or more replicas; each request goes to the replica with fewest in flight."""

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
    ) -> None:
        self.name = model
        self.mode = mode
        self.urls = [endpoint_url(u, mode) for u in urls]
        self.inflight = dict.fromkeys(self.urls, 0)
        self.api_key = api_key
        self.generation = dict(generation or {})
        self.retries = retries
        self.backoff_base = backoff_base
        headers = {"Content-Type": "application/json", "User-Agent": "coinflip"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._pool = ConnectionPool(headers, timeout)

    def _body(self, request: Request) -> bytes:
        body: dict[str, Any] = {"model": self.name}
        if self.mode == "chat":
            body["messages"] = request.messages
        else:  # a plain completion gets the same text: system prompt, blank line, prompt
            body["prompt"] = "\n\n".join(m["content"] for m in request.messages)
        extra = self.generation.get("extra_body") or {}
        body.update({k: v for k, v in self.generation.items() if k != "extra_body"})
        body.update(request.params)
        body.update(extra)
        return json.dumps(body).encode()

    async def complete(self, request: Request) -> Reply:
        body = self._body(request)
        start = time.perf_counter()
        last_error = ""
        for attempt in range(1, self.retries + 2):
            url = min(self.urls, key=self.inflight.__getitem__)
            self.inflight[url] += 1
            try:
                reply = await self._post(url, body)
                reply.latency_s = time.perf_counter() - start
                reply.attempts = attempt
                return reply
            except RetryableError as exc:
                last_error, wait = str(exc), exc.retry_after
            except (OSError, asyncio.TimeoutError) as exc:
                last_error, wait = f"{type(exc).__name__}: {exc}".rstrip(": "), None
            finally:
                self.inflight[url] -= 1
            if attempt <= self.retries:
                await asyncio.sleep(self._delay(attempt, wait))
        return Reply(
            text=None,
            latency_s=time.perf_counter() - start,
            attempts=self.retries + 1,
            error=redact(last_error, self.api_key)[:500],
        )

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        backoff = min(BACKOFF_CAP, self.backoff_base * 2 ** (attempt - 1)) * random.uniform(0.5, 1.5)
        return float(max(backoff, retry_after)) if retry_after is not None else backoff

    async def _post(self, url: str, body: bytes) -> Reply:
        response = await self._pool.post(url, body)
        status, raw = response.status, response.body
        if status in FATAL_STATUS:
            detail = redact(_error_detail(raw), self.api_key)
            raise FatalAPIError(
                f"{url} answered {status} {FATAL_STATUS[status]}{': ' + detail if detail else ''}"
                " - check --api-key, --model and --api-url"
            )
        if status != 200:
            raise RetryableError(f"HTTP {status}", retry_after(response.headers.get("retry-after")))
        return _parse(raw, self.mode)

    async def aclose(self) -> None:
        await self._pool.aclose()


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
    return min(max(seconds, 0.0), 60.0)


def _error_detail(raw: bytes) -> str:
    try:
        data = json.loads(raw)
        err = data.get("error", data) if isinstance(data, dict) else data
        message = err.get("message") if isinstance(err, dict) else err
        return " ".join(str(message).split())[:200]
    except (ValueError, AttributeError):
        return " ".join(raw.decode("utf-8", "replace").split())[:200]


def _parse(raw: bytes, mode: str = "chat") -> Reply:
    try:
        data = json.loads(raw)
        choice = data["choices"][0]
        message = choice["message"] if mode == "chat" else {"content": choice["text"]}
    except (ValueError, KeyError, IndexError, TypeError):
        field = "message" if mode == "chat" else "text"
        raise RetryableError(f"malformed response body (no choices[0].{field})") from None
    if not isinstance(message, dict):
        raise RetryableError("malformed response body (message is not an object)")
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else None
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    return Reply(
        text=message.get("content") or "",
        reasoning=reasoning if isinstance(reasoning, str) else None,
        finish_reason=choice.get("finish_reason"),
        usage=usage,
    )
