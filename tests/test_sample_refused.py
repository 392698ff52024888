"""A 400 that refuses one request (a prompt past the model's context, as vLLM answers it) is that sample's
error once the endpoint has answered, in the run or before its resume: a fatal stop would meet it again at
every resume, and the run could never end. Before any answer, it still stops the run (wrong settings)."""

from __future__ import annotations

import json
from pathlib import Path

from coinflip.testing.server import FakeOpenAIServer
from tests.conftest import run_cli

SHORT = "Q: A coin is heads up. {} flips the coin. Is the coin still heads up?"
LONG = "Q: A coin is heads up. " + "zed does not flip the coin. " * 60 + "Is the coin still heads up?"


def _data(tmp_path: Path, long_at: int) -> Path:
    rows = [{"question": SHORT.format(f"p{i}"), "answer": "no"} for i in range(5)]
    rows.insert(long_at, {"question": LONG, "answer": "yes"})
    path = tmp_path / "six.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _eval(srv: FakeOpenAIServer, data: Path, *more: str) -> tuple[int, str]:
    args = ("--model", "m", "--api-url", srv.url, "--dataset-path", str(data), "--eval-batch-size", "1", *more)
    result = run_cli("eval", *args)
    return result.returncode, result.stderr


def _rows(work: Path) -> list[dict[str, object]]:
    (predictions,) = work.glob("*/predictions/*/*.jsonl")
    return [json.loads(line) for line in predictions.read_text(encoding="utf-8").splitlines()]


def test_a_prompt_past_the_context_is_its_samples_error_in_a_run_and_at_every_resume(tmp_path: Path) -> None:
    with FakeOpenAIServer(context=200) as srv:
        code, err = _eval(srv, _data(tmp_path, 2), "--work-dir", str(tmp_path / "w"), "--limit-mode", "first")
        assert code == 1, err
        rows = _rows(tmp_path / "w")
        failed = [r for r in rows if r.get("error")]
        assert len(rows) == 6 and len(failed) == 1 and "400" in str(failed[0]["error"]), rows
        assert "maximum context length is 200 tokens" in str(failed[0]["error"])
        assert srv.state.requests[LONG] == 1  # refused for itself: not sent again
        (run,) = (p for p in (tmp_path / "w").iterdir() if p.is_dir())
        code, err = _eval(srv, _data(tmp_path, 2), "--use-cache", str(run))
        assert code == 1 and "Traceback" not in err, err  # incomplete, as before: not a bad request that stops it
        assert srv.state.requests[LONG] == 2
        assert [r["id"] for r in _rows(tmp_path / "w") if r.get("error")] == [2]  # the sample's error, once


def test_a_refusal_before_any_answer_still_stops_the_run_as_bad_settings(tmp_path: Path) -> None:
    with FakeOpenAIServer(context=200) as srv:
        code, err = _eval(srv, _data(tmp_path, 0), "--work-dir", str(tmp_path / "w"), "--limit-mode", "first")
    assert code == 2 and "answered 400 bad request" in err and "maximum context length" in err, err
    assert len(err.strip().splitlines()) == 1, err
