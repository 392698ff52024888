"""McNemar between two runs on the questions they share, paired on the question text (whatever ids or
subsets they used); with repeats a question counts as right when its majority vote is (reducers.Votes)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .metrics import Z95


def mcnemar(b: int, c: int) -> dict[str, float]:
    """b: only A right; c: only B right. Chi-square (1 df), with continuity correction, and exact."""
    n = b + c
    chi2 = (b - c) ** 2 / n if n else 0.0  # no discordant question: no evidence either way, p = 1
    corrected = max(abs(b - c) - 1, 0) ** 2 / n if n else 0.0
    return {
        "only_a": b,
        "only_b": c,
        "chi2": chi2,
        "p_value": math.erfc(math.sqrt(chi2 / 2)),
        "chi2_corrected": corrected,
        "p_corrected": math.erfc(math.sqrt(corrected / 2)),
        "p_exact": _exact(b, c),
    }


def _exact(b: int, c: int) -> float:
    """Two-sided binomial p-value in exact integers, each term from the last (milliseconds for thousands)."""
    n, term, tail = b + c, 1, 1
    for k in range(min(b, c)):
        term = term * (n - k) // (k + 1)
        tail += term
    return min(1.0, float(2 * tail / (1 << n)))


@dataclass(frozen=True)
class Paired:
    shared: int
    only_a: list[str]  # questions only A got right
    only_b: list[str]

    def stats(self) -> dict[str, Any]:
        return {"shared": self.shared, **mcnemar(len(self.only_a), len(self.only_b))}


def pair(a: Mapping[str, bool], b: Mapping[str, bool]) -> Paired:
    small, large = (a, b) if len(a) <= len(b) else (b, a)
    shared = [q for q in small if q in large]
    only_a = [q for q in shared if a[q] and not b[q]]
    only_b = [q for q in shared if b[q] and not a[q]]
    return Paired(len(shared), only_a, only_b)


def difference(only_a: int, only_b: int, shared: int, z: float = Z95) -> dict[str, float]:
    """B's accuracy minus A's, with Agresti and Min's adjusted Wald interval: honest on few questions."""
    if shared <= 0:
        return {"difference": 0.0, "low": -1.0, "high": 1.0}
    n, b, c = shared + 2, only_a + 0.5, only_b + 0.5
    centre = (c - b) / n
    half = z * math.sqrt(max((b + c) - (c - b) ** 2 / n, 0.0)) / n
    return {
        "difference": (only_b - only_a) / shared,
        "low": max(-1.0, centre - half),
        "high": min(1.0, centre + half),
    }
