"""Model stage: send every pending request with N in flight and hand each reply on as it lands.

Workers pull from one shared iterator, so a slow or retried request holds up nobody else.
A fatal server answer (bad key, unknown model) cancels the rest and propagates at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from .models.base import Model, Reply, Request


async def run_requests(
    model: Model, requests: Iterable[Request], concurrency: int, on_reply: Callable[[Request, Reply], None]
) -> None:
    pending = iter(requests)

    async def worker() -> None:
        for request in pending:
            on_reply(request, await model.complete(request))

    tasks = [asyncio.create_task(worker()) for _ in range(concurrency)]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
