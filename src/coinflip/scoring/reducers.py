"""Repeats: what K answers to the same question say beyond their pooled metrics.

- per repeat: the five metrics of each repeat k on its own, then their mean and spread (the
  sample standard deviation), which is the generation noise alone;
- majority vote (`majority`): one answer per question, the more frequent of the valid YES/NO
  answers (a tie, or no valid answer, is no answer); `compare`, the index and the probes pair
  runs on it too, their votes gathered from reviews by `Votes`;
- pass@k: the share of questions with at least one correct repeat;
- consistency: the share of questions whose K answers agree (invalid counts as an answer).

In EvalScope's arithmetic an errored sample is in no denominator (metrics.scored), so a question
whose every repeat errored is no question at all, here as in every place that pairs runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..records import ANSWERS
from .metrics import METRICS, Outcomes, number, per_question, rates, scored
from .schema import Repeats, Spread


def reduce(outcomes: Outcomes, compat: str) -> Repeats:
    import numpy as np

    k = int(outcomes.repeat.max()) + 1 if len(outcomes) else 0
    outcomes = scored(outcomes, compat)
    ids, matrix = per_question(outcomes)
    per_repeat = [rates(outcomes.where(outcomes.repeat == r).cells(), compat) for r in range(k)]
    spread: dict[str, Spread] = {}
    for name in METRICS:
        values = np.array([float(m[name]) for m in per_repeat])
        finite = values[np.isfinite(values)]
        spread[name] = {
            "mean": float(finite.mean()) if len(finite) else None,
            "std": float(finite.std(ddof=1)) if len(finite) > 1 else 0.0 if len(finite) else None,
            "values": [None if not np.isfinite(v) else round(float(v), 6) for v in values],
        }
    majority = _majority(matrix)
    votes = {name: number(v) for name, v in rates(majority, compat).items()}
    answered = matrix.sum(axis=1)
    return {
        "k": k,
        "questions": len(ids),
        "per_repeat": spread,
        "majority_vote": {name: votes[name] for name in METRICS},
        "pass_at_k": float(np.mean((matrix[:, 0] + matrix[:, 4]) > 0)) if len(ids) else None,
        "consistency": float(np.mean(matrix.max(axis=1) == answered)) if len(ids) else None,
    }


def majority(says_yes: Any, says_no: Any) -> Any:
    """The majority vote of each question from its counts of valid YES and NO answers: the more
    frequent one; a tie, or no valid answer, is no answer (invalid answers and errors do not
    vote). Indexes into records.ANSWERS: 0 YES, 1 NO, 2 none. The one definition the report,
    `compare` and the index all use."""
    import numpy as np

    says_yes, says_no = np.asarray(says_yes), np.asarray(says_no)
    return np.where(says_yes > says_no, 0, np.where(says_no > says_yes, 1, 2))


def majority_right(votes: dict[str, list[int]]) -> dict[str, bool]:
    """Whether each question's majority vote is right, from [YES answers, NO answers, target is YES]."""
    import numpy as np

    counts = np.array(list(votes.values()), dtype=np.int64).reshape(-1, 3)
    vote = majority(counts[:, 0], counts[:, 1])
    right = np.where(counts[:, 2] == 1, vote == 0, vote == 1)
    return dict(zip(votes, right.tolist(), strict=True))


class Votes:
    """Each question's valid YES and NO answers, gathered from a run's reviews (the pages' and the
    probes' way to `majority_right`, as the report reduces its outcomes): an errored sample does
    not vote, and in EvalScope's arithmetic is not counted at all; with `forced`, a sample without
    a valid answer votes with its forced answer (forced.recovered, the report's forced view)."""

    def __init__(self, compat: str, forced: bool = False) -> None:
        self.compat, self.forced = compat, forced
        self.counts: dict[str, list[int]] = {}  # question -> [YES answers, NO answers, target is YES]

    def add(self, question: str, review: Mapping[str, Any]) -> None:
        error = bool(review.get("error"))
        if error and self.compat == "evalscope":
            return
        answer = None if error else review.get("extracted")
        if self.forced and not error and answer not in ("YES", "NO"):
            answer = review.get("forced")
        count = self.counts.setdefault(question, [0, 0, int(review.get("target") == "YES")])
        count[0] += answer == "YES"
        count[1] += answer == "NO"

    def right(self) -> dict[str, bool]:
        return majority_right(self.counts)

    def answers(self) -> dict[str, str | None]:
        """Each question's majority answer: YES, NO, or None (a tie, or no valid answer)."""
        import numpy as np

        counts = np.array(list(self.counts.values()), dtype=np.int64).reshape(-1, 3)
        votes = majority(counts[:, 0], counts[:, 1]).tolist()
        return {question: ANSWERS[vote] for question, vote in zip(self.counts, votes, strict=True)}


def _majority(matrix: Any) -> Any:
    """The six cell counts (metrics.CELLS) of the questions' majority answers, one per question."""
    import numpy as np

    yes_target = matrix[:, :3].sum(axis=1) > 0
    answer = majority(matrix[:, 0] + matrix[:, 3], matrix[:, 1] + matrix[:, 4])
    return np.bincount(np.where(yes_target, answer, answer + 3), minlength=6)
