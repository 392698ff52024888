"""How many requests an endpoint gets, and when: pure bookkeeping (each call is given `now`). The level falls
on a refusal, a one-at-a-time server, queueing or timeouts, and each success grows it by 1/level."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from ..records import Requests

PERIOD_MAX = 4096  # send times kept to measure a rate
SHORT_S = 0.25  # a stretch shorter than this shows a burst, not a rate
UNDER = 0.95  # pace this much under the rate the endpoint was measured to accept
CREEP = 0.02  # per second: how fast a measured pace grows back (linearly)
CLIMB = 1.0  # doublings per second of a guessed pace (counted over less than a window)
NEAR = 1.5  # within this factor of the level at the last refusal, the level grows...
NEAR_GROWTH = 0.25  # ...this much per round of replies, not one
QUEUE_MIN_S = 0.25  # a reply slower than this, beyond the fastest, is worth a look for queueing
QUEUE_SAMPLES = 8  # replies needed before the queueing estimate is trusted
QUEUE_FACTOR = 4  # in flight beyond this many times the served parallelism (plus 2) is a queue
PROBE = 4  # without published slots, the first requests go this many at once: their replies tell...
SERIAL = 0.7  # ...a server serving one at a time, each taking this share of the work before it and its own


@dataclass
class Traffic:
    """What one endpoint saw, for the terminal and the report."""

    sent: int = 0
    succeeded: int = 0
    rejected: int = 0  # 429 and 503/529 "overloaded"
    timeouts: int = 0
    retried: int = 0  # attempts after a failure that was not a rejection
    waited_s: float = 0.0  # time requests spent held back by the limits
    peak: int = 0  # most requests in flight at once
    low: int = 0  # the lowest level the limits fell to (0: never lowered)
    slots: int | None = None  # what the server said it can serve at once


def describe(traffic: Traffic, ceiling: int) -> Requests:
    """The report's record of what went to the endpoint, with the hints that fix what went wrong."""
    hints = []
    if traffic.timeouts:
        hints.append(
            f"{traffic.timeouts} request(s) timed out: the server is slower than --timeout; raise it, or lower "
            "--eval-batch-size if requests queue at the server"
        )
    if traffic.retried > traffic.timeouts:
        retries = f"{traffic.retried} retr{'y' if traffic.retried == 1 else 'ies'}"
        hints.append(f"{retries} after failed requests: see the errors in the log")
    if traffic.rejected:
        hints.append(
            f"the endpoint refused {traffic.rejected} request(s) (429 or overloaded); coinflip slowed down and "
            "lost none. --eval-batch-size near the endpoint's limit refuses fewer"
        )
    if traffic.low and traffic.low < ceiling and not traffic.rejected and not traffic.timeouts:
        hints.append(
            f"requests queued at the server: coinflip kept {traffic.low} in flight; --eval-batch-size {traffic.low} "
            "asks for that from the start"
        )
    return {
        "sent": traffic.sent,
        "succeeded": traffic.succeeded,
        "refused": traffic.rejected,
        "timeouts": traffic.timeouts,
        "retries": traffic.retried,
        "in_flight_max": traffic.peak,
        "in_flight_lowest_limit": traffic.low or None,
        "in_flight_setting": ceiling,
        "server_slots": traffic.slots,
        "waited_on_limits_s": round(traffic.waited_s, 3),
        "hints": hints,
    }


