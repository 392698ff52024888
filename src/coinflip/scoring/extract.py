"""The one strict rule that turns a reply into YES, NO or no answer (None) with one of REASONS; the rule is
spelled out in docs/scoring.md."""

from __future__ import annotations

import re

_THINK = re.compile(r"<think\b[^>]*>.*?</think\s*>", re.S | re.I)
_THINK_OPEN = re.compile(r"<think\b", re.I)
_THINK_CLOSE = re.compile(r"</think\s*>", re.I)
_MARKER = re.compile(r"(?<![^\W_])answer(?![^\W_])[*_]*[ \t]*[:：]", re.I)
_WRAPPERS = re.compile(r"\\(?:boxed|text|textbf|mathrm|mathbf)\s*\{([^{}]*)\}")
_LEADING = re.compile(r"^(?:[\s#>*_~`\-+•|]+|\d+[.)]\s+)+")
_STRIP = str.maketrans("", "", "*_~`\"'“”‘’«»「」『』[]()（）【】{}<>$\\|")
_WORD = re.compile(r"[^\W\d_]+")


REASONS = ("empty", "no_marker", "no_verdict", "both", "unclosed_think", "cut_off")


def extract_answer(text: str | None) -> str | None:
    return _parse(text)[0]


def invalid_reason(text: str | None, finish_reason: str | None = None) -> str | None:
    return read_answer(text, finish_reason)[1]


def read_answer(text: str | None, finish_reason: str | None = None) -> tuple[str | None, str | None]:
    """(answer, None) or (None, reason); a cut-off reply is `cut_off` whatever else is wrong: raise max_tokens."""
    answer, reason = _parse(text)
    return (None, "cut_off") if answer is None and finish_reason == "length" else (answer, reason)


def _parse(text: str | None) -> tuple[str | None, str | None]:
    if not text:
        return None, "empty"
    visible = _visible(text)
    if visible is None:
        return None, "unclosed_think"
    markers = list(_MARKER.finditer(visible))
    if not markers:
        return None, "no_marker" if visible.strip() else "empty"  # blank, or a reasoning block alone
    value = _value_after(visible, markers[-1].end())
    if (answer := _yes_no(value)) is not None:
        return answer, None
    words = {w.lower() for w in _WORD.findall(value)}
    return None, "both" if {"yes", "no"} <= words else "no_verdict"


def _visible(text: str) -> str | None:
    """The reply without its reasoning block; None when the reasoning never ends."""
    text = _THINK_CLOSE.split(_without_blocks(text))[-1]  # a <think> a template opened leaves only its close
    return None if _THINK_OPEN.search(text) else text


def _without_blocks(text: str) -> str:
    """`_THINK.sub(" ", text)` in linear time: once an opening starts no block, no later one does (re.sub would try
    each, and a reply of 100,000 unclosed `<think>` cost each a search to its end)."""
    kept: list[str] = []
    at = 0
    while (opening := _THINK_OPEN.search(text, at)) and (block := _THINK.match(text, opening.start())):
        kept += [text[at : opening.start()], " "]
        at = block.end()
    return "".join(kept) + text[at:]


def _value_after(text: str, start: int) -> str:
    first, *rest = text[start:].split("\n")
    return _clean(first) or next((_clean(line) for line in rest if line.strip()), "")


def _clean(value: str) -> str:
    for _ in range(3):  # \boxed{\text{YES}} nests
        value = _WRAPPERS.sub(r"\1", value)
    value = _LEADING.sub("", value.strip())
    value = value.translate(_STRIP)
    return value.strip().rstrip(".,;:!?。，；：！？、…").strip()


def _yes_no(value: str) -> str | None:
    words = [w.lower() for w in _WORD.findall(value)]
    if not words or words[0] not in ("yes", "no") or not value.lower().startswith(words[0]):
        return None  # no verdict, or something other than a word comes first
    return None if {"yes", "no"} <= set(words) else words[0].upper()


def forced_answer(text: str | None) -> str | None:
    """A forced reply (asked for the answer line alone): the strict rule, or else a bare verdict."""
    found = extract_answer(text)
    if found is not None or not text:
        return found
    visible = _visible(text)
    return None if visible is None else _bare_verdict(_clean(visible.strip().split("\n")[0]))


def _bare_verdict(value: str) -> str | None:
    """A first line that is yes or no standing alone (`No.`, `Yes, it is`), not starting a phrase ("no idea")."""
    words = _WORD.findall(value)
    if words and value[len(words[0]) :].lstrip()[:1].isalnum():  # "no idea", "no way to tell": not an answer
        return None
    return _yes_no(value)
