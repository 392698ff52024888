"""Warnings people cannot miss, invalid answers explained, and where a number comes from."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from coinflip.pages import run_page
from coinflip.pages.summary import lines, print_summary
from coinflip.scoring.metrics import wilson
from coinflip.scoring.report import build_report
from coinflip.scoring.scorer import Scorer
from coinflip.testing.server import FakeOpenAIServer

from .conftest import only_run_dir, run_cli

BUNDLED = {"source": "bundled", "split": "test", "rows": 3333, "sha256": "ab" * 32}


def _report(rows: list[tuple[str, str | None, str | None]], **saved: Any) -> dict[str, Any]:
    """rows: (target, reply, finish_reason); a reply of None is an errored sample."""
    scorer = Scorer()
    for i, (target, reply, finish) in enumerate(rows):
        error = "HTTP 500: upstream down" if reply is None else None
        scorer.add({"id": i, "target": target, "people": 2, "reply": reply, "finish_reason": finish, "error": error})
    config = {"model": "m", "seed": 0, "generation_config": {"max_tokens": 64}}
    base = {"config": config, "fingerprint": {"dataset": BUNDLED}, "samples": len(rows)}
    return build_report({**base, **saved}, "r", scorer, "coinflip")


def test_mostly_invalid_with_reasons_and_a_cut_off_hint() -> None:
    rows = [("YES", "thinking and thinking", "length")] * 5 + [("NO", "no marker here", "stop")] * 2
    rows += [("YES", "ANSWER: YES", "stop"), ("NO", "ANSWER: NO", "stop")]
    report = _report(rows)
    assert report["invalid_reasons"] == {"no_marker": 2, "cut_off": 5}
    assert report["usage"]["finish_reasons"] == {"length": 5, "stop": 4}
    found = [w for w in report["warnings"] if "are invalid" in w]
    assert found == ["7 of 9 answers (78%) are invalid (cut_off 5, no_marker 2)"]
    assert any("cut off by the token limit" in w and "above 64" in w for w in report["warnings"])


def test_a_model_that_never_says_no_and_is_no_better_than_always_yes() -> None:
    rows = [("YES", "ANSWER: YES", "stop")] * 27 + [("NO", "ANSWER: YES", "stop")] * 23
    report = _report(rows)
    assert "the model never answered NO (YES 50, NO 0, of 50)" in report["warnings"]
    below = [w for w in report["warnings"] if w.startswith("not above a trivial baseline")]
    assert below and "f1_score 0.7013 <= always-yes 0.7013" in below[0]
    assert report["baselines"]["always-yes"]["f1_score"] == pytest.approx(54 / 77)
    assert report["baselines"]["always-no"]["precision"] is None  # it never says YES


def test_undefined_ratios_are_named_and_shown_as_undefined() -> None:
    report = _report([("NO", "ANSWER: NO", "stop")] * 4)
    assert report["metrics"]["precision"] is None and report["intervals"]["precision"] is None
    assert "precision is undefined (no YES answers)" in report["warnings"]


def test_errors_and_coverage() -> None:
    rows = [("YES", None, None)] * 2 + [("NO", "ANSWER: NO", "stop")] * 3
    report = _report(rows, samples=8, subset={"mode": "stratified", "seed": 3, "count": 4, "of": 3333})
    assert not report["complete"]
    assert any(w.startswith("2 sample(s) got no reply") for w in report["warnings"])
    assert any(w.startswith("3 sample(s) were never run") for w in report["warnings"])
    assert report["errors_top"] == [{"message": "HTTP 500: upstream down", "count": 2}]


def test_a_limit_asked_for_is_a_note_and_a_tiny_models_expectations_reach_the_page() -> None:
    """--limit 20 is what the user asked: a note, on the terminal and the page alike, never a
    warning (a red box); an incomplete run keeps its warning. The line on what SmolLM2-135M is
    expected to do is a note too, so the run page shows it as the terminal does."""
    subset = {"mode": "stratified", "seed": 3, "count": 4, "of": 3333}
    rows = [("YES", "ANSWER: YES", "stop"), ("NO", "ANSWER: NO", "stop")] * 2
    report = _report(rows, subset=subset, config={"model": "smollm2", "seed": 0, "generation_config": {}})
    covered = "covered 4 of 3333 questions (stratified, seed 3)"
    assert report["warnings"] == [] and covered in report["notes"]
    expected = next(n for n in report["notes"] if n.startswith("expected of SmolLM2-135M"))
    page = run_page.render(report, [], [], [])
    assert covered in page and expected in page and '<div class="warn">' not in page
    shown = io.StringIO()
    print_summary(report, console=Console(file=shown, width=100, color_system=None))
    terminal = shown.getvalue()
    assert "WARNING" not in terminal and covered in terminal and "expected of SmolLM2" in terminal
    other = _report(rows, subset=subset)
    assert not any(n.startswith("expected of") for n in other["notes"])  # another model: no such line
    for elsewhere in ({"api_url": "http://127.0.0.1:9/v1"}, {"model_path": "/m/other.gguf"}, {"batch_results": "r"}):
        served = _report(
            rows, subset=subset, config={"model": "smollm2", "seed": 0, "generation_config": {}, **elsewhere}
        )
        assert not any(n.startswith("expected of") for n in served["notes"]), elsewhere  # not the bundled file's
    unfinished = _report(rows, subset=subset, samples=6)
    assert unfinished["warnings"] == ["2 sample(s) were never run; resume to run them"]
    assert '<div class="warn">' in run_page.render(unfinished, [], [], [])


def test_a_clean_run_warns_of_nothing_and_names_its_data(tmp_path: Path) -> None:
    result = run_cli("eval", "--model", "oracle", "--work-dir", str(tmp_path), "--split", "validation")
    assert result.returncode == 0, result.stderr
    report = json.loads(next(only_run_dir(tmp_path).glob("reports/*/coin_flip.json")).read_text())
    assert report["warnings"] == []
    assert report["notes"] and "not it" in report["notes"][0] and "--dataset-hub huggingface" in report["notes"][0]
    assert "--dataset-hub huggingface" in result.stdout  # the same line in the terminal
    prov = report["provenance"]
    assert prov["coinflip_version"] and prov["python"].count(".") == 2 and prov["platform"]
    html = next(only_run_dir(tmp_path).glob("reports/*/coin_flip.html")).read_text()
    assert "not it" in html and prov["python"] in html


def test_use_cache_alone_resumes_with_the_saved_settings(tmp_path: Path) -> None:
    with FakeOpenAIServer("correct", api_key="sk-abc-123") as srv:
        args = ["--model", "served", "--api-url", srv.url, "--limit", "20", "--generation-config", "temperature=0"]
        first = run_cli("eval", *args, "--retries", "0", "--work-dir", str(tmp_path), env={"COINFLIP_API_KEY": "wrong"})
        assert first.returncode == 2  # a wrong key: nothing kept
        srv.state.fail_rate, srv.state.stall = 1.0, 0.05
        second = run_cli(
            "eval", *args, "--retries", "0", "--work-dir", str(tmp_path), env={"COINFLIP_API_KEY": "sk-abc-123"}
        )
        assert second.returncode == 1
        run = only_run_dir(tmp_path)
        assert f"coinflip eval --use-cache {run}" in second.stderr  # the exact command to resume
        srv.state.fail_rate = 0.0
        again = run_cli("eval", "--use-cache", str(run), env={"COINFLIP_API_KEY": "sk-abc-123"})
        assert again.returncode == 0, again.stderr
        assert srv.state.requests.total() >= 40
    report = json.loads((run / "reports/served/coin_flip.json").read_text())
    assert report["complete"] and report["counts"]["samples"] == 20
    assert report["generation_config"] == {"temperature": 0}


def test_evalscope_baselines_and_people_are_on_the_samples_its_metrics_count() -> None:
    """EvalScope's arithmetic leaves errored samples out: the floors and the by-people accuracy must too."""
    scorer = Scorer(compat="evalscope")
    rows = [("YES", None, 4)] * 2 + [("YES", "ANSWER: NO", 2)] + [("NO", "ANSWER: NO", 2)] * 2 + [("NO", None, 2)]
    for i, (target, reply, people) in enumerate(rows):
        error = "HTTP 500: upstream down" if reply is None else None
        scorer.add(
            {"id": i, "target": target, "people": people, "reply": reply, "finish_reason": "stop", "error": error}
        )
    saved = {"config": {"model": "m", "seed": 0}, "fingerprint": {"dataset": BUNDLED}, "samples": len(rows)}
    report = build_report(saved, "r", scorer, "evalscope")
    assert report["metrics"]["accuracy"] == pytest.approx(2 / 3)  # the 3 errored samples count nowhere
    assert report["baselines"]["always-no"]["accuracy"] == pytest.approx(2 / 3)
    assert report["baselines"]["always-yes"]["accuracy"] == pytest.approx(1 / 3)
    assert any("accuracy 0.6667 <= always-no 0.6667" in w for w in report["warnings"])
    assert report["by_people"] == {"2": {"samples": 3, "correct": 2, "accuracy": 2 / 3, "interval": list(wilson(2, 3))}}
    assert "yes_ratio true YES share: 0.333" in [bar["tip"] for bar in run_page._yes_chart(report)["bars"]]


