"""--limit draws a representative subset: stratified by number of people, seeded, nested."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coinflip.config import TaskConfig
from coinflip.data.load import Dataset, Record, load_dataset

from .conftest import only_run_dir, read_jsonl, run_cli


def _people_of(run: Path, model: str = "oracle") -> Counter[int]:
    return Counter(r["people"] for r in read_jsonl(run / f"predictions/{model}/coin_flip.jsonl"))


def test_limit_ten_covers_both_lengths_in_proportion(tmp_path: Path) -> None:
    result = run_cli("eval", "--model", "oracle", "--limit", "10", "--work-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    run = only_run_dir(tmp_path)
    assert _people_of(run) == {4: 6, 2: 4}  # 2,000 four-person and 1,333 two-person questions: 6.0 and 4.0
    report = json.loads((run / "reports/oracle/coin_flip.json").read_text())
    assert set(report["by_people"]) == {"2", "4"}
    assert report["subset"] == {"mode": "stratified", "seed": 42, "count": 10, "of": 3333}
    assert "covered 10 of 3333 questions (stratified, seed 42)" in result.stdout


@pytest.mark.parametrize("limit", [7, 33, 0.1, 500])
def test_stratified_shares_follow_the_set_for_any_size(limit: int | float) -> None:
    data = load_dataset("test")
    subset = data.take(limit, "stratified", 3)
    people = Counter(r.people for r in data if r.id in set(subset.ids or ()))
    assert sum(people.values()) == subset.count
    assert abs(people[4] - subset.count * 2000 / 3333) < 1 and abs(people[2] - subset.count * 1333 / 3333) < 1


def test_first_mode_keeps_evalscopes_first_n(tmp_path: Path) -> None:
    result = run_cli("eval", "--model", "oracle", "--limit", "10", "--limit-mode", "first", "--work-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    rows = read_jsonl(only_run_dir(tmp_path) / "predictions/oracle/coin_flip.jsonl")
    assert [r["id"] for r in rows] == list(range(10)) and {r["people"] for r in rows} == {4}


def test_same_seed_same_questions_and_a_larger_limit_contains_the_smaller() -> None:
    data = load_dataset("test")
    for mode in ("stratified", "random"):
        a, b = data.take(40, mode, 9), data.take(40, mode, 9)
        assert a.ids == b.ids and len(set(a.ids or ())) == 40
        assert data.take(40, mode, 10).ids != a.ids
        bigger = data.take(400, mode, 9)
        assert set(a.ids or ()) <= set(bigger.ids or ())


def test_evalscope_shuffle_maps_to_a_limit_mode() -> None:
    assert TaskConfig(model="m", dataset_args={"coin_flip": {"shuffle": True}}).limit_mode == "random"
    assert TaskConfig(model="m", dataset_args={"coin_flip": {"shuffle": False}}).limit_mode == "first"


def test_no_limit_or_limit_zero_takes_everything() -> None:
    assert TaskConfig(model="m", limit=0).limit is None
    data = load_dataset("validation")
    subset = data.take(None, "stratified", 1)
    assert subset.ids is None and subset.count == 1333 and subset.subset["mode"] == "all"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=7), st.integers(0, 5))
def test_a_larger_limit_holds_the_smaller_one_s_questions_for_any_number_of_strata(sizes: list[int], seed: int) -> None:
    """Largest remainder at each count gave a stratum fewer questions as the count grew, once there were three
    strata (--people 2-6: --limit 11 drew question 51, --limit 12 did not), so a resume with a larger --limit
    dropped answered questions and asked others. Each count's quota stays near the stratum's share (within two; two
    strata, as the official split has, get largest remainder's quotas exactly: the test above)."""
    people_of = [p for p, n in enumerate(sizes, 2) for _ in range(n)]
    records = [Record(i, f"q{i}", "YES", people, 0) for i, people in enumerate(people_of)]
    data = Dataset({}, len(records), rows=tuple(records))
    total, before = len(records), set[int]()
    for count in range(1, total):
        drawn = set(data.take(count, "stratified", seed).ids or ())
        assert before <= drawn and len(drawn) == count
        people = Counter(records[i].people for i in drawn)
        assert all(abs(people[p] - count * n / total) < 2 for p, n in enumerate(sizes, 2))
        before = drawn
