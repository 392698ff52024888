"""SIGINT, SIGTERM and SIGHUP ask a run to stop; they never raise from wherever the process is.

An exception raised by a signal handler lands at an arbitrary bytecode: inside the event loop's
own bookkeeping, a `finally`, a destructor. That left tracebacks ("Task was destroyed but it is
pending!") and, once, a process that swallowed the signal and waited for half an hour. So the
handler only decides how to stop, by where the run is:

- requests in flight (`cancelling`): the run's task is cancelled from inside the event loop, so
  the replies that landed are written and the loop unwinds as it does for any cancellation;
- a step that must not be cut (`held`: writing the run's settings, the event loop starting or
  closing, the report): the signal is kept and `check` raises once the step is done;
- anywhere else (reading data, starting a local server): `Interrupted` is raised at once, which
  only pure steps and context managers that clean up are exposed to; where it lands in code that
  cannot raise (a weakref callback inside an import, a destructor), the process ends at once in
  one line (`unraisable`), as a second signal does.

Whatever happens, the process ends: a second signal, or `GRACE_S` seconds after the first one,
exits at once with one line (what finished is on disk line by line and the run resumes).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Coroutine, Iterator
from types import FrameType
from typing import TYPE_CHECKING, Any, TypeVar

from .._entry import IGNORED, NAMES, said

if TYPE_CHECKING:
    import asyncio  # imported when requests go out, not when the CLI starts

T = TypeVar("T")
SIGNALS = tuple(signal.Signals(number) for number in NAMES)

GRACE_S = 20  # the longest a first signal may take to end the process
HANDLED = (*SIGNALS, *((signal.SIGALRM,) if hasattr(signal, "SIGALRM") else ()))  # what `install` replaces


class Interrupted(BaseException):
    """A stop asked for by a signal (args[0]: its name). Not a KeyboardInterrupt, so that click
    and asyncio, which treat that one specially, let it through to the runner and the CLI."""


def stopped_by(exc: BaseException | str | None) -> str:
    """'interrupted' for Ctrl-C, 'stopped by SIGTERM' for the others."""
    name = exc if isinstance(exc, str) else exc.args[0] if isinstance(exc, Interrupted) and exc.args else None
    return said(name)


class StopRequest:
    """The signals this process has received, and what a signal does right now."""

    def __init__(self) -> None:
        self.signal: str | None = None
        self.hint = ""  # appended to the line a forced exit prints: how to resume
        self._held = 0
        self.settled = False
        self._task: asyncio.Task[object] | None = None
        self.previous: dict[int, Any] = {}  # the handlers `install` replaced, for `restore`
        self.hook: Any = None  # the sys.unraisablehook `install` replaced

    def handler(self, signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.settled:
            return
        if self.signal is not None:  # the second signal: no more waiting
            self.exit_now(f"{stopped_by(name)} again")
        self.signal = name
        if hasattr(signal, "SIGALRM"):
            signal.alarm(GRACE_S)
        task = self._task
        if task is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed under us: then it is held
                task.get_loop().call_soon_threadsafe(task.cancel)
                return
        if not self._held:
            raise Interrupted(name)

    def unraisable(self, unraisable: Any) -> None:
        """sys.unraisablehook while installed. `Interrupted` raised where Python cannot raise (a
        weakref callback in importlib, a destructor) would be printed as "Exception ignored" with
        a traceback, and the process would go on: the stop ends it at once instead, in one line,
        as a second signal does. Anything else goes to the hook that was there."""
        if isinstance(unraisable.exc_value, Interrupted):
            self.exit_now(stopped_by(unraisable.exc_value))
        (self.hook or sys.__unraisablehook__)(unraisable)

    def overdue(self, _signum: int, _frame: FrameType | None) -> None:
        self.exit_now(f"{stopped_by(self.signal)}, and still running {GRACE_S} s later")

    def exit_now(self, why: str) -> None:
        """End the process at once: predictions are on disk line by line, and a run resumes."""
        with contextlib.suppress(BaseException):
            sys.stderr.write(f"{why}: exiting now{self.hint}\n")
            sys.stderr.flush()
        os._exit(1)

    def check(self) -> None:
        """Raise `Interrupted` if a signal arrived while the work was held."""
        if self.signal is not None:
            raise Interrupted(self.signal)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """A step that must finish once begun: a signal during it is acted on right after."""
        self._held += 1
        try:
            yield
        finally:
            self._held -= 1
        if not self._held:
            self.check()

    @contextlib.contextmanager
    def cancelling(self, task: asyncio.Task[object]) -> Iterator[None]:
        """While `task` runs, a signal cancels it (from inside its event loop)."""
        if self.signal is not None:  # it came while the loop was starting
            task.cancel()
        self._task = task
        try:
            yield
        finally:
            self._task = None

    def settle(self) -> None:
        """The process is printing its outcome and ending: from now on the stop signals are
        ignored, by the OS too, since the interpreter's shutdown puts back the default handlers,
        under which a late signal would turn the exit code into a death by signal."""
        self._held += 1
        self.settled = True  # a signal already received but not yet handled changes nothing now
        for sig in SIGNALS:
            signal.signal(sig, signal.SIG_IGN)

    def restore(self) -> None:
        """Put back the handlers `install` replaced: a library call (or a test) leaves its caller as
        it found it, never with a stop signal ignored, which every process it starts later would
        inherit (SIG_IGN survives exec) and could then not be stopped."""
        if self.previous and hasattr(signal, "SIGALRM"):
            signal.alarm(0)
        for sig, old in self.previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)  # None: set outside Python
        self.previous = {}
        if sys.unraisablehook == self.unraisable:
            sys.unraisablehook = self.hook or sys.__unraisablehook__


def run_until_stopped(main: Coroutine[Any, Any, T], stop: StopRequest | None = None) -> T:
    """`asyncio.run(main)`, where a stop signal cancels `main` from inside its event loop; once the
    loop is closed, `Interrupted` says which signal it was. `stop`: the installed one by default."""
    import asyncio

    stop = stop or current() or StopRequest()

    async def cancellable() -> T:
        task = asyncio.current_task()
        assert task is not None
        with stop.cancelling(task):
            return await main

    with stop.held():  # the loop starts and closes whole
        try:
            return asyncio.run(cancellable())
        except asyncio.CancelledError:
            if stop.signal is None:  # cancelled, but not by a stop signal
                raise
    raise Interrupted(stop.signal)  # held() raised it already, unless a caller holds on


def default_signals() -> None:
    """The stop signals at their defaults and unblocked, in a child before it execs (preexec_fn):
    an ignored or blocked signal survives exec, and a caller may have them ignored (`settle`),
    so a process started from that state could otherwise never be stopped by SIGTERM or Ctrl-C.
    Those the process was started with ignored (`nohup`: SIGHUP) stay ignored in the child."""
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_IGN if sig in IGNORED else signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)


def current() -> StopRequest | None:
    """The StopRequest whose handler is installed, if any."""
    handler = signal.getsignal(signal.SIGTERM)
    owner = getattr(handler, "__self__", None)
    return owner if isinstance(owner, StopRequest) else None


def install() -> StopRequest | None:
    """Handle the stop signals for the rest of the process (the command line does this first
    thing); None off the main thread, where Python cannot set handlers."""
    if threading.current_thread() is not threading.main_thread():
        return None
    stop = StopRequest()
    stop.previous = {sig: signal.getsignal(sig) for sig in HANDLED}
    if hasattr(signal, "SIGALRM"):  # first: a stop signal's handler may set the alarm at once
        signal.signal(signal.SIGALRM, stop.overdue)
    stop.hook, sys.unraisablehook = sys.unraisablehook, stop.unraisable
    for sig in SIGNALS:
        if stop.previous[sig] != signal.SIG_IGN:  # ignored on purpose (`nohup`): it stays so (_entry.IGNORED)
            signal.signal(sig, stop.handler)
    return stop


@contextlib.contextmanager
def stopping() -> Iterator[StopRequest]:
    """The installed StopRequest (the command line's), or one installed for the duration (a
    library call on the main thread); elsewhere one that no signal reaches."""
    existing = current()
    if existing is not None:
        yield existing
        return
    if threading.current_thread() is not threading.main_thread():
        yield StopRequest()
        return
    stop = install()
    assert stop is not None
    try:
        yield stop
    finally:
        stop.restore()
