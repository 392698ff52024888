"""Repeats: K answers per question, reduced by hand-checkable rules, resumed pair by pair."""

from __future__ import annotations

import json
import signal
import statistics
from collections import Counter
from pathlib import Path

import pytest

from coinflip.scoring.report import build_report
from coinflip.scoring.scorer import Scorer
from coinflip.testing.server import FakeOpenAIServer

from .conftest import PATIENCE_S, only_run_dir, read_jsonl, run_cli, spawn_cli, wait_for, whole_lines

# question id -> (target, answers of repeats 0, 1, 2); "?" is an invalid answer
FIXED = {
    0: ("YES", "YES", "YES", "YES"),
    1: ("YES", "YES", "NO", "NO"),
    2: ("NO", "NO", "?", "YES"),
    3: ("NO", "YES", "YES", "?"),
    4: ("YES", "?", "?", "NO"),
}
SAVED = {"config": {"model": "m", "seed": 1}, "fingerprint": {"dataset": {"source": "x"}, "repeats": 3}, "samples": 15}


def _reply(answer: str) -> str:
    return "ANSWER: maybe" if answer == "?" else f"so\nANSWER: {answer}"


def _report() -> dict:
    scorer = Scorer()
    for question, (target, *answers) in FIXED.items():
        for repeat, answer in enumerate(answers):
            scorer.add(
                {
                    "id": question,
                    "repeat": repeat,
                    "target": target,
                    "people": 2,
                    "reply": _reply(answer),
                    "error": None,
                }
            )
    return build_report(SAVED, "r", scorer, "coinflip")


def test_reducers_match_hand_computed_values() -> None:
    report = _report()
    r = report["repeat_metrics"]
    assert r["k"] == 3 and r["questions"] == 5
    # per repeat accuracy: repeat 0: q0 q1 q2 right = 3/5; repeat 1: q0 = 1/5; repeat 2: q0 = 1/5 (q4 says NO to YES)
    accuracy = r["per_repeat"]["accuracy"]
    assert accuracy["values"] == [0.6, 0.2, 0.2]
    assert accuracy["mean"] == pytest.approx(1 / 3) and accuracy["std"] == pytest.approx(
        statistics.stdev([0.6, 0.2, 0.2])
    )
    # majority: q0 YES (right), q1 NO (wrong), q2 tie NO/YES -> none, q3 YES (wrong), q4 NO (wrong)
    assert r["majority_vote"]["accuracy"] == pytest.approx(1 / 5)
    assert r["majority_vote"]["yes_ratio"] == pytest.approx(2 / 5)
    assert r["pass_at_k"] == pytest.approx(3 / 5)  # q0, q1 and q2 have a right repeat
    assert r["consistency"] == pytest.approx(1 / 5)  # only q0's three answers agree
    # pooled: 15 samples, right: q0x3, q1x1, q2x1 = 5
    assert report["metrics"]["accuracy"] == pytest.approx(5 / 15)
    lo, hi = report["intervals"]["accuracy"]
    assert lo < 5 / 15 < hi  # resampling questions with their repeats


def test_repeats_against_a_server_give_k_predictions_per_question(tmp_path: Path) -> None:
    with FakeOpenAIServer("mixed") as srv:
        result = run_cli(
            "eval", "--model", "m", "--api-url", srv.url, "--limit", "12", "--repeats", "3", "--work-dir", str(tmp_path)
        )
        asked = srv.state.requests
    assert result.returncode == 0, result.stderr
    run = only_run_dir(tmp_path)
    rows = read_jsonl(run / "predictions/m/coin_flip.jsonl")
    pairs = [(r["id"], r["repeat"]) for r in rows]
    assert len(pairs) == 36 and len(set(pairs)) == 36 and pairs == sorted(pairs)
    assert Counter(r["id"] for r in rows) == dict.fromkeys({r["id"] for r in rows}, 3)
    assert sorted(asked.values()) == [3] * 12
    report = json.loads((run / "reports/m/coin_flip.json").read_text())
    assert report["repeats"] == 3 and report["counts"]["samples"] == 36
    assert report["repeat_metrics"]["consistency"] == 1.0  # the mixed policy answers a question the same way
    reviews = read_jsonl(run / "reviews/m/coin_flip.jsonl")
    assert [(r["id"], r["repeat"]) for r in reviews] == pairs
    again = run_cli("rescore", str(run))
    assert again.returncode == 0 and json.loads((run / "reports/m/coin_flip.json").read_text()) == report


