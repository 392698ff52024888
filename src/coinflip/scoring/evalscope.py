"""EvalScope 1.14.1's coin_flip scoring, reproduced step by step for `--metric-compat evalscope`.

Each function names the EvalScope code it follows (paths under the released `evalscope` package).
What EvalScope does, in order, for one sample of an `openai_api` run with the default settings:

1. `output.completion` is the message `content` only: a `reasoning_content` (or `reasoning`)
   field is kept apart, and without such a field the first `<think>...</think>` block is cut out
   of the content (`completion`).
2. The benchmark declares no filters, so `CoinFlipAdapter.extract_answer` takes the completion:
   the rest of the line after the last `ANSWER:` marker, or the whole completion without one
   (`answer_line`, `filtered`).
3. `extract_verdict(filtered, allow_lowercase_exact=True)` is the prediction, both for the
   sample's `acc` (`match_score`) and for the five metrics (`aggregate_scores`): YES or NO when
   exactly one of `Yes`/`YES` or `No`/`NO` appears as a whole word, or when the whole text is a
   lone lowercase `yes`/`no` (`verdict`).
4. `aggregate_scores` divides accuracy and yes_ratio by the samples scored, and leaves samples
   without a verdict out of TP, FP and FN (metrics.py, compat "evalscope").
5. A request that still fails after its retries raises: without `ignore_errors` the whole
   evaluation stops with no report; with it the sample is dropped before scoring, so it is in
   no denominator (`ERRORED_SAMPLES`).
"""

from __future__ import annotations

import re
from typing import Any

VERSION = "1.14.1"
EXTRACTION = f"evalscope-{VERSION}:coin_flip"  # what a report in this mode names as its extraction
PRIMARY_METRIC = "accuracy"  # BenchmarkMeta(primary_metric='accuracy') in coin_flip_adapter.py
ERRORED_SAMPLES = "excluded"  # evaluator/evaluator.py: Evaluator._run_pool, on_error with ignore_errors
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
    """The text EvalScope scores: `ModelOutput.completion` for the reply coinflip recorded.

    Follows models/utils/openai.py `chat_message_assistant_from_openai` (content or '', and a
    reasoning field makes the content a [ContentReasoning, ContentText] list, left as it is) and
    api/messages/chat_message.py `ChatMessageAssistant.extract_reasoning` (a plain-string content
    loses its first <think> block via `parse_content_with_reasoning`, then is stripped).
    `reasoning` is the reasoning field as coinflip records it (`reasoning_content or reasoning`,
    None when absent), the same expression EvalScope tests against None.
    """
    text = reply or ""
    if reasoning is not None:
        return text
    found = _THINK.search(text)
    if found is None:
        return text
    return (text[: found.start()] + text[found.end() :]).strip()


def answer_line(text: str) -> str | None:
    """utils/multi_choices.py `extract_answer_line`: the rest of the line after the last
    `ANSWER:` (any case, ASCII colon, bold markers around it), without asterisks; None without one."""
    markers = list(_ANSWER_MARKER.finditer(text or ""))
    if not markers:
        return None
    return text[markers[-1].end() :].split("\n", 1)[0].strip().strip("*").strip()


def filtered(text: str) -> str:
    """benchmarks/coin_flip/coin_flip_adapter.py `CoinFlipAdapter.extract_answer`, reached through
    api/benchmark/adapters/default_data_adapter.py `filter_prediction` (coin_flip has no filters):
    the answer line, or the whole completion when there is no marker."""
    line = answer_line(text)
    return line if line is not None else text


def extract_verdict(prediction: str, allow_lowercase_exact: bool = True) -> str | None:
    """utils/yes_no.py `extract_verdict`: YES or NO for exactly one whole-word verdict in
    `Yes`/`YES`/`No`/`NO` spelling, or a lone lowercase yes/no; None for both or neither."""
    if allow_lowercase_exact:
        lowercase = _LOWERCASE_EXACT.fullmatch(prediction.strip())
        if lowercase:
            return lowercase.group(1).upper()
    has_yes = _YES.search(prediction) is not None
    has_no = _NO.search(prediction) is not None
    if has_yes == has_no:
        return None
    return "YES" if has_yes else "NO"


def verdict(reply: str | None, reasoning: str | None = None) -> str | None:
    """The prediction EvalScope 1.14.1 counts for a reply: `CoinFlipAdapter.match_score` and
    `aggregate_scores` both call `extract_verdict(extracted_prediction, allow_lowercase_exact=True)`
    on the filtered completion; the sample is correct when it equals the target."""
    return extract_verdict(filtered(completion(reply, reasoning)))


def read_verdict(
    reply: str | None, reasoning: str | None = None, finish_reason: str | None = None
) -> tuple[str | None, str | None]:
    """(verdict, None) or (None, reason), reason one of REASONS: coinflip's account of why
    EvalScope found no verdict (EvalScope itself records none)."""
    text = filtered(completion(reply, reasoning))
    found = extract_verdict(text)
    if found is not None:
        return found, None
    if finish_reason == "length":
        return None, "cut_off"
    if not text.strip():
        return None, "empty"
    return None, "both" if _YES.search(text) else "no_verdict"


def report_note(errors: int, scored: int) -> dict[str, Any]:
    """What a report in evalscope arithmetic says about how its numbers relate to EvalScope's."""
    return {
        "version": VERSION,
        "primary_metric": PRIMARY_METRIC,
        "note": (
            f"EvalScope {VERSION} names accuracy its primary metric; coinflip keeps F1 primary. "
            "Predictions, per-sample correctness and the five metrics follow EvalScope's coin_flip adapter."
        ),
        "errored_samples": ERRORED_SAMPLES,
        "errors_excluded": errors,
        "scored_samples": scored,
    }
