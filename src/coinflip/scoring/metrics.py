"""The five metrics (F1 primary, YES positive), counts and intervals, in coinflip's arithmetic (every sample
counts) or EvalScope's `aggregate_scores` (docs/scoring.md says how they differ)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .evalscope import report_note
from .schema import People, Report

METRICS = ("f1_score", "accuracy", "precision", "recall", "yes_ratio")
PRIMARY = "f1_score"
Z95 = 1.959963984540054
RESAMPLES = 2000
# the six (target, prediction) cells, in this order everywhere; prediction None is no answer
CELLS = (("YES", "YES"), ("YES", "NO"), ("YES", None), ("NO", "YES"), ("NO", "NO"), ("NO", None))


@dataclass(frozen=True)
class Outcomes:
    """One entry per (question, repeat), as numpy arrays: `cell` indexes CELLS."""

    question: Any
    repeat: Any
    cell: Any
    error: Any
    people: Any

    def __len__(self) -> int:
        return len(self.cell)

    def cells(self) -> Any:
        import numpy as np

        return np.bincount(self.cell, minlength=6)

    def where(self, mask: Any) -> Outcomes:
        return Outcomes(self.question[mask], self.repeat[mask], self.cell[mask], self.error[mask], self.people[mask])


def wilson(successes: int, total: int) -> tuple[float, float]:
    if total == 0:
        return (0.0, 0.0)
    p = successes / total
    denom = 1 + Z95**2 / total
    centre = (p + Z95**2 / (2 * total)) / denom
    half = Z95 * math.sqrt(p * (1 - p) / total + Z95**2 / (4 * total**2)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def rates(cells: Any, compat: str = "coinflip", raw: bool = False) -> dict[str, Any]:
    """The five metrics of cell counts (last axis: CELLS), or of a stack of resamples; NaN where undefined
    (EvalScope's arithmetic: 0.0, unless `raw`)."""
    import numpy as np

    c = np.asarray(cells, dtype=np.float64)
    tp, yes_no, yes_none, fp, tn = c[..., 0], c[..., 1], c[..., 2], c[..., 3], c[..., 4]
    total = c.sum(axis=-1)
    fn = yes_no + (0 if compat == "evalscope" else yes_none)
    with np.errstate(divide="ignore", invalid="ignore"):
        precision, recall = tp / (tp + fp), tp / (tp + fn)
        # the harmonic mean as EvalScope computes it (same floats); else 2TP / (2TP + FP + FN)
        harmonic = 2 * precision * recall / (precision + recall)
        counted = 2 * tp / (2 * tp + fp + fn)
        f1 = np.where(np.isfinite(harmonic), harmonic, np.where(tp == 0, counted, np.nan))
        out = {
            "f1_score": f1,
            "accuracy": (tp + tn) / total,
            "precision": precision,
            "recall": recall,
            "yes_ratio": (tp + fp) / total,
        }
    if compat == "evalscope" and not raw:
        out = {k: np.nan_to_num(v, nan=0.0) for k, v in out.items()}
    return out


def number(value: Any) -> float | None:
    value = float(value)
    return None if math.isnan(value) else value


def scored(outcomes: Outcomes, compat: str) -> Outcomes:
    """The samples the metrics count: in EvalScope's arithmetic, errored ones never reach its aggregation."""
    return outcomes.where(outcomes.error == 0) if compat == "evalscope" else outcomes


def summarize(outcomes: Outcomes, compat: str = "coinflip", seed: int = 0) -> Report:
    import numpy as np

    everything = outcomes
    outcomes = scored(outcomes, compat)
    cells, all_cells = outcomes.cells(), everything.cells()
    total = int(cells.sum())
    raw = rates(cells, compat, raw=True)
    undefined = [k for k in METRICS if math.isnan(float(raw[k]))] if total else []
    values = {k: number(v) for k, v in rates(cells, compat).items()}  # EvalScope's: 0.0 where undefined
    repeated = len(outcomes) and int(outcomes.repeat.max()) > 0
    intervals = _clustered(outcomes, compat, seed) if repeated else _intervals(cells, compat, seed)
    errors = everything.error.astype(bool)
    errors_on = [int(np.sum(errors & (everything.cell < 3))), int(np.sum(errors & (everything.cell >= 3)))]
    invalid_on = [int(all_cells[2]) - errors_on[0], int(all_cells[5]) - errors_on[1]]
    scores: Report = {"metric_compat": compat, "primary": PRIMARY}
    if compat == "evalscope":
        scores["evalscope"] = report_note(len(everything) - total, total)
    scores["metrics"] = {k: values[k] for k in METRICS}
    scores["intervals"] = {k: None if k in undefined else _rounded(intervals[k], values[k]) for k in METRICS}
    scores["undefined"] = undefined
    scores["counts"] = {
        "samples": len(everything),
        "correct": int(cells[0] + cells[4]),
        "tp": int(cells[0]),
        "fp": int(cells[3]),
        "tn": int(cells[4]),
        "fn": int(cells[1]),
        "invalid": sum(invalid_on),
        "invalid_rate": sum(invalid_on) / total if total else 0.0,
        "errors": sum(errors_on),
        "target_yes": int(all_cells[:3].sum()),
        "answered_yes": int(cells[0] + cells[3]),
        "answered_no": int(cells[1] + cells[4]),
        "invalid_on_yes": invalid_on[0],
        "invalid_on_no": invalid_on[1],
        "errors_on_yes": errors_on[0],
        "errors_on_no": errors_on[1],
    }
    scores["by_people"] = by_people(outcomes, seed)  # the samples the metrics count
    return scores


def _rounded(pair: tuple[float, float] | None, value: float | None) -> list[float] | None:
    """The interval widened to hold its metric: a posterior interval may miss an extreme one (1.0 of 2)."""
    if pair is None:
        return None
    low, high = (pair[0], pair[1]) if value is None else (min(pair[0], value), max(pair[1], value))
    return [round(low, 6), round(high, 6)]


def by_people(outcomes: Outcomes, seed: int = 0) -> dict[str, People]:
    """Wilson intervals; with repeats, the headline's bootstrap over questions (K answers are not K questions)."""
    import numpy as np

    out: dict[str, People] = {}
    right = (outcomes.cell == 0) | (outcomes.cell == 4)
    repeated = len(outcomes) and int(outcomes.repeat.max()) > 0
    for k in np.unique(outcomes.people).tolist():
        mask = outcomes.people == k
        n, ok = int(mask.sum()), int(right[mask].sum())
        pair = (_clustered(outcomes.where(mask), "coinflip", seed)["accuracy"] if repeated else None) or wilson(ok, n)
        out[str(k)] = {"samples": n, "correct": ok, "accuracy": ok / n if n else 0.0, "interval": list(pair)}
    return out


def _percentiles(samples: Any) -> tuple[float, float] | None:
    import numpy as np

    finite = samples[np.isfinite(samples)]
    if not len(finite):
        return None
    lo, hi = np.percentile(finite, [2.5, 97.5])
    return (float(lo), float(hi))


def _intervals(cells: Any, compat: str, seed: int) -> dict[str, tuple[float, float] | None]:
    """Wilson for accuracy and yes_ratio; else a Dirichlet draw with a Jeffreys prior over the cells, so 2 YES
    of 2 give a wide precision interval, not 1.000 - 1.000, and 2,000 draws of any size cost milliseconds."""
    import numpy as np

    total = int(cells.sum())
    if total == 0:
        return dict.fromkeys(METRICS)
    draws = np.random.default_rng(seed).dirichlet(cells + 0.5, size=RESAMPLES) * total
    drawn = rates(draws, compat)
    out = {k: _percentiles(drawn[k]) for k in ("precision", "recall", "f1_score")}
    out["accuracy"] = wilson(int(cells[0] + cells[4]), total)
    out["yes_ratio"] = wilson(int(cells[0] + cells[3]), total)
    return out


def per_question(outcomes: Outcomes) -> tuple[Any, Any]:
    import numpy as np

    ids, index = np.unique(outcomes.question, return_inverse=True)
    matrix = np.zeros((len(ids), 6), dtype=np.int64)
    np.add.at(matrix, (index, outcomes.cell), 1)
    return ids, matrix


def _clustered(outcomes: Outcomes, compat: str, seed: int) -> dict[str, tuple[float, float] | None]:
    import numpy as np

    _, matrix = per_question(outcomes)
    questions = len(matrix)
    rng = np.random.default_rng(seed)
    drawn: dict[str, list[Any]] = {k: [] for k in METRICS}
    for first in range(0, RESAMPLES, 200):  # 200 resamples at a time keeps memory flat
        size = min(200, RESAMPLES - first)  # all RESAMPLES, whatever it is
        weights = rng.multinomial(questions, np.full(questions, 1 / questions), size=size)
        for k, v in rates(weights @ matrix, compat).items():
            drawn[k].append(v)
    return {k: _percentiles(np.concatenate(drawn[k])) for k in METRICS}
