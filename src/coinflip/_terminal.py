"""Characters no page and no terminal shows as they are, defined once: what a server, a model or
a run directory wrote may hold escape sequences (clear the screen, set the title, a hidden link),
a bidi override (U+202E reverses the text after it: the run id beside a model name), or half a
surrogate pair (UTF-8 cannot hold it: printing it raised UnicodeEncodeError mid-summary). Each
becomes U+FFFD. pages/html.py `shown` uses the same set for pages."""

from __future__ import annotations

import re

# C0 controls but tab, newline and carriage return; DEL and C1; the bidi embeddings, overrides and
# isolates (U+202A-U+202E, U+2066-U+2069); lone surrogates
UNSHOWABLE = "\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff"
# and carriage return: a terminal goes back to the line's start, and what follows would overwrite it
_CONTROL = re.compile(f"[{UNSHOWABLE}\r]")


def printable(text: object) -> str:
    """`text` with every unshowable character, and carriage return, shown as U+FFFD."""
    return _CONTROL.sub("\ufffd", str(text))


def one_line(text: object, limit: int = 2000) -> str:
    """`printable`, a line break shown as U+FFFD too, at most `limit` characters (… at the cut): for
    what is shown as one line (a model's or a folder's name, a server's message in a log or a
    row's error), where a line break inside a value would print a line of its own that reads as
    coinflip's, and a server's 5 MB error page would flood the terminal."""
    shown = printable(text).replace("\n", "\ufffd")
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"
