"""Model stage: send every pending request with N in flight and hand the replies on as they land.

Workers pull from one shared iterator, so a slow or retried request holds up nobody else.
A worker sends its next request before anything is done with the reply it just got: the
replies that land in one turn of the event loop are handed on together, right after, so
bookkeeping (writing, progress) never sits between a reply and the next request.
A fatal server answer (bad key, unknown model) cancels the rest and propagates at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, Protocol, TypeVar

from .base import Model, Reply, Request

T = TypeVar("T")


class Gate(Protocol):
    """Holds each request until it may go (--max-cost's budget), and hears what it cost."""

    async def admit(self, request: Request) -> bool: ...

    def settle(self, request: Request, reply: Reply) -> None: ...


RAMP = 8  # workers started per turn of the event loop
MAX_BATCH = 256  # a model that never yields (a baseline) would pile every reply up here, deaf to Ctrl-C
Landed = list[tuple[T, Request, Reply]]


async def run_requests(
    model: Model,
    work: Iterable[tuple[T, Request]],
    concurrency: int,
    on_replies: Callable[[Landed[T]], None],
    follow_up: Callable[[T, Request, Reply], list[tuple[T, Request]]] | None = None,
    gate: Gate | None = None,
) -> None:
    """`work` pairs each request with whatever the caller needs back (its record); read lazily.
    `on_replies` gets every reply exactly once, in batches, also when the run is cancelled.
    `follow_up` may ask, right after a reply, for more requests about the same sample (a forced
    answer); the same worker sends them before it takes new work. A request `gate` refuses ends its worker.
    """
    pending = iter(work)
    loop = asyncio.get_running_loop()
    landed: Landed[T] = []
    failed: asyncio.Future[None] = loop.create_future()

    def hand_on() -> None:
        batch = landed.copy()
        landed.clear()
        if batch:
            try:
                on_replies(batch)
            except BaseException as exc:  # e.g. disk full: stop the run rather than lose replies
                if not failed.done():
                    failed.set_exception(exc)

    async def worker() -> None:
        for first in pending:
            queue = [first]
            while queue:
                if failed.done():
                    return
                item, request = queue.pop()
                if gate is not None and not await gate.admit(request):
                    return
                reply = await model.complete(request)
                if gate is not None:
                    gate.settle(request, reply)
                if not landed:
                    loop.call_soon(hand_on)
                landed.append((item, request, reply))
                if follow_up is not None:
                    queue.extend(follow_up(item, request, reply))
                if len(landed) >= MAX_BATCH:  # a model that never yields: hand on, and let the loop breathe
                    hand_on()
                    await asyncio.sleep(0)

    tasks: list[asyncio.Task[None]] = []
    try:
        await _start(tasks, worker, concurrency)
        everything = asyncio.gather(*tasks)
        everything.add_done_callback(lambda f: f.cancelled() or f.exception())  # seen: re-raised below
        await asyncio.wait((everything, failed), return_when=asyncio.FIRST_COMPLETED)
        if not failed.done():
            everything.result()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        hand_on()
        error = failed.exception() if failed.done() else None
    if error is not None:
        raise error


async def _start(tasks: list[asyncio.Task[None]], worker: Callable[[], Coroutine[Any, Any, None]], n: int) -> None:
    """`n` workers into `tasks`, a few per turn of the loop, so the first requests leave at once."""
    for i in range(n):
        tasks.append(asyncio.create_task(worker()))
        if i % RAMP == RAMP - 1:
            await asyncio.sleep(0)
