"""SIGINT, SIGTERM and SIGHUP cancel the run's task in its loop, as asyncio.Runner carries Ctrl-C, so what
landed is written; elsewhere `Interrupted` is raised (after a `held` step), or the process ends."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import signal
import sys
import threading
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from types import FrameType
from typing import Any, TypeVar

from .._signals import NAMES, exit_now, said

T = TypeVar("T")
GRACE_S = 20  # the longest a first signal may take to end the process


class Interrupted(BaseException):
    """A stop signal (args[0]: its name); not a KeyboardInterrupt, which click and asyncio treat specially."""


def stopped_by(exc: BaseException | str | None) -> str:
    return said(exc if isinstance(exc, str) else exc.args[0] if isinstance(exc, Interrupted) and exc.args else None)


class StopRequest:
    """The stop signal received, and where the run is (held, or a task in flight)."""

    def __init__(self) -> None:
        self.signal: str | None = None
        self.hint = ""  # appended to the line of a forced exit: how to resume
        self.holds = 0
        self.task: asyncio.Task[Any] | None = None
        self.previous: dict[int, Any] = {}  # what `install` replaced, for `restore`
        self.hook: Any = None

    def handler(self, signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.signal is not None:
            self.exit_now(f"{said(name)} again")
        self.signal = name
        self.previous.setdefault(signal.SIGALRM, signal.getsignal(signal.SIGALRM))  # the caller's, for `restore`
        signal.signal(signal.SIGALRM, self.overdue)  # only now: until a stop, SIGALRM is the caller's
        signal.alarm(GRACE_S)
        if self.task is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed under us: then it is held
                self.task.get_loop().call_soon_threadsafe(self.task.cancel)
                return
        if not self.holds:
            raise Interrupted(name)

    def exit_now(self, why: str) -> None:
        exit_now(f"{why}: exiting now{self.hint}")

    def unraisable(self, unraisable: Any) -> None:
        """`Interrupted` where Python cannot raise would print 'Exception ignored' and go on."""
        if isinstance(unraisable.exc_value, Interrupted):
            self.exit_now(stopped_by(unraisable.exc_value))
        (self.hook or sys.__unraisablehook__)(unraisable)

    @contextlib.contextmanager
    def held(self, then: bool = True) -> Iterator[None]:
        """A step that must finish once begun: a signal during it is raised right after (`then`), or left to the
        next step (`pending`): a run whose report is written whole is what the report says."""
        self.holds += 1
        try:
            yield
        finally:
            self.holds -= 1
        if then and not self.holds and self.signal is not None:
            raise Interrupted(self.signal)

    def run(self, main: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> T:
        """`main(*args)`, its coroutine made in the loop: one made before would be left 'never awaited' by a stop."""
        if asyncio._get_running_loop() is not None:  # called inside a loop (Jupyter): the run's own loop in a thread
            with ThreadPoolExecutor(1) as pool:
                return pool.submit(contextvars.copy_context().run, self.run, main, *args).result()

        async def cancellable() -> T:
            self.task = asyncio.current_task()
            if self.signal is not None and self.task is not None:  # it came while the loop was starting
                self.task.cancel()
            try:
                return await main(*args)
            finally:
                self.task = None

        with self.held(), asyncio.Runner() as runner:  # the loop starts and closes whole
            try:
                return runner.run(cancellable())
            except asyncio.CancelledError:
                if self.signal is None:
                    raise
        raise Interrupted(self.signal)  # unless a caller holds on, held() raised it already

    def overdue(self, _signum: int, _frame: FrameType | None) -> None:
        self.exit_now(f"{said(self.signal)}, and still running {GRACE_S} s later")

    def install(self) -> StopRequest:
        """Until `restore`; one ignored (`nohup`: SIGHUP) stays ignored; off the main thread, nothing."""
        if threading.current_thread() is not threading.main_thread():
            return self
        self.previous = {sig: signal.getsignal(sig) for sig in NAMES}
        self.hook, sys.unraisablehook = sys.unraisablehook, self.unraisable
        for sig in NAMES:
            if self.previous[sig] != signal.SIG_IGN:
                signal.signal(sig, self.handler)
        return self

    def restore(self) -> None:
        if signal.SIGALRM in self.previous:  # a stop set the alarm: a caller's timer, if any, is lost with it
            signal.alarm(0)
        for sig, old in self.previous.items():
            signal.signal(sig, signal.SIG_DFL if old is None else old)  # None: set outside Python
        if sys.unraisablehook == self.unraisable:
            sys.unraisablehook = self.hook

    def settle(self) -> None:
        """The outcome is printed: a late signal changes nothing (Python's shutdown would die of it)."""
        self.holds += 1
        for sig in NAMES:
            signal.signal(sig, signal.SIG_IGN)


def _installed() -> StopRequest | None:
    """The StopRequest whose handler holds SIGTERM now (the command line's), if any."""
    existing = getattr(signal.getsignal(signal.SIGTERM), "__self__", None)
    return existing if isinstance(existing, StopRequest) else None


def pending() -> str | None:
    """The signal a held step left for what follows, on the command line's StopRequest."""
    existing = _installed()
    return existing.signal if existing is not None else None


@contextlib.contextmanager
def stopping() -> Iterator[StopRequest]:
    """The command line's StopRequest, or one installed for a library call (off the main thread, an idle one)."""
    existing = _installed()
    if existing is not None and threading.current_thread() is threading.main_thread():  # not another's
        yield existing
        return
    stop = StopRequest().install()
    try:
        yield stop
    finally:
        stop.restore()
    if stop.signal is not None:  # left by a step held to its end (a report): the caller's own handling has it now
        signal.raise_signal(getattr(signal, stop.signal))
