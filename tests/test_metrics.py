"""The five metrics in both arithmetics, on a hand-computed confusion matrix with invalid answers and errors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from coinflip.scoring.metrics import CELLS, METRICS, Outcomes, summarize, wilson


@dataclass(frozen=True)
class Outcome:
    """One sample, written by hand."""

    target: str
    prediction: str | None
    error: bool = False
    people: int = 0


def compute(items: list[Outcome], compat: str = "coinflip", seed: int = 0) -> dict[str, Any]:
    """The report's numbers for hand-written samples, each a question of its own."""
    import numpy as np

    rows = [(i, 0, CELLS.index((o.target, o.prediction)), o.error, o.people) for i, o in enumerate(items)]
    return summarize(Outcomes(*np.array(rows, dtype=np.int64).reshape(-1, 5).T), compat, seed)


def _outcomes() -> list[Outcome]:
    o = [Outcome("YES", "YES", people=2)] * 4 + [Outcome("YES", "NO", people=2)] * 2
    o += [Outcome("YES", None, people=4), Outcome("YES", None, error=True, people=4)]
    o += [Outcome("NO", "NO", people=4)] * 5 + [Outcome("NO", "YES", people=2)] * 3 + [Outcome("NO", None, people=2)]
    return o


def test_coinflip_arithmetic_counts_every_failure() -> None:
    r = compute(_outcomes(), "coinflip")
    m, c = r["metrics"], r["counts"]
    assert (c["tp"], c["fn"], c["tn"], c["fp"], c["invalid"], c["errors"], c["samples"]) == (4, 2, 5, 3, 2, 1, 17)
    assert m["accuracy"] == pytest.approx(9 / 17)
    assert m["yes_ratio"] == pytest.approx(7 / 17)
    assert m["precision"] == pytest.approx(4 / 7)
    assert m["recall"] == pytest.approx(4 / 8)  # the invalid and the errored YES targets are misses
    assert m["f1_score"] == pytest.approx(8 / 15)
    assert c["invalid_rate"] == pytest.approx(2 / 17)
    assert (c["invalid_on_yes"], c["errors_on_yes"], c["invalid_on_no"], c["errors_on_no"]) == (1, 1, 1, 0)
    assert r["metric_compat"] == "coinflip" and r["primary"] == "f1_score"
    assert list(m) == list(METRICS) and list(m)[0] == "f1_score"


def test_evalscope_arithmetic_leaves_unparsed_out_and_errors_out_of_everything() -> None:
    r = compute(_outcomes(), "evalscope")
    m, c = r["metrics"], r["counts"]
    assert m["accuracy"] == pytest.approx(9 / 16)  # the errored sample is in no denominator
    assert m["yes_ratio"] == pytest.approx(7 / 16)
    assert m["precision"] == pytest.approx(4 / 7)
    assert m["recall"] == pytest.approx(4 / 6)  # the invalid YES target is not a miss
    assert m["f1_score"] == pytest.approx(8 / 13)
    assert (c["samples"], c["invalid"], c["errors"], c["invalid_rate"]) == (17, 2, 1, 2 / 16)
    assert r["metric_compat"] == "evalscope" and r["primary"] == "f1_score"
    note = r["evalscope"]
    assert (note["version"], note["primary_metric"], note["errors_excluded"], note["scored_samples"]) == (
        "1.14.1",
        "accuracy",
        1,
        16,
    )
    assert "evalscope" not in compute(_outcomes(), "coinflip")


def test_accuracy_by_people() -> None:
    by = compute(_outcomes())["by_people"]
    assert by["2"]["samples"] == 10 and by["2"]["correct"] == 4
    assert by["4"]["samples"] == 7 and by["4"]["correct"] == 5


def test_ratios_without_a_denominator_are_undefined_not_zero() -> None:
    r = compute([Outcome("NO", "NO")] * 3)
    m = r["metrics"]
    assert m["precision"] is None and m["recall"] is None and m["f1_score"] is None
    assert r["intervals"]["precision"] is None and r["undefined"] == ["f1_score", "precision", "recall"]
    assert m["accuracy"] == 1
    never_yes = compute([Outcome("NO", "NO"), Outcome("YES", "NO")])["metrics"]
    assert never_yes["precision"] is None and never_yes["recall"] == 0 and never_yes["f1_score"] == 0
    evalscope = compute([Outcome("NO", "NO")] * 3, "evalscope")  # EvalScope prints 0.0 for these
    assert evalscope["metrics"]["precision"] == 0 and evalscope["undefined"] == ["f1_score", "precision", "recall"]


@pytest.mark.parametrize(
    ("k", "n", "lo", "hi"), [(0, 10, 0.0, 0.2775), (5, 10, 0.2366, 0.7634), (81, 263, 0.2553, 0.3662)]
)
def test_wilson_matches_published_values(k: int, n: int, lo: float, hi: float) -> None:
    got = wilson(k, n)
    assert got[0] == pytest.approx(lo, abs=5e-4) and got[1] == pytest.approx(hi, abs=5e-4)


def test_bootstrap_is_seeded_and_brackets_the_estimate() -> None:
    outcomes = _outcomes() * 50
    a, b = compute(outcomes, seed=1), compute(outcomes, seed=1)
    assert a["intervals"] == b["intervals"]
    assert compute(outcomes, seed=2)["intervals"]["f1_score"] != a["intervals"]["f1_score"]
    for name in ("precision", "recall", "f1_score", "accuracy", "yes_ratio"):
        lo, hi = a["intervals"][name]
        assert lo <= a["metrics"][name] <= hi and hi - lo < 0.2


def test_small_counts_never_collapse_to_a_point_interval() -> None:
    r = compute([Outcome("YES", "YES")] * 2 + [Outcome("NO", "NO")] * 3)
    assert r["metrics"]["precision"] == 1.0 and r["metrics"]["recall"] == 1.0
    for name in ("precision", "recall", "f1_score"):
        lo, hi = r["intervals"][name]
        assert lo < 0.9 and hi == 1.0  # two answers say little; the interval holds the estimate
    zero = compute([Outcome("YES", "NO")] * 4 + [Outcome("NO", "NO")])["intervals"]["f1_score"]
    assert zero[0] == 0.0 and zero[1] > 0.1
