"""--force-answer: a reply without a valid answer is asked once more for its answer line; its row is written
pending, then `answered`, and scoring puts what it `said` in place of an invalid strict answer (`recovered`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..records import ANSWERS, FORCED_ANSWERS, PENDING, Forced, Prediction, pending, progress, scored
from .calibration import answer_window
from .extract import extract_answer, forced_answer

if TYPE_CHECKING:
    from ..models.base import Reply

__all__ = ["PENDING", "answered", "needed", "pending", "progress", "recovered", "said", "scored"]


def needed(reply: str | None) -> bool:
    return extract_answer(reply) is None


def answered(first: Prediction, reply: Reply) -> Prediction:
    """The first reply's row again, now holding the forced follow-up's reply."""
    forced: Forced = {
        "reply": reply.text,
        "finish_reason": reply.finish_reason,
        "usage": reply.usage,
        "latency_s": None if reply.latency_s is None else round(reply.latency_s, 6),
        "attempts": reply.attempts,
        "error": reply.error,
    }
    if (window := answer_window(reply.logprobs, bare=True)) is not None:
        forced["answer_logprobs"] = window
    if reply.batch:
        forced["batch"] = True
    if reply.source:  # the last batch whose usage it holds: never read again
        forced["source"] = reply.source
    if reply.stopped:  # the run stopped it between attempts: still to ask, what they were billed kept
        forced["pending"] = True
    kept = {k: v for k, v in first.items() if k not in ("forced", "error")}
    return {**kept, "forced": forced, "error": first.get("error")}  # type: ignore[typeddict-item]


def said(row: Prediction) -> str | None:
    """A FORCED_ANSWERS value: None when none was asked or came back yet; "invalid" when it failed or has none."""
    forced = row.get("forced")
    if not isinstance(forced, dict) or forced.get("pending"):
        return None
    if forced.get("error") is not None:
        return "invalid"
    reply = forced.get("reply")
    return forced_answer(reply if isinstance(reply, str) else None) or "invalid"


def recovered(answer: Any, error: Any, forced: Any) -> Any:
    """ANSWERS indexes: the strict answer, or the forced one (FORCED_ANSWERS indexes) where only it says YES or NO."""
    import numpy as np

    as_answer = np.array([ANSWERS.index(a if a in ("YES", "NO") else None) for a in FORCED_ANSWERS], dtype=np.int8)
    none = ANSWERS.index(None)
    use = (answer == none) & (error == 0) & (as_answer[forced] != none)
    return np.where(use, as_answer[forced], answer).astype(np.int8)
