"""Forced answers and answer probabilities: every model yields a signal, computed by hand here."""

from __future__ import annotations

import json
import math
import signal
from pathlib import Path

import pytest

from coinflip.scoring.calibration import auroc, calibration, p_yes
from coinflip.testing.policy import Policy, truth
from coinflip.testing.server import FakeOpenAIServer

from .answer_server import AnswerServer, Seen, answer, chat
from .conftest import PATIENCE_S, hand_metrics, only_run_dir, read_jsonl, run_cli, spawn_cli, wait_for

MIXED = Policy("mixed")


def _hand_calibration(probs: list[float], ys: list[int]) -> dict[str, float]:
    pos = [p for p, y in zip(probs, ys, strict=True) if y]
    neg = [p for p, y in zip(probs, ys, strict=True) if not y]
    wins = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a in pos for b in neg)
    ece = 0.0
    for b in range(10):
        members = [(p, y) for p, y in zip(probs, ys, strict=True) if min(int(p * 10), 9) == b]
        if members:
            gap = abs(sum(p for p, _ in members) / len(members) - sum(y for _, y in members) / len(members))
            ece += len(members) / len(probs) * gap
    return {
        "auroc": wins / (len(pos) * len(neg)),
        "brier": sum((p - y) ** 2 for p, y in zip(probs, ys, strict=True)) / len(probs),
        "ece": ece,
    }


@pytest.mark.parametrize("mode", ["chat", "completions"])
def test_forced_answers_and_probabilities_match_the_hand_count(tmp_path: Path, mode: str) -> None:
    with FakeOpenAIServer("mixed", record=True) as srv:
        result = run_cli(
            "eval", "--model", "m", "--api-url", srv.url, "--limit", "120", "--force-answer", "--api-mode", mode,
            "--generation-config", "logprobs=true,top_logprobs=3", "--work-dir", str(tmp_path),
        )  # fmt: skip
        forced_requests = [b for _, _, b in srv.state.seen if "Give only your final answer" in json.dumps(b)]
        cue_requests = [b for _, _, b in srv.state.seen if str(b.get("prompt", "")).endswith("(YES or NO) is:")]
    assert result.returncode == 0, result.stderr
    run = only_run_dir(tmp_path)
    rows = read_jsonl(run / "predictions/m/coin_flip.jsonl")
    questions = [(r["question"], r["target"]) for r in rows]
    invalid = [q for q, _ in questions if MIXED.expected(q) is None]
    assert invalid and len(forced_requests if mode == "chat" else cue_requests) == len(invalid)  # one each, no more
    report = json.loads((run / "reports/m/coin_flip.json").read_text())
    strict = [(t, MIXED.expected(q)) for q, t in questions]
    forced = [(t, MIXED.expected(q) or MIXED.forced(q)) for q, t in questions]
    assert report["metrics"] == pytest.approx(hand_metrics(strict))  # the strict score is untouched
    assert report["forced"]["metrics"] == pytest.approx(hand_metrics(forced))
    recovered = [(truth(q), MIXED.forced(q)) for q in invalid]
    f = report["forced"]
    assert f["invalid_strict"] == f["asked"] == len(invalid)
    assert f["recovered_correct"] == sum(t == a for t, a in recovered)
    assert f["recovered_wrong"] == sum(a is not None and t != a for t, a in recovered)
    assert f["still_invalid"] == sum(a is None for _, a in recovered)
    each = [MIXED.p_yes(q, MIXED.expected(q) or MIXED.forced(q)) for q, _ in questions]  # None: no verdict
    probs = [p for p in each if p is not None]
    ys = [int(t == "YES") for (_, t), p in zip(questions, each, strict=True) if p is not None]
    c = report["calibration"]
    assert c["available"] and c["samples"] == len(probs) < 120
    assert {k: c[k] for k in ("auroc", "brier", "ece")} == pytest.approx(_hand_calibration(probs, ys))
    reviews = read_jsonl(run / "reviews/m/coin_flip.jsonl")
    assert [r["p_yes"] for r in reviews] == pytest.approx(each)
    assert "forced" in result.stdout and "AUROC" in result.stdout
    html = (run / "reports/m/coin_flip.html").read_text()
    assert "Forced (invalid answers asked again)" in html and 'id="calibration"' in html
    rescored = run_cli("rescore", str(run))
    assert rescored.returncode == 0 and json.loads((run / "reports/m/coin_flip.json").read_text()) == report


