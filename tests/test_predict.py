"""The model stage: N in flight, every reply handed on exactly once, also when the run stops."""

from __future__ import annotations

import asyncio
import random

import pytest

from coinflip.errors import FatalAPIError
from coinflip.models.base import Reply, Request
from coinflip.models.predict import MAX_BATCH, run_requests


class Sleepy:
    """A model that takes a random short time per request and counts how many are in flight."""

    name = "sleepy"

    def __init__(self, fail_at: int | None = None) -> None:
        self.in_flight = 0
        self.most = 0
        self.started = 0
        self.fail_at = fail_at
        self.rng = random.Random(0)

    async def complete(self, request: Request) -> Reply:
        self.started += 1
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            await asyncio.sleep(self.rng.uniform(0, 0.004))
            if request.id == self.fail_at:
                raise FatalAPIError("401 unauthorized")
            return Reply(text=f"ANSWER: {request.id}")
        finally:
            self.in_flight -= 1

    async def aclose(self) -> None:
        return None


def work(n: int) -> list[tuple[int, Request]]:
    return [(i, Request(i, f"p{i}", f"q{i}")) for i in range(n)]


def test_every_reply_once_with_at_most_n_in_flight() -> None:
    model, batches = Sleepy(), []
    asyncio.run(run_requests(model, work(300), 16, batches.append))
    got = [item for batch in batches for item, _, _ in batch]
    assert sorted(got) == list(range(300))
    assert all(reply.text == f"ANSWER: {item}" for batch in batches for item, _, reply in batch)
    assert model.most == 16
    assert len(batches) < 300  # replies that land in the same turn are handed on together


def test_a_failing_handler_stops_the_run_and_its_error_comes_out() -> None:
    model = Sleepy()

    def broken(batch: list[tuple[int, Request, Reply]]) -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        asyncio.run(run_requests(model, work(500), 8, broken))
    assert model.started < 500


def test_a_fatal_answer_cancels_the_rest_and_keeps_what_landed() -> None:
    model, batches = Sleepy(fail_at=100), []
    with pytest.raises(FatalAPIError):
        asyncio.run(run_requests(model, work(1000), 8, batches.append))
    got = [item for batch in batches for item, _, _ in batch]
    assert len(got) == len(set(got)) and 80 < len(got) < 200
    assert 100 not in got


def test_cancelling_hands_on_what_already_landed() -> None:
    batches: list[list[tuple[int, Request, Reply]]] = []

    async def main() -> None:
        task = asyncio.create_task(run_requests(Sleepy(), work(10_000), 8, batches.append))
        while not batches:  # some replies have landed
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    got = [item for batch in batches for item, _, _ in batch]
    assert 0 < len(got) < 10_000 and len(got) == len(set(got))


class Instant:
    """Answers without ever yielding to the event loop, as the baselines do."""

    name = "instant"

    async def complete(self, request: Request) -> Reply:
        return Reply(text="ANSWER: YES")

    async def aclose(self) -> None:
        return None


def test_a_model_that_never_yields_is_handed_on_in_bounded_batches() -> None:
    sizes: list[int] = []
    asyncio.run(run_requests(Instant(), work(5000), 4, lambda batch: sizes.append(len(batch))))
    assert sum(sizes) == 5000 and max(sizes) <= MAX_BATCH
