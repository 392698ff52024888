"""The `coinflip` command's first code: the stop signals are handled before anything else loads.

Between the interpreter's start and `stop.install` (click, the settings, stop.py itself: tens of
ms), Python's own SIGINT would show a KeyboardInterrupt traceback from inside an import, and
SIGTERM's default would end the process without a word. So the console script enters here, and
`main` puts in place a handler that ends the process with the line a stop before the run prints,
and exit 1 (nothing has begun), before it imports the CLI. Neither this module nor
`import coinflip` imports anything the interpreter has not loaded by then, so no import is left
in that window (`signal` would import enum first: 3 ms); and `import coinflip` installs nothing:
a program that imports the library keeps its own handlers. What is left is the interpreter's
start-up, before any code of ours runs.
"""

import _signal  # the C half of `signal`, loaded by the interpreter itself
import os
import sys

NAMES = {
    _signal.SIGINT: "SIGINT",
    _signal.SIGTERM: "SIGTERM",
    **({_signal.SIGHUP: "SIGHUP"} if hasattr(_signal, "SIGHUP") else {}),
}
"""The stop signals, by number: Ctrl-C, a service manager's stop, a closed terminal."""
IGNORED = frozenset(sig for sig in NAMES if _signal.getsignal(sig) == _signal.SIG_IGN)
"""The stop signals this process was started with ignored, as `nohup` starts it (SIGHUP) or a
shell its background jobs (SIGINT): they stay ignored, here, in stop.py and in the processes it
starts, as Python itself leaves an ignored SIGINT ignored; a closed terminal must not stop such a run."""


def main() -> None:
    """`coinflip` (the console script) and `python -m coinflip`."""
    handle_early()
    from .cli import main as command

    command()


def said(name: str | None) -> str:
    """The line a stop signal ends a command with: 'interrupted' for Ctrl-C, 'stopped by SIGTERM'."""
    return f"stopped by {name}" if name and name != "SIGINT" else "interrupted"


def handle_early(module: str = "__main__") -> None:
    """A stop signal from now until `stop.install` replaces this handler ends the process in one
    line. For the command itself only: `module` is "__main__" when it is (cli.py passes its
    __name__, for `python -m coinflip.cli`), or the script is named coinflip (one that pip wrote
    when the command entered at cli.main); a program that imports the CLI keeps its handlers."""
    name = os.path.splitext(os.path.basename(sys.argv[0] if sys.argv else ""))[0]
    if module != "__main__" and name not in ("coinflip", "coinflip-script"):
        return
    try:
        for sig in NAMES:
            if sig not in IGNORED:
                _signal.signal(sig, _ended_early)
    except ValueError:  # not the main thread: Python sets no handler there
        return


def _ended_early(signum: int, _frame: object) -> None:
    try:
        sys.stderr.write(f"{said(NAMES.get(signum))}\n")
        sys.stderr.flush()
    finally:
        os._exit(1)  # at once: raised here, an exception would land inside an import