def test_evalscope_recall_without_a_denominator_says_why_when_there_are_yes_targets() -> None:
    """In EvalScope's arithmetic a YES target without a verdict is in no recall denominator: the recall is
    undefined although the questions hold YES targets, and the warning must not say there are none."""
    scorer = Scorer(compat="evalscope")
    for i, target in enumerate(("YES", "YES", "NO")):
        scorer.add({"id": i, "target": target, "people": 2, "reply": "nothing", "finish_reason": "stop", "error": None})
    saved = {"config": {"model": "m", "seed": 0}, "fingerprint": {"dataset": BUNDLED}, "samples": 3}
    report = build_report(saved, "r", scorer, "evalscope")
    assert report["counts"]["target_yes"] == 2 and "recall" in report["undefined"]
    assert "recall is undefined (no YES targets answered YES or NO)" in report["warnings"]
    assert not any("no YES targets)" in w for w in report["warnings"])
    page = run_page.render(report, [], [], [])  # EvalScope's 0.0 is marked undefined, as in the terminal
    assert page.count("<b>0.0000 (undefined)</b>") == 3 and "<b>0.0000</b>" in page  # F1, precision, recall


def test_evalscope_most_answers_invalid_counts_the_samples_it_scores() -> None:
    """EvalScope's invalid rate leaves errored samples out; the warning that most answers are invalid too."""
    scorer = Scorer(compat="evalscope")
    replies = [None] * 4 + ["nothing"] * 4 + ["ANSWER: YES"] * 2
    for i, reply in enumerate(replies):
        error = "HTTP 500: upstream down" if reply is None else None
        scorer.add({"id": i, "target": "YES", "people": 2, "reply": reply, "finish_reason": "stop", "error": error})
    saved = {"config": {"model": "m", "seed": 0}, "fingerprint": {"dataset": BUNDLED}, "samples": len(replies)}
    report = build_report(saved, "r", scorer, "evalscope")
    assert report["counts"]["invalid_rate"] == pytest.approx(4 / 6)
    assert "4 of 6 answers (67%) are invalid (no_verdict 4)" in report["warnings"]
    assert lines(report)[0].startswith("samples 10 (6 scored)  invalid 4 (66.7%)  errors 4")
    assert "invalid answers 4 (66.7% of 6 scored), errors 4" in run_page.render(report, [], [], [])


