"""The limits policy on its own (models/limits.py), against simulated endpoints on a simulated
clock: token buckets, in-flight limits, one-slot servers and servers without limits."""

from __future__ import annotations

import copy
import heapq
import math
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coinflip.models.limits import Limiter, Traffic, describe
from coinflip.models.openai_api import BACKOFF_CAP, OpenAIClient, limit_wait
from coinflip.records import checked_requests as checked
from coinflip.records import requests_line as line


@dataclass
class Bucket:
    """A token bucket answering 429 with a Retry-After in whole seconds (or none)."""

    rate: float
    burst: int
    retry_after: bool = True
    tokens: float = 0.0
    filled: float = 0.0

    def __post_init__(self) -> None:
        self.tokens = float(self.burst)

    def accept(self, now: float) -> tuple[bool, float | None]:
        self.tokens = min(float(self.burst), self.tokens + (now - self.filled) * self.rate)
        self.filled = now
        if self.tokens < 1:
            return False, float(max(1, math.ceil((1 - self.tokens) / self.rate))) if self.retry_after else None
        self.tokens -= 1
        return True, None


@dataclass
class Capped:
    """At most `cap` in flight; beyond, 429 without Retry-After."""

    cap: int
    now_in: int = 0

    def accept(self, now: float) -> tuple[bool, float | None]:
        if self.now_in >= self.cap:
            return False, None
        self.now_in += 1
        return True, None

    def release(self) -> None:
        self.now_in -= 1


@dataclass
class Result:
    elapsed: float
    limiter: Limiter
    latencies: list[float] = field(default_factory=list)
    most_in_flight_late: int = 0  # after the first `late_after` replies


def simulate(limiter: Limiter, server: object, total: int, latency: float = 0.0, late_after: int = 0) -> Result:
    """Send `total` requests through `limiter` to `server` until each is accepted; replies take
    `latency` (a `service` attribute on the server serves them one at a time instead)."""
    now, done, waiting_copies = 0.0, 0, total
    flight: list[tuple[float, float]] = []  # (finish, sent)
    busy_until = 0.0
    result = Result(0.0, limiter)
    service = getattr(server, "service", None)
    for _ in range(1_000_000):
        while waiting_copies and limiter.delay(now) <= 0:
            limiter.send(now)
            ok, retry = server.accept(now)  # type: ignore[attr-defined]
            if not ok:
                limiter.rejected(now, now, retry)
                continue
            waiting_copies -= 1
            if service is not None:
                busy_until = max(busy_until, now) + service
                heapq.heappush(flight, (busy_until, now))
            else:
                heapq.heappush(flight, (now + latency, now))
            if done >= late_after:
                result.most_in_flight_late = max(result.most_in_flight_late, len(flight))
        if done == total:
            break
        wait = limiter.delay(now) if waiting_copies else math.inf
        if flight and flight[0][0] <= now + wait:
            now, sent = heapq.heappop(flight)
            limiter.succeeded(now, sent, 10)
            result.latencies.append(now - sent)
            if hasattr(server, "release"):
                server.release()
            done += 1
        else:
            assert math.isfinite(wait), "nothing in flight and nothing may go: the limiter is stuck"
            now += max(wait, 1e-6)
    result.elapsed = now
    return result


@settings(max_examples=40, deadline=None)
@given(rate=st.floats(2, 40), burst=st.integers(1, 10), latency=st.sampled_from([0.0, 0.2, 0.5]))
def test_a_token_bucket_with_retry_after_is_met_near_its_rate(rate: float, burst: int, latency: float) -> None:
    total = int(rate * 20)
    result = simulate(Limiter(32), Bucket(rate, burst), total, latency)
    ideal = (total - burst) / rate + latency
    assert result.elapsed <= 1.5 * ideal + 2.0
    assert result.limiter.traffic.rejected <= 0.1 * total + 32
    assert result.limiter.traffic.succeeded == total


@settings(max_examples=20, deadline=None)
@given(rate=st.floats(2, 40), burst=st.integers(2, 10), latency=st.sampled_from([0.0, 0.2, 0.5]))
def test_a_token_bucket_without_retry_after_is_met_too(rate: float, burst: int, latency: float) -> None:
    """Gateways drop Retry-After: the level of requests in flight, spread out, finds the rate (a
    bucket of one, refusing any two requests sent close together, can take up to 3.5 x)."""
    total = int(rate * 20)
    result = simulate(Limiter(32), Bucket(rate, burst, retry_after=False), total, latency)
    ideal = (total - burst) / rate + latency
    assert result.elapsed <= 2.0 * ideal + 2.0
    assert result.limiter.traffic.rejected <= 0.25 * total + 32


