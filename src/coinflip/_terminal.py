"""Characters no page and no terminal shows as they are (escape sequences, bidi overrides, half a
surrogate pair from a server, a model or a run directory), defined once: each becomes U+FFFD."""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Iterator
from typing import Any, TextIO, cast

# C0 controls but tab, newline and carriage return; DEL and C1; bidi embeddings, overrides, isolates; lone surrogates
UNSHOWABLE = "\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_CONTROL = re.compile(f"[{UNSHOWABLE}\r]")  # and carriage return, which would let what follows overwrite the line


def printable(text: object) -> str:
    return _CONTROL.sub("\ufffd", str(text))


def one_line(text: object, limit: int = 2000) -> str:
    """`printable`, a line break as U+FFFD too, at most `limit` characters: a value's line break
    would read as coinflip's own line, and a server's 5 MB error page would flood the terminal."""
    shown = printable(text).replace("\n", "\ufffd")
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


class QuietPipe:
    """The command's stdout or stderr, for a reader that may stop reading (`coinflip answers RUN | head`): once it
    has, what is left to print goes nowhere and the work goes on, so the exit code says how the work ended, not how
    much of its output was read (click exited 1, "incomplete", after a complete run whose summary filled the pipe)."""

    def __init__(self, stream: TextIO, lost: type[OSError] = BrokenPipeError) -> None:
        self.stream, self.lost = stream, lost  # stderr: any failure (a full disk too) leaves nowhere to say it

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except self.lost as exc:
            self._gone(exc)
            return len(text)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except self.lost as exc:
            self._gone(exc)

    def _gone(self, exc: OSError) -> None:
        """The pipe's end becomes /dev/null, so the buffer still held, and Python's flush at exit, write nowhere."""
        if isinstance(exc, BlockingIOError):  # a full pipe that was set not to block: it is still read
            raise exc
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, self.stream.fileno())
        finally:
            os.close(null)

    def __getattr__(self, name: str) -> Any:  # encoding, isatty, fileno, buffer: the stream's own
        return getattr(self.stream, name)


@contextlib.contextmanager
def quiet_pipes() -> Iterator[None]:
    """stdout and stderr as QuietPipes for a command's length (`| head`, `2>&1 | head`), then as they were."""
    saved = sys.stdout, sys.stderr  # stdout's full disk is the command's error: its output is short
    quiet = [cast(TextIO, QuietPipe(s, lost)) if s is not None and hasattr(s, "fileno") else s
             for s, lost in zip(saved, (BrokenPipeError, OSError), strict=True)]  # fmt: skip
    sys.stdout, sys.stderr = quiet
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
