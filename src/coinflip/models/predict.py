"""Send every pending request with N in flight and hand on the replies that land in one turn of the event
loop together, after the next requests went, so bookkeeping never delays a request."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Generic, Protocol, TypeVar

from .base import Model, Reply, Request, Unanswered

T = TypeVar("T")
RAMP = 8  # workers started per turn of the event loop
MAX_BATCH = 256  # a model that never yields (a baseline) would pile every reply up here, deaf to Ctrl-C
Landed = list[tuple[T, Request, Reply]]
FollowUp = Callable[[T, Request, Reply], list[tuple[T, Request]]]


def custom_id(request: Request) -> str:
    """A request's key in a round and in a batch's lines: stable across runs."""
    return f"q{request.id}-r{request.repeat}" + ("-forced" if request.forced else "")


class Gatherer:
    """A model that answers its requests all together (a batch): each waits for the round, which begins
    once a turn of the event loop adds none; `_answers` answers the round's by custom_id (one missing: Unanswered)."""

    gathers = True  # the runner hands this model every request at once
    _answers: Callable[[dict[str, Request]], Awaitable[dict[str, Reply]]]

    def __init__(self) -> None:
        self.waiting: dict[str, tuple[Request, asyncio.Future[Reply]]] = {}  # for the next round
        self.rounds: list[asyncio.Task[None]] = []

    async def complete(self, request: Request) -> Reply:
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        if not self.waiting:  # none gathered yet: a round begins
            self.rounds.append(asyncio.create_task(self._run_round()))
        self.waiting[custom_id(request)] = (request, future)
        return await future

    async def _run_round(self) -> None:
        """Once a turn of the event loop adds no request, answer the waiting ones."""
        count = -1
        while count != len(self.waiting):
            count = len(self.waiting)
            for _ in range(2):
                await asyncio.sleep(0)
        waiting, self.waiting, failed = self.waiting, {}, None
        try:
            replies = await self._answers({key: request for key, (request, _) in waiting.items()})
        except Exception as exc:  # each waiting request gets it (a fatal answer)
            replies, failed = {}, exc
        for key, (_, future) in waiting.items():
            if not future.done() and key in replies:
                future.set_result(replies[key])
            elif not future.done():
                future.set_exception(failed or Unanswered())

    async def aclose(self) -> None:
        for task in self.rounds:  # those not done yet
            task.cancel()


class Gate(Protocol):
    async def admit(self, request: Request) -> bool: ...

    def hold(self, request: Request) -> None: ...

    def settle(self, request: Request, reply: Reply | None) -> None: ...


class _Flow(Generic[T]):
    def __init__(
        self, model: Model, on_replies: Callable[[Landed[T]], None], follow_up: FollowUp[T] | None, gate: Gate | None
    ) -> None:
        self.model, self.on_replies, self.follow_up, self.gate = model, on_replies, follow_up, gate
        self.loop = asyncio.get_running_loop()
        self.landed: Landed[T] = []
        self.failed: asyncio.Future[None] = self.loop.create_future()
        self.together = getattr(model, "gathers", False)  # a batch: follow-ups side by side, in one batch
        self.paid: Callable[[Request], bool] = getattr(model, "paid", lambda _: False)
        self.unsaved: dict[int, Reply] = getattr(model, "unsaved", {})

    def hand_on(self) -> None:
        batch = self.landed.copy()
        self.landed.clear()
        if batch:
            try:
                self.on_replies(batch)
            except BaseException as exc:  # e.g. disk full: stop the run rather than lose replies
                if not self.failed.done():
                    self.failed.set_exception(exc)

    async def send(self, queue: list[tuple[T, Request]]) -> bool:
        """`queue` and its replies' follow-ups (side by side for a model that gathers: one batch);
        False when the gate refused a request, which ends the worker."""
        helpers: list[asyncio.Task[bool]] = []
        try:
            while queue and not self.failed.done():
                item, request = queue.pop()
                if self.gate is not None and self.paid(request):  # billed whatever happens: read, never refused
                    self.gate.hold(request)
                elif self.gate is not None and not await self.gate.admit(request):
                    return False
                try:
                    reply: Reply | None = await self.model.complete(request)
                except Unanswered:  # stays owed: nothing recorded, no follow-up
                    reply = None
                except BaseException:  # a stop between attempts: what the failed ones were billed lands in its row
                    if billed := self.unsaved.pop(id(request), None):
                        self.landed.append((item, request, billed))
                    raise
                if self.gate is not None:  # its hold goes either way, or the others wait on it forever
                    self.gate.settle(request, reply)
                if reply is None:
                    await asyncio.sleep(0)  # a model that never yields (a request file): a stop lands here
                    continue
                if not self.landed:
                    self.loop.call_soon(self.hand_on)
                self.landed.append((item, request, reply))
                more = self.follow_up(item, request, reply) if self.follow_up is not None else []
                if self.together:
                    helpers += [asyncio.create_task(self.send([pair])) for pair in more[1:]]
                    more = more[:1]
                queue.extend(more)
                if len(self.landed) >= MAX_BATCH:  # a model that never yields: hand on, and let the loop breathe
                    self.hand_on()
                    await asyncio.sleep(0)
            return all(await asyncio.gather(*helpers))
        finally:
            for helper in helpers:
                helper.cancel()


async def run_requests(
    model: Model, work: Iterable[tuple[T, Request]], concurrency: int, on_replies: Callable[[Landed[T]], None],
    follow_up: FollowUp[T] | None = None, gate: Gate | None = None,
) -> None:  # fmt: skip
    """`on_replies` gets every reply once, in batches, also on cancel; `follow_up` may ask for more requests
    about a sample (a forced answer), sent by the same worker first; a request `gate` refuses ends its worker."""
    flow = _Flow(model, on_replies, follow_up, gate)
    pending = iter(sorted(work, key=lambda pair: not flow.paid(pair[1])) if flow.together else work)  # paid first

    async def worker() -> None:
        for first in pending:
            if flow.failed.done() or not await flow.send([first]):  # a full disk, or the budget spent
                return

    tasks: list[asyncio.Task[None]] = []
    try:
        for n in range(concurrency):  # a few per turn of the loop, so the first requests leave at once
            tasks.append(asyncio.create_task(worker()))
            if n % RAMP == RAMP - 1:
                await asyncio.sleep(0)
        everything = asyncio.gather(*tasks)
        everything.add_done_callback(lambda f: f.cancelled() or f.exception())  # seen: re-raised below
        either: list[asyncio.Future[Any]] = [everything, flow.failed]
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if not flow.failed.done():
            everything.result()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        flow.hand_on()
        error = flow.failed.exception() if flow.failed.done() else None
    if error is not None:
        raise error
