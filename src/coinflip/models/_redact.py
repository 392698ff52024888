"""Secrets out of everything a run keeps or shows: error messages, replies, reasoning.

A server may echo the key back in any of the forms it travelled or was stored in, and a form may
differ character by character: raw (and so inside `Bearer KEY`), escaped for JSON (`\\/`,
`\\u0073`, a surrogate pair), for HTML (`&amp;`, `&#115;`, `&#x73;`, leading zeros, either case),
or URL-encoded (the UTF-8 bytes as `%hh` in either case, `+` for a space), and it may be split
across lines (a line break, raw or JSON-escaped, and its indent, between any two characters). The
secret is matched as a sequence of characters each in any of its forms, so every mixture is
masked as `***`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace

from ..secrets import REDACTED as MASK  # one mask for what is saved and what is shown
from .base import Reply

MIN_SECRET = 8  # shorter values would mask ordinary words ("none", "EMPTY"); real keys are far longer
PLACEHOLDERS = {"empty", "none", "dummy", "ollama", "lm-studio", "sk-no-key-required", "not-needed", "no-key"}
_JSON_SHORT = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_HTML_NAMED = {"&": "amp", "<": "lt", ">": "gt", '"': "quot", "'": "apos"}


def is_secret(value: str | None) -> bool:
    """A value worth masking: long enough, and not one of the stand-ins local servers accept."""
    return value is not None and len(value) >= MIN_SECRET and value.lower() not in PLACEHOLDERS


def _hex(number: int, width: int = 1) -> str:
    """A pattern for `number` in hex digits of either case, zero-padded to `width`."""
    return "".join(f"[{d}{d.upper()}]" if d.isalpha() else d for d in f"{number:0{width}x}")


def _char(c: str) -> str:
    """A pattern for one character in any of the forms above; the character itself is tried last,
    so a final `%` echoed as `%25` (or `&` as `&amp;`) is masked whole, not as `***25`."""
    code = ord(c)
    forms = [f"&#0*{code};", f"&#[xX]0*{_hex(code)};"]
    if code > 0xFFFF:  # JSON spells it as a surrogate pair
        high, low = 0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)
        forms.append(f"\\\\u{_hex(high, 4)}\\\\u{_hex(low, 4)}")
    else:
        forms.append(f"\\\\u{_hex(code, 4)}")
    if c in _JSON_SHORT:
        forms.append(re.escape(_JSON_SHORT[c]))
    if c in _HTML_NAMED:
        forms.append(f"&{_HTML_NAMED[c]};")
    forms.append("".join(f"%{_hex(byte, 2)}" for byte in c.encode("utf-8", "surrogatepass")))
    if c == " ":
        forms.append(re.escape("+"))
    forms.append(re.escape(c))
    return f"(?:{'|'.join(forms)})"


# between two characters: a line break (raw, JSON-escaped, or shown as U+FFFD by _terminal.one_line)
# and its indent, or a space
_BREAK = r"(?:(?:\r?\n|\\r?\\n|\r?\ufffd)[ \t]*| )?"
CUT_LEAST = 6  # characters of a secret's start that are masked where a cut message ends with them


def pattern(secret: str) -> str:
    """A pattern matching `secret` however each of its characters was escaped, and split across
    lines anywhere (a server that wraps its error page, or folds a header it echoes); or its
    start, from CUT_LEAST characters, where a text ends (a message cut to its length, `…`)."""
    chars = [_char(c) for c in secret]
    cut = ""
    for c in reversed(chars[CUT_LEAST:-1]):
        cut = f"(?:{_BREAK}{c}{cut})?"
    head, rest = _BREAK.join(chars[:CUT_LEAST]), "".join(_BREAK + c for c in chars[CUT_LEAST:])
    return f"{head}(?:{rest}|{cut}(?=…?\\Z))"  # the start matched once for both: half the time


class Redactor:
    """Masks every form of the given secrets; a no-op without any."""

    def __init__(self, secrets: Iterable[str | None]) -> None:
        kept = sorted({s for s in secrets if s is not None and is_secret(s)}, key=len, reverse=True)
        self._pattern = re.compile("|".join(pattern(s) for s in kept)) if kept else None

    def __call__(self, text: str) -> str:
        return text if self._pattern is None else self._pattern.sub(MASK, text)

    def found(self, text: str | None) -> bool:
        return text is not None and self._pattern is not None and self._pattern.search(text) is not None

    def reply(self, reply: Reply) -> Reply:
        """The reply with secrets masked; its log probabilities dropped if the text held one (its
        tokens would spell the secret out)."""
        if self._pattern is None:
            return reply
        if not any(self.found(t) for t in (reply.text, reply.reasoning, reply.finish_reason, reply.error)):
            return replace(reply, more=[self.reply(r) for r in reply.more]) if reply.more else reply
        return replace(
            reply,
            text=None if reply.text is None else self(reply.text),
            reasoning=None if reply.reasoning is None else self(reply.reasoning),
            finish_reason=None if reply.finish_reason is None else self(reply.finish_reason),
            error=None if reply.error is None else self(reply.error),
            logprobs=None,
            more=[self.reply(r) for r in reply.more],
        )
