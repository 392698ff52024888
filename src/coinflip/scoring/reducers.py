"""Repeats: what K answers to the same question say beyond their pooled metrics.

- per repeat: the five metrics of each repeat k on its own, then their mean and spread (the
  sample standard deviation), which is the generation noise alone;
- majority vote (`majority_cells`): one answer per question, the more frequent of the valid
  YES/NO answers (a tie, or no valid answer, is no answer); `compare`, the index and the probes
  pair runs on it too, their votes gathered from reviews by `Votes` through the same steps;
- pass@k: the share of questions with at least one correct repeat;
- consistency: the share of questions whose K answers agree (invalid counts as an answer).

In EvalScope's arithmetic an errored sample is in no denominator (metrics.scored), so a question
whose every repeat errored is no question at all, here as in every place that pairs runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..records import FORCED_ANSWERS, make_review
from .metrics import CELLS, METRICS, Outcomes, number, per_question, rates, scored
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
    vote). Indexes into records.ANSWERS: 0 YES, 1 NO, 2 none."""
    import numpy as np

    says_yes, says_no = np.asarray(says_yes), np.asarray(says_no)
    return np.where(says_yes > says_no, 0, np.where(says_no > says_yes, 1, 2))


def majority_cells(matrix: Any) -> Any:
    """Each question's majority answer as its cell (metrics.CELLS) from its (questions x 6) cell
    counts (metrics.per_question): the one definition of a question's verdict that the report,
    `compare`, the index and the probes all read. Its target is YES when any of its samples' is
    (a hand-edited file may give one id two targets)."""
    import numpy as np

    yes_target = matrix[:, :3].sum(axis=1) > 0
    answer = majority(matrix[:, 0] + matrix[:, 3], matrix[:, 1] + matrix[:, 4])
    return np.where(yes_target, answer, answer + 3)


def _majority(matrix: Any) -> Any:
    """The six cell counts (metrics.CELLS) of the questions' majority answers, one per question."""
    import numpy as np

    return np.bincount(majority_cells(matrix), minlength=6)


class Votes:
    """Each question's majority vote, from a run's saved reviews (the pages' and the probes' way to
    the report's verdicts): the reviews go through the report's own steps (scorer.Columns, its
    forced view, metrics.scored, per_question, majority_cells), so an errored sample does not vote
    and in EvalScope's arithmetic is not counted at all, and with `forced` a sample without a
    valid answer votes with its forced answer. A review's odd fields (a hand edit) count as none."""

    def __init__(self, compat: str, forced: bool = False) -> None:
        from .scorer import Columns

        self.compat, self.forced = compat, forced
        self.keys: dict[str, int] = {}  # question -> its index in the columns
        self.columns = Columns()

    def add(self, question: str, review: Mapping[str, Any]) -> None:
        index = self.keys.setdefault(question, len(self.keys))
        extracted, forced = review.get("extracted"), review.get("forced")
        error = bool(review.get("error"))
        self.columns.append(
            make_review(
                index,
                0,  # which repeat does not change a vote
                0,
                "YES" if review.get("target") == "YES" else "NO",
                extracted if extracted in ("YES", "NO") and not error else None,
                None,
                error,
                forced if forced in FORCED_ANSWERS else None,
                None,
            )
        )

    def _cells(self) -> dict[str, int]:
        """Each question's majority cell; a question none of whose samples is counted has none."""
        outcomes = scored(self.columns.outcomes(self.forced), self.compat)
        ids, matrix = per_question(outcomes)
        names = list(self.keys)
        return {names[i]: cell for i, cell in zip(ids.tolist(), majority_cells(matrix).tolist(), strict=True)}

    def right(self) -> dict[str, bool]:
        """Whether each question's majority vote is right: its cell is (YES, YES) or (NO, NO)."""
        return {question: CELLS[cell][0] == CELLS[cell][1] for question, cell in self._cells().items()}

    def answers(self) -> dict[str, str | None]:
        """Each question's majority answer: YES, NO, or None (a tie, or no valid answer)."""
        return {question: CELLS[cell][1] for question, cell in self._cells().items()}
