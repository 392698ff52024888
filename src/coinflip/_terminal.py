"""Text fit for a terminal: what a server, a model or a run directory wrote may hold escape
sequences (clear the screen, set the title, a hidden link); printed, they would act."""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: object) -> str:
    """`text` with every control character but tab and newline shown as U+FFFD, and every bidi
    embedding, override or isolate too: a model named with U+202E would reverse what follows it."""
    return _CONTROL.sub("\ufffd", str(text))
