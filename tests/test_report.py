"""The scorer gives the same bytes whatever order the predictions arrive in (live or from disk)."""

from __future__ import annotations

import io
import json
import random
from typing import Any

import pytest

from coinflip.errors import DataError
from coinflip.scoring.report import build_report
from coinflip.scoring.scorer import Scorer, review

REPLIES = ["ANSWER: YES", "ANSWER: NO", "**ANSWER: maybe**", "", "no marker at all"]
SAVED = {"config": {"model": "m", "seed": 7}, "fingerprint": {"dataset": {"source": "x"}}, "samples": 400}


def predictions(n: int) -> list[dict[str, Any]]:
    rng = random.Random(3)
    rows = []
    for i in range(n):
        error = rng.random() < 0.05
        rows.append(
            {
                "id": i,
                "target": rng.choice(("YES", "NO")),
                "people": rng.randint(2, 9),
                "reply": None if error else rng.choice(REPLIES),
                "latency_s": round(rng.uniform(0.1, 2.0), 6),
                "usage": {"prompt_tokens": rng.randint(100, 200), "completion_tokens": rng.randint(1, 90)},
                "error": "HTTP 500" if error else None,
            }
        )
    return rows


def score(rows: list[dict[str, Any]], cap: int) -> tuple[str, dict[str, Any], list[Any]]:
    scorer = Scorer(cap)
    for row in rows:
        scorer.add(row)
    out = io.BytesIO()
    scorer.write_reviews(out)
    return out.getvalue().decode(), build_report(SAVED, "r", scorer, "coinflip"), scorer.showcase.rows()


@pytest.mark.parametrize("cap", [1000, 25])
def test_arrival_order_changes_nothing(cap: int) -> None:
    rows = predictions(400)
    shuffled = rows.copy()
    random.Random(1).shuffle(shuffled)
    in_order, out_of_order = score(rows, cap), score(shuffled, cap)
    assert in_order == out_of_order
    reviews_text, report, showcase = in_order
    reviews = [json.loads(line) for line in reviews_text.splitlines()]
    assert reviews == [review(r) for r in rows]  # id order, each exactly what review() says
    failed = [r for r in reviews if not r["correct"]]
    assert len(showcase) == min(cap, 400)
    assert [r["id"] for _, r in showcase[: len(failed)]] == [r["id"] for r in failed][:cap]  # lowest ids first
    assert report["counts"]["samples"] == 400 and report["counts"]["errors"] == sum(r["error"] for r in reviews)


def test_a_target_that_is_not_yes_or_no_is_one_clear_error() -> None:
    with pytest.raises(DataError, match="target must be YES or NO, got 'maybe'"):
        Scorer(10).add({"id": 3, "target": "maybe", "reply": "ANSWER: YES", "error": None})