def test_a_sigkilled_run_with_repeats_resumes_with_nothing_lost_or_doubled(tmp_path: Path) -> None:
    with FakeOpenAIServer("mixed", latency=0.02) as srv:
        args = [
            "eval",
            "--model",
            "m",
            "--api-url",
            srv.url,
            "--limit",
            "80",
            "--repeats",
            "3",
            "--eval-batch-size",
            "4",
        ]
        proc = spawn_cli(*args, "--work-dir", str(tmp_path), quiet=True)
        files = "*/predictions/m/coin_flip.jsonl"
        wait_for(lambda: any(p.stat().st_size > 30_000 for p in tmp_path.glob(files)), "30 kB of predictions")
        proc.send_signal(signal.SIGKILL)
        proc.wait(PATIENCE_S)
        run = only_run_dir(tmp_path)
        kept = {
            (r["id"], r["repeat"]) for r in whole_lines(run / "predictions/m/coin_flip.jsonl") if r["error"] is None
        }
        assert 0 < len(kept) < 240
        before = srv.state.requests.total()
        again = run_cli("eval", "--use-cache", str(run))  # the saved settings: nothing retyped
        sent_again = srv.state.requests.total() - before
    assert again.returncode == 0, again.stderr
    rows = read_jsonl(run / "predictions/m/coin_flip.jsonl")
    pairs = [(r["id"], r["repeat"]) for r in rows]
    assert len(pairs) == 240 and len(set(pairs)) == 240  # every (question, repeat) once
    assert sent_again == 240 - len(kept)  # only the missing pairs were asked
    assert all(r["repeat"] in (0, 1, 2) for r in rows)


def test_n_choices_per_request_are_repeats_and_a_server_that_ignores_n_is_told(tmp_path: Path) -> None:
    with FakeOpenAIServer("mixed", record=True) as srv:
        result = run_cli(
            "eval", "--model", "m", "--api-url", srv.url, "--limit", "10", "--repeats", "2",
            "--generation-config", "n=3,seed=40", "--work-dir", str(tmp_path / "n"),
        )  # fmt: skip
        bodies = [body for _, _, body in srv.state.seen]
    assert result.returncode == 0, result.stderr
    rows = read_jsonl(only_run_dir(tmp_path / "n") / "predictions/m/coin_flip.jsonl")
    assert len(rows) == 60 and {r["repeat"] for r in rows} == set(range(6))  # 2 requests x 3 choices each
    assert len(bodies) == 20 and all(b["n"] == 3 for b in bodies)
    assert sorted({b["seed"] for b in bodies}) == [40, 43]  # request k starts at repeat 3k: seed + 3k
    report = json.loads(next((tmp_path / "n").glob("*/reports/m/coin_flip.json")).read_text())
    assert report["repeat_metrics"]["k"] == 6 and report["counts"]["samples"] == 60


def test_a_server_that_returns_fewer_choices_than_asked_leaves_errors_to_resume(tmp_path: Path) -> None:
    from .answer_server import AnswerServer, answer, chat

    with AnswerServer(lambda seen: answer(chat("ANSWER: YES"))) as srv:  # one choice, whatever n says
        result = run_cli(
            "eval", "--model", "m", "--api-url", srv.url, "--limit", "4", "--generation-config", "n=2",
            "--retries", "0", "--work-dir", str(tmp_path),
        )  # fmt: skip
    assert result.returncode == 1
    rows = read_jsonl(only_run_dir(tmp_path) / "predictions/m/coin_flip.jsonl")
    missing = [r for r in rows if r["repeat"] == 1]
    assert len(missing) == 4 and all("returned 1 of n=2 choices" in r["error"] for r in missing)


