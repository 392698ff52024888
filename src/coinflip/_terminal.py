"""Characters no page and no terminal shows as they are (escape sequences, bidi overrides, half a
surrogate pair from a server, a model or a run directory), defined once: each becomes U+FFFD."""

from __future__ import annotations

import re

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
