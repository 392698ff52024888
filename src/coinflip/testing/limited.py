"""The test server's limits, as hosted endpoints and small servers have them: a token bucket and an in-flight
cap that answer 429, and slots that serve requests one after another (llama.cpp's server)."""

from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import dataclass
from typing import Any

Response = tuple[int, bytes, dict[str, str]]


def reply_json(status: int, payload: Any, headers: dict[str, str] | None = None) -> Response:
    return status, json.dumps(payload).encode(), headers or {}


def error_json(status: int, message: str, param: str | None = None) -> Response:
    """An error as OpenAI's API words it."""
    return reply_json(
        status, {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": None}}
    )


@dataclass
class Limits:
    rate: float = 0.0  # requests per second (a token bucket); 0: no limit
    burst: int = 1  # the bucket's size
    retry_after: bool = True  # a rate-limit 429 says when to come back, in whole seconds
    max_in_flight: int = 0  # 429 without Retry-After beyond this many in flight; 0: no limit
    slots: int = 0  # serve this many at a time, the rest wait in line; 0: all at once
    publish_slots: bool = True  # say so at /props, as llama.cpp's server does
    owned_by: str = ""  # what /v1/models names as each model's owner ("me": as the Python llama.cpp server)


class Gate:
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

    def admit(self) -> Response | None:
        """None: admitted (then `serve` it); else the 429 to answer."""
        limits = self.limits
        if limits.rate > 0:
            now = time.monotonic()
            self.tokens = min(float(max(1, limits.burst)), self.tokens + (now - self.filled) * limits.rate)
            self.filled = now
            if self.tokens < 1.0:
                wait = math.ceil((1.0 - self.tokens) / limits.rate)
                return self._refuse("rate limit reached for requests", {"Retry-After": str(max(1, wait))})
            self.tokens -= 1.0
        if limits.max_in_flight and self.in_flight >= limits.max_in_flight:
            return self._refuse("too many concurrent requests")
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        return None

    def _refuse(self, message: str, headers: dict[str, str] | None = None) -> Response:
        self.refused += 1
        body = {"error": {"message": message, "type": "rate_limit_error", "code": "rate_limit_exceeded"}}
        return reply_json(429, body, headers if self.limits.retry_after else None)

    async def serve(self, latency: float, arrived: float) -> None:
        """Take `latency` to answer: from arrival, or, with slots, once a slot is free."""
        loop = asyncio.get_running_loop()
        try:
            if self.limits.slots:
                self._slots = self._slots or asyncio.Semaphore(self.limits.slots)
                async with self._slots:
                    await asyncio.sleep(latency)
            elif latency:  # counted from arrival, so the server's own work is part of the latency
                await asyncio.sleep(max(0.0, latency - (loop.time() - arrived)))
        finally:
            self.in_flight -= 1
        self.latencies.append(loop.time() - arrived)
        self.window = (min(self.window[0], arrived), loop.time())
