"""The report record (scoring/schema.py): what is written reads back the same, and whatever a
saved report holds reads without an exception, each field of the wrong type left out."""

from __future__ import annotations

import json
import types
import typing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coinflip import run_task
from coinflip.pages.board import row
from coinflip.pages.catalog import read_run
from coinflip.records import Requests
from coinflip.scoring.report import write_report
from coinflip.scoring.schema import Report, checked, read_report

from .conftest import run_cli

_TEXT = st.text(max_size=8)


def _strategy(hint: Any) -> st.SearchStrategy[Any]:
    """Values of a declared type, sections built from their declaration (JSON's own values only:
    finite floats, string keys)."""
    if hint is Requests:  # held to its own bounds too (records.checked_requests): whole counts, a few short hints
        counts = st.integers(min_value=0, max_value=2**53 - 1)
        fields = {k: counts | st.none() if "None" in str(h) else counts for k, h in Requests.__annotations__.items()}
        fields |= {"waited_on_limits_s": st.floats(0, 1e6), "hints": st.lists(_TEXT, max_size=3)}
        return st.fixed_dictionaries(fields)
    if typing.is_typeddict(hint):
        hints = typing.get_type_hints(hint, include_extras=True)
        required = {k: _strategy(hints[k]) for k in hint.__required_keys__}
        optional = {k: _strategy(hints[k]) for k in hint.__optional_keys__}
        return st.fixed_dictionaries(required, optional=optional)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:  # Count, Rate, Amount, Interval: within their bounds
        base, meta = args
        if base is int:
            return st.integers(min_value=meta.ge, max_value=meta.le)
        if base is float:
            return st.floats(min_value=meta.ge, max_value=meta.le, allow_nan=False, allow_infinity=False)
        return st.lists(_strategy(typing.get_args(base)[0]), min_size=meta.min_length, max_size=meta.max_length)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*(_strategy(a) for a in args))
    if origin is list:
        return st.lists(_strategy(args[0]), max_size=3)
    if origin is dict:
        return st.dictionaries(_TEXT, _strategy(args[1]), max_size=3)
    simple: dict[Any, st.SearchStrategy[Any]] = {
        str: _TEXT,
        int: st.integers(),
        float: st.floats(allow_nan=False, allow_infinity=False),
        bool: st.booleans(),
        type(None): st.none(),
        Any: st.none() | st.integers() | _TEXT | st.lists(st.integers(), max_size=2),
    }
    return simple[hint]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(report=_strategy(Report))
def test_a_report_written_reads_back_equal(report: Report, tmp_path: Path) -> None:
    path = tmp_path / "reports" / "m" / "coin_flip.json"
    write_report(path, report)
    assert read_report(path.read_bytes()) == report


def test_a_real_run_report_reads_back_as_written(tmp_path: Path) -> None:
    work = tmp_path / "w"
    args = ("--model", "random", "--limit", "12", "--repeats", "2", "--force-answer", "--no-timestamp")
    assert run_cli("eval", *args, "--work-dir", str(work)).returncode == 0
    saved = (work / "reports/random/coin_flip.json").read_bytes()
    report = read_report(saved)
    assert report == json.loads(saved) and report is not None
    assert report["repeat_metrics"]["k"] == 2 and "forced" in report and report["counts"]["samples"] == 24


