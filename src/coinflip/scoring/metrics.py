"""Score stage: the five metrics (F1 primary), counts, and how sure each number is.

Positive class is YES. Two arithmetics:
- "coinflip" (default): every sample counts. An invalid answer or an errored sample is wrong;
  recall's denominator is every YES target, so an invalid answer on a YES target is a miss.
- "evalscope": EvalScope 1.14.1's own arithmetic (coin_flip_adapter.py `aggregate_scores`):
  samples without a YES/NO prediction are left out of TP/FP/FN but count in accuracy's and
  yes_ratio's denominators, and errored samples are in no denominator at all (EvalScope drops
  them with `ignore_errors`, and writes no report without it; see scoring/evalscope.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .evalscope import report_note

METRICS = ("f1_score", "accuracy", "precision", "recall", "yes_ratio")
PRIMARY = "f1_score"
Z95 = 1.959963984540054
_CATEGORIES = [(t, p) for t in ("YES", "NO") for p in ("YES", "NO", None)]


@dataclass(frozen=True)
class Outcome:
    """What the scorer needs of one sample."""

    target: str
    prediction: str | None
    error: bool = False
    people: int = 0


def wilson(successes: int, total: int) -> tuple[float, float]:
    if total == 0:
        return (0.0, 0.0)
    p = successes / total
    denom = 1 + Z95**2 / total
    centre = (p + Z95**2 / (2 * total)) / denom
    half = Z95 * math.sqrt(p * (1 - p) / total + Z95**2 / (4 * total**2)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def _ratio(num: float, den: float) -> float:
    return num / den if den else 0.0


def _prf(tp: Any, fp: Any, fn_denominator: Any) -> tuple[Any, Any, Any]:
    """Precision, recall and F1; works on scalars and numpy arrays alike (0 where undefined)."""
    import numpy as np

    with np.errstate(divide="ignore", invalid="ignore"):
        precision = np.where(tp + fp > 0, tp / np.maximum(tp + fp, 1), 0.0)
        recall = np.where(fn_denominator > 0, tp / np.maximum(fn_denominator, 1), 0.0)
        f1 = np.where(precision + recall > 0, 2 * precision * recall / np.maximum(precision + recall, 1e-300), 0.0)
    return precision, recall, f1


def _from_counts(c: dict[tuple[str, str | None], Any], compat: str) -> tuple[Any, Any, Any]:
    tp, fp = c[("YES", "YES")], c[("NO", "YES")]
    misses = c[("YES", "NO")] + (0 if compat == "evalscope" else c[("YES", None)])
    return _prf(tp, fp, tp + misses)


class Tally:
    """Running counts: metrics for any number of samples in constant memory."""

    def __init__(self) -> None:
        self.cells = dict.fromkeys(_CATEGORIES, 0)
        self.errors = dict.fromkeys(("YES", "NO"), 0)
        self.by_people: dict[int, list[int]] = {}
        self.total = 0

    def add(self, o: Outcome) -> None:
        self.total += 1
        self.cells[(o.target, o.prediction)] += 1
        self.errors[o.target] += o.error
        cell = self.by_people.setdefault(o.people, [0, 0])
        cell[0] += 1
        cell[1] += o.prediction == o.target

    def result(self, compat: str = "coinflip", seed: int = 0, resamples: int = 2000) -> dict[str, Any]:
        """All numbers of a report; deterministic for a seed."""
        import numpy as np

        counts, total = self.cells, self.total
        if compat == "evalscope":  # errored samples never reach EvalScope's aggregation
            counts = {c: n - (self.errors[c[0]] if c[1] is None else 0) for c, n in counts.items()}
            total -= sum(self.errors.values())
        correct = counts[("YES", "YES")] + counts[("NO", "NO")]
        yes = counts[("YES", "YES")] + counts[("NO", "YES")]
        invalid_on = {t: self.cells[(t, None)] - self.errors[t] for t in ("YES", "NO")}
        invalid = sum(invalid_on.values())
        precision, recall, f1 = (float(x) for x in _from_counts(counts, compat))
        values = {
            "f1_score": f1,
            "accuracy": _ratio(correct, total),
            "precision": precision,
            "recall": recall,
            "yes_ratio": _ratio(yes, total),
        }
        intervals = {
            "accuracy": wilson(correct, total),
            "yes_ratio": wilson(yes, total),
            **_bootstrap(counts, total, compat, seed, resamples, np),
        }
        extra = {"evalscope": report_note(self.total - total, total)} if compat == "evalscope" else {}
        return {
            "metric_compat": compat,
            "primary": PRIMARY,
            **extra,
            "metrics": values,
            "intervals": {k: [round(lo, 6), round(hi, 6)] for k, (lo, hi) in intervals.items()},
            "counts": {
                "samples": self.total,
                "correct": correct,
                "tp": counts[("YES", "YES")],
                "fp": counts[("NO", "YES")],
                "tn": counts[("NO", "NO")],
                "fn": counts[("YES", "NO")],
                "invalid": invalid,
                "invalid_rate": _ratio(invalid, total),
                "errors": self.errors["YES"] + self.errors["NO"],
                "target_yes": sum(self.cells[("YES", p)] for p in ("YES", "NO", None)),
                "invalid_on_yes": invalid_on["YES"],
                "invalid_on_no": invalid_on["NO"],
                "errors_on_yes": self.errors["YES"],
                "errors_on_no": self.errors["NO"],
            },
            "by_people": {
                str(k): {"samples": n, "correct": ok, "accuracy": _ratio(ok, n), "interval": list(wilson(ok, n))}
                for k, (n, ok) in sorted(self.by_people.items())
            },
        }


def compute(
    outcomes: Iterable[Outcome], compat: str = "coinflip", seed: int = 0, resamples: int = 2000
) -> dict[str, Any]:
    tally = Tally()
    for o in outcomes:
        tally.add(o)
    return tally.result(compat, seed, resamples)


def _bootstrap(
    counts: dict[tuple[str, str | None], int], total: int, compat: str, seed: int, resamples: int, np: Any
) -> dict[str, tuple[float, float]]:
    """Percentile intervals for precision, recall and F1.

    Resampling samples with replacement is a multinomial draw over the six (target, prediction)
    cells, so 2,000 resamples of any size cost a few milliseconds.
    """
    if total == 0:
        return {k: (0.0, 0.0) for k in ("precision", "recall", "f1_score")}
    probs = np.array([counts[c] for c in _CATEGORIES], dtype=float) / total
    draws = np.random.default_rng(seed).multinomial(total, probs, size=resamples)
    cells = {c: draws[:, i] for i, c in enumerate(_CATEGORIES)}
    precision, recall, f1 = _from_counts(cells, compat)
    out = {}
    for name, arr in (("precision", precision), ("recall", recall), ("f1_score", f1)):
        lo, hi = np.percentile(arr, [2.5, 97.5])
        out[name] = (float(lo), float(hi))
    return out
