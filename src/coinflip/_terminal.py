"""Characters no page and no terminal shows as they are (escape sequences, bidi overrides, half a
surrogate pair from a server, a model or a run directory), defined once: each becomes U+FFFD."""

from __future__ import annotations

import re

# C0 controls but tab, newline and carriage return; DEL and C1; the bidi embeddings, overrides and
# isolates (U+202A-U+202E, U+2066-U+2069); lone surrogates
UNSHOWABLE = "\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff"
# and carriage return: a terminal goes back to the line's start, and what follows would overwrite it
_CONTROL = re.compile(f"[{UNSHOWABLE}\r]")


def printable(text: object) -> str:
    return _CONTROL.sub("\ufffd", str(text))


def one_line(text: object, limit: int = 2000) -> str:
    """`printable`, a line break as U+FFFD too, at most `limit` characters: a value's line break
    would read as coinflip's own line, and a server's 5 MB error page would flood the terminal."""
    shown = printable(text).replace("\n", "\ufffd")
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"
