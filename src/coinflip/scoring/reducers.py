"""Repeats: each repeat's metrics with their spread, the majority vote (`majority_cells`, which `compare`,
the index and the probes pair runs on through `Votes`), pass@k, and consistency (invalid is an answer)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..records import FORCED_ANSWERS, make_review, whole
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
    votes = rates(np.bincount(majority_cells(matrix), minlength=6), compat)  # the majority answers' cells
    return {
        "k": k,
        "questions": len(ids),
        "per_repeat": spread,
        "majority_vote": {name: number(votes[name]) for name in METRICS},
        "pass_at_k": float(np.mean((matrix[:, 0] + matrix[:, 4]) > 0)) if len(ids) else None,
        "consistency": float(np.mean(matrix.max(axis=1) == matrix.sum(axis=1))) if len(ids) else None,
    }


def majority_cells(matrix: Any) -> Any:
    """Each question's majority answer (its more frequent valid one; a tie or none is no answer) as its CELLS
    cell: the one definition of a question's verdict. Its target is YES when any of its samples' is."""
    import numpy as np

    yes_target = matrix[:, :3].sum(axis=1) > 0
    says_yes, says_no = matrix[:, 0] + matrix[:, 3], matrix[:, 1] + matrix[:, 4]
    answer = np.where(says_yes > says_no, 0, np.where(says_no > says_yes, 1, 2))  # ANSWERS' indexes
    return np.where(yes_target, answer, answer + 3)


class Votes:
    """Each question's majority vote from a run's saved reviews, through the report's own steps (Columns,
    metrics.scored, majority_cells); with `forced`, the forced view's. Odd fields (a hand edit) count as none."""

    def __init__(self, compat: str, forced: bool = False) -> None:
        from .scorer import Columns

        self.compat, self.forced = compat, forced
        self.keys: dict[str, int] = {}  # question -> its index in the columns
        self.columns = Columns()

    def add(self, question: str, review: Mapping[str, Any]) -> None:
        index = self.keys.setdefault(question, len(self.keys))
        extracted, forced = review.get("extracted"), review.get("forced")
        error = bool(review.get("error"))
        target = "YES" if review.get("target") == "YES" else "NO"
        answer = extracted if extracted in ("YES", "NO") and not error else None
        said = forced if forced in FORCED_ANSWERS else None
        self.columns.append(make_review(index, 0, 0, target, answer, None, error, said, None))  # repeat: no matter

    def _cells(self) -> dict[str, int]:
        outcomes = scored(self.columns.outcomes(self.forced), self.compat)
        ids, matrix = per_question(outcomes)
        names = list(self.keys)
        return {names[i]: cell for i, cell in zip(ids.tolist(), majority_cells(matrix).tolist(), strict=True)}

    def right(self) -> dict[str, bool]:
        return {question: CELLS[cell][0] == CELLS[cell][1] for question, cell in self._cells().items()}

    def answers(self) -> dict[str, str | None]:
        return {question: CELLS[cell][1] for question, cell in self._cells().items()}


def answers_per_question(fingerprint: dict[str, Any]) -> int:
    """Answers asked per question: --repeats times `n`, as plan.per_question counts them (odd values count 1)."""
    repeats = fingerprint.get("repeats")
    return (repeats if whole(repeats) and repeats else 1) * choices(fingerprint)


def choices(fingerprint: dict[str, Any]) -> int:
    """Answers per request (`n`; odd values count 1): the request's usage is in its first answer's row alone."""
    generation = fingerprint.get("generation_config")
    n = generation.get("n") if isinstance(generation, dict) else None
    return n if whole(n) and n else 1