def test_evalscope_with_nothing_scored_compares_with_no_baseline() -> None:
    """Every sample errored: EvalScope's arithmetic scores none, so there is nothing to hold against a floor."""
    scorer = Scorer(compat="evalscope")
    for i, target in enumerate(("YES", "NO")):
        scorer.add({"id": i, "target": target, "people": 2, "reply": None, "error": "HTTP 500: upstream down"})
    saved = {"config": {"model": "m", "seed": 0}, "fingerprint": {"dataset": BUNDLED}, "samples": 2}
    report = build_report(saved, "r", scorer, "evalscope")
    assert report["evalscope"]["scored_samples"] == 0
    assert not any(w.startswith("not above a trivial baseline") for w in report["warnings"])
    assert any(w.startswith("2 sample(s) got no reply") for w in report["warnings"])


def test_the_terminal_accounts_for_every_error_beyond_the_commonest_three() -> None:
    """The summary lists the three commonest messages; the rest are counted, never silently left out."""
    scorer = Scorer()
    messages = ["HTTP 500: a"] * 3 + ["HTTP 502: b"] * 2 + ["TimeoutError: c"] * 2 + ["HTTP 503: d", "HTTP 504: e"]
    for i, message in enumerate(messages):
        scorer.add({"id": i, "target": "YES", "people": 2, "reply": None, "finish_reason": None, "error": message})
    base = {"config": {"model": "m", "seed": 0}, "fingerprint": {"dataset": BUNDLED}, "samples": len(messages)}
    shown = lines(build_report(base, "r", scorer, "coinflip"))
    listed = [line for line in shown if line.startswith("  ") and " x " in line]
    assert listed[:3] == ["  3 x HTTP 500: a", "  2 x HTTP 502: b", "  2 x TimeoutError: c"]
    assert listed[3].startswith("  2 x other messages")
    assert sum(int(line.split(" x ")[0]) for line in listed) == len(messages)
    one = Scorer()
    one.add({"id": 0, "target": "YES", "people": 2, "reply": None, "finish_reason": None, "error": "HTTP 500: a"})
    alone = lines(build_report({**base, "samples": 1}, "r", one, "coinflip"))
    assert not any("other messages" in line for line in alone)
    four = Scorer()  # one message beyond the three: itself, in the line "1 x other messages" took
    for i, message in enumerate(messages[:-1]):
        four.add({"id": i, "target": "YES", "people": 2, "reply": None, "finish_reason": None, "error": message})
    shown = lines(build_report({**base, "samples": len(messages) - 1}, "r", four, "coinflip"))
    assert [line for line in shown if line.startswith("  ") and " x " in line][3:] == ["  1 x HTTP 503: d"]
