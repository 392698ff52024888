"""EvalScope 1.14.1's coin_flip scoring for `--metric-compat evalscope`, step by step: each function names
the code it follows (paths under the released `evalscope` package); metrics.py divides as it does."""

from __future__ import annotations

import re
from typing import Any

VERSION = "1.14.1"
EXTRACTION = f"evalscope-{VERSION}:coin_flip"  # what a report in this mode names as its extraction
REASONS = ("empty", "no_verdict", "both", "cut_off")

# api/messages/utils.py: parse_content_with_reasoning (case-sensitive, first block only)
_THINK = re.compile(r'<think(?:\s+signature="([^"]*)")?(?:\s+redacted="(true)")?\s*>(.*?)</think>', re.DOTALL)
# utils/multi_choices.py: _ANSWER_MARKER_RE
_ANSWER_MARKER = re.compile(r"(?i)ANSWER\s*:\s*\**\s*")
# utils/yes_no.py: _YES_PATTERN, _NO_PATTERN, _LOWERCASE_EXACT_PATTERN
_YES = re.compile(r"\b(?:Yes|YES)\b")
_NO = re.compile(r"\b(?:No|NO)\b")
_LOWERCASE_EXACT = re.compile(r"(yes|no)[.!]?")


def completion(reply: str | None, reasoning: str | None = None) -> str:
    """`ModelOutput.completion`: models/utils/openai.py `chat_message_assistant_from_openai` keeps the content
    beside a reasoning field; without one, `ChatMessageAssistant.extract_reasoning` cuts the first <think> block."""
    text, end = reply or "", (reply or "").rfind("</think>") + len("</think>")  # no match ends past the last close
    found = None if reasoning is not None else _THINK.search(text, 0, end)  # and none starts without one after it
    return text if found is None else (text[: found.start()] + text[found.end() :]).strip()


def filtered(text: str) -> str:
    """coin_flip_adapter.py `CoinFlipAdapter.extract_answer` (coin_flip has no filters): the answer line
    (utils/multi_choices.py `extract_answer_line`: the rest of the line after the last `ANSWER:`), or all."""
    markers = list(_ANSWER_MARKER.finditer(text or ""))
    return text[markers[-1].end() :].split("\n", 1)[0].strip().strip("*").strip() if markers else text


def extract_verdict(prediction: str, allow_lowercase_exact: bool = True) -> str | None:
    """utils/yes_no.py `extract_verdict`: exactly one whole-word Yes/YES or No/NO, or a lone lowercase yes/no."""
    lowercase = _LOWERCASE_EXACT.fullmatch(prediction.strip()) if allow_lowercase_exact else None
    if lowercase:
        return lowercase.group(1).upper()
    has_yes = _YES.search(prediction) is not None
    has_no = _NO.search(prediction) is not None
    return None if has_yes == has_no else "YES" if has_yes else "NO"


def verdict(reply: str | None, reasoning: str | None = None) -> str | None:
    """The prediction both `CoinFlipAdapter.match_score` and `aggregate_scores` count for a reply."""
    return extract_verdict(filtered(completion(reply, reasoning)))


def read_verdict(
    reply: str | None, reasoning: str | None = None, finish_reason: str | None = None
) -> tuple[str | None, str | None]:
    """(verdict, None) or (None, reason): coinflip's account of why EvalScope found no verdict (it records none)."""
    text = filtered(completion(reply, reasoning))
    if (found := extract_verdict(text)) is not None:
        return found, None
    if finish_reason == "length":
        return None, "cut_off"
    if not text.strip():
        return None, "empty"
    return None, "both" if _YES.search(text) else "no_verdict"


def report_note(errors: int, scored: int) -> dict[str, Any]:
    return {
        "version": VERSION,
        "primary_metric": "accuracy",  # BenchmarkMeta(primary_metric='accuracy') in coin_flip_adapter.py
        "note": (
            f"EvalScope {VERSION} names accuracy its primary metric; coinflip keeps F1 primary. "
            "Predictions, per-sample correctness and the five metrics follow EvalScope's coin_flip adapter."
        ),
        "errored_samples": "excluded",  # evaluator/evaluator.py: Evaluator._run_pool, on_error with ignore_errors
        "errors_excluded": errors,
        "scored_samples": scored,
    }
