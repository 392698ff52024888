"""Model stage: send every pending request with N in flight and hand each reply on as it lands.

Workers pull from one shared iterator, so a slow or retried request holds up nobody else.
A fatal server answer (bad key, unknown model) cancels the rest and propagates at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import TypeVar

from .models.base import Model, Reply, Request

T = TypeVar("T")


async def run_requests(
    model: Model, work: Iterable[tuple[T, Request]], concurrency: int, on_reply: Callable[[T, Request, Reply], None]
) -> None:
    """`work` pairs each request with whatever the caller needs back (its record) and is read lazily."""
    pending = iter(work)

    async def worker() -> None:
        for item, request in pending:
            on_reply(item, request, await model.complete(request))

    tasks = [asyncio.create_task(worker()) for _ in range(concurrency)]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
