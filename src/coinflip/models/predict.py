"""Model stage: send every pending request with N in flight and hand the replies on as they land.

Workers pull from one shared iterator, so a slow or retried request holds up nobody else.
A worker sends its next request before anything is done with the reply it just got: the
replies that land in one turn of the event loop are handed on together, right after, so
bookkeeping (writing, progress) never sits between a reply and the next request.
A fatal server answer (bad key, unknown model) cancels the rest and propagates at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from .base import Model, Reply, Request, Unanswered

T = TypeVar("T")
RAMP = 8  # workers started per turn of the event loop
MAX_BATCH = 256  # a model that never yields (a baseline) would pile every reply up here, deaf to Ctrl-C
Landed = list[tuple[T, Request, Reply]]


async def run_requests(
    model: Model,
    work: Iterable[tuple[T, Request]],
    concurrency: int,
    on_replies: Callable[[Landed[T]], None],
    follow_up: Callable[[T, Request, Reply], list[tuple[T, Request]]] | None = None,
) -> None:
    """`work` pairs each request with whatever the caller needs back (its record) and is read lazily.

    `on_replies` gets every reply exactly once, in batches, also when the run is cancelled.
    `follow_up` may ask, right after a reply, for more requests about the same sample (a forced
    answer); the same worker sends them before it takes new work (side by side for a model that
    gathers requests into batches: one batch, not one per choice).
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

    together = getattr(model, "gathers", False)  # a batch: follow-ups side by side, in one batch

    async def send(queue: list[tuple[T, Request]]) -> None:
        helpers: list[asyncio.Task[None]] = []
        try:
            while queue and not failed.done():
                item, request = queue.pop()
                try:
                    reply = await model.complete(request)
                except Unanswered:  # stays owed: nothing recorded, no follow-up
                    continue
                if not landed:
                    loop.call_soon(hand_on)
                landed.append((item, request, reply))
                more = follow_up(item, request, reply) if follow_up is not None else []
                if together:
                    helpers += [asyncio.create_task(send([pair])) for pair in more[1:]]
                    more = more[:1]
                queue.extend(more)
                if len(landed) >= MAX_BATCH:  # a model that never yields: hand on, and let the loop breathe
                    hand_on()
                    await asyncio.sleep(0)
            await asyncio.gather(*helpers)
        finally:
            for helper in helpers:
                helper.cancel()

    async def worker() -> None:
        for first in pending:
            await send([first])

    tasks: list[asyncio.Task[None]] = []
    try:
        for n in range(concurrency):  # a few per turn of the loop, so the first requests leave at once
            tasks.append(asyncio.create_task(worker()))
            if n % RAMP == RAMP - 1:
                await asyncio.sleep(0)
        everything = asyncio.gather(*tasks)
        everything.add_done_callback(lambda f: f.cancelled() or f.exception())  # seen: re-raised below
        either: list[asyncio.Future[Any]] = [everything, failed]
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
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
