"""The stop signals' names and lines, and how a process ends on one before any run began.

Imports only what the interpreter has loaded before any code of ours (`_signal`, `os`, `sys`):
the command's entry (`__main__.py`) puts `ended_early` in place from its first line, before click,
the settings or the runner load, so that a stop in that window is one line and exit 1, not a
KeyboardInterrupt traceback from inside an import or a silent death by SIGTERM.
"""

import _signal  # the C half of `signal`: `signal` would import enum first (3 ms)
import os
import sys

NAMES = {
    _signal.SIGINT: "SIGINT",
    _signal.SIGTERM: "SIGTERM",
    **({_signal.SIGHUP: "SIGHUP"} if hasattr(_signal, "SIGHUP") else {}),
}
"""The stop signals, by number: Ctrl-C, a service manager's stop, a closed terminal."""
IGNORED = frozenset(sig for sig in NAMES if _signal.getsignal(sig) == _signal.SIG_IGN)
"""Those this process was started with ignored (`nohup`: SIGHUP; a shell's background job: SIGINT):
they stay ignored, here, in run/stop.py and in the processes it starts."""


def said(name: str | None) -> str:
    """The line a stop signal ends a command with: 'interrupted' for Ctrl-C, 'stopped by SIGTERM'."""
    return f"stopped by {name}" if name and name != "SIGINT" else "interrupted"


def exit_now(why: str) -> None:
    """End the process at once, in one line: what finished is on disk line by line and resumes."""
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
    """The stop signals at their defaults and unblocked, in a child before it execs (preexec_fn):
    an ignored or blocked signal survives exec, so a child of a process that ignores them could
    never be stopped; those this process was started with ignored (`nohup`) stay ignored there."""
    import signal

    for sig in NAMES:
        signal.signal(sig, signal.SIG_IGN if sig in IGNORED else signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, NAMES)