def test_a_report_as_built_is_checked_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run page and the summary read a fresh report through `checked`: it must lose nothing."""
    monkeypatch.chdir(tmp_path)
    report = run_task(model="random", limit=12, repeats=2, force_answer=True, quiet=True)
    assert "forced" in report and "repeat_metrics" in report and checked(report) == report


HOSTILE: list[dict[str, Any]] = [
    {},  # every section missing
    {"metrics": {"accuracy": "high", "f1_score": [1], "recall": 0.5}, "counts": "many", "warnings": "not a list"},
    {"metrics": {}, "by_people": [], "intervals": {"accuracy": [1], "f1_score": ["a", "b"]}, "usage": 7},
    {"metrics": {}, "counts": {"samples": 10**400, "invalid_rate": 10**400}, "repeats": 10**30, "few_shot_num": -1},
    {"metrics": {}, "subset": {"count": 10**400, "of": 1e308}, "dataset": {"rows": 10**400, "sha256": 5}},
    {"metrics": {}, "template": "a string", "calibration": {"auroc": True, "bins": [{"lo": "x"}]}, "cost": "free"},
    {"metrics": {}, "forced": {"metrics": {"accuracy": 0.5}, "asked": True}, "repeat_metrics": {"k": "3"}},
    {"metrics": {}, "by_people": {"2": {"accuracy": "x", "interval": [0, 1, 2]}, "x": {}}, "errors_top": [{}]},
    {"metrics": {}, "future_field": {"nested": [1, {"deep": None}]}, "provenance": {"coinflip_version": 9}},
    {"metrics": {"accuracy": float("nan")}, "usage": {"latency_s": {"mean": float("inf")}}, "complete": "yes"},
]


FIELDS = sorted(typing.get_type_hints(Report)) + ["unknown", "2", "mean", "accuracy", "samples", "interval"]


@settings(max_examples=150, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(FIELDS), inner, max_size=4),
        max_leaves=20,
    )
)
def test_any_json_reads_without_an_exception(found: Any) -> None:
    report = read_report(json.dumps(found))
    if not isinstance(found, dict):
        assert report is None
        return
    assert report is not None and set(report) <= set(found) | {"warnings"}


def _left_out(names: str) -> list[str]:
    return [f"the saved report was edited by hand or is of another version: left out {names}"]


def test_odd_reports_read_as_their_well_typed_fields(tmp_path: Path) -> None:
    for found in HOSTILE:
        report = read_report(json.dumps(found))
        assert report is not None and set(report) <= set(found) | {"warnings"}
    special = read_report(json.dumps(HOSTILE[9]))  # NaN and Infinity, as Python's json writes them
    assert special is not None and special["metrics"] == {}  # a NaN share and "complete": "yes" left out
    assert special["usage"] == {"latency_s": {"mean": float("inf")}}  # an endless wait is no share
    assert special["warnings"] == _left_out("metrics.accuracy, complete")
    odd = read_report(json.dumps(HOSTILE[1]))  # wrong types left out, one by one inside a mapping, and named
    assert odd == {
        "metrics": {"recall": 0.5},
        "warnings": _left_out("metrics.accuracy, metrics.f1_score, counts, warnings"),
    }
    future = read_report(json.dumps(HOSTILE[8]))
    assert future is not None and future["future_field"] == HOSTILE[8]["future_field"]  # kept for the details
    assert "coinflip_version" in future["provenance"]  # provenance is free-form: read as text where shown
    forced = read_report(json.dumps(HOSTILE[6]))
    assert forced == {"metrics": {}, "forced": {"metrics": {"accuracy": 0.5}}, "repeat_metrics": {},
                      "warnings": _left_out("forced.asked, repeat_metrics.k")}  # fmt: skip
    assert read_report(b"[1, 2]") is None and read_report(b"{truncated") is None and read_report(b"\xff") is None


def test_odd_reports_become_rows_without_an_exception(tmp_path: Path) -> None:
    """The leaderboard (index and compare) reads each odd report into a row, shown or left empty."""
    work = tmp_path / "w"
    assert (
        run_cli("eval", "--model", "oracle", "--limit", "5", "--no-timestamp", "--work-dir", str(work)).returncode == 0
    )
    path = work / "reports/oracle/coin_flip.json"
    for found in HOSTILE[1:]:
        path.write_text(json.dumps(found))
        run = read_run(work, work)
        assert run.kind == "run", run.reason
        shown = row(run)
        assert shown["samples"] is None or isinstance(shown["samples"], float)
        assert all(isinstance(w, str) for w in shown["warnings"])
    path.write_text(json.dumps(HOSTILE[0]))
    assert read_run(work, work).kind == "broken"  # no metrics at all: not a report


def test_a_count_below_zero_is_left_out_as_a_text_would_be(tmp_path: Path) -> None:
    """A hand-edited report's -5 samples and -2 errors were shown as such on the index and by compare."""
    assert run_task(model="oracle", limit=4, work_dir=str(tmp_path), html_report=False)["complete"]
    (path,) = tmp_path.glob("*/reports/oracle/coin_flip.json")
    report = json.loads(path.read_text())
    report["counts"] |= {"samples": -5, "errors": -2, "tp": 10**30}  # past 64 bits: compare showed it as a float
    report["usage"]["prompt_tokens_total"] = -1
    report["usage"]["finish_reasons"] = {"stop": -4, "length": 2}
    report["subset"]["seed"] = -7  # a seed may be below zero
    path.write_text(json.dumps(report))
    found = read_report(path.read_bytes())
    assert found is not None and not found["counts"].keys() & {"samples", "errors", "tp"}
    assert found["counts"]["correct"] == 4 and "prompt_tokens_total" not in found["usage"]
    assert found["usage"]["finish_reasons"] == {"length": 2} and found["subset"]["seed"] == -7
    shown = row(read_run(tmp_path, path.parents[2]))
    assert shown["samples"] is None and shown["errors"] is None


