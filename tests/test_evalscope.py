"""`--metric-compat evalscope` reproduces EvalScope 1.14.1's coin_flip scoring exactly.

The expected verdicts below were not written by hand: they were computed once by running
EvalScope 1.14.1's own code (pip install evalscope==1.14.1) on each reply, through the path an
`openai_api` run takes: an OpenAI ChatCompletion with the reply as `content` (and
`reasoning_content` when given) -> `models.utils.openai.chat_choices_from_openai` and
`model_output_from_openai` -> `ModelOutput.completion` -> `CoinFlipAdapter.extract_answer` ->
`CoinFlipAdapter.match_score` -> `utils.yes_no.extract_verdict(extracted_prediction,
allow_lowercase_exact=True)`, as `CoinFlipAdapter.aggregate_scores` does. Then pasted here.
`benchmarks/evalscope_verdicts.py --python /tmp/es/bin/python` reruns EvalScope on the table.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coinflip import extract_answer
from coinflip.scoring import evalscope
from coinflip.scoring.report import build_report
from coinflip.scoring.scorer import Scorer, review
from coinflip.testing.server import FakeOpenAIServer

from .conftest import only_run_dir, read_jsonl, run_cli

# (reply, reasoning field, EvalScope 1.14.1's verdict)
EVALSCOPE_VERDICTS: list[tuple[str | None, str | None, str | None]] = [
    ("ANSWER: YES", None, "YES"),
    ("ANSWER: NO", None, "NO"),
    ("ANSWER: yes", None, "YES"),
    ("ANSWER: no", None, "NO"),
    ("ANSWER: YES.", None, "YES"),
    ("ANSWER: No.", None, "NO"),
    ("**ANSWER:** YES", None, "YES"),
    ("ANSWER: **NO**", None, "NO"),
    ("**ANSWER: YES**", None, "YES"),
    ("**ANSWER**: YES", None, "YES"),
    ("The answer is Yes", None, "YES"),
    ("No.", None, "NO"),
    ("Yes", None, "YES"),
    ("yes", None, "YES"),
    ("  no!  ", None, "NO"),
    ("Yes or No? I think Yes.", None, None),
    ("The coin was flipped once, so no, it is not heads up.", None, None),
    ("<think>Is it Yes? No.</think>\nANSWER: YES", None, "YES"),
    ("<think>ANSWER: NO</think>The answer is Yes", None, "YES"),
    ("<think>still thinking... ANSWER: NO", None, "NO"),
    ("Answer: Yes, because nobody flipped it.", None, "YES"),
    ("Answer: Yes, because No one flipped it.", None, None),
    ("", None, None),
    (None, None, None),
    ("ANSWER：YES", None, "YES"),
    ("## ANSWER: NO", None, "NO"),
    ("### Final Answer\nYES", None, "YES"),
    ("ANSWER:\nYES", None, "YES"),
    ("ANSWER: maybe", None, None),
    ("ANSWER: YES\nWait.\nANSWER: NO", None, "NO"),
    ("ANSWER: [YES]", None, "YES"),
    ("ANSWER: YES/NO", None, None),
    ("ANSWER: Yes", "Hmm, No? Let me count again.", "YES"),
    ("<think>ANSWER: YES</think>\nNo.", "scratch", "YES"),
    ("<think>ANSWER: YES</think>\nNo.", None, "NO"),
    ("<THINK>Yes</THINK>No", None, None),
    ("<think>a</think>Yes <think>b No</think>", None, None),
    ("ANSWER: NOT", None, None),
    ("I'd say YES", None, "YES"),
    ("ANSWER: yes, definitely", None, None),
    ("The answer is: NO", None, "NO"),
    ("FINALANSWER:YES", None, "YES"),
    ("ANSWER: Yes\n\nNo wait", None, "YES"),
    ("ANSWER:", None, None),
    ("No, the coin is not heads up.\nANSWER: NO", None, "NO"),
    ("Ｙｅｓ", None, None),
    ("ANSWER: \\boxed{YES}", None, "YES"),
    ("Tracking the flips... ANSWER: Yes.", None, "YES"),
    ("answer: No", None, "NO"),
    ("ANSWER : YES", None, "YES"),
]


@pytest.mark.parametrize(("reply", "reasoning", "expected"), EVALSCOPE_VERDICTS)
def test_verdict_matches_evalscope(reply: str | None, reasoning: str | None, expected: str | None) -> None:
    assert evalscope.verdict(reply, reasoning) == expected
    for target in ("YES", "NO"):  # the review carries EvalScope's prediction and its correctness rule
        r = review({"id": 0, "target": target, "reply": reply, "reasoning": reasoning, "error": None}, "evalscope")
        assert (r["extracted"], r["correct"], r["invalid"]) == (expected, expected == target, expected is None)
        assert (r["invalid_reason"] is None) == (expected is not None)


def test_the_table_is_not_the_strict_rule() -> None:
    """The two rules disagree on a good part of the table; the default stays strict."""
    differ = [r for r, reasoning, v in EVALSCOPE_VERDICTS if reasoning is None and extract_answer(r) != v]
    assert len(differ) >= 10
    r = review({"id": 0, "target": "YES", "reply": "The answer is Yes", "error": None})
    assert (r["extracted"], r["invalid_reason"]) == (None, "no_marker")


def test_reasons_for_evalscope_invalid_answers() -> None:
    assert evalscope.read_verdict("") == (None, "empty")
    assert evalscope.read_verdict("ANSWER: Yes or No") == (None, "both")
    assert evalscope.read_verdict("ANSWER: maybe") == (None, "no_verdict")
    assert evalscope.read_verdict("ANSWER: maybe", finish_reason="length") == (None, "cut_off")
    assert evalscope.read_verdict("ANSWER: NO", finish_reason="length") == ("NO", None)  # EvalScope scores it


# target, reply, error: the five metrics worked out by hand below
FIXED = [
    ("YES", "ANSWER: YES", None),  # TP
    ("YES", "ANSWER: yes", None),  # TP
    ("YES", "The answer is Yes", None),  # TP (no marker: EvalScope reads the whole reply)
    ("YES", "ANSWER: NO", None),  # FN
    ("YES", "ANSWER: maybe", None),  # no verdict: in accuracy's denominator only
    ("YES", None, "HTTP 500 after 3 attempts"),  # errored: in no denominator
    ("NO", "ANSWER: NO", None),  # TN
    ("NO", "**ANSWER:** NO.", None),  # TN
    ("NO", "No.", None),  # TN
    ("NO", "ANSWER: YES", None),  # FP
    ("NO", "Yes or No", None),  # both: no verdict
    ("NO", "<think>No</think>ANSWER: Yes", None),  # FP
]


def _scored(compat: str) -> dict:
    scorer = Scorer(compat=compat)
    for i, (target, reply, error) in enumerate(FIXED):
        scorer.add({"id": i, "target": target, "people": 2, "reply": reply, "error": error})
    saved = {"config": {"model": "m"}, "fingerprint": {"dataset": {}}, "samples": len(FIXED)}
    report = build_report(saved, "run", scorer, compat)
    report["reasons"] = scorer.reasons
    return report


def test_five_metrics_in_evalscope_arithmetic_by_hand() -> None:
    r = _scored("evalscope")
    tp, fn, tn, fp, scored = 3, 1, 3, 2, 11
    p, rec = tp / (tp + fp), tp / (tp + fn)
    # EvalScope's own formulas (coin_flip_adapter.py aggregate_scores), compared exactly
    assert r["metrics"] == {
        "f1_score": (2 * p * rec) / (p + rec),
        "accuracy": (tp + tn) / scored,
        "precision": p,
        "recall": rec,
        "yes_ratio": (tp + fp) / scored,
    }
    assert r["metrics"]["accuracy"] == 6 / 11 and r["metrics"]["f1_score"] == pytest.approx(2 / 3)
    assert (r["counts"]["tp"], r["counts"]["fn"], r["counts"]["tn"], r["counts"]["fp"]) == (tp, fn, tn, fp)
    assert (r["counts"]["samples"], r["counts"]["invalid"], r["counts"]["errors"]) == (12, 2, 1)
    assert r["evalscope"]["primary_metric"] == "accuracy" and r["evalscope"]["scored_samples"] == 11
    assert r["primary"] == "f1_score" and r["extraction"] == "evalscope-1.14.1:coin_flip"
    assert r["reasons"] == {"empty": 0, "no_verdict": 1, "both": 1, "cut_off": 0}
    assert any("1 sample(s)" in w and "left out" in w for w in r["warnings"])


def test_same_replies_in_strict_arithmetic_by_hand() -> None:
    r = _scored("coinflip")
    assert r["metrics"]["accuracy"] == 4 / 12 and r["metrics"]["yes_ratio"] == 4 / 12
    assert r["metrics"]["precision"] == 2 / 4 and r["metrics"]["recall"] == 2 / 6
    assert r["metrics"]["f1_score"] == pytest.approx(0.4)
    assert "evalscope" not in r and r["extraction"] == "coinflip.extract_answer/1"
    assert any("1 sample(s)" in w and "scored wrong" in w for w in r["warnings"])
    assert r["reasons"] == {"empty": 0, "no_marker": 3, "no_verdict": 1, "both": 0, "unclosed_think": 0, "cut_off": 0}


def test_report_and_reviews_must_follow_the_same_rule() -> None:
    with pytest.raises(ValueError, match="evalscope"):
        build_report({"config": {"model": "m"}, "fingerprint": {"dataset": {}}}, "r", Scorer(), "evalscope")


def _eval(tmp_path: Path, *extra: str) -> Path:
    with FakeOpenAIServer("mixed", fail_rate=0.15, seed=3, stall=0.2) as srv:
        args = ["eval", "--model", "m", "--api-url", srv.url, "--limit", "80", "--work-dir", str(tmp_path)]
        result = run_cli(*args, "--retries", "0", "--metric-compat", "evalscope", *extra)
    assert result.returncode == 1, result.stderr  # some samples errored: an incomplete run
    return only_run_dir(tmp_path)


def test_a_live_evalscope_run_scores_each_reply_by_evalscopes_rule(tmp_path: Path) -> None:
    run = _eval(tmp_path)
    predictions = {p["id"]: p for p in read_jsonl(run / "predictions/m/coin_flip.jsonl")}
    reviews = read_jsonl(run / "reviews/m/coin_flip.jsonl")
    report = json.loads((run / "reports/m/coin_flip.json").read_text())
    errors = sum(p["error"] is not None for p in predictions.values())
    assert errors and report["evalscope"]["errors_excluded"] == errors
    for r in reviews:  # the server's reasoning_content holds the opposite answer: never read
        p = predictions[r["id"]]
        assert r["extracted"] == (None if p["error"] else evalscope.verdict(p["reply"], p["reasoning"]))
    scored = [r for r in reviews if not r["error"]]
    assert report["metrics"]["accuracy"] == sum(r["correct"] for r in scored) / len(scored)
    before = [(run / f).read_bytes() for f in ("reports/m/coin_flip.json", "reviews/m/coin_flip.jsonl")]
    assert run_cli("rescore", str(run)).returncode == 1  # the saved compat, from the file: same bytes (errors: 1)
    assert [(run / f).read_bytes() for f in ("reports/m/coin_flip.json", "reviews/m/coin_flip.jsonl")] == before
    assert run_cli("rescore", str(run), "--metric-compat", "coinflip").returncode == 1
    assert [(run / f).read_bytes() for f in ("reports/m/coin_flip.json", "reviews/m/coin_flip.jsonl")] == before
    strict = read_jsonl(run / "reviews/m/coin_flip.coinflip.jsonl")  # beside the run's own, which stays
    assert all(r["extracted"] == extract_answer(predictions[r["id"]]["reply"]) for r in strict if not r["error"])