def test_without_log_probabilities_the_report_says_why(tmp_path: Path) -> None:
    result = run_cli("eval", "--model", "oracle", "--limit", "5", "--work-dir", str(tmp_path))
    assert result.returncode == 0
    report = json.loads((only_run_dir(tmp_path) / "reports/oracle/coin_flip.json").read_text())
    assert report["calibration"]["available"] is False and "logprobs=5" in report["calibration"]["reason"]
    assert "forced" not in report


def test_a_killed_run_with_forced_answers_resumes_asking_only_for_what_is_missing(tmp_path: Path) -> None:
    with FakeOpenAIServer("mixed", latency=0.03, record=True) as srv:
        args = [
            "eval",
            "--model",
            "m",
            "--api-url",
            srv.url,
            "--limit",
            "150",
            "--force-answer",
            "--eval-batch-size",
            "3",
        ]
        proc = spawn_cli(*args, "--work-dir", str(tmp_path), quiet=True)
        wait_for(lambda: len(srv.state.seen) >= 60, "60 questions at the server")
        proc.send_signal(signal.SIGKILL)
        proc.wait(PATIENCE_S)
        run = only_run_dir(tmp_path)
        lines = (run / "predictions/m/coin_flip.jsonl").read_text().splitlines(keepends=True)
        saved = [json.loads(line) for line in lines if line.endswith("\n")]
        replied = {r["id"] for r in saved if r["error"] is None}
        answered = {r["id"] for r in saved if isinstance(r.get("forced"), dict) and "reply" in r["forced"]}
        pending = {r["id"] for r in saved if r.get("forced") == {"pending": True}} - answered
        assert replied and pending | answered  # killed midway, with forced answers done and pending
        srv.state.seen.clear()
        again = run_cli("eval", "--use-cache", str(run))
        asked = [b for _, _, b in srv.state.seen]
    assert again.returncode == 0, again.stderr
    firsts = [b for b in asked if "Give only your final answer" not in json.dumps(b)]
    forced = [b for b in asked if "Give only your final answer" in json.dumps(b)]
    rows = read_jsonl(run / "predictions/m/coin_flip.jsonl")
    ids = {r["id"] for r in rows}
    assert len(rows) == 150 == len(ids)
    assert len(firsts) == 150 - len(replied)  # first requests only where no reply was kept
    new_invalid = {r["id"] for r in rows if r["id"] not in replied and MIXED.expected(r["question"]) is None}
    assert len(forced) == len(pending) + len(new_invalid)  # forced ones only where still pending
    assert all(
        isinstance(r.get("forced"), dict) and "reply" in r["forced"]
        for r in rows
        if MIXED.expected(r["question"]) is None
    )


def test_p_yes_sums_tokenisation_variants_and_normalises() -> None:
    window = [
        {"token": "ANSWER", "logprob": 0.0, "top": {}},
        {"token": ":", "logprob": 0.0, "top": {}},
        {"token": " **", "logprob": -0.1, "top": {}},
        {"token": " Yes", "logprob": math.log(0.4), "top": {" YES": math.log(0.2), "yes": math.log(0.1)}},
    ]
    window[-1]["top"].update({" No": math.log(0.2), "Maybe": -1.0})
    assert p_yes(window) == pytest.approx(0.7 / 0.9)
    assert p_yes([{"token": "ANSWER: maybe", "logprob": -0.1, "top": {}}]) is None  # no YES or NO in sight
    assert p_yes(None) is None


