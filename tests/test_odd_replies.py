"""Whatever a server sends, each sample ends with a reply or a recorded error, the predictions
file stays strict JSON Lines, and resume and rescore of that run directory finish."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from coinflip.testing.server import FakeOpenAIServer

from .answer_server import AnswerServer, Seen, answer, chat
from .conftest import only_run_dir, read_jsonl, run_cli


def _strict(line: str) -> Any:
    def refuse(name: str) -> Any:
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(line, parse_constant=refuse)


def _nested(seen: Seen) -> bytes:
    return answer(None, raw=b'{"choices": ' + b"[" * 50_000 + b"]" * 50_000 + b"}")


def _parts(seen: Seen) -> bytes:
    text = seen.right_answer
    half = len(text) // 2
    picture = {"type": "image_url", "image_url": {}}
    return answer(chat([{"type": "text", "text": text[:half]}, picture, {"type": "text", "text": text[half:]}]))


def _nan_usage(seen: Seen) -> bytes:
    body = json.dumps(chat(seen.right_answer)).encode()[:-1]
    return answer(None, raw=body + b', "usage": {"prompt_tokens": NaN, "completion_tokens": 7, "total_tokens": 1e999}}')


def _huge(seen: Seen) -> bytes:  # 3 MB of text, sent gzip-compressed in a few KB
    body = gzip.compress(json.dumps(chat("x" * 3_000_000)).encode())
    return answer(None, 200, "Content-Encoding: gzip", raw=body)


def _digits(seen: Seen, where: str) -> bytes:
    """A number of 400 digits (valid JSON, read whole by Python, too large for a float) in usage or logprobs."""
    reply = chat(seen.right_answer, usage={"prompt_tokens": 12345, "completion_tokens": 7})
    top = [{"token": "YES", "logprob": -12345}, {"token": "NO", "logprob": -0.5}]
    reply["choices"][0]["logprobs"] = {"content": [{"token": "YES", "logprob": -12345, "top_logprobs": top}]}
    raw, digits = json.dumps(reply).encode(), b"9" * 400
    old = b"12345" if where == "all" else b'"prompt_tokens": 12345'
    return answer(None, raw=raw.replace(old, old.replace(b"12345", digits)))


def _labelled_html(seen: Seen) -> bytes:
    """A JSON answer sent as text/html, as a Flask app returning json.dumps(...) does."""
    return answer(chat(seen.right_answer)).replace(b"Content-Type: application/json", b"Content-Type: text/html")


# name: (how the server answers, what the sample's row must hold, the exit code)
CASES: dict[str, tuple[Callable[[Seen], bytes], Callable[[dict[str, Any]], bool], int]] = {
    "content is a number": (
        lambda s: answer(chat(1)),
        lambda row: row["reply"] == "1" and row["error"] is None,
        0,
    ),
    "content is a list of text parts": (
        _parts,
        lambda row: row["error"] is None and row["reply"].endswith(f"ANSWER: {row['target']}**"),
        0,
    ),
    "token counts as strings": (
        lambda s: answer(chat(s.right_answer, usage={"prompt_tokens": "120", "completion_tokens": 3.5})),
        lambda row: row["usage"] == {"prompt_tokens": 120} and row["error"] is None,
        0,
    ),
    "token counts in digits int() refuses": (
        lambda s: answer(chat(s.right_answer, usage={"prompt_tokens": "\u00b2", "completion_tokens": 7})),
        lambda row: row["usage"] == {"completion_tokens": 7} and row["error"] is None,
        0,
    ),
    "a JSON answer labelled text/html": (
        _labelled_html,
        lambda row: row["error"] is None and row["reply"].endswith(f"ANSWER: {row['target']}**"),
        0,
    ),
    "a bare NaN in usage": (
        _nan_usage,
        lambda row: row["usage"] == {"completion_tokens": 7} and row["error"] is None,
        0,
    ),
    "token counts too large for a float": (
        lambda s: _digits(s, "usage"),
        lambda row: row["usage"] == {"completion_tokens": 7} and row["error"] is None,
        0,
    ),
    "log probabilities too large for a float": (
        lambda s: _digits(s, "all"),
        lambda row: row["error"] is None and row["usage"] == {"completion_tokens": 7},
        0,
    ),
    "deeply nested JSON": (
        _nested,
        lambda row: row["reply"] is None and "nested too deeply" in row["error"],
        1,
    ),
    "a 200 answer carrying an error": (
        lambda s: answer({"error": {"message": "upstream model crashed", "code": 500}}),
        lambda row: row["reply"] is None and row["error"] == "HTTP 200 with an error: upstream model crashed",
        1,
    ),
    "a reply over --max-reply-mb": (
        _huge,
        lambda row: row["reply"] is None and "larger than 1 MB" in row["error"] and row["attempts"] == 1,
        1,
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_odd_reply_shapes_end_as_replies_or_errors_and_the_run_dir_stays_usable(case: str, tmp_path: Path) -> None:
    respond, check, code = CASES[case]
    with AnswerServer(respond) as srv:
        result = run_cli("eval", "--model", "m", "--api-url", srv.url, "--limit", "3", "--retries", "0",
                         "--max-reply-mb", "1", "--work-dir", str(tmp_path))  # fmt: skip
        assert result.returncode == code, result.stderr
        assert "Traceback" not in result.stderr
        run = only_run_dir(tmp_path)
        predictions = run / "predictions/m/coin_flip.jsonl"
        rows = [_strict(line) for line in predictions.read_text(encoding="utf-8").splitlines()]
        assert len(rows) == 3 and all(check(row) for row in rows), rows
        again = run_cli("eval", "--model", "m", "--api-url", srv.url, "--limit", "3", "--retries", "0",
                        "--max-reply-mb", "1", "--use-cache", str(run))  # fmt: skip
    assert again.returncode == code and "Traceback" not in again.stderr, again.stderr
    rescored = run_cli("rescore", str(run))
    assert rescored.returncode == code and "Traceback" not in rescored.stderr, rescored.stderr  # 1: incomplete
    report = json.loads((run / "reports/m/coin_flip.json").read_text())
    assert report["counts"]["samples"] == 3
    assert report["counts"]["errors"] == (3 if code else 0)
    for line in predictions.read_text(encoding="utf-8").splitlines():
        _strict(line)


def test_a_list_of_text_parts_is_scored_like_plain_text(tmp_path: Path) -> None:
    with AnswerServer(_parts) as srv:
        result = run_cli("eval", "--model", "m", "--api-url", srv.url, "--limit", "6", "--work-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    report = json.loads((only_run_dir(tmp_path) / "reports/m/coin_flip.json").read_text())
    assert report["metrics"]["accuracy"] == 1.0
    assert {row["error"] for row in read_jsonl(only_run_dir(tmp_path) / "predictions/m/coin_flip.jsonl")} == {None}


def test_a_reasoning_loop_of_unclosed_think_tags_is_scored_at_once_in_both_arithmetics(tmp_path: Path) -> None:
    """A model stuck repeating `<think>` to its token limit (1.4 MB here): each opening's search for a close
    scanned to the end of the reply, so scoring it took hours in either rule; now it is `unclosed_think`."""
    loop = "<think>" * 200_000
    with AnswerServer(lambda s: answer(chat(loop))) as srv:
        result = run_cli("eval", "--model", "m", "--api-url", srv.url, "--limit", "2", "--work-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    run = only_run_dir(tmp_path)
    assert json.loads((run / "reports/m/coin_flip.json").read_text())["invalid_reasons"] == {"unclosed_think": 2}
    rescored = run_cli("rescore", str(run), "--metric-compat", "evalscope")
    assert rescored.returncode == 0, rescored.stderr
    assert json.loads((run / "reports/m/coin_flip.evalscope.json").read_text())["invalid_reasons"] == {"no_verdict": 2}


PORTAL = b"<!DOCTYPE html><html><head><title>Hotel Wi-Fi: sign in</title></head><body><form>...</form></body></html>"


def test_a_login_page_mid_run_is_recorded_as_a_web_page_not_as_a_malformed_body(tmp_path: Path) -> None:
    """A captive portal or a proxy's login page (200, HTML) after the first answer: each sample's error said
    'malformed response body (JSONDecodeError ...)'; it says what came back and where to look, as at the start."""

    def respond(seen: Seen) -> bytes:
        page = answer(None, raw=PORTAL).replace(b"application/json", b"text/html")
        return answer(chat(seen.right_answer)) if seen.index == 0 else page

    with AnswerServer(respond) as srv:
        result = run_cli("eval", "--model", "m", "--api-url", srv.url, "--limit", "3", "--eval-batch-size", "1",
                         "--retries", "0", "--work-dir", str(tmp_path))  # fmt: skip
    assert result.returncode == 1, result.stderr
    errors = [row["error"] for row in read_jsonl(only_run_dir(tmp_path) / "predictions/m/coin_flip.jsonl")]
    assert errors.count(None) == 1 and len(errors) == 3, errors
    for error in filter(None, errors):
        assert "answered with a web page, not the OpenAI API: Hotel Wi-Fi: sign in (an HTML page)" in error
        assert "check --api-url" in error and "proxy" in error and "malformed" not in error


@pytest.mark.parametrize("usage", [{"prompt_tokens": 18}, {"prompt_tokens": 18, "completion_tokens": -3}, None])
def test_a_cost_that_leaves_out_unreported_tokens_says_so(tmp_path: Path, usage: dict[str, Any] | None) -> None:
    """A server that reported prompt tokens but no usable completion count: the line said "72 prompt, 0 completion
    over 0 requests; cost 0.0001", no word that the completion tokens, so part of the cost, were never reported.
    One that reports no usage at all said "cost 0.0000", as if the answers were free."""
    reply = answer(chat("ANSWER: YES", **({} if usage is None else {"usage": usage})))
    with AnswerServer(lambda seen: reply) as srv:
        args = ("eval", "--model", "m", "--limit", "4", "--api-url", srv.url, "--work-dir", str(tmp_path))
        result = run_cli(*args, "--price-input", "1", "--price-output", "1")
    report = json.loads((only_run_dir(tmp_path) / "reports/m/coin_flip.json").read_text())
    said = "did not report the usage of 4 answer(s) in full: these sums leave it out"
    assert result.returncode == 0 and report["tokens"]["unreported"] == 4, result.stderr
    assert said in result.stdout and any(said in note for note in report["notes"]), result.stdout


def test_a_baseline_s_answers_spend_nothing_so_leave_nothing_out(tmp_path: Path) -> None:
    """A baseline reports no usage because it uses none: its cost is whole, not short of 4 answers."""
    result = run_cli("eval", "--model", "oracle", "--limit", "4", "--price-input", "1", "--price-output", "1",
                     "--work-dir", str(tmp_path))  # fmt: skip
    report = json.loads((only_run_dir(tmp_path) / "reports/oracle/coin_flip.json").read_text())
    assert result.returncode == 0 and "unreported" not in report["tokens"], result.stderr
    assert report["cost"]["total"] == 0 and "leave it out" not in result.stdout


def test_the_other_choices_of_n_answers_leave_no_usage_out(tmp_path: Path) -> None:
    """With n=2, a request's usage is in its first answer's row alone: every other answer was counted as one whose
    usage the server did not report (a false note on every run with n), though the cost held it. A server that
    reports none is still said to."""
    with FakeOpenAIServer("mixed") as srv:
        args = ("eval", "--model", "m", "--limit", "5", "--api-url", srv.url, "--generation-config", "n=2")
        result = run_cli(
            *args, "--repeats", "2", "--price-input", "1", "--price-output", "1", "--work-dir", str(tmp_path)
        )
    rows = read_jsonl(only_run_dir(tmp_path) / "predictions/m/coin_flip.jsonl")
    report = json.loads((only_run_dir(tmp_path) / "reports/m/coin_flip.json").read_text())
    assert result.returncode == 0 and len(rows) == 20 and sum(row["usage"] is None for row in rows) == 10
    assert "unreported" not in report["tokens"] and "leave it out" not in result.stdout, result.stdout
    rescored = run_cli("rescore", str(only_run_dir(tmp_path)))
    assert rescored.returncode == 0 and "leave it out" not in rescored.stdout
    choice = {"message": {"role": "assistant", "content": "ANSWER: YES"}, "finish_reason": "stop"}
    silent = answer({"choices": [{"index": i, **choice} for i in range(2)]})  # two answers, no usage
    with AnswerServer(lambda seen: silent) as srv:
        args = ("eval", "--model", "m", "--limit", "3", "--api-url", srv.url, "--generation-config", "n=2")
        quiet = run_cli(*args, "--price-input", "1", "--price-output", "1", "--work-dir", str(tmp_path / "s"))
    assert quiet.returncode == 0 and "the usage of 3 answer(s) in full" in quiet.stdout, quiet.stdout


@pytest.mark.parametrize(
    ("usages", "requests", "per_prompt", "per_completion"),
    [
        ([{"prompt_tokens": 100}], 4, 100.0, None),  # said "0 completion over 0 requests", no prompt average
        ([{"prompt_tokens": 100, "completion_tokens": 10}, {"completion_tokens": 10}], 4, 100.0, 10.0),  # said 50
    ],
)
def test_each_token_average_is_over_the_answers_that_gave_its_count(
    tmp_path: Path, usages: list[dict[str, Any]], requests: int, per_prompt: float, per_completion: float | None
) -> None:
    """The request count and every average were taken over the answers that reported completion tokens: a server
    that reports prompt tokens alone had its 4 requests told as 0, and half its prompts made a prompt average of 50."""
    replies = iter([answer(chat("ANSWER: YES", usage=usages[i % len(usages)])) for i in range(4)])
    with AnswerServer(lambda seen: next(replies)) as srv:
        args = ("eval", "--model", "m", "--limit", "4", "--api-url", srv.url, "--eval-batch-size", "1")
        result = run_cli(*args, "--work-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    tokens = json.loads((only_run_dir(tmp_path) / "reports/m/coin_flip.json").read_text())["tokens"]
    assert tokens["requests"] == requests and f"over {requests} requests" in result.stdout
    assert tokens["per_request"]["prompt"] == per_prompt and tokens["per_request"]["completion"] == per_completion
