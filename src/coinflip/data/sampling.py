"""Which questions a `--limit` run asks: the same subset for the same seed and data.

The official test split is ordered (2,000 four-person questions, then 1,333 two-person), so by default
a limit draws a seeded sample stratified by the number of people; `first` keeps EvalScope's first N,
`random` is a plain seeded sample (EvalScope's `shuffle`).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .load import Record


@dataclass(frozen=True)
class Subset:
    ids: tuple[int, ...] | None  # sorted; None: the first `count` rows
    count: int
    total: int
    mode: str
    seed: int

    def describe(self) -> dict[str, object]:
        mode = self.mode if self.count < self.total else "all"
        return {"mode": mode, "seed": self.seed, "count": self.count, "of": self.total}


def choose(records: Iterable[Record], total: int, limit: int | float | None, mode: str, seed: int) -> Subset:
    """The subset a limit (a count, a fraction or None) asks for; reads `records` only for a stratified draw."""
    count = total if limit is None else max(1, int(total * limit)) if isinstance(limit, float) else int(limit)
    count = min(count, total)  # EvalScope takes int(n * f) of a fraction
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
    """Proportional quotas by largest remainder (ties to the larger stratum), each the first rows of a
    seeded shuffle: a larger limit mostly holds the smaller one's questions, so a resume reuses them."""
    keys = sorted(strata)
    quotas = {k: count * len(strata[k]) / total for k in keys}
    taken = {k: int(quotas[k]) for k in keys}
    short = count - sum(taken.values())
    for k in sorted(keys, key=lambda k: (-(quotas[k] - taken[k]), -len(strata[k]), k))[:short]:
        taken[k] += 1
    chosen: list[int] = []
    for k in keys:
        order = list(strata[k])
        random.Random(f"coinflip-subset:{seed}:{k}").shuffle(order)
        chosen.extend(order[: taken[k]])
    return tuple(sorted(chosen))
