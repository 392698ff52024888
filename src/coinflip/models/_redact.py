"""Secrets out of everything a run keeps or shows: error messages, replies, reasoning.

A server may echo the key back in any of the forms it travelled or was stored in: raw (and so
inside `Bearer KEY`), escaped for JSON (`\\/`, `\\u00..`), for HTML (`&amp;`, `&#x27;`), or
URL-encoded (either case of hex, `+` for space). Each form is replaced by `***`.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable
from dataclasses import replace
from urllib.parse import quote, quote_plus

from ..config import REDACTED as MASK  # one mask for what is saved and what is shown
from .base import Reply

MIN_SECRET = 8  # shorter values would mask ordinary words ("none", "EMPTY"); real keys are far longer
PLACEHOLDERS = {"empty", "none", "dummy", "ollama", "lm-studio", "sk-no-key-required", "not-needed", "no-key"}


def is_secret(value: str | None) -> bool:
    """A value worth masking: long enough, and not one of the stand-ins local servers accept."""
    return bool(value) and len(value or "") >= MIN_SECRET and (value or "").lower() not in PLACEHOLDERS


def _forms(secret: str) -> set[str]:
    forms = {secret, html.escape(secret), html.escape(secret, quote=False)}
    forms.add(html.escape(secret).replace("&#x27;", "&#39;"))
    for ascii_only in (True, False):
        escaped = json.dumps(secret, ensure_ascii=ascii_only)[1:-1]
        forms |= {escaped, escaped.replace("/", "\\/")}
    for encoded in (quote(secret, safe=""), quote_plus(secret, safe=""), quote(secret)):
        forms |= {encoded, re.sub(r"%[0-9A-F]{2}", lambda m: m.group().lower(), encoded)}
    return {f for f in forms if len(f) >= MIN_SECRET}


class Redactor:
    """Masks every form of the given secrets; a no-op without any."""

    def __init__(self, secrets: Iterable[str | None]) -> None:
        forms = set().union(*(_forms(s) for s in secrets if s is not None and is_secret(s)))
        longest_first = sorted(forms, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, longest_first))) if forms else None

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
