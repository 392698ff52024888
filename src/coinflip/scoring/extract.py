"""Extract stage: one strict, documented rule turns a reply into YES, NO or no answer (None).

1. Text inside <think>...</think> is ignored; an unclosed <think> means no answer.
2. The marker is the whole word ANSWER in any case (words such as "Final" may precede it), then
   optional spaces and an ASCII or full-width colon. The last marker counts, valid or not.
3. The value is the rest of the marker's line, or the next non-empty line when that is empty,
   stripped of markdown, quotes, brackets, $...$, \\boxed{...} and trailing punctuation.
4. Its first word must be exactly yes or no; a value naming both, or anything else, is no answer.

Every reply without an answer gets one reason, from the same parse (so the two never disagree):
`empty`, `unclosed_think`, `no_marker`, `both`, `no_verdict`, or `cut_off` when the server
stopped it at max_tokens (finish_reason "length"), which explains any of the others.
"""

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
    """Return "YES", "NO" or None (no valid answer) for a model reply."""
    return _parse(text)[0]


def invalid_reason(text: str | None, finish_reason: str | None = None) -> str | None:
    """Why a reply has no answer (one of REASONS); None when extract_answer finds one."""
    return read_answer(text, finish_reason)[1]


def read_answer(text: str | None, finish_reason: str | None = None) -> tuple[str | None, str | None]:
    """(answer, None) or (None, reason): extract_answer and invalid_reason from one parse.

    A reply cut off by max_tokens is `cut_off` whatever else is wrong with it: the fix is a
    larger max_tokens, not a better prompt.
    """
    answer, reason = _parse(text)
    if answer is None and finish_reason == "length":
        return None, "cut_off"
    return answer, reason


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
    answer = _yes_no(value)
    if answer is not None:
        return answer, None
    words = {w.lower() for w in _WORD.findall(value)}
    return None, "both" if {"yes", "no"} <= words else "no_verdict"


def _visible(text: str) -> str | None:
    """The reply without its reasoning block; None when the reasoning never ends."""
    text = _THINK.sub(" ", text)
    closes = list(_THINK_CLOSE.finditer(text))
    if closes:  # a template that opened <think> in the prompt leaves only the closing tag
        text = text[closes[-1].end() :]
    if _THINK_OPEN.search(text):
        return None
    return text


def _value_after(text: str, start: int) -> str:
    rest = text[start:].split("\n")
    first = _clean(rest[0])
    if first:
        return first
    for line in rest[1:]:
        if line.strip():
            return _clean(line)
    return ""


def _clean(value: str) -> str:
    for _ in range(3):  # \boxed{\text{YES}} nests
        value = _WRAPPERS.sub(r"\1", value)
    value = _LEADING.sub("", value.strip())
    value = value.translate(_STRIP)
    return value.strip().rstrip(".,;:!?。，；：！？、…").strip()


def _yes_no(value: str) -> str | None:
    words = [w.lower() for w in _WORD.findall(value)]
    if not words or words[0] not in ("yes", "no"):
        return None
    if not value.lower().startswith(words[0]):  # something other than a word comes first
        return None
    if "yes" in words and "no" in words:
        return None
    return str(words[0]).upper()


def forced_answer(text: str | None) -> str | None:
    """The answer of a forced reply, which was asked for the answer line alone: the strict rule,
    or else a bare verdict (`YES`, `No.`, `**NO**`, `Yes, it is`: the reply's first word is yes or
    no, standing alone rather than starting a phrase such as "no idea", and it names only one of them)."""
    found = extract_answer(text)
    if found is not None or not text:
        return found
    visible = _visible(text)
    return None if visible is None else _bare_verdict(_clean(visible.strip().split("\n")[0]))


def _bare_verdict(value: str) -> str | None:
    """A forced reply's first line as a verdict: yes or no standing alone. Only here, where there
    is no answer marker to say a verdict follows: after a marker the strict rule reads the first
    word (README, Scoring), and a rescore must score saved replies as the run did."""
    words = _WORD.findall(value)
    if words and value[len(words[0]) :].lstrip()[:1].isalnum():  # "no idea", "no way to tell": not an answer
        return None
    return _yes_no(value)
