"""Secrets out of everything a run keeps or shows, each character matched in any form a server may echo it
in (raw, JSON-escaped, HTML, URL-encoded; a key in any case), split across lines or not; or base64-encoded."""

from __future__ import annotations

import base64
import functools
import math
import re
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from .._terminal import one_line
from ..secrets import REDACTED as MASK  # one mask for what is saved and what is shown
from .base import Reply

MIN_SECRET = 8  # shorter values would mask ordinary words ("none", "EMPTY"); real keys are far longer
PLACEHOLDERS = {"empty", "none", "dummy", "ollama", "lm-studio", "sk-no-key-required", "not-needed", "no-key"}
_JSON_SHORT = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_HTML_NAMED = {"&": "amp", "<": "lt", ">": "gt", '"': "quot", "'": "apos"}
# between two characters: a line break (raw, JSON-escaped, or shown as U+FFFD by _terminal.one_line)
# and its indent, or a space
_BREAK = r"(?:(?:\r?\n|\\r?\\n|\r?\ufffd)[ \t]*| )?"
_WRAP = r"\s*\ufffd*"  # where base64 is wrapped (`base64`, MIME: 76 characters a line), or as shown
CUT_LEAST = 6  # characters of a secret's start that are masked where a message ends or is cut (…) after them


def is_secret(value: str | None) -> bool:
    return value is not None and len(value) >= MIN_SECRET and value.lower() not in PLACEHOLDERS


def _hex(number: int, width: int = 1) -> str:
    return "".join(f"[{d}{d.upper()}]" if d.isalpha() else d for d in f"{number:0{width}x}")


def _char(c: str) -> str:
    """One character in any form; itself last, so a final `%` echoed as `%25` is masked whole."""
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
    if one_line(c) != c:  # a line break or control character, as a message shows it: U+FFFD
        forms.append("\ufffd")
    forms.append(re.escape(c))
    return f"(?:{'|'.join(forms)})"


def pattern(secret: str) -> str:
    """`secret` in any escaping, split across lines; or its start (CUT_LEAST+) where a text ends or was cut (…)."""
    chars = [_char(c) for c in secret]
    head, rest = _BREAK.join(chars[:CUT_LEAST]), "".join(_BREAK + c for c in chars[CUT_LEAST:])
    return f"{head}(?:{rest}|{_prefix(chars[CUT_LEAST:-1])}(?=…|\\Z))"  # the start matched once for both: half the time


def encoded(secret: str) -> list[tuple[str, str]]:
    """`secret` base64-encoded (standard or URL-safe) at each of the 3 alignments it may have in a longer text: the
    characters its bytes alone decide (up to 3 either side mix in a neighbour's: `Redactor` masks them too); or
    their start (MIN_SECRET+) where a text ends or was cut (…). Each as its first MIN_SECRET characters and the rest."""
    data, forms = secret.encode("utf-8", "surrogatepass"), []
    for shift in range(3):
        text = base64.b64encode(bytes(shift) + data).decode()[4 if shift else 0 : (len(data) + shift) // 3 * 4]
        chars = [{"+": "[+-]", "/": "[/_]"}.get(c, c) for c in text]
        rest, cut = "".join(_WRAP + c for c in chars[MIN_SECRET:]), _prefix(chars[MIN_SECRET:-1], _WRAP)
        forms.append((_WRAP.join(chars[:MIN_SECRET]), f"(?:{rest}|{cut}(?=…|\\Z))"))
    return forms


def _prefix(chars: list[str], gap: str = _BREAK) -> str:
    """Any start of `chars`, none too: optional per character within chunks of about sqrt(n), per chunk
    across them, so a 2,000-character token nests some 90 deep, not 2,000 (re's parser recurses)."""
    size, prefix = math.isqrt(len(chars)) + 1, ""
    for at in reversed(range(0, len(chars), size)):
        chunk, inner = chars[at : at + size], ""
        for c in reversed(chunk):
            inner = f"(?:{gap}{c}{inner})?"
        prefix = f"(?:{''.join(gap + c for c in chunk)}{prefix}|{inner})" if prefix else inner
    return prefix


class Redactor:
    """Each secret's start (in any form, base64 too) is searched for first: the whole pattern (5 ms to compile for a
    40-character key, 1.3 s for a 2,000-character token) is compiled only where one is found, in most runs never."""

    def __init__(self, secrets: Iterable[str | None], keys: Iterable[str | None] = ()) -> None:
        """`keys` (the API key, a proxy's password) are matched in any case whatever they look like."""
        given = [k for k in keys if k is not None]
        both = (t for s in [*secrets, *given] if s is not None for t in (s, s.strip()))  # a server strips spaces
        kept = sorted({s for s in both if is_secret(s)}, key=len, reverse=True)
        self._kept, self._keys = kept, {t for k in given for t in (k, k.strip())}
        starts = "|".join(self._cased(s, _BREAK.join(map(_char, s[:CUT_LEAST]))) for s in kept)
        self._pattern = re.compile(starts) if kept else None
        forms = [form for s in kept for form in encoded(s)]
        self._encoded = re.compile("|".join(head for head, _ in forms) or "(?!)")  # their starts, as `_pattern`
        cores = "|".join(head + rest for head, rest in forms)
        self._wrapped = f"[\\w+/-]{{0,3}}(?:{cores})[\\w+/-]{{0,3}}=*"  # with neighbours, padding: compiled if found

    @functools.cached_property
    def _full(self) -> re.Pattern[str]:
        return re.compile("|".join(self._cased(s, pattern(s)) for s in self._kept))

    def _cased(self, secret: str, found: str) -> str:
        """`found` in any case for a key, or a secret that looks like one (letters and digits, as generated): a
        server may echo it upper-cased; a word given as a gateway's header (`X-Title: CoinFlip`) in its own case."""
        keylike = any(c.isdigit() for c in secret) and any(c.isalpha() for c in secret) and len(secret) <= 256
        return f"(?i:{found})" if keylike or secret in self._keys else found

    @functools.cached_property
    def _around(self) -> re.Pattern[str]:
        return re.compile(self._wrapped)

    def __call__(self, text: str) -> str:
        if self._pattern is None:
            return text
        text = self._full.sub(MASK, text) if self._pattern.search(text) else text
        return self._around.sub(MASK, text) if self._encoded.search(text) else text

    def found(self, text: str | None) -> bool:
        if text is None or self._pattern is None:
            return False
        whole = self._pattern.search(text) and self._full.search(text)
        return bool(whole or self._encoded.search(text) and self._around.search(text))

    def reply(self, reply: Reply) -> Reply:
        """Masked; log probabilities dropped where the text or they held a secret (its tokens spell it out)."""
        if self._pattern is None:
            return reply
        texts = {name: getattr(reply, name) for name in ("text", "reasoning", "finish_reason", "error")}
        if not any(self.found(t) for t in [*texts.values(), _spelled(reply.logprobs)]):
            return replace(reply, more=[self.reply(r) for r in reply.more]) if reply.more else reply
        masked: dict[str, Any] = {name: t and self(t) for name, t in texts.items()}
        return replace(reply, **masked, logprobs=None, more=[self.reply(r) for r in reply.more])


def _spelled(logprobs: list[dict[str, Any]] | None) -> str:
    """Every text of the log probabilities (tokens, alternatives, a logprob sent as text), a line each: a key
    spread over neighbours is found too."""
    texts = (t for e in logprobs or [] for t in (e.get("token"), e.get("logprob"), *(e.get("top") or {})))
    return "\n".join(t for t in texts if isinstance(t, str))
