"""The forced answer (--force-answer), its whole lifecycle in one place.

A reply without a valid answer (by the strict rule) is asked once more, for only its answer line
(plan.py `RequestBuilder.forced` builds that request). A sample is *pending* from the moment its
first reply is kept until its forced answer lands:

1. its row is written with `"forced": {"pending": true}` (`PENDING`) as soon as the reply lands;
2. the follow-up's reply lands: the row is written again, holding it (`answered`); on reading,
   a later line for the same sample wins unless it got less far (`progress`; the row states are
   declared with the rows, in records.py);
3. a follow-up that failed leaves the sample pending: the row is final for the report (the forced
   answer counts as invalid) but a resume asks again;
4. scoring reads what the forced reply said (`said`), and the report's forced view puts it in
   place of an invalid strict answer (`recovered`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..records import ANSWERS, FORCED_ANSWERS, PENDING, Forced, Prediction, pending, progress, scored
from .calibration import answer_window
from .extract import extract_answer, forced_answer

if TYPE_CHECKING:
    from ..models.base import Reply

__all__ = ["PENDING", "answered", "needed", "pending", "progress", "recovered", "said", "scored"]


def needed(reply: str | None) -> bool:
    """A reply is asked for its answer line when the strict rule finds no answer in it."""
    return extract_answer(reply) is None


def answered(first: Prediction, reply: Reply) -> Prediction:
    """The first reply's row again, now holding the forced follow-up's reply."""
    forced: Forced = {
        "reply": reply.text,
        "finish_reason": reply.finish_reason,
        "usage": reply.usage,
        "latency_s": round(reply.latency_s, 6),
        "attempts": reply.attempts,
        "error": reply.error,
    }
    window = answer_window(reply.logprobs, bare=True)
    if window is not None:
        forced["answer_logprobs"] = window
    if reply.batch:
        forced["batch"] = True
    row: Prediction = {k: v for k, v in first.items() if k not in ("forced", "error")}  # type: ignore[assignment]
    row["forced"] = forced
    row["error"] = first.get("error")
    return row


def said(row: Prediction) -> str | None:
    """What the forced reply said, as a FORCED_ANSWERS value: None when none was asked or none came
    back yet; "invalid" when it failed or holds no answer."""
    forced = row.get("forced")
    if not isinstance(forced, dict) or forced.get("pending"):
        return None
    if forced.get("error") is not None:
        return "invalid"
    reply = forced.get("reply")
    return forced_answer(reply if isinstance(reply, str) else None) or "invalid"


def recovered(answer: Any, error: Any, forced: Any) -> Any:
    """The forced view's answers (indexes into ANSWERS): a strict answer where there is one, the
    forced answer where there is none and it said YES or NO. Arrays of ANSWERS and FORCED_ANSWERS
    indexes, one entry a sample."""
    import numpy as np

    as_answer = np.array([ANSWERS.index(a if a in ("YES", "NO") else None) for a in FORCED_ANSWERS], dtype=np.int8)
    none = ANSWERS.index(None)
    use = (answer == none) & (error == 0) & (as_answer[forced] != none)
    return np.where(use, as_answer[forced], answer).astype(np.int8)
