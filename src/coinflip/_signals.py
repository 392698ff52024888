"""The stop signals' names and lines, and how a process ends on one before any run began (one line,
exit 1, not a traceback from inside an import). Imports only what the interpreter loaded already."""

import _signal  # the C half of `signal`: `signal` would import enum first (3 ms)
import os
import sys

NAMES = {getattr(_signal, name): name for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(_signal, name)}
# those this process was started with ignored (`nohup`, a background job) stay ignored, in children too
IGNORED = frozenset(sig for sig in NAMES if _signal.getsignal(sig) == _signal.SIG_IGN)


def said(name: str | None) -> str:
    return f"stopped by {name}" if name and name != "SIGINT" else "interrupted"


def exit_now(why: str) -> None:
    """At once, in one line: what finished is on disk and resumes."""
    try:
        sys.stderr.write(f"{why}\n")
        sys.stderr.flush()
    finally:
        os._exit(1)


def handle_early() -> None:
    """From now until run/stop.py `install` replaces it, a stop signal ends the process in one line."""
    try:
        for sig in NAMES:
            if sig not in IGNORED:
                _signal.signal(sig, _ended_early)
    except ValueError:  # not the main thread: Python sets no handler there
        return


def _ended_early(signum: int, _frame: object) -> None:
    exit_now(said(NAMES.get(signum)))  # at once: raised here, an exception would land inside an import


def default_signals() -> None:
    """In a child before it execs: an ignored or blocked signal survives exec, so reset them (but IGNORED)."""
    import signal

    for sig in NAMES:
        signal.signal(sig, signal.SIG_IGN if sig in IGNORED else signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, NAMES)
