"""Repeats: what K answers to the same question say beyond their pooled metrics.

- per repeat: the five metrics of each repeat k on its own, then their mean and spread (the
  sample standard deviation), which is the generation noise alone;
- majority vote (`majority`): one answer per question, the more frequent of the valid YES/NO
  answers (a tie, or no valid answer, is no answer); `compare` and the index pair runs on it too;
- pass@k: the share of questions with at least one correct repeat;
- consistency: the share of questions whose K answers agree (invalid counts as an answer).
"""

from __future__ import annotations

from typing import Any

from .metrics import METRICS, Outcomes, number, per_question, rates
from .schema import Repeats, Spread


def reduce(outcomes: Outcomes, compat: str) -> Repeats:
    import numpy as np

    ids, matrix = per_question(outcomes)
    k = int(outcomes.repeat.max()) + 1 if len(outcomes) else 0
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


def _majority(matrix: Any) -> Any:
    """The six cell counts (metrics.CELLS) of the questions' majority answers, one per question."""
    import numpy as np

    yes_target = matrix[:, :3].sum(axis=1) > 0
    answer = majority(matrix[:, 0] + matrix[:, 3], matrix[:, 1] + matrix[:, 4])
    return np.bincount(np.where(yes_target, answer, answer + 3), minlength=6)