@settings(max_examples=30, deadline=None)
@given(cap=st.integers(1, 40), latency=st.sampled_from([0.05, 0.2, 1.0]))
def test_an_in_flight_limit_without_retry_after_is_found(cap: int, latency: float) -> None:
    total = 400
    result = simulate(Limiter(64), Capped(cap), total, latency)
    ideal = math.ceil(total / cap) * latency
    assert result.elapsed <= 1.3 * ideal + 4 * latency
    assert result.limiter.traffic.rejected <= 0.2 * total + 64
    assert result.limiter.traffic.low and result.limiter.traffic.low <= cap


def test_a_server_without_limits_gets_every_request_at_once_after_the_first_replies() -> None:
    limiter = Limiter(128)
    result = simulate(limiter, Capped(10**9), 3333, 0.2)
    assert limiter.traffic.peak == 128 and limiter.traffic.low == 0
    assert result.elapsed == pytest.approx(0.2 + math.ceil((3333 - 4) / 128) * 0.2)  # the first wave: one reply


def test_a_one_slot_server_that_publishes_nothing_is_found_by_its_first_replies() -> None:
    """60 questions, 300 ms each (Ollama or LM Studio with one slot): the first wave of 4 shows
    replies one after another, and the rest go one at a time: latencies are the model's time."""

    @dataclass
    class OneSlot(Capped):
        service: float = 0.3

    result = simulate(Limiter(32), OneSlot(10**9), 60, late_after=4)
    assert result.limiter.queue_cap == 1 and result.limiter.traffic.low == 1
    assert result.limiter.traffic.peak == 4 and result.most_in_flight_late <= 1
    assert sum(result.latencies) <= 1.2 * result.elapsed and result.elapsed <= 1.5 * 60 * 0.3


@pytest.mark.parametrize(
    ("times", "tokens", "serial"),
    [
        ((1, 2, 3, 4), (10, 10, 10, 10), True),  # alike, one after another
        ((3, 4, 5, 6), (30, 10, 10, 10), True),  # a long one first, then the rest behind it
        ((1, 1, 1.1, 1.2), (10, 10, 10, 10), False),  # side by side
        ((1, 1.5, 2.2, 2.9), (10, 15, 22, 29), False),  # side by side, each as long as its answer
    ],
)
def test_the_first_wave_is_one_at_a_time_only_when_each_reply_took_the_work_before_it(
    times: tuple[float, ...], tokens: tuple[int, ...], serial: bool
) -> None:
    limiter = Limiter(32)
    for _ in range(4):
        limiter.send(0.0)
    assert limiter.delay(0.0) == math.inf  # the first wave is 4
    for at, n in zip(times, tokens, strict=True):
        limiter.succeeded(at, 0.0, n)
    assert limiter.serial is serial and limiter.allowed() == (1 if serial else 32)


def test_published_slots_are_kept_to() -> None:
    limiter = Limiter(32)
    limiter.serves(1)
    limiter.send(0.0)
    assert limiter.delay(0.0) == math.inf and limiter.traffic.slots == 1
    limiter.succeeded(1.0, 0.0)
    assert limiter.delay(1.0) == 0.0 and limiter.allowed() == 1


def test_a_retry_after_pauses_every_new_request_not_only_the_refused_one() -> None:
    limiter = Limiter(8)
    for _ in range(3):
        limiter.send(10.0)
    limiter.rejected(10.0, 10.0, 2.0)
    assert limiter.delay(10.0) == pytest.approx(2.0)
    assert limiter.delay(12.0) == 0.0 or limiter.rate is not None


