"""The limits of the test server: what hosted endpoints and small servers do under load.

- a requests-per-second limit with a burst (a token bucket), answering 429 with a Retry-After
  rounded up to whole seconds, as most gateways write it (or without one: `retry_after` off);
- an in-flight limit, answering 429 "too many concurrent requests" without Retry-After;
- slots: only so many requests are served at a time and the rest wait in line, each taking the
  server's latency once it is served (llama.cpp's server with one slot). The slots are published
  at /props (`total_slots`) and /slots, as llama.cpp does, unless `publish_slots` is off.

Every answered request's time from arrival to reply is kept in `Gate.latencies` (so a test can
add up how long requests waited at the server), the most requests held at once in `peak`, and
the first arrival and the last reply in `window` (how long the server was kept busy).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import dataclass
from typing import Any

Response = tuple[int, bytes, dict[str, str]]


@dataclass
class Limits:
    """What a hosted endpoint or a small server allows."""

    rate: float = 0.0  # requests per second (a token bucket); 0: no limit
    burst: int = 1  # the bucket's size
    retry_after: bool = True  # a rate-limit 429 says when to come back, in whole seconds
    max_in_flight: int = 0  # 429 without Retry-After beyond this many in flight; 0: no limit
    slots: int = 0  # serve this many at a time, the rest wait in line; 0: all at once
    publish_slots: bool = True  # say so at /props and /slots, as llama.cpp's server does
    owned_by: str = ""  # what /v1/models names as each model's owner ("me": as the Python llama.cpp server)


class Gate:
    """Admits, refuses or queues each completion request by the server's `Limits`."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.tokens = float(max(1, limits.burst))
        self.filled = time.monotonic()
        self.in_flight = 0
        self.peak = 0
        self.refused = 0
        self.latencies: list[float] = []
        self.window = (math.inf, 0.0)  # loop time of the first arrival and of the last reply
        self._slots: asyncio.Semaphore | None = None

    @property
    def publishes(self) -> bool:
        return self.limits.slots > 0 and self.limits.publish_slots

    def published(self, path: str) -> Any:
        if path == "/props":
            return {"total_slots": self.limits.slots, "default_generation_settings": {"n_ctx": 2048}}
        return [{"id": i, "is_processing": False} for i in range(self.limits.slots)]

    def admit(self) -> Response | None:
        """None: served (call `serve`, then `done`); else the 429 to answer."""
        limits = self.limits
        if limits.rate > 0:
            now = time.monotonic()
            self.tokens = min(float(max(1, limits.burst)), self.tokens + (now - self.filled) * limits.rate)
            self.filled = now
            if self.tokens < 1.0:
                self.refused += 1
                wait = math.ceil((1.0 - self.tokens) / limits.rate)
                headers = {"Retry-After": str(max(1, wait))} if limits.retry_after else {}
                return _refusal("rate limit reached for requests", headers)
            self.tokens -= 1.0
        if limits.max_in_flight and self.in_flight >= limits.max_in_flight:
            self.refused += 1
            return _refusal("too many concurrent requests", {})
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        return None

    async def serve(self, latency: float, arrived: float) -> None:
        """Take `latency` to answer: from arrival, or, with slots, once a slot is free."""
        loop = asyncio.get_running_loop()
        if self.limits.slots:
            if self._slots is None:
                self._slots = asyncio.Semaphore(self.limits.slots)
            async with self._slots:
                await asyncio.sleep(latency)
        elif latency:  # counted from arrival, so the server's own work is part of the latency
            await asyncio.sleep(max(0.0, latency - (loop.time() - arrived)))
        self.latencies.append(loop.time() - arrived)
        self.window = (min(self.window[0], arrived), loop.time())

    def done(self) -> None:
        self.in_flight -= 1


def _refusal(message: str, headers: dict[str, str]) -> Response:
    body = {"error": {"message": message, "type": "rate_limit_error", "code": "rate_limit_exceeded"}}
    return 429, json.dumps(body).encode(), headers
