"""Which questions a `--limit` run asks: a representative subset, the same one for the same seed and data.

The official test split is ordered (2,000 four-person questions, then 1,333 two-person), so the
first N questions are all of one kind. By default a limit draws a seeded sample stratified by the
number of people, in proportion (largest remainders); `first` keeps EvalScope's first-N
behaviour, and `random` is a plain seeded sample (EvalScope's `shuffle`).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .load import Record  # the rows are load.py's; sampling only picks among them


@dataclass(frozen=True)
class Subset:
    """The selected row ids (sorted), and how they were drawn, for the report."""

    ids: tuple[int, ...] | None  # None: the first `count` rows
    count: int
    total: int
    mode: str
    seed: int

    def describe(self) -> dict[str, object]:
        return {
            "mode": self.mode if self.count < self.total else "all",
            "seed": self.seed,
            "count": self.count,
            "of": self.total,
        }


def size(limit: int | float | None, total: int) -> int:
    """How many rows a limit asks for: a count, a fraction of the set, or everything."""
    if limit is None:
        return total
    count = max(1, int(total * limit)) if isinstance(limit, float) else int(limit)  # EvalScope: int(n * f)
    return min(count, total)


def choose(records: Iterable[Record], total: int, limit: int | float | None, mode: str, seed: int) -> Subset:
    """Draw the subset; reads `records` (one pass) only when the draw needs them."""
    count = size(limit, total)
    if count >= total or mode == "first":
        return Subset(None, count, total, mode, seed)
    if mode == "random":
        order = list(range(total))
        random.Random(f"coinflip-subset:{seed}").shuffle(order)
        return Subset(tuple(sorted(order[:count])), count, total, mode, seed)
    strata: dict[int, list[int]] = {}
    for r in records:
        strata.setdefault(r.people, []).append(r.id)
    return Subset(_stratified(strata, count, total, seed), count, total, mode, seed)


def _stratified(strata: dict[int, list[int]], count: int, total: int, seed: int) -> tuple[int, ...]:
    """Proportional allocation by largest remainder (ties to the larger stratum), then the first
    rows of a seeded shuffle of each stratum: a larger limit with the same seed mostly contains
    the smaller one's questions, so a resumed run with a larger --limit reuses what it has."""
    keys = sorted(strata)
    quotas = {k: count * len(strata[k]) / total for k in keys}
    taken = {k: int(quotas[k]) for k in keys}
    short = count - sum(taken.values())
    by_remainder = sorted(keys, key=lambda k: (-(quotas[k] - taken[k]), -len(strata[k]), k))
    for k in by_remainder[:short]:
        taken[k] += 1
    chosen: list[int] = []
    for k in keys:
        order = list(strata[k])
        random.Random(f"coinflip-subset:{seed}:{k}").shuffle(order)
        chosen.extend(order[: taken[k]])
    return tuple(sorted(chosen))