def test_a_timeout_keeps_the_level_to_half_of_what_completed_meanwhile() -> None:
    limiter = Limiter(32)
    for _ in range(32):
        limiter.send(0.0)
    for _ in range(6):
        limiter.succeeded(20.0, 0.0)  # the server answered six in the time...
    limiter.timed_out(120.0, 0.0, 6)  # ...this one waited out the timeout behind the rest
    assert limiter.allowed() == 3 and limiter.traffic.timeouts == 1
    # 25 requests are still in the server's hands, this one's copy too: at 6 per 120 s, nothing new
    # (the retry included) goes until the server has had the time to get through them
    assert limiter.paused_until == pytest.approx(240.0)  # (capped at one more timeout's length)
    stalled = Limiter(4)
    stalled.send(0.0)
    stalled.timed_out(120.0, 0.0, 0)  # nothing else completed: a stalled request, no sign of a queue
    assert stalled.allowed() == 4


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "3"}, 3.0),
        ({"retry-after-ms": "250", "retry-after": "1"}, 0.25),
        ({"x-ratelimit-reset-requests": "1s", "x-ratelimit-reset-tokens": "6m0s"}, 1.0),
        ({"x-ratelimit-reset-requests": "20ms"}, 0.02),
        ({"x-ratelimit-reset-tokens": "1m30.5s"}, 60.0),
        ({"x-ratelimit-reset-requests": "soon"}, None),
        ({}, None),
    ],
)
def test_how_long_a_refusal_asks_to_wait(headers: dict[str, str], expected: float | None) -> None:
    assert limit_wait(headers) == (pytest.approx(expected) if expected is not None else None)


def test_the_report_record_says_what_happened_and_how_to_fix_it() -> None:
    traffic = Traffic(sent=120, succeeded=100, rejected=15, timeouts=2, retried=3, waited_s=4.25, peak=32, low=8)
    record = describe(traffic, 32)
    assert record["refused"] == 15 and record["in_flight_lowest_limit"] == 8 and record["waited_on_limits_s"] == 4.25
    assert any("--timeout" in h for h in record["hints"]) and any("lost none" in h for h in record["hints"])
    shown = line(record)
    assert "120 sent" in shown and "15 refused" in shown and "lowered to 8" in shown and "2 timeouts" in shown


def test_a_refusal_that_says_come_back_now_is_no_limit_to_learn() -> None:
    """A flaky server's passing 429 with `Retry-After: 0`: counted, and nothing slows down."""
    limiter = Limiter(32)
    for _ in range(3):
        limiter.send(1.0)
    limiter.rejected(1.0, 1.0, 0.0)
    assert limiter.traffic.rejected == 1 and limiter.allowed() == 32 and limiter.delay(1.0) == 0.0


def test_come_back_now_said_again_before_any_success_is_a_limit() -> None:
    """A server answering every request 429 with `Retry-After: 0` got some 1,700 requests a second
    until --patience ran out (300 s: half a million): the second such refusal in a row slows down
    as one without the header does, and a success makes the next one passing again."""
    limiter = Limiter(32)
    limiter.send(1.0)
    limiter.rejected(1.0, 1.0, 0.0)
    assert limiter.delay(1.0) == 0.0
    limiter.send(1.0)
    limiter.rejected(1.0, 1.0, 0.0)
    assert limiter.delay(1.0) > 0.0 and limiter.traffic.rejected == 2
    limiter.send(5.0)
    limiter.succeeded(5.1, 5.0)
    twin = copy.deepcopy(limiter)
    for each in (limiter, twin):
        each.send(6.0)
    limiter.rejected(6.0, 6.0, 0.0)
    twin.failed()  # no signal about load: what a passing refusal is
    assert limiter.delay(6.0) == twin.delay(6.0) and limiter.allowed() == twin.allowed()


def test_a_record_read_back_is_checked() -> None:
    record = describe(Traffic(sent=3, succeeded=3, peak=2), 32)
    assert checked(record) == record
    assert checked({**record, "sent": -1}) is None and checked({**record, "sent": True}) is None
    assert checked({**record, "hints": "x" * 600}) is None and checked([record]) is None
    assert checked({**record, "extra": 1}) is None and checked({**record, "waited_on_limits_s": float("nan")}) is None


def test_the_backoff_stays_at_its_cap_after_a_thousand_retries() -> None:
    """--retries 2000 against an endpoint that fails for hours (a patience to match): the 1,025th retry's
    0.25 * 2 ** 1024 was an OverflowError, which ended the run in a traceback."""
    client = OpenAIClient("m", "http://127.0.0.1:9/v1", retries=2000)
    assert all(BACKOFF_CAP / 2 <= client._delay(attempt, None) <= BACKOFF_CAP * 1.5 for attempt in (6, 1025, 5000))