def test_a_requests_record_or_subset_made_unreadable_is_left_out_not_shown(tmp_path: Path) -> None:
    from coinflip.testing.server import FakeOpenAIServer

    with FakeOpenAIServer("mixed") as srv:
        done = run_cli("eval", "--model", "m", "--api-url", srv.url, "--limit", "6", "--work-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    (path,) = tmp_path.glob("*/reports/m/coin_flip.json")
    report = json.loads(path.read_text())
    assert read_report(path.read_bytes())["requests"]["sent"] >= 6  # type: ignore[index]
    report["requests"]["sent"] = -5
    report["subset"] |= {"count": -6, "of": "3333"}
    path.write_text(json.dumps(report))
    found = read_report(path.read_bytes())
    assert found is not None and "requests" not in found and found["counts"]["samples"] == 6
    shown = row(read_run(tmp_path, path.parents[2]))
    assert shown["subset"] == "an unknown subset" and "-5" not in json.dumps(shown["details"])


def test_a_metric_that_is_no_share_is_left_out_and_said_where_runs_are_ranked(tmp_path: Path) -> None:
    """An f1_score of 1.7 ranked a run first on the index and in compare, with no word; so did an accuracy of 2, an
    interval of [5, -1] or a cost below zero. Each is left out, and the report says it was altered."""
    for name in ("a", "b"):
        assert run_task(model="oracle", limit=6, work_dir=str(tmp_path / name), no_timestamp=True, quiet=True)
    path = tmp_path / "a" / "reports" / "oracle" / "coin_flip.json"
    report = json.loads(path.read_text())
    report["metrics"] |= {"f1_score": 1.7, "accuracy": -0.1}
    report["intervals"]["recall"] = [5, -1]
    report["by_people"] = {p: {**g, "accuracy": 2.0} for p, g in report["by_people"].items()}
    path.write_text(json.dumps(report))
    found = read_report(path.read_bytes())
    assert found is not None and set(found["metrics"]) == {"precision", "recall", "yes_ratio"}
    assert "recall" not in found["intervals"] and "accuracy" in found["intervals"]
    assert all("accuracy" not in g for g in found["by_people"].values())
    assert (
        found["warnings"][0].startswith("the saved report was edited by hand")
        and "metrics.f1_score" in found["warnings"][0]
    )
    compared = run_cli("compare", str(tmp_path / "a"), str(tmp_path / "b"))
    assert compared.returncode == 0 and "1.7" not in compared.stdout + compared.stderr
    assert "[a]: the saved report was edited by hand" in compared.stdout + compared.stderr
    viewed = run_cli("view", str(tmp_path))
    assert viewed.returncode == 0 and "altered" in viewed.stderr and "metrics.f1_score" in viewed.stderr


def test_a_report_that_names_a_key_twice_is_no_report(tmp_path: Path) -> None:
    """A second "f1_score" in one object won unseen (json's last one wins), and compare ranked by it."""
    assert run_task(model="oracle", limit=4, work_dir=str(tmp_path), no_timestamp=True, quiet=True)
    path = tmp_path / "reports" / "oracle" / "coin_flip.json"
    saved = path.read_text()
    assert read_report(saved) is not None
    path.write_text(saved.replace('"f1_score": 1.0,', '"f1_score": 1.0, "f1_score": 0.2,', 1))
    assert '"f1_score": 0.2' in path.read_text()
    assert read_report(path.read_bytes()) is None
    found = read_run(tmp_path, tmp_path)
    assert found.kind == "broken" and "names a key twice" in found.reason
