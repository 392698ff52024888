"""Markdown (compare.md) where every value is text: each passes `text`, tables are written by `table`."""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from typing import Any

from .html import shown

# a backslash, a `|` (ends the cell), brackets (`[x](javascript:...)` is a link), backticks (code),
# `*` and `~` (emphasis, strikethrough) are escaped; a line break (ends the row) becomes a space
_INLINE = str.maketrans(
    {"\\": "\\\\", "|": "\\|", "[": "\\[", "]": "\\]", "`": "\\`", "*": "\\*", "~": "\\~", "\n": " ", "\r": " "}
)
_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")  # at a word's edge; inside one (f1_score) it is text
# what makes a heading, a list item or a rule where a block begins (after "- " in a list): "# ", "- ",
# "+ ", "---", "1. ", "1) "
_BLOCK = re.compile(r"#{1,6}(?=\s|$)|[+-](?=\s|$)|-{3,}|\d{1,9}(?=[.)](\s|$))")


def text(value: Any) -> str:
    """One line, `shown`, with HTML as entities and markdown syntax escaped wherever it stands."""
    out = _UNDERSCORE.sub(r"\\_", html.escape(shown(value), quote=False).translate(_INLINE).strip())
    marker = _BLOCK.match(out)
    if marker is None:
        return out
    at = marker.end() if out[0].isdigit() else 0  # the dot of "1. ", else the first character
    return f"{out[:at]}\\{out[at:]}"


def table(head: Sequence[Any], rows: Sequence[Sequence[Any]]) -> list[str]:

    def line(cells: Sequence[Any]) -> str:
        return "| " + " | ".join(text(c) for c in cells) + " |"

    return [line(head), "|" + "---|" * len(head), *(line(r) for r in rows)]
