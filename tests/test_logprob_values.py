"""Log probabilities from a server are untrusted: a value above 0, NaN or infinite at the answer
leaves that sample without P(YES), counted in the report, instead of a confident P(YES)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coinflip.scoring.calibration import impossible, p_yes
from coinflip.testing.server import FakeOpenAIServer

from .conftest import only_run_dir, read_jsonl, run_cli
from .test_forced import _hand_calibration


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("fault", ["positive", "nan"])
def test_impossible_log_probabilities_leave_samples_without_p_yes(tmp_path: Path, fault: str, stream: bool) -> None:
    with FakeOpenAIServer("mixed", impossible_logprobs=fault) as srv:
        result = run_cli(
            "eval", "--model", "m", "--api-url", srv.url, "--limit", "60", "--work-dir", str(tmp_path),
            "--generation-config", "logprobs=true,top_logprobs=3", *(["--stream"] if stream else []),
        )  # fmt: skip
        state = srv.state
    assert result.returncode == 0, result.stderr
    run = only_run_dir(tmp_path)
    rows = read_jsonl(run / "predictions/m/coin_flip.jsonl")
    answered = [r for r in rows if state.policy.expected(r["question"]) is not None]  # "maybe" has no P(YES)
    bad = [r for r in answered if state.impossible(r["question"])]
    good = [r for r in answered if not state.impossible(r["question"])]
    assert bad and good
    reviews = {r["id"]: r for r in read_jsonl(run / "reviews/m/coin_flip.jsonl")}
    assert all(reviews[r["id"]]["p_yes"] is None for r in bad)
    assert all(0 < reviews[r["id"]]["p_yes"] < 1 for r in good)
    report = json.loads((run / "reports/m/coin_flip.json").read_text())
    c = report["calibration"]
    assert c["impossible_logprobs"] == len(bad) and c["samples"] == len(good)
    probs = [state.policy.p_yes(r["question"], state.policy.expected(r["question"])) for r in good]
    ys = [int(r["target"] == "YES") for r in good]
    assert {k: c[k] for k in ("auroc", "brier", "ece")} == pytest.approx(_hand_calibration(probs, ys))
    assert any(f"{len(bad)} sample(s) have no P(YES)" in w for w in report["warnings"])
    rescored = run_cli("rescore", str(run))  # the file keeps what makes them impossible
    assert rescored.returncode == 0, rescored.stderr
    assert json.loads((run / "reports/m/coin_flip.json").read_text())["calibration"] == c


def _window(chosen: object, other: object) -> list[dict[str, object]]:
    answer = {"token": " YES", "logprob": chosen, "top": {" NO": other}}
    return [{"token": "ANSWER:", "logprob": -0.1, "top": {}}, answer]


@given(st.floats(min_value=-50, max_value=0), st.floats(min_value=-50, max_value=0))
def test_possible_values_give_the_normalised_p_yes(yes: float, no: float) -> None:
    window = _window(yes, no)
    assert not impossible(window)
    assert p_yes(window) == pytest.approx(math.exp(yes) / (math.exp(yes) + math.exp(no)))


impossible_numbers = st.one_of(
    st.floats(min_value=1e-3, exclude_min=False, allow_infinity=True),
    st.just(math.nan),
    st.just(-math.inf),
    st.sampled_from(["nan", "inf", "-inf", "oops", True]),
)


@given(impossible_numbers, st.floats(min_value=-50, max_value=0), st.booleans())
def test_any_impossible_value_at_the_answer_means_no_p_yes(bad: object, fine: float, on_chosen: bool) -> None:
    window = _window(bad, fine) if on_chosen else _window(fine, bad)
    assert impossible(window) and p_yes(window) is None


@pytest.mark.parametrize("top", [0, 3])
def test_p_yes_without_alternatives_is_called_out_as_restating_the_answers(tmp_path: Path, top: int) -> None:
    """top_logprobs=0 (or a server that ignores it): the chosen token alone, so every P(YES) is 0 or 1."""
    asked = f"logprobs=true,top_logprobs={top}"
    with FakeOpenAIServer("mixed") as srv:
        result = run_cli("eval", "--model", "m", "--api-url", srv.url, "--limit", "30", "--work-dir", str(tmp_path),
                         "--generation-config", asked)  # fmt: skip
    assert result.returncode == 0, result.stderr
    run = only_run_dir(tmp_path)
    found = {r["p_yes"] for r in read_jsonl(run / "reviews/m/coin_flip.jsonl")} - {None}
    report = json.loads((run / "reports/m/coin_flip.json").read_text())
    flagged = [w for w in report["warnings"] if w.startswith("P(YES) is 0 or 1 at every answer")]
    assert report["calibration"]["available"]
    if top:
        assert found - {0.0, 1.0} and not flagged
    else:
        assert found == {0.0, 1.0} and len(flagged) == 1 and "top_logprobs=5" in flagged[0]
        assert "P(YES) is 0 or 1 at every answer" in result.stderr + result.stdout