class Limiter:
    """One endpoint's level of requests in flight, its pause and its pace."""

    def __init__(self, ceiling: int, now: float = 0.0, probe: bool = True) -> None:
        """`probe`: find a one-at-a-time server by the first replies (not where the user set the level)."""
        self.ceiling = max(1, ceiling)
        self.level = float(self.ceiling)
        self.in_flight, self.paused_until, self.next_send = 0, 0.0, 0.0
        self.rate: float | None = None  # requests per second; None: unpaced
        self.rate_set = (now, 0.0, False)  # when the pace was set, to what, and whether it was measured
        self.period_start = -math.inf  # since the last pause: what was sent, and refused, since then
        self.period_sends: deque[float] = deque(maxlen=PERIOD_MAX)  # when each request went
        self.period_refused: deque[float] = deque(maxlen=PERIOD_MAX)  # when each refused one went
        self.burst: int | None = None  # what the endpoint took at once before its first rejection
        self.queue_cap: int | None = None  # the level queueing showed the server works at
        self.refused_at = 0  # requests in flight beside the last refusal without a Retry-After
        self.spread = False  # send the level's requests spread over a reply's time, not together
        self.passing = False  # a refusal saying "come back now" (Retry-After: 0) since the last success
        self.latency = 0.0  # seconds, a moving average of the replies'
        self.replies: deque[tuple[float, int]] = deque()  # (end, tokens) of the latest replies
        self.reply_tokens, self.fastest = 0, math.inf  # their tokens summed; seconds per token of the fastest
        self.wave: list[tuple[float, int]] | None = [] if probe and self.ceiling > PROBE else None  # first replies
        self.serial = False  # the first replies came one after another: one request at a time
        self.opened = math.inf  # the first send after the first wave: queueing is measured from then
        self.traffic = Traffic()

    def serves(self, slots: int) -> None:
        self.traffic.slots = slots
        self.wave = None
        self.ceiling = max(1, min(self.ceiling, slots))
        self.level = min(self.level, float(self.ceiling))

    def allowed(self) -> int:
        cap = PROBE - len(self.wave) if self.wave is not None else self.queue_cap or self.ceiling  # a wave: no more
        return max(1, min(int(self.level), cap))

    def limiting(self, now: float) -> bool:
        """A limit holds new requests back now (not --eval-batch-size, nor the first wave)."""
        return (self.wave is None and self.allowed() < self.ceiling) or max(self.paused_until, self.next_send) > now

    def delay(self, now: float) -> float:
        """Seconds until a new request may go; math.inf while the level is full (a reply frees it)."""
        if self.in_flight >= self.allowed():
            return math.inf
        wait = max(self.paused_until, self.next_send) - now
        return max(wait, 0.0)

    def send(self, now: float) -> None:
        self.in_flight += 1
        self.traffic.sent += 1
        if self.wave is None and self.opened == math.inf:
            self.opened = now
        self.traffic.peak = max(self.traffic.peak, self.in_flight)
        if self.period_start < self.paused_until <= now:  # the first request after a pause
            self.period_start = now
            self.period_sends.clear()
            self.period_refused.clear()
        self.period_sends.append(now)
        gap = 1.0 / self._pace(now) if self.rate is not None else 0.0
        if self.spread and self.latency:  # the level's requests spread over half a reply's time: no slower
            gap = max(gap, self.latency / self.allowed() / 2)
        if gap:
            self.next_send = max(now, self.next_send) + gap

    def _pace(self, now: float) -> float:
        """The pace grows back: slowly from a measured rate, doubling each second from a guess."""
        when, base, measured = self.rate_set
        dt = max(0.0, now - when)
        self.rate = base * (1.0 + CREEP * dt) if measured else base * 2.0 ** min(dt * CLIMB, 30.0)
        return self.rate

    def succeeded(self, now: float, sent_at: float, tokens: int = 0) -> None:
        self.in_flight -= 1
        self.traffic.succeeded += 1
        self.passing = False
        self.latency += (now - sent_at - self.latency) * (0.1 if self.latency else 1.0)
        near = self.level < NEAR * self.refused_at  # probe slowly near where the endpoint refused
        self.level = min(float(self.ceiling), self.level + (NEAR_GROWTH if near else 1.0) / self.level)
        if self.wave is not None:
            self._first_wave(now - sent_at, max(1, tokens))
        if sent_at >= self.opened:
            self._queueing(now, now - sent_at, tokens)

    def rejected(self, now: float, sent_at: float, retry_after: float | None) -> None:
        """With a Retry-After a rate limit: pause, and pace. Without one the level falls to what was
        in flight beside it; when nothing was, a rate limit too."""
        self.in_flight -= 1
        self.traffic.rejected += 1
        self.wave = None
        if retry_after is not None and retry_after <= 0:
            if not self.passing:
                self.passing = True
                return  # "come back now": a passing refusal, as flaky servers give, not a limit to learn
            retry_after = None  # said again before any success: a limit after all (else a busy loop)
        if sent_at >= self.period_start:
            self.period_refused.append(sent_at)
        if retry_after is None:
            self.refused_at = max(1, self.in_flight)
            self._lower(max(1.0, float(self.in_flight)))
            if self.in_flight >= 1:  # an in-flight limit, or a bucket refusing requests sent together
                self.spread = True
                return
        self._slow_pace(now)
        pause = retry_after if retry_after is not None else 1.0 / (self.rate or 1.0)
        self.paused_until = max(self.paused_until, now + pause)

    def timed_out(self, now: float, sent_at: float, completed: int) -> None:
        """The server gets through `completed` in a timeout: keep to half, and pause until it can have
        finished what it holds (the abandoned copy too). With none completed, a stall: no signal."""
        self.in_flight -= 1
        self.traffic.timeouts += 1
        self.wave = None
        if completed:
            self._lower(max(1.0, completed / 2))
            served = completed / max(now - sent_at, 1e-3)  # requests per second the server gets through
            self.paused_until = max(self.paused_until, now + min((self.in_flight + 1) / served, now - sent_at))

    def failed(self) -> None:
        """5xx, a dropped connection, a broken reply: no signal about load."""
        self.in_flight -= 1
        self.wave = None

    def _lower(self, level: float) -> None:
        if level < self.level:
            self.level = level
            low = max(1, int(level))
            self.traffic.low = min(self.traffic.low, low) if self.traffic.low else low

    def _slow_pace(self, now: float) -> None:
        """A bucket accepts at most burst + rate x stretch: the tightest stretch (SHORT_S+) since the pause
        measures the rate; a shorter period shows the burst, and the pace is a guess that doubles each second."""
        burst = self.burst or 0
        refused = sorted(self.period_refused, reverse=True)
        best, gone = 0.0, 0
        for count, sent in enumerate(reversed(self.period_sends), 1):
            while gone < len(refused) and refused[gone] >= sent:
                gone += 1
            if now - sent >= SHORT_S:
                best = max(best, (count - gone - burst) / (now - sent))
        if now - self.period_start < SHORT_S:
            accepted = max(0, len(self.period_sends) - len(self.period_refused))
            self.burst = accepted if self.burst is None else min(self.burst, accepted)
        current = self._pace(now) if self.rate is not None else None
        if best > 0:  # never below half the pace that was refused: a short stretch bounds the rate loosely
            rate, measured = max(best * UNDER, (current or 0.0) / 2), True
        else:
            rate, measured = max(1.0, float(self.burst or 0)), False
        if self.rate is not None and now - self.rate_set[0] < SHORT_S:
            rate = min(rate, self.rate)  # the rest of one burst of refusals says nothing new
        self.rate = rate
        self.rate_set = (now, rate, measured)
        self.next_send = max(self.next_send, now)

    def _first_wave(self, latency: float, tokens: int) -> None:
        """Served one at a time, the k-th reply took the work of all k (by tokens); a faster one, or a
        last one under QUEUE_MIN_S, opens the level."""
        assert self.wave is not None
        self.wave.append((latency, tokens))
        pace, last = self.wave[0][0] / self.wave[0][1], len(self.wave) == PROBE
        if latency < SERIAL * pace * sum(t for _, t in self.wave) or (last and latency < QUEUE_MIN_S):
            self.wave = None  # side by side: open; after a wave that took a while (a bucket refilled
            self.period_start = -math.inf if latency >= SHORT_S else self.period_start  # meanwhile) measure anew
        elif last:
            self.wave, self.serial, self.queue_cap = None, True, 1
            self._lower(1.0)

    def _queueing(self, now: float, latency: float, tokens: int) -> None:
        """Little's law: replies per second times the fastest reply's time per token is how many the
        server works on at once; far more in flight only wait in its queue."""
        tokens = max(1, tokens)
        self.fastest = min(self.fastest, latency / tokens)
        self.replies.append((now, tokens))
        self.reply_tokens += tokens
        while len(self.replies) > max(QUEUE_SAMPLES, self.allowed()):
            self.reply_tokens -= self.replies.popleft()[1]
        span = now - self.replies[0][0]
        if len(self.replies) < QUEUE_SAMPLES or span <= 0 or latency < QUEUE_MIN_S:
            return
        served = (self.reply_tokens - self.replies[0][1]) / span * self.fastest
        if self.queue_cap is None and self.in_flight + 1 > QUEUE_FACTOR * served + 2:
            self.queue_cap = max(1, round(served)) + 1
            self._lower(float(self.queue_cap))
        elif self.queue_cap is not None and not self.serial:
            self.queue_cap = max(self.queue_cap, min(self.ceiling, max(1, round(served)) + 1))