def test_one_majority_vote_for_the_report_compare_and_the_index(tmp_path: Path) -> None:
    """A YES question answered YES, invalid, invalid: invalid answers do not vote, so its majority
    vote is YES and it is right, in the report and in the verdicts compare and the index pair on."""
    from coinflip.jsonl import PredictionWriter
    from coinflip.pages.catalog import Found, read_answers

    answers = {0: ("YES", "YES", "?", "?"), 1: ("NO", "NO", "YES", "YES"), 2: ("YES", "NO", "YES", "?")}
    rows = [
        {"id": q, "repeat": k, "target": target, "people": 2, "question": f"q{q}", "reply": _reply(a), "error": None}
        for q, (target, *said) in answers.items()
        for k, a in enumerate(said)
    ]
    scorer = Scorer()
    folder = tmp_path / "run"
    writer = PredictionWriter(folder / "predictions" / "m" / "coin_flip.jsonl")
    for row in rows:
        scorer.add(row)  # type: ignore[arg-type]
        writer.write(row)  # type: ignore[arg-type]
    writer.close()
    report = build_report({**SAVED, "samples": 9}, "r", scorer, "coinflip")
    assert report["repeat_metrics"]["majority_vote"]["accuracy"] == pytest.approx(1 / 3)  # q0 right; q1 wrong; q2 a tie
    (folder / "reviews" / "m").mkdir(parents=True)
    with (folder / "reviews" / "m" / "coin_flip.jsonl").open("wb") as out:
        scorer.write_reviews(out)
    verdicts = read_answers(Found(folder, "run", "run", model_dir="m", config={"repeats": 3}))  # as saved
    assert verdicts is not None and verdicts.correct == {"q0": True, "q1": False, "q2": False}


def test_accuracy_by_people_has_the_headline_interval_when_one_kind_of_question_is_asked_again_and_again() -> None:
    """A model that gives the same answer 8 times learns nothing new from the 7 more: by-people intervals, like
    the headline's, resample questions with all their repeats, not 80 answers as if 80 questions."""
    scorer = Scorer()
    for question in range(10):
        for repeat in range(8):
            answer = "YES" if question < 5 else "NO"
            row = {"id": question, "repeat": repeat, "target": "YES", "people": 2, "reply": _reply(answer)}
            scorer.add({**row, "error": None})
    saved = {**SAVED, "fingerprint": {"dataset": {"source": "x"}, "repeats": 8}, "samples": 80}
    report = build_report(saved, "r", scorer, "coinflip")
    (people,) = report["by_people"].values()
    assert people["accuracy"] == report["metrics"]["accuracy"] == 0.5
    assert people["interval"] == pytest.approx(report["intervals"]["accuracy"], abs=1e-6)
    assert people["interval"][1] - people["interval"][0] > 0.4  # 10 questions, not 80


def test_a_repeat_s_seed_stays_within_64_bits(tmp_path: Path) -> None:
    """seed=2**63-1 with repeats sent 2**63, which no 64-bit server field holds: it wraps round."""
    with FakeOpenAIServer("mixed", record=True) as srv:
        args = ("--limit", "2", "--repeats", "3", "--generation-config", f"seed={2**63 - 1}")
        result = run_cli("eval", "--model", "m", "--api-url", srv.url, *args, "--work-dir", str(tmp_path))
        seeds = sorted({body["seed"] for _, _, body in srv.state.seen})
    assert result.returncode == 0, result.stderr
    assert seeds == [-(2**63), -(2**63) + 1, 2**63 - 1]  # repeats 1 and 2 past the largest, wrapped round