def test_calibration_by_hand() -> None:
    probs, ys = [0.9, 0.8, 0.8, 0.3, 0.1, 0.55], [1, 1, 0, 0, 0, 1]
    got = calibration(probs, ys)
    assert {k: got[k] for k in ("auroc", "brier", "ece")} == pytest.approx(_hand_calibration(probs, ys))
    assert auroc([0.5, 0.5], [1, 0]) == 0.5 and auroc([0.1, 0.9], [1, 1]) is None
    assert sum(b["samples"] for b in got["bins"]) == 6 and len(got["bins"]) == 10


@pytest.mark.parametrize(
    ("reply", "answer"),
    [
        ("YES", "YES"),
        ("No.", "NO"),
        ("**NO**", "NO"),
        ("ANSWER: YES", "YES"),
        ("  yes, the coin is still heads up", "YES"),
        ("Yes or no, hard to say", None),
        ("The coin is heads up.", None),
        ("<think>no idea</think>\nNO", "NO"),
        ("Yes - it is still heads up", "YES"),
        ("no idea", None),  # "no" starting a phrase is no verdict
        ("No way to tell from this.", None),
        ("Yes it is", None),
        ("", None),
    ],
)
def test_a_forced_reply_may_be_a_bare_verdict(reply: str, answer: str | None) -> None:
    from coinflip.scoring.extract import forced_answer

    assert forced_answer(reply) == answer


def _unsure_then_forced(seen: Seen) -> bytes:
    """Every first reply has no answer line (so each sample asks a forced answer), at a known cost."""
    forced = len(seen.body.get("messages") or []) > 1
    text = "ANSWER: YES" if forced else "I am not sure about this one."
    return answer(chat(text, usage={"prompt_tokens": 100, "completion_tokens": 30}))


@pytest.mark.parametrize("concurrency", ["1", "32"])
def test_max_cost_holds_for_the_forced_answers_too(tmp_path: Path, concurrency: str) -> None:
    """The forced follow-ups went out past the budget's gate, and its count of requests in flight
    (sent minus answered) went negative as their replies were counted: a run capped at half its
    cost spent all of it. Each request here costs 100 * 2 + 30 * 8 = 440 millionths."""
    prices = ("--price-input", "2", "--price-output", "8", "--generation-config", "max_tokens=32")
    with AnswerServer(_unsure_then_forced) as srv:
        args = ("eval", "--model", "m", "--limit", "20", "--api-url", srv.url, "--force-answer", *prices)
        capped = run_cli(*args, "--eval-batch-size", concurrency, "--max-cost", "0.0088", "--work-dir", str(tmp_path))
    rows = read_jsonl(only_run_dir(tmp_path) / "predictions/m/coin_flip.jsonl")
    replies = [r for r in rows if r.get("error") is None] + [r["forced"] for r in rows if r["forced"].get("reply")]
    assert replies and len(replies) * 440 / 1e6 <= 0.0088  # all 40 requests would cost 0.0176
    assert capped.returncode == 1 and "--max-cost" in capped.stderr, capped.stderr
    report = json.loads((only_run_dir(tmp_path) / "reports/m/coin_flip.json").read_text(encoding="utf-8"))
    assert report["cost"]["total"] == pytest.approx(len(replies) * 440 / 1e6)  # pending samples' replies included


def test_evalscope_s_arithmetic_beside_forced_answers_is_not_called_strict(tmp_path: Path) -> None:
    """A run with forced answers rescored in EvalScope's arithmetic: its page and its summary called EvalScope's
    lenient numbers "Strict (the specification's score)", beside the report that holds the strict ones."""
    with FakeOpenAIServer("mixed") as srv:
        args = ("eval", "--model", "m", "--api-url", srv.url, "--limit", "40", "--force-answer", "--no-timestamp")
        assert run_cli(*args, "--work-dir", str(tmp_path)).returncode == 0
    lenient = run_cli("rescore", str(tmp_path), "--metric-compat", "evalscope")
    assert lenient.returncode == 0 and "Accuracy EvalScope's" in lenient.stdout, lenient.stdout
    page = (tmp_path / "reports/m/coin_flip.evalscope.html").read_text()
    assert "EvalScope (its own reading and arithmetic)" in page and "Strict (the specification" not in page
    assert "Strict (the specification&#39;s score)" in (tmp_path / "reports/m/coin_flip.html").read_text()
