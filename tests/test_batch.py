"""Batch mode against the test server's real /v1/files and /v1/batches on 127.0.0.1, and the
offline round trip through a request file and a result file in `vllm run-batch`'s shape."""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import shlex
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from coinflip.models.batch_api import read_result, split_lines
from coinflip.testing.batches import BatchStore
from coinflip.testing.limited import Limits, Response, reply_json
from coinflip.testing.policy import Policy
from coinflip.testing.server import FakeOpenAIServer

from .answer_server import QuietHandler, serving
from .conftest import only_run_dir, read_jsonl, run_cli, spawn_cli

MIXED = Policy("mixed")
FAST = ("--batch-poll-s", "0.05")


def _answers(run: Path) -> dict[tuple[int, int], tuple[str | None, Any]]:
    """(id, repeat) -> (reply, forced reply) of a finished run."""
    rows = read_jsonl(run / "predictions/m/coin_flip.jsonl")
    return {(r["id"], r["repeat"]): (r["reply"], (r.get("forced") or {}).get("reply")) for r in rows}


def _report(run: Path) -> dict[str, Any]:
    return json.loads((run / "reports/m/coin_flip.json").read_text())


def _wait_for(condition: Any, what: str, budget: float = 120.0) -> None:
    deadline = time.monotonic() + budget
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _killed_while_polled(args: tuple[str, ...], work: Path, store: BatchStore) -> None:
    """Run `coinflip ARGS` in `work` and SIGKILL it once its batch is saved and being polled."""
    proc = spawn_cli(*args, "--work-dir", str(work), quiet=True)
    _wait_for(lambda: _saved_batch_id(work) and store.polls > 0, "the batch to be created and polled")
    proc.send_signal(signal.SIGKILL)
    proc.wait(60)


def _killed_and_edited(srv: FakeOpenAIServer, work: Path, store: BatchStore, **saved: Any) -> Path:
    """A batch run of 5 killed while polled, its first batch's saved state then set to `saved`: the run."""
    _killed_while_polled(("eval", "--model", "m", "--limit", "5", "--api-url", srv.url, "--batch", *FAST), work, store)
    run = only_run_dir(work)
    state = json.loads((run / "batch/state.json").read_text())
    state["batches"][0].update(saved)
    (run / "batch/state.json").write_text(json.dumps(state))
    return run


def _batch_run_with_four_owed(srv: FakeOpenAIServer, work: Path) -> Path:
    """A batch run of 6 questions done in `work`, then 4 of its answers dropped, and the batch's
    saved results too (a resume would read them from there): a resume sends those 4 again."""
    args = ("eval", "--model", "m", "--limit", "6", "--api-url", srv.url, "--batch", *FAST, "--work-dir", str(work))
    done = run_cli(*args)
    assert done.returncode == 0, done.stderr
    run = only_run_dir(work)
    predictions = run / "predictions/m/coin_flip.jsonl"
    predictions.write_text("".join(predictions.read_text().splitlines(keepends=True)[:2]))
    for saved in run.glob("batch/*.output.jsonl"):
        saved.unlink()
    return run


def _saved_batch_id(work: Path) -> bool:
    for state in work.glob("*/batch/state.json"):
        try:
            return any(b.get("batch_id") for b in json.loads(state.read_text())["batches"])
        except (ValueError, KeyError):
            return False
    return False


def test_a_batch_run_s_own_batch_folder_is_part_of_the_run_not_a_foreign_folder(tmp_path: Path) -> None:
    """`coinflip view` listed a complete --batch run's batch/ (its request and result files) as "foreign: not a
    coinflip run", under "Needs attention" on the index page."""
    with FakeOpenAIServer("mixed") as srv:
        args = ("eval", "--model", "m", "--limit", "4", "--api-url", srv.url, "--batch", *FAST)
        assert run_cli(*args, "--work-dir", str(tmp_path)).returncode == 0
    assert (only_run_dir(tmp_path) / "batch").is_dir()
    seen = run_cli("view", str(tmp_path))
    assert seen.returncode == 0 and "1 run" in seen.stderr and "0 foreign" in seen.stderr, seen.stderr


@pytest.mark.parametrize(
    "extra",
    [
        (),
        ("--force-answer", "--repeats", "2", "--generation-config", "n=2,seed=7"),
        ("--force-answer", "--api-mode", "completions"),
    ],
    ids=["plain", "forced-repeats-n", "completions-forced"],
)
def test_a_batch_run_gives_the_online_run_s_predictions(tmp_path: Path, extra: tuple[str, ...]) -> None:
    common = ("eval", "--model", "m", "--limit", "30", *extra)
    with FakeOpenAIServer("mixed") as srv:
        online = run_cli(*common, "--api-url", srv.url, "--work-dir", str(tmp_path / "online"))
        assert srv.state.batches.created == 0
        batch = run_cli(*common, "--api-url", srv.url, "--work-dir", str(tmp_path / "batch"), "--batch", *FAST)
        created = srv.state.batches.created
    assert online.returncode == 0, online.stderr
    assert batch.returncode == 0, batch.stderr
    want, got = only_run_dir(tmp_path / "online"), only_run_dir(tmp_path / "batch")
    assert _answers(got) == _answers(want) and len(_answers(got)) == 30 * (4 if "--repeats" in extra else 1)
    assert _report(got)["metrics"] == _report(want)["metrics"]
    forced_asked = sum(1 for _, f in _answers(got).values() if f is not None)
    assert created == (2 if forced_asked else 1)  # the forced turns as a second batch, and only then
    assert not extra or forced_asked > 0
    assert _report(got)["batch"] is True and "ttft_s" not in _report(got)["usage"]
    assert any("time to first token does not exist" in n for n in _report(got)["notes"])
    assert "batch turnaround median" in batch.stdout and "time to first token" in batch.stdout


@pytest.mark.parametrize("unsaved", [False, True], ids=["batch-id-saved", "killed-before-saving-its-id"])
def test_a_killed_batch_run_resumes_the_same_batch(tmp_path: Path, unsaved: bool) -> None:
    store = BatchStore(delay=3600.0)  # in progress until the test says otherwise
    with FakeOpenAIServer("mixed", batches=store) as srv:
        args = ("eval", "--model", "m", "--limit", "25", "--api-url", srv.url, "--batch", *FAST)
        _killed_while_polled(args, tmp_path, store)
        assert store.created == 1
        store.delay = 0.0  # the batch finishes at the server while nobody polls it
        run = only_run_dir(tmp_path)
        if unsaved:  # as if killed between creating the batch and saving its id: found by its input file
            state = json.loads((run / "batch/state.json").read_text())
            state["batches"][0].update(batch_id=None, status="new")
            (run / "batch/state.json").write_text(json.dumps(state))
        resumed = run_cli("eval", "--use-cache", str(run), *FAST)
        assert store.created == 1  # polled and collected, never submitted twice
    assert resumed.returncode == 0, resumed.stderr
    assert len(_answers(run)) == 25 and _report(run)["complete"]
    assert all(n == 1 for n in store.seen_ids.values()) and len(store.seen_ids) == 25


def test_ctrl_c_while_polling_leaves_the_batch_running(tmp_path: Path) -> None:
    store = BatchStore(delay=3600.0)
    with FakeOpenAIServer("mixed", batches=store) as srv:
        args = ("eval", "--model", "m", "--limit", "10", "--api-url", srv.url, "--batch", *FAST)
        proc = spawn_cli(*args, "--work-dir", str(tmp_path))
        _wait_for(lambda: _saved_batch_id(tmp_path) and store.polls > 0, "the batch to be polled")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        statuses = [b["status"] for b in store.batches.values()]
        store.delay = 0.0
        resumed = run_cli("eval", "--use-cache", str(only_run_dir(tmp_path)), *FAST)
    assert proc.returncode == 1, err
    assert "not cancelled" in err and "resume with: coinflip eval --use-cache" in err and "Traceback" not in err
    assert statuses == ["in_progress"]
    assert resumed.returncode == 0, resumed.stderr
    assert store.created == 1


def test_an_expired_batch_keeps_its_answers_and_a_second_pass_completes_it(tmp_path: Path) -> None:
    store = BatchStore(expire=1)
    with FakeOpenAIServer("mixed", batches=store) as srv:
        result = run_cli(
            "eval", "--model", "m", "--limit", "20", "--api-url", srv.url, "--batch", *FAST, "--work-dir", str(tmp_path)
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    run = only_run_dir(tmp_path)
    state = json.loads((run / "batch/state.json").read_text())["batches"]
    assert [(b["status"], b["count"]) for b in state] == [("expired", 20), ("completed", 10)]
    assert all(n == 1 for n in store.seen_ids.values()) and len(store.seen_ids) == 20  # the 10 answered: not again
    assert len(_answers(run)) == 20 and _report(run)["complete"]


def test_failed_lines_are_recorded_then_sent_again(tmp_path: Path) -> None:
    store = BatchStore(fail_every=3)  # lines 0, 3, 6, ... fail the first time
    with FakeOpenAIServer("mixed", batches=store) as srv:
        result = run_cli(
            "eval", "--model", "m", "--limit", "12", "--api-url", srv.url, "--batch", *FAST, "--work-dir", str(tmp_path)
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    run = only_run_dir(tmp_path)
    lines = read_jsonl(run / "batch/batch_000001.error.jsonl")
    assert len(lines) == 4 and all(line["response"]["status_code"] == 500 for line in lines)
    assert store.created == 2 and _report(run)["complete"] and _report(run)["counts"]["errors"] == 0


def test_failed_batches_end_incomplete_and_resumable_or_go_online(tmp_path: Path) -> None:
    store = BatchStore(fail_batches=3)  # every pass of the first run fails
    with FakeOpenAIServer("mixed", batches=store) as srv:
        args = ("eval", "--model", "m", "--limit", "8", "--api-url", srv.url, "--batch", *FAST)
        failed = run_cli(*args, "--work-dir", str(tmp_path / "a"))
        run = only_run_dir(tmp_path / "a")
        assert failed.returncode == 1 and store.created == 3
        assert "the batch failed: refused (test)" in failed.stdout + failed.stderr
        assert "resume with: coinflip eval --use-cache" in failed.stderr
        resumed = run_cli("eval", "--use-cache", str(run), *FAST)
        assert resumed.returncode == 0, resumed.stderr
        assert store.created == 4 and sum(srv.state.requests.values()) == 8  # answered by the fourth batch only
        store.fail_batches = 5
        online = run_cli(*args, "--batch-rest-online", "--work-dir", str(tmp_path / "b"))
        assert online.returncode == 0, online.stderr
        assert store.created == 5 and sum(srv.state.requests.values()) == 16  # the rest went online
    assert _answers(only_run_dir(tmp_path / "b")) == _answers(run)


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        found: dict[str, Any] = json.load(answer)
        return found


def _run_batch_elsewhere(srv: FakeOpenAIServer, requests: Path, out: Path, fail: set[str] = frozenset()) -> None:
    """What `vllm run-batch -i requests -o out` does: each line answered, written in its output shape."""
    results = []
    for line in read_jsonl(requests):
        assert line["method"] == "POST" and line["url"] == "/v1/chat/completions"
        if line["custom_id"] in fail:
            response = {"status_code": 400, "request_id": "vllm-batch-x", "body": {"object": "error", "message": "bad"}}
        else:
            body = _post(srv.url + "/chat/completions", line["body"])
            response = {"status_code": 200, "request_id": f"vllm-batch-{len(results)}", "body": body}
        results.append(
            {"id": f"vllm-{len(results)}", "custom_id": line["custom_id"], "response": response, "error": None}
        )
    random.Random(3).shuffle(results)  # the order is not guaranteed
    out.write_text("".join(json.dumps(r) + "\n" for r in results))


def test_the_request_file_s_commands_paste_whole_with_a_space_in_its_path(tmp_path: Path) -> None:
    """`vllm run-batch -i PATH` was printed unquoted: a path with a space pasted as two arguments."""
    requests = tmp_path / "my requests.jsonl"
    wrote = run_cli("eval", "--model", "m", "--limit", "3", "--batch-write", str(requests), "--work-dir", str(tmp_path))
    assert wrote.returncode == 0 and len(read_jsonl(requests)) == 3, wrote.stderr
    command = wrote.stderr.split("e.g. ", 1)[1].split(", then", 1)[0]
    assert shlex.split(command) == ["vllm", "run-batch", "-i", str(requests), "-o", "results.jsonl", "--model", "m"]


def test_answers_read_from_a_result_file_are_not_held_against_max_cost(tmp_path: Path) -> None:
    """Made and paid elsewhere, a result file's answers were held against --max-cost as if sent now: a cap below
    what they cost read none of them (nothing is spent reading them; a later session's cap counts them as saved)."""
    requests, results, work = tmp_path / "requests.jsonl", tmp_path / "results.jsonl", tmp_path / "out"
    prices = ("--price-input", "2", "--price-output", "8", "--max-cost", "0.0001")
    with FakeOpenAIServer("mixed") as srv:
        wrote = run_cli("eval", "--model", "m", "--limit", "6", *prices, "--batch-write", str(requests),
                        "--work-dir", str(work))  # fmt: skip
        assert wrote.returncode == 0, wrote.stderr
        _run_batch_elsewhere(srv, requests, results)
    run = only_run_dir(work)
    read = run_cli("eval", "--use-cache", str(run), "--batch-results", str(results), *prices)
    rows = read_jsonl(run / "predictions/m/coin_flip.jsonl")
    assert read.returncode == 0 and len(rows) == 6 and all(r["error"] is None for r in rows), read.stderr


def test_a_result_file_from_vllm_run_batch_is_scored_as_a_run(tmp_path: Path) -> None:
    requests, results = tmp_path / "requests.jsonl", tmp_path / "results.jsonl"
    work = tmp_path / "out"
    with FakeOpenAIServer("mixed") as srv:
        wrote = run_cli(
            "eval", "--model", "m", "--limit", "24", "--force-answer", "--batch-write", str(requests),
            "--work-dir", str(work),
        )  # fmt: skip
        assert wrote.returncode == 0, wrote.stderr
        assert "vllm run-batch -i" in wrote.stderr and len(read_jsonl(requests)) == 24
        run = only_run_dir(work)
        first = sorted(line["custom_id"] for line in read_jsonl(requests))[:1]
        _run_batch_elsewhere(srv, requests, results, fail=set(first))
        scored = run_cli("eval", "--use-cache", str(run), "--batch-results", str(results))
        assert scored.returncode == 1  # one failed line, and the forced turns are owed
        forced = tmp_path / "forced.jsonl"
        again = run_cli("eval", "--use-cache", str(run), "--batch-write", str(forced))
        assert again.returncode == 0, again.stderr
        owed = read_jsonl(forced)
        assert first[0] in {line["custom_id"] for line in owed}
        assert sum(line["custom_id"].partition(".")[0].endswith("-forced") for line in owed) == len(owed) - 1 > 0
        _run_batch_elsewhere(srv, forced, results)
        done = run_cli("eval", "--use-cache", str(run), "--batch-results", str(results))
        online = run_cli(
            "eval", "--model", "m", "--limit", "24", "--force-answer", "--api-url", srv.url,
            "--work-dir", str(tmp_path / "online"),
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert online.returncode == 0, online.stderr
    assert _answers(run) == _answers(only_run_dir(tmp_path / "online"))
    assert _report(run)["complete"] and _report(run)["batch"] is True


def test_a_forced_answer_for_a_reply_with_half_a_surrogate_pair_is_written_as_a_request(tmp_path: Path) -> None:
    """The reply goes back in the forced follow-up's request; as UTF-8 it cannot be written, and
    the request line (--batch-write, and a batch's upload alike) crashed with UnicodeEncodeError."""
    requests, results, forced = tmp_path / "requests.jsonl", tmp_path / "results.jsonl", tmp_path / "forced.jsonl"
    work = tmp_path / "out"
    wrote = run_cli("eval", "--model", "m", "--limit", "3", "--force-answer", "--batch-write", str(requests),
                    "--work-dir", str(work))  # fmt: skip
    assert wrote.returncode == 0, wrote.stderr
    run = only_run_dir(work)
    body = '{"choices": [{"index": 0, "message": {"content": "no verdict \\ud800 here"}, "finish_reason": "stop"}]}'
    lines = [f'{{"custom_id": "{r["custom_id"]}", "response": {{"status_code": 200, "body": {body}}}, "error": null}}'
             for r in read_jsonl(requests)]  # fmt: skip
    results.write_text("\n".join(lines) + "\n", encoding="utf-8")
    scored = run_cli("eval", "--use-cache", str(run), "--batch-results", str(results))
    assert scored.returncode == 1, scored.stderr  # the forced turns are owed
    again = run_cli("eval", "--use-cache", str(run), "--batch-write", str(forced))
    assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr
    owed = read_jsonl(forced)
    assert len(owed) == 3 and all(line["custom_id"].partition(".")[0].endswith("-forced") for line in owed)
    assert all({"role": "assistant", "content": "no verdict \ud800 here"} in line["body"]["messages"] for line in owed)


def test_tokens_and_cost_add_up_and_max_cost_stops_before_passing_it(tmp_path: Path) -> None:
    prices = ("--price-input", "2", "--price-output", "8")
    with FakeOpenAIServer("mixed") as srv:
        base = ("eval", "--model", "m", "--limit", "20", "--api-url", srv.url, "--eval-batch-size", "1", *prices)
        base += ("--generation-config", "max_tokens=64")  # the first request's estimate: its prompt and 64 out
        full = run_cli(*base, "--work-dir", str(tmp_path / "full"))
        assert full.returncode == 0, full.stderr
        rows = read_jsonl(only_run_dir(tmp_path / "full") / "predictions/m/coin_flip.jsonl")
        prompt = sum(r["usage"]["prompt_tokens"] for r in rows)
        completion = sum(r["usage"]["completion_tokens"] for r in rows)
        report = _report(only_run_dir(tmp_path / "full"))
        assert report["tokens"]["prompt"] == prompt and report["tokens"]["completion"] == completion
        assert report["cost"]["total"] == pytest.approx((prompt * 2 + completion * 8) / 1e6)
        line = f"cost {report['cost']['total']:.4f} at 2/8 per million in/out"
        assert line in full.stdout and f"tokens: {prompt:,} prompt" in full.stdout
        assert line in (only_run_dir(tmp_path / "full") / "reports/m/coin_flip.html").read_text()  # the run page
        assert "cost.total" in (tmp_path / "full/index.html").read_text()  # the index's row details
        limit = report["cost"]["total"] / 2
        stopped = run_cli(*base, "--max-cost", f"{limit}", "--work-dir", str(tmp_path / "capped"))
        run = only_run_dir(tmp_path / "capped")
        assert stopped.returncode == 1
        assert "max-cost" in stopped.stderr and "resume with: coinflip eval --use-cache" in stopped.stderr
        capped = _report(run)
        assert 0 < len(_answers(run)) < 20 and capped["cost"]["total"] <= limit
        more = run_cli("eval", "--use-cache", str(run), "--max-cost", "1")
    assert more.returncode == 0, more.stderr
    assert _report(run)["cost"]["total"] == pytest.approx(report["cost"]["total"])  # what the whole run costs
    rescored = run_cli("rescore", str(run))
    assert rescored.returncode == 0 and _report(run)["cost"] == _report(only_run_dir(tmp_path / "full"))["cost"]


def test_a_pricing_file_and_the_batch_discount(tmp_path: Path) -> None:
    pricing = tmp_path / "prices.yaml"
    pricing.write_text("m:\n  input: 1.5\n  output: 6\n  batch_discount: 0.5\nother:\n  input: 9\n  output: 9\n")
    with FakeOpenAIServer("mixed") as srv:
        args = ("eval", "--model", "m", "--limit", "10", "--api-url", srv.url, "--pricing-file", str(pricing))
        result = run_cli(*args, "--batch", *FAST, "--work-dir", str(tmp_path / "a"))
        missing = run_cli(*args[:-2], "--pricing-file", str(tmp_path / "nope.yaml"), "--work-dir", str(tmp_path / "b"))
        unknown = run_cli(*args[:2], "x", *args[3:], "--work-dir", str(tmp_path / "c"))
    assert result.returncode == 0, result.stderr
    t = _report(only_run_dir(tmp_path / "a"))["tokens"]
    cost = _report(only_run_dir(tmp_path / "a"))["cost"]
    assert cost["total"] == pytest.approx((t["prompt"] * 1.5 + t["completion"] * 6) / 1e6 * 0.5)
    assert cost["full_price"] == pytest.approx(cost["total"] * 2)
    assert missing.returncode == 2 and "cannot read" in missing.stderr
    assert unknown.returncode == 2 and "no prices for 'x'" in unknown.stderr and "Traceback" not in unknown.stderr


def test_a_run_answered_by_a_batch_and_online_prices_each_answer_by_how_it_came(tmp_path: Path) -> None:
    prices = ("--price-input", "2", "--price-output", "8", "--batch-discount", "0.25")
    with FakeOpenAIServer("mixed", batches=BatchStore(fail_every=3)) as srv:  # every third line fails in the batch
        args = ("eval", "--model", "m", "--limit", "12", "--api-url", srv.url, *prices, "--work-dir", str(tmp_path))
        result = run_cli(*args, "--batch", *FAST, "--batch-rest-online")  # the failed lines go online
    assert result.returncode == 0, result.stderr
    run = only_run_dir(tmp_path)
    rows = read_jsonl(run / "predictions/m/coin_flip.jsonl")

    def cost(kept: list[dict[str, Any]]) -> float:
        return sum(r["usage"]["prompt_tokens"] * 2 + r["usage"]["completion_tokens"] * 8 for r in kept) / 1e6

    batch, online = [r for r in rows if r.get("batch") is True], [r for r in rows if "batch" not in r]
    assert batch and online and len(batch) + len(online) == 12
    report = _report(run)
    assert report["cost"]["total"] == pytest.approx(cost(batch) * 0.25 + cost(online))
    assert report["cost"]["full_price"] == pytest.approx(cost(rows))
    assert report["requests"]["sent"] == report["requests"]["succeeded"] == len(online)  # what went online, counted
    assert f"requests {len(online)} sent" in result.stdout + result.stderr
    rescored = run_cli("rescore", str(run))
    assert rescored.returncode == 0 and _report(run)["cost"] == report["cost"]


def test_split_at_the_api_limits() -> None:
    lines = [b"x" * 10 + b"\n"] * 7
    assert [len(g) for g in split_lines(lines, max_requests=3)] == [3, 3, 1]
    assert [len(g) for g in split_lines(lines, max_bytes=25)] == [2, 2, 2, 1]
    assert [len(g) for g in split_lines([b"y" * 100], max_bytes=25)] == [1]  # one line alone, however long


def test_result_lines_of_every_shape() -> None:
    ok = {"choices": [{"index": 0, "message": {"content": "ANSWER: YES"}, "finish_reason": "stop"}]}
    line = {"id": "1", "custom_id": "q1-r0", "response": {"status_code": 200, "body": ok}, "error": None}
    cid, reply = read_result(json.dumps(line).encode(), "chat") or ("", None)
    assert cid == "q1-r0" and reply is not None and reply.text == "ANSWER: YES" and reply.error is None
    bad = {**line, "response": {"status_code": 429, "body": {"error": {"message": "slow"}}}}
    assert (read_result(json.dumps(bad).encode(), "chat") or ("", None))[1].error == "HTTP 429: slow"  # type: ignore[union-attr]
    expired = {**line, "response": None, "error": {"code": "batch_expired", "message": "too late"}}
    assert "batch_expired: too late" in str((read_result(json.dumps(expired).encode(), "chat") or ("", None))[1])
    assert read_result(b"not json\n", "chat") is None and read_result(b'{"no": "id"}', "chat") is None


def test_no_secret_reaches_the_run_directory_in_batch_mode(tmp_path: Path) -> None:
    key, token = "sk-batch-secret-1234", "tok-body-secret-5678"
    generation = json.dumps({"extra_body": {"api_token": token}})
    with FakeOpenAIServer("mixed", api_key=key) as srv:
        args = ("eval", "--model", "m", "--limit", "6", "--api-url", srv.url, "--batch", *FAST)
        result = run_cli(
            *args, "--generation-config", generation, "--work-dir", str(tmp_path / "a"), env={"OPENAI_API_KEY": key}
        )
        refused = run_cli(*args, "--work-dir", str(tmp_path / "b"), env={"OPENAI_API_KEY": "sk-wrong-key-9999"})
        written = run_cli(
            "eval", "--model", "m", "--limit", "6", "--generation-config", generation,
            "--batch-write", str(tmp_path / "r.jsonl"), "--work-dir", str(tmp_path / "c"),
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    for path in (tmp_path / "a").rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes() and token.encode() not in path.read_bytes(), path
    assert refused.returncode == 2 and "401" in refused.stderr and "sk-wrong-key-9999" not in refused.stderr
    assert written.returncode == 2 and "look like secrets" in written.stderr and not (tmp_path / "r.jsonl").exists()


def test_max_cost_limits_what_a_batch_submits(tmp_path: Path) -> None:
    with FakeOpenAIServer("mixed") as srv:
        args = ("eval", "--model", "m", "--limit", "20", "--api-url", srv.url, "--batch", *FAST)
        prices = ("--price-input", "2", "--price-output", "8", "--generation-config", "max_tokens=32")
        first = run_cli(*args, *prices, "--max-cost", "0.002", "--work-dir", str(tmp_path))
        run = only_run_dir(tmp_path)
        submitted = srv.state.batches.batches["batch_000001"]["request_counts"]["total"]
        rest = run_cli("eval", "--use-cache", str(run), "--max-cost", "1", *FAST)
    assert first.returncode == 1 and "max-cost" in first.stderr
    assert 0 < submitted < 20 and _report(run)["cost"]["total"] <= 1
    assert rest.returncode == 0, rest.stderr
    # the cap may be met in parts (a batch more once answers settle what the last one cost), but
    # never by sending a request twice
    assert len(_answers(run)) == 20 and srv.state.batches.created >= 2
    assert set(srv.state.batches.seen_ids.values()) == {1}


def test_a_max_cost_stop_in_the_batches_and_in_their_online_rest_is_one_line(tmp_path: Path) -> None:
    """Both budgets stop: the batches' (they afford some requests) and the online rest's (every
    other line fails in the batch and goes online). One note, with what the whole run cost: the
    batches' own note said less than the run had spent."""
    prices = ("--price-input", "2", "--price-output", "8", "--generation-config", "max_tokens=32")
    with FakeOpenAIServer("mixed", batches=BatchStore(fail_every=2)) as srv:
        args = ("eval", "--model", "m", "--limit", "20", "--api-url", srv.url, "--batch", *FAST, *prices)
        result = run_cli(*args, "--batch-rest-online", "--max-cost", "0.002", "--work-dir", str(tmp_path))
    assert result.returncode == 1, result.stderr
    notes = [line for line in result.stderr.splitlines() if "stopped before passing --max-cost" in line]
    cost = _report(only_run_dir(tmp_path))["cost"]
    assert len(notes) == 1 and f"the run has cost {cost['total']:.4f}" in notes[0], result.stderr
    assert cost["full_price"] > cost["total"]  # some answers came from the batch, some online


def test_max_cost_holds_for_what_a_batch_left_and_went_online(tmp_path: Path) -> None:
    prices = ("--price-input", "2", "--price-output", "8", "--generation-config", "max_tokens=32")
    store = BatchStore(fail_batches=1)  # the one batch fails: all 20 requests are left for the online pass
    with FakeOpenAIServer("mixed", batches=store) as srv:
        args = ("eval", "--model", "m", "--limit", "20", "--api-url", srv.url, *prices, "--eval-batch-size", "1")
        full = run_cli(*args, "--work-dir", str(tmp_path / "full"))
        assert full.returncode == 0, full.stderr
        limit = _report(only_run_dir(tmp_path / "full"))["cost"]["total"] / 2  # half of what all 20 cost online
        batch = ("--batch", *FAST, "--batch-rest-online", "--batch-discount", "0.1")  # the batch affords all 20
        capped = run_cli(*args, *batch, "--max-cost", f"{limit}", "--work-dir", str(tmp_path / "capped"))
        run = only_run_dir(tmp_path / "capped")
        assert store.created == 1 and store.batches["batch_000001"]["request_counts"]["total"] == 20
        rows = read_jsonl(run / "predictions/m/coin_flip.jsonl")
        online = [r["usage"] for r in rows if r.get("usage")]  # the failed batch answered none: all came online
        spent = sum(u["prompt_tokens"] * 2 + u["completion_tokens"] * 8 for u in online) / 1e6
        rest = run_cli("eval", "--use-cache", str(run), "--max-cost", "1", *FAST)
    assert capped.returncode == 1, capped.stderr
    assert "--max-cost" in capped.stderr and "resume with: coinflip eval --use-cache" in capped.stderr
    assert 0 < len(online) < 20 and spent <= limit
    assert rest.returncode == 0, rest.stderr
    assert len(_answers(run)) == 20 and _report(run)["complete"]


def test_a_batch_line_billed_without_an_answer_does_not_stop_a_capped_run_as_billed_past_max_tokens(
    tmp_path: Path,
) -> None:
    """A batch line that bills 30 completion tokens and holds no answer, answered online in 20 more: its row's usage
    counts both (50 for max_tokens 32 online once), which stopped the run as 'more tokens than max_tokens allows'."""

    async def billed(*_: Any) -> tuple[int, bytes]:
        usage = {"prompt_tokens": 100, "completion_tokens": 30, "total_tokens": 130}
        return 200, json.dumps({"object": "chat.completion", "choices": [], "usage": usage}).encode()

    store = BatchStore()
    prices = ("--price-input", "2", "--price-output", "8", "--generation-config", "max_tokens=32")
    with FakeOpenAIServer("mixed", batches=store) as srv:
        store.chat = billed
        args = ("eval", "--model", "m", "--limit", "4", "--api-url", srv.url, "--batch", *FAST, *prices)
        result = run_cli(*args, "--batch-rest-online", "--max-cost", "1", "--work-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert _report(only_run_dir(tmp_path))["complete"]


def test_max_cost_counts_what_batches_answered_at_the_batch_price(tmp_path: Path) -> None:
    prices = ("--price-input", "2", "--price-output", "8", "--batch-discount", "0.1")
    with FakeOpenAIServer("mixed") as srv:
        args = ("eval", "--model", "m", "--limit", "10", "--api-url", srv.url, *prices, "--batch", *FAST)
        first = run_cli(*args, "--generation-config", "max_tokens=32", "--work-dir", str(tmp_path))
        run = only_run_dir(tmp_path)
        answered = read_jsonl(run / "predictions/m/coin_flip.jsonl")
        full = sum(r["usage"]["prompt_tokens"] * 2 + r["usage"]["completion_tokens"] * 8 for r in answered) / 1e6
        limit = 0.1 * full + 0.9 * (full - 0.1 * full)  # above what the batch cost, below its answers' full price
        more = run_cli(
            "eval", "--use-cache", str(run), "--no-batch", "--limit", "20", "--eval-batch-size", "1",
            "--max-cost", f"{limit}",
        )  # fmt: skip
    assert first.returncode == 0, first.stderr
    assert all(r.get("batch") is True for r in answered) and len(answered) == 10
    assert more.returncode == 1 and "--max-cost" in more.stderr, more.stderr
    online = [r for r in read_jsonl(run / "predictions/m/coin_flip.jsonl") if "batch" not in r]
    assert 0 < len(online) < 10 and _report(run)["cost"]["total"] <= limit


def test_max_cost_prices_saved_online_answers_in_full_when_a_run_goes_on_as_a_batch(tmp_path: Path) -> None:
    """A run begun online and resumed with --batch: the answers it already has were paid in full;
    the budget priced them at the batch discount, and the batch then spent past --max-cost."""
    prices = ("--price-input", "2", "--price-output", "8", "--batch-discount", "0.1")
    with FakeOpenAIServer("mixed", batches=BatchStore()) as srv:
        args = ("eval", "--model", "m", "--limit", "30", "--api-url", srv.url, *prices, "--eval-batch-size", "1",
                "--generation-config", "max_tokens=32", "--work-dir", str(tmp_path))  # fmt: skip
        first = run_cli(*args, "--max-cost", "0.002")  # stops after a few online answers
        run = only_run_dir(tmp_path)
        rows = read_jsonl(run / "predictions/m/coin_flip.jsonl")
        spent = sum(r["usage"]["prompt_tokens"] * 2 + r["usage"]["completion_tokens"] * 8 for r in rows) / 1e6
        assert first.returncode == 1 and 0 < len(rows) <= 8 and not any(r.get("batch") for r in rows), first.stderr
        limit = spent * 1.2  # room for about two batch answers (at a tenth of the price) per online one
        second = run_cli("eval", "--use-cache", str(run), "--batch", *FAST, "--max-cost", f"{limit}")
    assert 0 < _report(run)["cost"]["total"] <= limit
    assert second.returncode == 1 and "--max-cost" in second.stderr, second.stderr
    assert _report(run)["cost"]["full_price"] > _report(run)["cost"]["total"]  # the batch did answer some


@pytest.mark.parametrize("state", ["nested too deep", "a FIFO"])
def test_a_hostile_batch_state_file_is_one_line_on_resume(tmp_path: Path, state: str) -> None:
    """state.json was read with read_text and json.loads: a FIFO there hung the resume for good,
    and JSON nested 100,000 deep raised RecursionError (a traceback)."""
    with FakeOpenAIServer("mixed") as srv:
        run = _batch_run_with_four_owed(srv, tmp_path)
        path = run / "batch/state.json"
        path.unlink()
        if state == "a FIFO":
            os.mkfifo(path)
        else:
            path.write_text('{"batches": ' + "[" * 100_000 + "]" * 100_000 + "}")
        again = run_cli("eval", "--use-cache", str(run), *FAST)
    lines = again.stderr.strip().splitlines()
    assert again.returncode == 2 and len(lines) == 1 and "not a batch state file" in lines[0], again.stderr


def test_a_batch_the_server_forgot_is_sent_again(tmp_path: Path) -> None:
    store = BatchStore(delay=3600.0)
    with FakeOpenAIServer("mixed", batches=store) as srv:
        args = ("eval", "--model", "m", "--limit", "9", "--api-url", srv.url, "--batch", *FAST)
        _killed_while_polled(args, tmp_path, store)
        store.batches.clear()  # e.g. deleted at the provider
        store.delay = 0.0
        resumed = run_cli("eval", "--use-cache", str(only_run_dir(tmp_path)), *FAST)
    assert resumed.returncode == 0, resumed.stderr
    assert store.created == 2 and len(_answers(only_run_dir(tmp_path))) == 9


def _capped_and_killed(srv: FakeOpenAIServer, store: BatchStore, work: Path) -> tuple[Path, int]:
    """A batch run of 20 under --max-cost 0.003, killed while its first batch is polled, which then ends: the run
    and how many requests that batch holds."""
    prices = ("--price-input", "2", "--price-output", "8", "--generation-config", "max_tokens=32")
    args = ("eval", "--model", "m", "--limit", "20", "--api-url", srv.url, "--batch", *FAST, *prices)
    _killed_while_polled((*args, "--max-cost", "0.003"), work, store)
    store.delay = 0.0
    return only_run_dir(work), store.batches["batch_000001"]["request_counts"]["total"]


def test_max_cost_on_resume_counts_the_batch_a_killed_session_left_running(tmp_path: Path) -> None:
    """The resume priced only what was saved: the requests in the batch still running looked free,
    so it submitted the rest as well and the run cost more than --max-cost (0.0034 against 0.003)."""
    store = BatchStore(delay=3600.0)
    with FakeOpenAIServer("mixed", batches=store) as srv:
        run, first = _capped_and_killed(srv, store, tmp_path)
        resumed = run_cli("eval", "--use-cache", str(run), *FAST, "--max-cost", "0.003")
    assert 0 < first < 20  # the first session could afford only part of the run
    assert _report(run)["cost"]["total"] <= 0.003
    assert resumed.returncode == 1 and "--max-cost" in resumed.stderr, resumed.stderr


def test_a_resume_reads_and_counts_the_answers_a_killed_session_paid_for_whatever_room_is_left(tmp_path: Path) -> None:
    """The batch a killed session left running bills its answers whatever the resume does. A resume with no room
    left under --max-cost (a lower cap; or what went online first) refused its requests: the answers, billed,
    were never read, and the cost said less than the bill. They are read and counted, and nothing new is sent."""
    store = BatchStore(delay=3600.0)
    with FakeOpenAIServer("mixed", batches=store) as srv:
        run, first = _capped_and_killed(srv, store, tmp_path)
        resumed = run_cli("eval", "--use-cache", str(run), *FAST, "--max-cost", "0.00001")
    assert 0 < first < 20 and list(store.batches) == ["batch_000001"]  # nothing new was sent
    assert len(_answers(run)) == first, resumed.stderr
    rows = read_jsonl(run / "predictions/m/coin_flip.jsonl")
    billed = sum(2 * r["usage"]["prompt_tokens"] + 8 * r["usage"]["completion_tokens"] for r in rows) / 2e6
    assert _report(run)["cost"]["total"] == pytest.approx(billed)  # the batch's half price
    assert resumed.returncode == 1, resumed.stderr
    assert "passed --max-cost 0.00001" in resumed.stderr and "for answers a batch sent before" in resumed.stderr


def test_a_batch_ids_file_that_is_a_fifo_never_hangs_the_resume(tmp_path: Path) -> None:
    """The ids of a batch left running were read with read_text: a FIFO in their place hung the resume."""
    store = BatchStore(delay=3600.0)
    with FakeOpenAIServer("mixed", batches=store) as srv:
        args = ("eval", "--model", "m", "--limit", "6", "--api-url", srv.url, "--batch", *FAST)
        _killed_while_polled(args, tmp_path, store)
        run = only_run_dir(tmp_path)
        (ids,) = run.glob("batch/requests-*.ids")
        ids.unlink()
        os.mkfifo(ids)
        store.delay = 0.0
        resumed = run_cli("eval", "--use-cache", str(run), *FAST)  # a hang ends at run_cli's outer bound
    assert resumed.returncode == 0, resumed.stderr
    assert len(_answers(run)) == 6


class _BatchIdsWithSlashes(QuietHandler):
    """A Batch API whose batch id climbs out of the folder it is saved under; every answer is YES."""

    ids: list[str] = []
    asked: list[str] = []  # the paths of every GET

    def _send(self, payload: Any) -> None:
        self.reply(200, payload, content_type=None)

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.startswith("/v1/files"):
            type(self).ids = [m.decode() for m in re.findall(rb'"custom_id": ?"([^"]+)"', raw)]
            self._send({"id": "file-in"})
        else:
            self._send({"id": "../../../escaped", "status": "validating", "input_file_id": "file-in"})

    def do_GET(self) -> None:  # noqa: N802
        type(self).asked.append(self.path)
        if self.path.startswith("/v1/files/file-out/content"):
            ok = {"choices": [{"index": 0, "message": {"content": "ANSWER: YES"}, "finish_reason": "stop"}]}
            lines = [{"custom_id": c, "response": {"status_code": 200, "body": ok}, "error": None} for c in self.ids]
            self._send("".join(json.dumps(line) + "\n" for line in lines).encode())
        elif "limit=" in self.path:  # the list of batches, asked when a run resumes a creation
            self._send({"data": []})
        else:  # the batch itself
            counts = {"total": len(self.ids), "completed": len(self.ids), "failed": 0}
            self._send({"id": "../../../escaped", "status": "completed", "output_file_id": "file-out",
                        "request_counts": counts})  # fmt: skip


def test_a_batch_id_from_the_server_never_names_a_file_outside_the_run(tmp_path: Path) -> None:
    """The downloaded results were saved as batch/{batch_id}.output.jsonl: an id holding ../
    wrote the server's file outside the run directory. Nor does it name another path on the
    server: it was put into the URL as it came, and GET /v1/batches/../../../escaped went to /escaped."""
    work = tmp_path / "deep" / "er" / "work"
    _BatchIdsWithSlashes.asked = []
    with serving(_BatchIdsWithSlashes) as url:
        result = run_cli("eval", "--model", "m", "--limit", "4", "--api-url", url, "--batch", *FAST,
                         "--work-dir", str(work))  # fmt: skip
    run = only_run_dir(work)
    assert not [p for p in tmp_path.rglob("escaped*") if run not in p.parents]
    assert result.returncode == 0, result.stderr
    assert len(_answers(run)) == 4
    polled = [p for p in _BatchIdsWithSlashes.asked if "limit=" not in p and "/files" not in p]  # /files: the probe
    assert polled and all(p.split("?")[0] == "/v1/batches/..%2F..%2F..%2Fescaped" for p in polled), polled


def test_a_fifo_where_the_next_batch_s_ids_go_never_hangs_the_run(tmp_path: Path) -> None:
    """The next batch's ids were written with write_text: a FIFO left at that name hung the resume."""
    with FakeOpenAIServer("mixed") as srv:
        run = _batch_run_with_four_owed(srv, tmp_path)
        os.mkfifo(run / "batch/requests-002.ids")
        resumed = run_cli("eval", "--use-cache", str(run), *FAST)  # a hang ends at run_cli's outer bound
    assert resumed.returncode == 0, resumed.stderr
    assert len(_answers(run)) == 6 and (run / "batch/requests-002.ids").is_file()


def _written_offline(tmp_path: Path) -> Path:
    """A run whose 5 requests were written for `vllm run-batch`, none sent: no batch state yet."""
    requests = tmp_path / "requests.jsonl"
    wrote = run_cli(
        "eval", "--model", "m", "--limit", "5", "--batch-write", str(requests), "--work-dir", str(tmp_path / "o")
    )
    assert wrote.returncode == 0, wrote.stderr
    return only_run_dir(tmp_path / "o")


def test_a_local_model_s_requests_are_written_with_no_server_bar_or_budget(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """--batch-write hands the requests to another tool: llama.cpp is not started for a local model, no progress
    bar is drawn and --max-cost (even 0) holds none back; the one line says what was written."""
    from coinflip import run_task

    requests = tmp_path / "requests.jsonl"
    config = {"model": "smollm2", "limit": 3, "batch_write": str(requests), "progress": True, "eval_batch_size": 4,
              "max_cost": 0, "price_input": 1, "price_output": 1, "work_dir": str(tmp_path / "o")}  # fmt: skip
    wrote = run_task(config)
    run = only_run_dir(tmp_path / "o")
    assert wrote == {"complete": False, "batch_written": {"path": str(requests), "requests": 3}, "run": str(run)}
    out, err = capfd.readouterr()
    assert not out and err.startswith(f"wrote 3 requests to {requests}; run them") and err.count("\n") == 1, err
    assert len(read_jsonl(requests)) == 3
    assert not (run / "logs/llama_server.log").exists() and not (run / "predictions").exists()


def test_a_complete_run_writes_an_empty_request_file_and_no_report(tmp_path: Path) -> None:
    requests = tmp_path / "requests.jsonl"
    done = run_cli("eval", "--model", "oracle", "--limit", "3", "--work-dir", str(tmp_path / "o"))
    run = only_run_dir(tmp_path / "o")
    report = run / "reports/oracle/coin_flip.json"
    before = report.stat().st_mtime_ns
    wrote = run_cli("eval", "--use-cache", str(run), "--batch-write", str(requests))
    assert done.returncode == 0 and wrote.returncode == 0 and not wrote.stdout, wrote.stderr
    assert wrote.stderr == f"wrote no requests to {requests}: the run owes none\n"  # not 'wrote 0; run them'
    assert requests.read_bytes() == b"" and report.stat().st_mtime_ns == before


def _sent_as_a_batch(run: Path) -> subprocess.CompletedProcess[str]:
    with FakeOpenAIServer("correct") as srv:  # a fresh server: its first batch is batch_000001
        return run_cli("eval", "--use-cache", str(run), "--batch", "--api-url", srv.url, *FAST)


def test_a_linked_batch_folder_is_replaced_by_a_real_one_before_the_first_batch(tmp_path: Path) -> None:
    """With no batch state yet, a `batch/` link to elsewhere was written through: the ids, state
    and results landed outside the run, whose reads refuse files outside it, so every answer was lost."""
    outside = tmp_path / "outside"
    outside.mkdir()
    run = _written_offline(tmp_path)
    (run / "batch").symlink_to(outside, target_is_directory=True)
    sent = _sent_as_a_batch(run)
    assert sent.returncode == 0, sent.stderr
    assert not any(outside.iterdir()) and not (run / "batch").is_symlink()
    assert len(_answers(run)) == 5


def test_a_fifo_where_a_batch_s_results_are_downloaded_never_hangs_the_run(tmp_path: Path) -> None:
    run = _written_offline(tmp_path)
    (run / "batch").mkdir()
    os.mkfifo(run / "batch" / "batch_000001.output.jsonl")  # where the results go (no .part file now)
    sent = _sent_as_a_batch(run)  # a hang ends at run_cli's outer bound
    assert sent.returncode == 0, sent.stderr
    assert len(_answers(run)) == 5


def test_a_folder_where_a_batch_s_results_are_downloaded_is_one_line(tmp_path: Path) -> None:
    """A folder in the way of a download ended in IsADirectoryError's traceback."""
    run = _written_offline(tmp_path)
    (run / "batch" / "batch_000001.output.jsonl").mkdir(parents=True)
    sent = _sent_as_a_batch(run)
    assert sent.returncode == 1 and "Traceback" not in sent.stderr, sent.stderr  # a StorageError
    line = sent.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: cannot write {run / 'batch'}") and "batch_000001.output.jsonl" in line, line
    assert "Is a directory" in line


def _answering(status: int, body: bytes) -> type[QuietHandler]:
    class Answering(QuietHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.reply(status, body, content_type=None)

    return Answering


@pytest.mark.parametrize(
    ("status", "body", "said"),
    [
        (404, b'{"error": {"message": "Not Found"}}', "does not serve the Batch API"),
        (200, b"{}", "error: POST /files answered without an id ({}): is it a Batch API?"),  # a catch-all stub
    ],
    ids=["404", "no-id"],
)
def test_a_server_that_is_no_batch_api_is_named_in_one_line(
    tmp_path: Path, status: int, body: bytes, said: str
) -> None:
    """An answer without an id to POST /files ended in a KeyError's traceback."""
    with serving(_answering(status, body)) as url:
        result = run_cli(
            "eval", "--model", "m", "--limit", "3", "--api-url", url, "--batch", "--work-dir", str(tmp_path)
        )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0] and not any(tmp_path.iterdir())  # nothing left behind


def test_reasoning_tokens_from_a_result_file_are_totalled(tmp_path: Path) -> None:
    requests, results = tmp_path / "requests.jsonl", tmp_path / "results.jsonl"
    wrote = run_cli(
        "eval", "--model", "m", "--limit", "5", "--batch-write", str(requests), "--work-dir", str(tmp_path / "o")
    )
    assert wrote.returncode == 0, wrote.stderr
    lines = []
    for n, line in enumerate(read_jsonl(requests)):
        usage = {
            "prompt_tokens": 100 + n,
            "completion_tokens": 40,
            "completion_tokens_details": {"reasoning_tokens": 30},
        }
        body = {
            "choices": [{"index": 0, "message": {"content": "ANSWER: YES"}, "finish_reason": "stop"}],
            "usage": usage,
        }
        response = {"status_code": 200, "request_id": f"r{n}", "body": body}
        lines.append(json.dumps({"id": f"b{n}", "custom_id": line["custom_id"], "response": response, "error": None}))
    results.write_text("\n".join(lines) + "\n")
    run = only_run_dir(tmp_path / "o")
    scored = run_cli(
        "eval", "--use-cache", str(run), "--batch-results", str(results), "--price-input", "1", "--price-output", "10"
    )
    assert scored.returncode == 0, scored.stderr
    report = _report(run)
    assert report["tokens"] == {
        "requests": 5,
        "prompt": 510,
        "completion": 200,
        "reasoning": 150,
        "per_request": {"prompt": 102.0, "completion": 40.0, "reasoning": 30.0},
        "batch_prompt": 510,
        "batch_completion": 200,
    }
    assert report["cost"]["total"] == pytest.approx((510 * 1 + 200 * 10) / 1e6 * 0.5)  # a batch's price
    assert "150 reasoning" in scored.stdout


def test_a_batch_cancelled_at_the_provider_is_completed_by_a_new_one(tmp_path: Path) -> None:
    store = BatchStore(delay=3600.0)
    with FakeOpenAIServer("mixed", batches=store) as srv:
        args = ("eval", "--model", "m", "--limit", "10", "--api-url", srv.url, "--batch", *FAST)
        proc = spawn_cli(*args, "--work-dir", str(tmp_path), quiet=True)
        _wait_for(lambda: _saved_batch_id(tmp_path) and store.polls > 0, "the batch to be polled")
        _post(f"{srv.url}/batches/{next(iter(store.batches))}/cancel", {})  # someone cancels it in the console
        _wait_for(lambda: store.created == 2, "a new batch for what the cancelled one did not answer")
        store.delay = 0.0
        assert proc.wait(120) == 0
    run = only_run_dir(tmp_path)
    state = json.loads((run / "batch/state.json").read_text())["batches"]
    assert [b["status"] for b in state] == ["cancelled", "completed"] and state[1]["count"] == 10
    assert len(_answers(run)) == 10 and _report(run)["complete"]


def test_a_run_past_the_api_limits_is_split_into_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from coinflip import run_task
    from coinflip.models import batch_api

    monkeypatch.setattr(batch_api, "MAX_REQUESTS", 7)  # the API's 50,000, scaled down
    with FakeOpenAIServer("mixed") as srv:
        report = run_task(
            model="m", api_url=srv.url, limit=20, batch=True, batch_poll_s=0.05, work_dir=str(tmp_path), quiet=True
        )
        counts = sorted(b["request_counts"]["total"] for b in srv.state.batches.batches.values())
    assert counts == [6, 7, 7] and report["complete"] and report["counts"]["samples"] == 20


def test_a_wrong_endpoint_fails_in_one_line_before_any_batch(tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    result = run_cli("eval", "--model", "m", "--limit", "3", "--api-url", url, "--batch", "--work-dir", str(tmp_path))
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert f"127.0.0.1:{port}" in result.stderr and not any(tmp_path.iterdir())


def test_a_batch_or_file_the_server_no_longer_has_is_lost_not_fatal(tmp_path: Path) -> None:

    from coinflip.models.batch_api import LOST, BatchAPI

    async def ask(url: str) -> tuple[dict[str, Any], bool]:
        async with BatchAPI(url, None, {}, 30.0, []) as api:
            return await api.retrieve("batch_gone"), await api.download("file-gone", tmp_path / "out.jsonl")

    with FakeOpenAIServer() as srv:
        batch, downloaded = asyncio.run(ask(srv.url))
    assert batch == {"id": "batch_gone", "status": LOST}
    assert downloaded is False and not list(tmp_path.iterdir())


class _EndlessError(QuietHandler):
    """Refuses the upload with a 400 whose body never ends (64 MB, close-delimited, unless the
    client hangs up first); counts what it got out."""

    sent = 0

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(400)
        self.send_header("Content-Type", "application/json")
        self.send_header("Connection", "close")
        self.end_headers()
        piece = b'{"error": {"message": "' + b"x" * 65_000
        try:
            for _ in range(1024):
                self.wfile.write(piece)
                type(self).sent += len(piece)
        except OSError:  # the client hung up: what it read was capped
            pass


def test_an_endless_error_body_from_the_batch_api_is_read_up_to_the_reply_cap(tmp_path: Path) -> None:
    """The Batch API's error answers were read whole, however large: memory without bound."""
    with serving(_EndlessError) as url:
        result = run_cli(
            "eval", "--model", "m", "--limit", "3", "--api-url", url, "--batch", "--max-reply-mb", "1",
            "--work-dir", str(tmp_path),
        )  # fmt: skip
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "POST /files answered 400: the reply is larger than 1 MB" in lines[0], lines
    assert _EndlessError.sent < 1024 * 65_000  # cut off, not read to the end


class _Brotli(QuietHandler):
    """Answers every call in br, whatever the Accept-Encoding; counts the calls."""

    calls = 0

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(404)
        self.send_header("Content-Encoding", "br")
        self.send_header("Content-Length", "5")
        self.end_headers()
        self.wfile.write(b"\x8b\x05\x80{}")

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).calls += 1
        self.send_response(200)
        self.send_header("Content-Encoding", "br")
        self.send_header("Content-Length", "5")
        self.end_headers()
        self.wfile.write(b"\x8b\x05\x80{}")


def test_a_batch_api_answer_in_br_ends_the_run_in_our_words_without_retries(tmp_path: Path) -> None:
    with serving(_Brotli) as url:
        result = run_cli(
            "eval", "--model", "m", "--limit", "3", "--api-url", url, "--batch", "--work-dir", str(tmp_path)
        )  # fmt: skip
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert (
        "the Batch API's answer to POST /files: the reply is encoded as 'br', which coinflip does not decode"
        in lines[0]
    )
    assert len(lines) == 1 and "Brotli" not in result.stderr and _Brotli.calls == 1, lines


class _Drip(QuietHandler):
    """Answers a batch's retrieval with a JSON body that never ends, a byte at a time, each well
    within the timeout of the read before it (a server stuck writing, or a hostile one)."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if not self.path.startswith("/v1/batches/"):
            self.reply(404, {"error": {"message": "no such route"}})
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        try:
            self.wfile.write(b'{"id": "b", "status": "in_progress", "note": "')
            while True:
                self.wfile.write(b".")
                self.wfile.flush()
                time.sleep(0.02)
        except OSError:  # the client hung up
            pass


@pytest.mark.parametrize("status", [200, 500])
def test_a_batch_api_answer_that_drips_forever_fails_within_the_timeout(status: int) -> None:
    """Each call's answer had only a limit on the gap between reads: a body that kept dripping,
    under the reply cap, held the run for hours (16 MB a byte at a time). Its whole answer is now
    read within --timeout; a retry is the next attempt, and the call then fails in one line."""

    from coinflip.errors import EndpointBroken
    from coinflip.models.batch_api import BatchAPI

    class Drip(_Drip):
        def send_response(self, code: int, message: str | None = None) -> None:
            super().send_response(status if code == 200 else code, message)

    async def ask(url: str) -> None:
        async with BatchAPI(url, None, {}, 1.0, [], retries=1) as api:
            await api.retrieve("b")

    with serving(Drip) as url, pytest.raises(EndpointBroken) as caught:
        asyncio.run(asyncio.wait_for(ask(url), 60))  # a guard: the test fails rather than hangs
    assert str(caught.value).startswith("the Batch API did not answer: GET /batches/b")


class _SecondPass(BatchStore):
    """Holds a step only once a batch expired: the second pass's, which sends what it did not run."""

    async def held(self, step: str) -> None:
        if any(b["status"] == "expired" for b in self.batches.values()):
            await super().held(step)


@pytest.mark.parametrize("step", ["upload", "create", "create-unlisted", "create-second-pass"])
def test_killed_during_its_upload_or_creation_a_batch_run_never_submits_a_request_twice(
    tmp_path: Path, step: str
) -> None:
    """SIGKILL while the server holds the upload (its file not yet kept) or the creation (the
    batch made, its id not yet answered); the resume finds the batch by its input file. A server
    that cannot list batches (405) cannot tell: the resume says so in one line and goes on. In
    the second pass the requests are in two batches: the resume reads the later one's answers."""
    kind = _SecondPass if step.endswith("second-pass") else BatchStore
    store = kind(hold=step.split("-")[0], listing=step != "create-unlisted", expire=int(kind is _SecondPass))
    with FakeOpenAIServer("mixed", batches=store) as srv:
        args = ("eval", "--model", "m", "--limit", "8", "--api-url", srv.url, "--batch", *FAST)
        proc = spawn_cli(*args, "--work-dir", str(tmp_path), quiet=True)
        assert store.reached.wait(120), f"the server never held the {step}"
        proc.send_signal(signal.SIGKILL)
        proc.wait(60)
        store.hold = ""
        run = only_run_dir(tmp_path)
        resumed = run_cli("eval", "--use-cache", str(run), *FAST)
    assert resumed.returncode == 0, resumed.stderr
    assert len(_answers(run)) == 8 and _report(run)["complete"]
    assert len(store.seen_ids) == 8 and all(n == 1 for n in store.seen_ids.values())  # none answered twice
    notes = [line for line in resumed.stderr.splitlines() if "cannot check" in line]
    if step == "create-unlisted":
        assert store.created == 2 and len(notes) == 1 and "(GET /batches answered 405" in notes[0]
    else:
        assert store.created == 1 + (kind is _SecondPass) and not notes


class _OneBatch(QuietHandler):
    """A Batch API that makes one batch, `batch_1`, of whatever is uploaded: its status is the
    class's `status`, its output file what `results(ids)` makes of the uploaded custom_ids."""

    status: Any = "completed"
    ids: list[str] = []
    auth = ""

    @staticmethod
    def results(ids: list[str]) -> bytes:
        return b""

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.startswith("/v1/files"):
            type(self).ids = [m.decode() for m in re.findall(rb'"custom_id": ?"([^"]+)"', raw)]
            type(self).auth = self.headers.get("Authorization", "")
            self.reply(200, {"id": "file-in"})
        else:
            self.reply(200, {"id": "batch_1", "status": self.status, "input_file_id": "file-in"})

    def do_GET(self) -> None:  # noqa: N802
        if "/content" in self.path:
            self.reply(200, type(self).results(type(self).ids), content_type=None)
        else:
            self.reply(200, {"id": "batch_1", "status": self.status, "output_file_id": "file-out"})


def _ok(custom_id: str, content: str) -> bytes:
    body = {"choices": [{"index": 0, "message": {"content": content}, "finish_reason": "stop"}]}
    return json.dumps({"custom_id": custom_id, "response": {"status_code": 200, "body": body}}).encode() + b"\n"


def test_a_batch_server_that_echoes_the_key_and_a_gateway_header_puts_neither_anywhere(tmp_path: Path) -> None:
    """Batch answers and errors skipped the redaction online replies get: the key reached the
    predictions, report, page, answers.csv, log, terminal and the saved batch files."""
    import base64

    from .test_redaction import KEY, forms

    gateway = 'gw-Secret/Pass"9<&>'
    headers = json.dumps({"extra_headers": {"X-Gateway-Key": gateway}})

    class Echo(_OneBatch):
        @staticmethod
        def results(ids: list[str]) -> bytes:
            said = f"{Echo.auth} via {gateway}"
            lines = []
            for n, cid in enumerate(ids):
                if n % 3 == 0:
                    body = {"error": {"message": f"upstream rejected {said}"}}
                    lines.append(json.dumps({"custom_id": cid, "response": {"status_code": 500, "body": body}}))
                elif n % 3 == 1:
                    lines.append(_ok(cid, f"ANSWER: YES (you sent {said})").decode().strip())
                else:
                    lines.append(json.dumps({"custom_id": cid, "error": {"code": "x", "message": f"no: {said}"}}))
            return "\n".join(lines).encode() + b"\n"

    with serving(Echo) as url:
        result = run_cli("eval", "--model", "m", "--limit", "6", "--api-url", url, "--api-key", KEY, "--batch", *FAST,
                         "--generation-config", headers, "--work-dir", str(tmp_path))  # fmt: skip
        shown = run_cli("answers", str(only_run_dir(tmp_path)))
    assert result.returncode == 1 and shown.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    rows = read_jsonl(only_run_dir(tmp_path) / "predictions/m/coin_flip.jsonl")
    assert any("***" in (r["error"] or "") for r in rows) and any("***" in (r["reply"] or "") for r in rows)
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name.endswith(".output.jsonl") for p in files) and any(p.suffix == ".csv" for p in files)
    for secret in (KEY, gateway):
        every = [*forms(secret), base64.b64encode(secret.encode()).decode()]
        for text in [result.stdout + result.stderr + shown.stdout + shown.stderr, *(p.read_bytes().decode(
                "utf-8", "replace") for p in files)]:  # fmt: skip
            assert not [form for form in every if form in text]


@pytest.mark.parametrize("given", ["huge line", "/dev/zero", "/dev/urandom", "a FIFO"])
def test_result_files_are_read_in_bounded_memory_and_only_when_plain(tmp_path: Path, given: str) -> None:
    """A result line was read whole (a 1.6 GB line: MemoryError), /dev/zero too, and a FIFO or
    /dev/urandom hung: lines are capped at --max-reply-mb, and only a plain file is read."""
    run = _written_offline(tmp_path)
    ids = [line["custom_id"] for line in read_jsonl(tmp_path / "requests.jsonl")]
    results = tmp_path / "results.jsonl"
    if given == "huge line":
        results.write_bytes(
            _ok(ids[0], "ANSWER: YES " + "x" * (3 << 20)) + b"".join(_ok(c, "ANSWER: NO") for c in ids[1:])
        )
    elif given == "a FIFO":
        os.mkfifo(results)
    else:
        results = Path(given)
    scored = run_cli("eval", "--use-cache", str(run), "--batch-results", str(results), "--max-reply-mb", "1")
    if given != "huge line":
        lines = scored.stderr.strip().splitlines()
        assert scored.returncode == 2 and len(lines) == 1 and "not a plain file" in lines[0], scored.stderr
        return
    assert scored.returncode == 1 and "Traceback" not in scored.stderr, scored.stderr
    rows = read_jsonl(run / "predictions/m/coin_flip.jsonl")
    errors = [r["error"] for r in rows if r["error"]]
    assert len(rows) == 5 and len(errors) == 1 and "larger than the reply cap (1 MB" in errors[0]


def test_two_answers_for_one_request_are_a_conflict_not_a_choice(tmp_path: Path) -> None:
    """The first of two successful answers was kept silently, and the second reported as a line
    'not owed by this run'."""
    run = _written_offline(tmp_path)
    ids = [line["custom_id"] for line in read_jsonl(tmp_path / "requests.jsonl")]
    results = tmp_path / "results.jsonl"
    results.write_bytes(_ok(ids[0], "ANSWER: NO") + b"".join(_ok(c, "ANSWER: YES") for c in ids))
    scored = run_cli("eval", "--use-cache", str(run), "--batch-results", str(results))
    assert scored.returncode == 1, scored.stderr
    errors = [r["error"] for r in read_jsonl(run / "predictions/m/coin_flip.jsonl") if r["error"]]
    assert errors == [f"two answers for {ids[0]} in the batch's results; neither is kept (a conflict)"]
    assert "1 with two answers); 0 lines for requests not owed now" in scored.stderr


def test_the_results_notes_count_lines_for_other_requests_and_only_the_owed_conflicts(tmp_path: Path) -> None:
    """Read once for the whole run, the file's two answers for a request not owed counted as a
    conflict of the answers read, and as one line for requests not owed rather than two."""
    run = _written_offline(tmp_path)
    ids = [line["custom_id"] for line in read_jsonl(tmp_path / "requests.jsonl")]
    results = tmp_path / "results.jsonl"
    results.write_bytes(_ok(ids[0], "ANSWER: YES") + _ok("other", "ANSWER: NO") + _ok("other", "ANSWER: YES"))
    scored = run_cli("eval", "--use-cache", str(run), "--batch-results", str(results))
    assert scored.returncode == 1, scored.stderr
    assert "1 answers read" in scored.stderr
    assert "(0 failed, 0 with two answers); 2 lines for requests not owed now" in scored.stderr, scored.stderr


def test_a_batch_whose_status_is_none_the_api_has_ends_within_patience(tmp_path: Path) -> None:
    """A batch whose status was null was polled forever, saying nothing."""

    class Null(_OneBatch):
        status = None

    with serving(Null) as url:
        result = run_cli("eval", "--model", "m", "--limit", "3", "--api-url", url, "--batch", *FAST,
                         "--patience", "1", "--work-dir", str(tmp_path))  # fmt: skip
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    (line,) = result.stderr.strip().splitlines()  # one line
    assert "batch batch_1: its status None is none the Batch API has, for 1 s (--patience)" in line
    assert "resume with: coinflip eval --use-cache" in line


@pytest.mark.parametrize("saved", ["..", ""])
def test_a_saved_batch_id_that_no_server_gives_is_looked_for_again(tmp_path: Path, saved: str) -> None:
    """A batch id of '..' or '' in state.json made every resume exit 2, with no way forward."""
    store = BatchStore(delay=3600.0)
    with FakeOpenAIServer("mixed", batches=store) as srv:
        run = _killed_and_edited(srv, tmp_path, store, batch_id=saved)
        store.delay = 0.0
        resumed = run_cli("eval", "--use-cache", str(run), *FAST)
    assert resumed.returncode == 0, resumed.stderr
    assert f"batch id {saved!r} is not a batch's id" in resumed.stderr
    assert store.created == 1 and len(_answers(run)) == 5


def test_unreadable_result_lines_are_recorded_with_their_real_reason(tmp_path: Path) -> None:
    """Lines with invalid UTF-8 or a 5,000-digit number were dropped as 'the batch ended completed
    before this request ran', and sent again."""

    class Broken(_OneBatch):
        @staticmethod
        def results(ids: list[str]) -> bytes:
            usage = b'"usage": {"prompt_tokens": ' + b"9" * 5000 + b"}"
            bad = [_ok(ids[0], "ANSWER: YES \udcff").replace(b"\\udcff", b"\xff"),
                   _ok(ids[1], "ANSWER: NO").replace(b'"response"', usage + b', "response"')]  # fmt: skip
            return b"".join([*bad, *(_ok(c, "ANSWER: YES") for c in ids[2:])])

    with serving(Broken) as url:
        result = run_cli("eval", "--model", "m", "--limit", "4", "--api-url", url, "--batch", *FAST,
                         "--work-dir", str(tmp_path))  # fmt: skip
    assert result.returncode == 1, result.stderr
    errors = sorted(
        r["error"] for r in read_jsonl(only_run_dir(tmp_path) / "predictions/m/coin_flip.jsonl") if r["error"]
    )
    assert len(errors) == 2 and all(e.startswith("its result line: malformed response body") for e in errors), errors
    assert "can't decode byte 0xff" in errors[0] and "(4300 digits)" in errors[1]


def test_a_downloaded_answer_over_the_reply_cap_is_skipped_and_never_kept(tmp_path: Path) -> None:
    """A result line was saved and read whole, however large: each resend kept another full copy."""

    class Huge(_OneBatch):
        @staticmethod
        def results(ids: list[str]) -> bytes:
            return _ok(ids[0], "ANSWER: YES " + "x" * (3 << 20)) + b"".join(_ok(c, "ANSWER: NO") for c in ids[1:])

    with serving(Huge) as url:
        result = run_cli("eval", "--model", "m", "--limit", "3", "--api-url", url, "--batch", *FAST,
                         "--max-reply-mb", "1", "--work-dir", str(tmp_path))  # fmt: skip
    assert result.returncode == 1, result.stderr
    rows = read_jsonl(only_run_dir(tmp_path) / "predictions/m/coin_flip.jsonl")
    errors = [r for r in rows if r["error"]]
    assert len(rows) == 3 and len(errors) == 1 and "larger than the reply cap (1 MB" in errors[0]["error"]
    assert errors[0]["attempts"] == 3  # sent again twice, as a failed line is
    assert sum(p.stat().st_size for p in tmp_path.rglob("*") if p.is_file()) < 1 << 20


def test_a_result_file_that_lacks_requests_under_max_cost_ends(tmp_path: Path) -> None:
    """A request the file does not answer stays owed; under --max-cost its hold went with it only
    when answered, so the first two (held at their worst case, all the cap allows) being missing
    left the rest waiting for room forever."""
    requests, results = tmp_path / "requests.jsonl", tmp_path / "results.jsonl"
    wrote = run_cli(
        "eval", "--model", "m", "--limit", "6", "--generation-config", "max_tokens=32",
        "--batch-write", str(requests), "--work-dir", str(tmp_path / "o"),
    )  # fmt: skip
    assert wrote.returncode == 0, wrote.stderr
    lines = []
    for n, line in enumerate(read_jsonl(requests)):
        if n < 2:  # the first two are missing from the file
            continue
        body = {
            "choices": [{"index": 0, "message": {"content": "ANSWER: YES"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 4},
        }
        response = {"status_code": 200, "request_id": f"r{n}", "body": body}
        lines.append(json.dumps({"id": f"b{n}", "custom_id": line["custom_id"], "response": response, "error": None}))
    results.write_text("\n".join(lines) + "\n")
    worst = max(len(line.encode()) for line in requests.read_text().splitlines()) + 32 * 10  # per million
    cap = f"{2.5 * worst / 1e6:.6f}"  # about two requests held at their worst case at once
    scored = run_cli(
        "eval", "--use-cache", str(only_run_dir(tmp_path / "o")), "--batch-results", str(results),
        "--price-input", "1", "--price-output", "10", "--max-cost", cap, timeout=120,
    )  # fmt: skip
    assert scored.returncode == 1, scored.stderr  # two still owed
    assert len(_answers(only_run_dir(tmp_path / "o"))) == 4


def test_a_gateway_s_authorization_header_wins_over_the_key_in_a_batch_as_online(tmp_path: Path) -> None:
    """One rule for both paths: an Authorization in extra_headers is the user's word for this endpoint
    (a gateway's scheme), so it goes instead of the key's Bearer, online and to the Batch API alike."""
    headers = json.dumps({"extra_headers": {"authorization": "Basic Z3c6cGFzcw=="}})

    class Done(_OneBatch):
        @staticmethod
        def results(ids: list[str]) -> bytes:
            return b"".join(_ok(cid, "ANSWER: YES") for cid in ids)

    with serving(Done) as url:
        result = run_cli("eval", "--model", "m", "--limit", "2", "--api-url", url, "--api-key", "sk-key", "--batch",
                         *FAST, "--generation-config", headers, "--work-dir", str(tmp_path))  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert Done.auth == "Basic Z3c6cGFzcw=="


def test_a_download_whose_temporary_file_cannot_be_made_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The raw download goes to a nameless file beside its result; where the disk refuses it (full,
    read-only, out of file handles) the OSError left the run as a traceback, not a StorageError."""
    import errno
    import tempfile

    from coinflip.errors import StorageError
    from coinflip.models.batch_api import BatchAPI

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tempfile, "TemporaryFile", refused)

    async def download() -> None:
        api = BatchAPI("http://127.0.0.1:9/v1", None, {}, 5.0, [])  # nothing is sent: the file comes first
        await api.download("file-1", tmp_path / "batch_000001.output.jsonl")

    with pytest.raises(StorageError, match=f"cannot write {tmp_path}: No space left on device"):
        asyncio.run(download())


def test_a_disk_that_fills_during_a_download_is_one_line_not_the_server_s_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk while a result file came in was taken for the server's failure: retried, then
    'the Batch API did not answer'. It is our disk: a StorageError naming the folder, at once."""
    import errno
    import io
    import tempfile

    from coinflip.errors import StorageError
    from coinflip.models.batch_api import BatchAPI

    class Full(io.BytesIO):
        def write(self, data: Any) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

    class Results(_OneBatch):
        @staticmethod
        def results(ids: list[str]) -> bytes:
            return b"x" * 100_000

    monkeypatch.setattr(tempfile, "TemporaryFile", lambda *args, **kwargs: Full())

    async def download(url: str) -> None:
        async with BatchAPI(url, None, {}, 5.0, []) as api:
            await api.download("file-out", tmp_path / "batch_000001.output.jsonl")

    with serving(Results) as url, pytest.raises(StorageError, match=f"cannot write {tmp_path}: No space left"):
        asyncio.run(download(url))


def test_a_batch_creation_that_times_out_is_looked_for_before_it_is_sent_again(tmp_path: Path) -> None:
    """The server makes the batch but its answer never comes (held past --timeout): POST /batches was
    retried blind, and every retry made one more batch of the same requests, each run and paid for."""
    store = BatchStore(hold="create")  # every creation is made at once, its answer held for good
    with FakeOpenAIServer("mixed", batches=store) as srv:
        args = ("eval", "--model", "m", "--limit", "6", "--api-url", srv.url, "--batch", *FAST, "--timeout", "1")
        done = run_cli(*args, "--work-dir", str(tmp_path))
        store.hold = ""
        created = store.created
    assert done.returncode == 0, done.stderr
    assert created == 1, f"{created} batches of the same requests"
    run = only_run_dir(tmp_path)
    assert len(_answers(run)) == 6 and _report(run)["complete"] and "Traceback" not in done.stderr


def test_a_batch_made_before_a_kill_is_found_past_the_first_page_of_the_list(tmp_path: Path) -> None:
    """GET /batches answers a page, newest first: where 150 batches were made at the server between
    the kill and the resume, the run's batch was on the second page, and a new one was made."""
    store = BatchStore(hold="create")  # the batch made, its id never answered: the client is killed
    with FakeOpenAIServer("mixed", batches=store) as srv:
        args = ("eval", "--model", "m", "--limit", "5", "--api-url", srv.url, "--batch", *FAST)
        proc = spawn_cli(*args, "--work-dir", str(tmp_path), quiet=True)
        assert store.reached.wait(120), "the server never held the creation"
        proc.send_signal(signal.SIGKILL)
        proc.wait(60)
        store.hold = ""
        other = store.keep("batch", b"")
        for _ in range(150):  # another run's batches, made meanwhile
            store.create({"input_file_id": other, "endpoint": "/v1/chat/completions", "completion_window": "24h"}, "")
        run = only_run_dir(tmp_path)
        resumed = run_cli("eval", "--use-cache", str(run), *FAST)
        created = store.created
    assert resumed.returncode == 0, resumed.stderr
    assert created == 151, "the run's requests went in a second batch"
    assert len(_answers(run)) == 5 and all(n == 1 for n in store.seen_ids.values())


def test_a_batch_whose_input_file_the_server_dropped_before_its_creation_is_sent_again(tmp_path: Path) -> None:
    """Killed after its upload, before its batch was made (its id unsaved); the server then dropped
    the file (batch files expire): every resume ended in exit 2, POST /batches answering 400."""
    store = BatchStore(delay=3600.0)
    with FakeOpenAIServer("mixed", batches=store) as srv:
        run = _killed_and_edited(srv, tmp_path, store, batch_id=None, status="new")  # killed before it was made
        store.batches.clear()
        store.files.clear()
        store.delay = 0.0
        resumed = run_cli("eval", "--use-cache", str(run), *FAST)
        created = store.created
    assert resumed.returncode == 0, resumed.stderr
    assert created == 2 and len(_answers(run)) == 5 and _report(run)["complete"]
    assert len(store.seen_ids) == 5 and all(n == 1 for n in store.seen_ids.values())


def test_a_resume_with_no_batch_leaves_a_batch_not_yet_collected_to_be_collected(tmp_path: Path) -> None:
    """`--use-cache RUN --no-batch` while the run's batch was still at the server sent every one of its
    requests online again, paid twice and unsaid (docs/batches.md: never sent twice): now refused."""
    store = BatchStore(delay=3600.0)
    with FakeOpenAIServer("mixed", batches=store) as srv:
        args = ("eval", "--model", "m", "--limit", "5", "--api-url", srv.url, "--batch", *FAST)
        _killed_while_polled(args, tmp_path, store)
        run = only_run_dir(tmp_path)
        online = run_cli("eval", "--use-cache", str(run), "--no-batch")
        store.delay = 0.0
        resumed = run_cli("eval", "--use-cache", str(run), *FAST)
    assert online.returncode == 2 and "batch_" in online.stderr and "--batch" in online.stderr, online.stderr
    assert len(online.stderr.strip().splitlines()) == 1 and "Traceback" not in online.stderr
    assert resumed.returncode == 0, resumed.stderr
    assert store.created == 1 and all(n == 1 for n in store.seen_ids.values()) and len(_answers(run)) == 5


@pytest.mark.parametrize(
    "dates",
    [
        {"completed_at": 10**400},
        {"created_at": -1e308, "completed_at": 1e308},
        {"completed_at": 1_800_000_000_000},
        {"created_at": True, "completed_at": 9},  # true is no date: not 8 s
    ],
)
def test_a_batch_dated_past_any_float_keeps_its_answers(tmp_path: Path, dates: dict[str, Any]) -> None:
    """A batch whose end was a 400-digit number ended every run and resume in an OverflowError traceback; one
    dated in milliseconds beside seconds must not save a turnaround its resume then refuses."""

    class FarDated(BatchStore):
        async def finish(self, batch: dict[str, Any], status: str, done: int) -> None:
            await super().finish(batch, status, done)
            batch.update(dates)

    with FakeOpenAIServer("mixed", batches=FarDated()) as srv:
        result = run_cli("eval", "--model", "m", "--limit", "3", "--api-url", srv.url, "--batch", *FAST,
                         "--work-dir", str(tmp_path))  # fmt: skip
        again = run_cli("eval", "--use-cache", str(only_run_dir(tmp_path)), *FAST)
    assert result.returncode == 0 and again.returncode == 0, result.stderr + again.stderr
    rows = read_jsonl(only_run_dir(tmp_path) / "predictions/m/coin_flip.jsonl")
    assert len(rows) == 3 and all(r["error"] is None and r["latency_s"] is None for r in rows)  # not known: not 0 s
    report = json.loads((only_run_dir(tmp_path) / "reports/m/coin_flip.json").read_text())
    assert report["usage"]["latency_s"] == {} and "turnaround median" not in again.stdout, again.stdout


@pytest.mark.parametrize("data", [5, 1.5, True])
def test_a_failed_batch_whose_errors_are_no_list_is_sent_again(tmp_path: Path, data: Any) -> None:
    """A failed batch whose errors.data was a number ended the run and every resume in a TypeError traceback."""

    class OddErrors(BatchStore):
        async def advance(self, batch: dict[str, Any]) -> None:
            await super().advance(batch)
            if batch["status"] == "failed":
                batch["errors"] = {"object": "list", "data": data}

    store = OddErrors(fail_batches=1)
    with FakeOpenAIServer("mixed", batches=store) as srv:
        result = run_cli("eval", "--model", "m", "--limit", "3", "--api-url", srv.url, "--batch", *FAST,
                         "--work-dir", str(tmp_path))  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert store.created == 2 and len(_answers(only_run_dir(tmp_path))) == 3


@pytest.mark.parametrize("data", [5, True])
def test_a_batch_list_whose_data_is_no_list_shows_no_batch(tmp_path: Path, data: Any) -> None:
    """After a POST /batches got a 500, the list was looked through for the batch it may have made: a list whose
    data was a number ended the run in a TypeError traceback."""

    class OddList(BatchStore):
        refused = False

        async def __call__(
            self, method: str, path: str, headers: dict[str, str], body: bytes, query: str = ""
        ) -> Response:
            if path.endswith("/batches") and method == "GET":
                return reply_json(200, {"object": "list", "data": data, "has_more": False})
            if path.endswith("/batches") and not self.refused:  # the first creation fails, making nothing
                self.refused = True
                return reply_json(500, {"error": {"message": "try again"}})
            return await super().__call__(method, path, headers, body, query)

    store = OddList()
    with FakeOpenAIServer("mixed", batches=store) as srv:
        result = run_cli("eval", "--model", "m", "--limit", "3", "--api-url", srv.url, "--batch", *FAST,
                         "--work-dir", str(tmp_path))  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert store.created == 1 and len(_answers(only_run_dir(tmp_path))) == 3


class _NoAnswerFirst(BatchStore):
    """Each request's first result line is a 200 that reports usage (1,000 prompt tokens) but holds no answer."""

    async def answer(self, index: int, line: dict[str, Any], auth: str) -> tuple[bool, dict[str, Any]]:
        ok, found = await super().answer(index, line, auth)
        if self.seen_ids[line["custom_id"]] == 1:  # its first run: billed, no choices
            usage = {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100}
            found["response"]["body"] = {"object": "chat.completion", "choices": [], "usage": usage}
        return ok, found


def test_a_batch_line_of_200_without_an_answer_counts_the_usage_it_reports(tmp_path: Path) -> None:
    """A result line of 200 whose body reports usage but holds no answer was sent again, and what it said it
    cost was dropped: the report said the run cost only its answers, where online such an attempt counts."""
    prices = ("--price-input", "1", "--price-output", "1")
    with FakeOpenAIServer("mixed", batches=_NoAnswerFirst()) as srv:
        result = run_cli("eval", "--model", "m", "--limit", "3", "--api-url", srv.url, "--batch", *FAST, *prices,
                         "--work-dir", str(tmp_path))  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = read_jsonl(only_run_dir(tmp_path) / "predictions/m/coin_flip.jsonl")
    assert all(r["error"] is None and r["attempts"] == 2 and r["usage"]["prompt_tokens"] > 1000 for r in rows)
    report = _report(only_run_dir(tmp_path))
    assert (
        report["tokens"]["batch_prompt"] == report["tokens"]["prompt"] == sum(r["usage"]["prompt_tokens"] for r in rows)
    )
    assert report["cost"]["total"] > 3 * 1100 / 1e6 * 0.5


def test_a_batch_line_that_failed_with_usage_counts_when_its_request_goes_online(tmp_path: Path) -> None:
    """With --batch-rest-online, a request whose result line (a 200 without an answer) reported usage went
    online, and the row and the report kept only the online answer's tokens: the batch line's were dropped."""
    with FakeOpenAIServer("mixed", batches=_NoAnswerFirst()) as srv:
        result = run_cli("eval", "--model", "m", "--limit", "3", "--api-url", srv.url, "--batch", "--batch-rest-online",
                         *FAST, "--work-dir", str(tmp_path))  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = read_jsonl(only_run_dir(tmp_path) / "predictions/m/coin_flip.jsonl")
    assert all(r["error"] is None and r["usage"]["prompt_tokens"] > 1000 for r in rows)
    assert _report(only_run_dir(tmp_path))["tokens"]["prompt"] == sum(r["usage"]["prompt_tokens"] for r in rows)


def test_a_batch_id_in_a_wide_script_still_names_its_results_file(tmp_path: Path) -> None:
    """A batch id of 95 CJK letters (letters are kept in a file name) made a name of 300 bytes: every run and
    resume ended 'File name too long' as the results came in, and the batch was never collected."""

    class WideIds(BatchStore):
        def new_id(self, prefix: str) -> str:
            return super().new_id(prefix) + ("\u4e2d" * 95 if prefix == "batch_" else "")

        async def __call__(
            self, method: str, path: str, headers: dict[str, str], body: bytes, query: str = ""
        ) -> Response:
            return await super().__call__(method, urllib.parse.unquote(path), headers, body, query)

    with FakeOpenAIServer("mixed", batches=WideIds()) as srv:
        result = run_cli("eval", "--model", "m", "--limit", "2", "--api-url", srv.url, "--batch", *FAST,
                         "--work-dir", str(tmp_path))  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert len(_answers(only_run_dir(tmp_path))) == 2


class _Twice(BatchStore):
    """Each result line twice in the output file: every request a conflict."""

    async def finish(self, batch: dict[str, Any], status: str, done: int) -> None:
        await super().finish(batch, status, done)
        purpose, content = self.files[batch["output_file_id"]]
        self.files[batch["output_file_id"]] = (purpose, content + content)


def test_two_answers_for_one_request_count_what_they_report_they_cost(tmp_path: Path) -> None:
    """An output file that held each line twice: each request was a conflict, sent again twice (three batches of
    two answers each), and the report said the run had used no token at all."""

    with FakeOpenAIServer("mixed", batches=_Twice()) as srv:
        result = run_cli("eval", "--model", "m", "--limit", "1", "--api-url", srv.url, "--batch", *FAST,
                         "--price-input", "1", "--price-output", "1", "--work-dir", str(tmp_path / "b"))  # fmt: skip
        online = run_cli(
            "eval", "--model", "m", "--limit", "1", "--api-url", srv.url, "--work-dir", str(tmp_path / "o")
        )
    assert result.returncode == 1 and online.returncode == 0, result.stderr
    (row,) = read_jsonl(only_run_dir(tmp_path / "b") / "predictions/m/coin_flip.jsonl")
    assert "neither is kept (a conflict)" in row["error"] and row["attempts"] == 3
    one = _report(only_run_dir(tmp_path / "o"))["tokens"]
    tokens = _report(only_run_dir(tmp_path / "b"))["tokens"]
    assert tokens["batch_prompt"] == tokens["prompt"] == 6 * one["prompt"]  # three sends of two answers each
    assert tokens["batch_completion"] == tokens["completion"] == 6 * one["completion"]


def test_a_resume_counts_a_failed_line_s_usage_once(tmp_path: Path) -> None:
    """A request failed in every send (two answers each: a conflict) was resumed: the resume read its last batch
    again, whose conflict's usage landed in the new row on top of the failed row's, which already held it: 12
    answers' tokens recorded for the 10 the server billed. A batch is read where no row holds its answer."""
    store = _Twice()
    with FakeOpenAIServer("mixed", batches=store) as srv:
        args = ("eval", "--model", "m", "--limit", "1", "--api-url", srv.url)
        online = run_cli(*args, "--work-dir", str(tmp_path / "o"))
        first = run_cli(*args, "--batch", *FAST, "--work-dir", str(tmp_path / "b"))
        run = only_run_dir(tmp_path / "b")
        saved = run / "predictions/m/coin_flip.jsonl"
        (before,) = read_jsonl(saved)
        again = run_cli("eval", "--use-cache", str(run), "--batch", *FAST)
        one = _report(only_run_dir(tmp_path / "o"))["tokens"]["prompt"]
        (row,) = read_jsonl(saved)
        billed = 2 * sum(store.seen_ids.values()) * one  # two answers a send
        assert row["usage"]["prompt_tokens"] == _report(run)["tokens"]["prompt"] == billed, store.seen_ids
        saved.write_text(json.dumps(before) + "\n")  # as if the resume was killed before writing its row
        third = run_cli("eval", "--use-cache", str(run), "--batch", *FAST)
    assert online.returncode == 0 and first.returncode == again.returncode == third.returncode == 1, third.stderr
    assert sum(store.seen_ids.values()) == 8  # the lost resume's batches read again (no row held them), then 2 sends
    # the lost resume's 3 sends (billed: no row holds them) and the 2 new ones, of two answers each
    assert read_jsonl(saved)[-1]["usage"]["prompt_tokens"] == before["usage"]["prompt_tokens"] + 2 * 5 * one


def test_a_resume_shows_its_own_requests_not_the_session_s_before(tmp_path: Path) -> None:
    """A resume with nothing left to ask, and one that went on as a batch (no online requests), each printed
    'requests 4 sent' and saved it in their report: the first session's requests, shown as their own."""
    with FakeOpenAIServer("mixed", batches=BatchStore()) as srv:
        first = run_cli("eval", "--model", "m", "--limit", "4", "--api-url", srv.url, "--work-dir", str(tmp_path))
        run = only_run_dir(tmp_path)
        idle = run_cli("eval", "--use-cache", str(run))
        idle_report = _report(run)
        batch = run_cli("eval", "--use-cache", str(run), "--limit", "6", "--batch", *FAST)
    assert first.returncode == idle.returncode == batch.returncode == 0, (idle.stderr, batch.stderr)
    assert "requests 4 sent" in first.stdout and len(_answers(run)) == 6
    assert "requests 4 sent" not in idle.stdout and "requests" not in idle_report, idle.stdout
    assert "requests 4 sent" not in batch.stdout and "requests" not in _report(run), batch.stdout


def test_answers_of_a_batch_collected_before_a_stop_keep_its_turnaround(tmp_path: Path) -> None:
    """A batch downloaded, then the run stopped before its answers were written (here: two rows dropped): the
    resume read them from the run directory and saved them with latency_s 0.0, a turnaround it never measured."""
    with FakeOpenAIServer("mixed", batches=BatchStore(delay=1.1)) as srv:  # the server dates in whole seconds
        args = ("eval", "--model", "m", "--limit", "4", "--api-url", srv.url, "--batch", *FAST)
        first = run_cli(*args, "--work-dir", str(tmp_path))
        run = only_run_dir(tmp_path)
        predictions = run / "predictions/m/coin_flip.jsonl"
        predictions.write_text("".join(predictions.read_text().splitlines(keepends=True)[:2]))
        resumed = run_cli("eval", "--use-cache", str(run), *FAST)
    latencies = [r["latency_s"] for r in read_jsonl(predictions)]
    assert first.returncode == resumed.returncode == 0 and len(latencies) == 4, resumed.stderr
    assert latencies[0] >= 1 and set(latencies) == {latencies[0]}, latencies


@pytest.mark.parametrize("turnaround", [1e308, -1.0])
def test_a_saved_turnaround_past_any_batch_window_is_refused(tmp_path: Path, turnaround: float) -> None:
    """state.json is untrusted: a turnaround of 1e308 s was saved as each answer's latency (and counted 0.0)."""
    with FakeOpenAIServer("mixed", batches=BatchStore()) as srv:
        args = ("eval", "--model", "m", "--limit", "2", "--api-url", srv.url, "--batch", *FAST)
        first = run_cli(*args, "--work-dir", str(tmp_path))
        run = only_run_dir(tmp_path)
        state = json.loads((run / "batch/state.json").read_text())
        state["batches"][0]["turnaround_s"] = turnaround
        (run / "batch/state.json").write_text(json.dumps(state))
        (run / "predictions/m/coin_flip.jsonl").write_text("")
        resumed = run_cli("eval", "--use-cache", str(run), *FAST)
    assert first.returncode == 0 and resumed.returncode == 2 and "turnaround_s" in resumed.stderr, resumed.stderr
    assert len(resumed.stderr.strip().splitlines()) == 1 and "Traceback" not in resumed.stderr


@pytest.mark.parametrize("flag", ["--batch-write", "--batch-results"])
def test_batch_write_or_results_while_a_batch_is_still_open_is_refused(tmp_path: Path, flag: str) -> None:
    """`--use-cache RUN --batch-write FILE` while the run's batch was still at the server wrote its requests again
    for `vllm run-batch`: asked twice (docs/batches.md: never sent twice). `--batch-results FILE` recorded the file
    and left the batch uncollected for good. Both are refused as --no-batch is."""
    store = BatchStore(delay=3600.0)
    offline = tmp_path / "offline.jsonl"
    if flag == "--batch-results":
        offline.write_text("")
    with FakeOpenAIServer("mixed", batches=store) as srv:
        args = ("eval", "--model", "m", "--limit", "5", "--api-url", srv.url, "--batch", *FAST)
        _killed_while_polled(args, tmp_path / "work", store)
        run = only_run_dir(tmp_path / "work")
        refused = run_cli("eval", "--use-cache", str(run), flag, str(offline))
        kept = _answers(run)
        store.delay = 0.0
        resumed = run_cli("eval", "--use-cache", str(run), *FAST)
    assert refused.returncode == 2 and "batch_000001" in refused.stderr, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "Traceback" not in refused.stderr
    assert not kept and offline.exists() == (flag == "--batch-results")  # nothing saved, nothing written
    assert resumed.returncode == 0 and store.created == 1 and len(_answers(run)) == 5, resumed.stderr


def test_a_batch_run_resumed_online_with_nothing_to_ask_still_calls_its_latency_a_batch_turnaround(
    tmp_path: Path,
) -> None:
    """Its report said batch false and its summary 'latency median 3.00 s': each batch's turnaround (creation to
    end) shown as a request's time, beside online runs' latencies."""
    with FakeOpenAIServer("mixed", batches=BatchStore()) as srv:
        first = run_cli("eval", "--model", "m", "--limit", "6", "--api-url", srv.url, "--batch", *FAST,
                        "--work-dir", str(tmp_path))  # fmt: skip
        run = only_run_dir(tmp_path)
        again = run_cli("eval", "--use-cache", str(run), "--no-batch")
    assert first.returncode == 0 and again.returncode == 0, again.stderr
    assert _report(run)["batch"] is True and "batch turnaround median" in again.stdout, again.stdout


def test_killed_while_the_rows_of_an_n_choice_answer_are_written_a_resume_records_each_choice_once(
    tmp_path: Path,
) -> None:
    """A kill between the rows of one answer of n=2 (the buffered writer flushes in 8 KiB pieces): the
    resume read the saved batch again and put its first choice, saved already, in the lost row with
    its usage a second time, and the second choice the batch answered and billed was lost."""

    class TwoChoices(_OneBatch):
        @staticmethod
        def results(ids: list[str]) -> bytes:
            said = [{"index": i, "message": {"content": f"{i} ANSWER: {a}"}} for i, a in enumerate(("YES", "NO"))]
            body = {"choices": said, "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}}
            return b"".join(json.dumps({"custom_id": c, "response": {"status_code": 200, "body": body}}).encode()
                            + b"\n" for c in ids)  # fmt: skip

    with serving(TwoChoices) as url:
        args = ("eval", "--model", "m", "--limit", "2", "--api-url", url, "--batch", *FAST, "--work-dir", str(tmp_path))
        assert run_cli(*args, "--generation-config", "n=2").returncode == 0
        run = only_run_dir(tmp_path)
        predictions = run / "predictions/m/coin_flip.jsonl"
        whole = predictions.read_text()
        predictions.write_text(whole[: whole.rindex("\n", 0, -1) + 40])  # its last row half written
        resumed = run_cli("eval", "--use-cache", str(run), *FAST)
    assert resumed.returncode == 0, resumed.stderr
    saved = [json.loads(line) for line in whole.split("\n") if line]
    assert [(r["id"], r["repeat"], r["reply"], r["usage"]) for r in read_jsonl(predictions)] == [
        (r["id"], r["repeat"], r["reply"], r["usage"]) for r in saved
    ]


def test_a_batch_line_that_failed_with_usage_counts_when_max_cost_keeps_its_request_from_going_online(
    tmp_path: Path,
) -> None:
    """With --batch-rest-online and --max-cost, a result line of 200 without an answer reported usage and the cap
    then left no room to send its request online: the request stayed owed with no row, and the report and the cap's
    note said the run had cost nothing, though the batch line was billed (a resume counted it, by reading it again).
    Its row is a failed one holding that usage, which a resume does not read again."""
    prices = ("--price-input", "1", "--price-output", "100", "--generation-config", "max_tokens=32")
    store = _NoAnswerFirst()
    with FakeOpenAIServer("mixed", batches=store) as srv:
        args = ("eval", "--model", "m", "--limit", "1", "--api-url", srv.url, *prices, "--batch-discount", "0.1")
        capped = run_cli(*args, "--batch", "--batch-rest-online", *FAST, "--max-cost", "0.002",
                         "--work-dir", str(tmp_path))  # fmt: skip
        run = only_run_dir(tmp_path)
        first = _report(run)
        rest = run_cli("eval", "--use-cache", str(run), "--max-cost", "1", *FAST)
    assert capped.returncode == 1 and rest.returncode == 0, (capped.stderr, rest.stderr)
    billed = (1000 * 1 + 100 * 100) * 0.1 / 1e6  # the batch line, at the batch price
    assert first["tokens"]["prompt"] == 1000 and first["cost"]["total"] == pytest.approx(billed), capped.stderr
    assert f"the run has cost {billed:.4f}" in capped.stderr
    (row,) = read_jsonl(run / "predictions/m/coin_flip.jsonl")
    assert row["error"] is None and 1000 < row["usage"]["prompt_tokens"] < 2000  # counted once
    assert sum(store.seen_ids.values()) == 2, store.seen_ids


def _questions_refused(srv: FakeOpenAIServer) -> tuple[Any, Any]:
    """The server's chat handler, and one that refuses every question online (500) but the endpoint's probe."""
    healthy = srv.chat

    async def refused(headers: dict[str, str], body: bytes, *rest: Any) -> Any:
        if b"coin" in body:  # a question, not the endpoint's probe
            return reply_json(500, {"error": {"message": "refused (test)"}})
        return await healthy(headers, body, *rest)

    return healthy, refused


def test_a_failed_online_row_holding_a_batch_line_s_usage_is_not_read_again_on_resume(tmp_path: Path) -> None:
    """With --batch-rest-online, a batch line of 200 without an answer (billed) went online, which failed too: the
    failed row held the line's usage but named no batch, so the resume read that line again and its usage was
    counted twice in the new row (1000 prompt tokens billed once, recorded twice)."""
    store = _NoAnswerFirst()
    with FakeOpenAIServer("mixed", batches=store) as srv:
        healthy, refused = _questions_refused(srv)

        srv.chat = refused  # online only: the batch lines are answered as before
        first = run_cli("eval", "--model", "m", "--limit", "1", "--api-url", srv.url, "--batch", "--batch-rest-online",
                        "--retries", "0", *FAST, "--work-dir", str(tmp_path))  # fmt: skip
        srv.chat = healthy
        run = only_run_dir(tmp_path)
        (failed,) = read_jsonl(run / "predictions/m/coin_flip.jsonl")
        resumed = run_cli("eval", "--use-cache", str(run), *FAST)
    assert first.returncode == 1 and resumed.returncode == 0, resumed.stderr
    assert failed["error"] and failed["usage"]["prompt_tokens"] == 1000, failed
    (row,) = read_jsonl(run / "predictions/m/coin_flip.jsonl")
    assert row["error"] is None and 1000 < row["usage"]["prompt_tokens"] < 2000, row  # the line counted once


class _NoAnswerFirstThenHeld(_NoAnswerFirst):
    """As _NoAnswerFirst; each batch after the first stays in progress while `waits`."""

    waits = True
    polled_later = False

    async def advance(self, batch: dict[str, Any]) -> None:
        if batch["_number"] > 1 and self.waits:
            self.polled_later = True
            return
        await super().advance(batch)


def test_killed_between_the_sends_of_a_request_a_resume_counts_each_send(tmp_path: Path) -> None:
    """A request whose first batch line was a 200 without an answer (billed) was sent again in a second batch, and
    the run was killed while that batch ran: the resume read only the request's latest batch, so its row and the
    report held the second send's usage alone, and the first's, billed, counted nowhere."""
    store = _NoAnswerFirstThenHeld()
    with FakeOpenAIServer("mixed", batches=store) as srv:
        args = ("eval", "--model", "m", "--limit", "2", "--api-url", srv.url, "--batch", *FAST)
        proc = spawn_cli(*args, "--work-dir", str(tmp_path), quiet=True)
        _wait_for(lambda: store.polled_later, "the second batch to be polled")
        proc.send_signal(signal.SIGKILL)
        proc.wait(60)
        store.waits = False
        run = only_run_dir(tmp_path)
        resumed = run_cli("eval", "--use-cache", str(run), *FAST)
        again = run_cli("eval", "--use-cache", str(run), *FAST)  # nothing left to ask: counted as it was
    assert resumed.returncode == again.returncode == 0, resumed.stderr
    assert set(store.seen_ids.values()) == {2} and store.created == 2  # never a third send
    rows = read_jsonl(run / "predictions/m/coin_flip.jsonl")
    assert all(r["error"] is None and 1000 < r["usage"]["prompt_tokens"] < 2000 for r in rows), rows
    assert _report(run)["tokens"]["prompt"] == sum(r["usage"]["prompt_tokens"] for r in rows)


def test_a_failed_row_written_online_keeps_naming_the_batches_whose_usage_it_holds(tmp_path: Path) -> None:
    """A request failed in every batch send (conflicts: their usage in its failed row, which names its last batch),
    was asked online (--no-batch), which failed too: the new failed row held the batches' usage but named none, so
    the next batch resume read them again and counted their usage twice."""

    class TwiceWhileTold(_Twice):
        twice = True

        async def finish(self, batch: dict[str, Any], status: str, done: int) -> None:
            await (super().finish(batch, status, done) if self.twice else BatchStore.finish(self, batch, status, done))

    store = TwiceWhileTold()
    with FakeOpenAIServer("mixed", batches=store) as srv:
        healthy, refused = _questions_refused(srv)

        args = ("eval", "--model", "m", "--limit", "1", "--api-url", srv.url)
        online = run_cli(*args, "--work-dir", str(tmp_path / "o"))
        first = run_cli(*args, "--batch", *FAST, "--work-dir", str(tmp_path / "b"))
        run = only_run_dir(tmp_path / "b")
        (batched,) = read_jsonl(run / "predictions/m/coin_flip.jsonl")
        srv.chat = refused  # online only: the batch lines are answered as before
        failed = run_cli("eval", "--use-cache", str(run), "--no-batch", "--retries", "0")
        srv.chat, store.twice = healthy, False
        last = run_cli("eval", "--use-cache", str(run), "--batch", *FAST)
    assert online.returncode == 0 and first.returncode == failed.returncode == 1, failed.stderr
    assert last.returncode == 0, last.stderr
    one = _report(only_run_dir(tmp_path / "o"))["tokens"]["prompt"]
    (row,) = read_jsonl(run / "predictions/m/coin_flip.jsonl")
    assert batched["usage"]["prompt_tokens"] == 6 * one  # three sends of two answers each
    assert row["error"] is None and row["usage"]["prompt_tokens"] == 7 * one, row  # and the last send's answer


class _ForcedNoAnswer(BatchStore):
    """Each forced turn's result line is a 200 that reports usage (1,000 prompt tokens) but holds no answer."""

    async def answer(self, index: int, line: dict[str, Any], auth: str) -> tuple[bool, dict[str, Any]]:
        ok, found = await super().answer(index, line, auth)
        if line["custom_id"].endswith("-forced"):
            usage = {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100}
            found["response"]["body"] = {"object": "chat.completion", "choices": [], "usage": usage}
        return ok, found


@pytest.mark.parametrize("then", ["--no-batch", "--batch"])
def test_a_failed_forced_turn_s_usage_counts_once_when_it_is_asked_again(tmp_path: Path, then: str) -> None:
    """A forced turn whose batch lines were each a 200 without an answer (billed) was recorded failed, holding what
    its three sends cost; asked again on resume, its new answer replaced that usage: online (--no-batch) the three
    billed lines counted nowhere, and a batch resume read them all again."""
    store = _ForcedNoAnswer()
    with FakeOpenAIServer("mixed", batches=store) as srv:
        args = ("eval", "--model", "m", "--limit", "20", "--api-url", srv.url, "--force-answer")
        first = run_cli(*args, "--batch", *FAST, "--work-dir", str(tmp_path))
        run = only_run_dir(tmp_path)
        failed = [r for r in read_jsonl(run / "predictions/m/coin_flip.jsonl") if "forced" in r]
        before = _report(run)["tokens"]["prompt"]
        store.answer = BatchStore.answer.__get__(store)  # type: ignore[method-assign]  # healthy from now on
        resumed = run_cli("eval", "--use-cache", str(run), then, *FAST)
    assert first.returncode == resumed.returncode == 0, resumed.stderr  # a failed forced turn: still invalid
    assert failed and all(r["forced"]["error"] and r["forced"]["usage"]["prompt_tokens"] == 3000 for r in failed)
    forced = [r["forced"] for r in read_jsonl(run / "predictions/m/coin_flip.jsonl") if "forced" in r]
    assert len(forced) == len(failed) and all(f["error"] is None for f in forced), forced
    assert all(3000 < f["usage"]["prompt_tokens"] < 4000 for f in forced), forced  # three failed sends, one answer
    assert sum(store.seen_ids.values()) == 20 + (3 + (then == "--batch")) * len(failed)  # one send more, if a batch
    assert _report(run)["tokens"]["prompt"] == before + sum(f["usage"]["prompt_tokens"] - 3000 for f in forced)


class _OneChoiceSecondHeld(BatchStore):
    """Answers one choice whatever n asks; each batch after the first stays in progress while `waits`."""

    waits = True
    polled_later = False

    async def answer(self, index: int, line: dict[str, Any], auth: str) -> tuple[bool, dict[str, Any]]:
        ok, found = await super().answer(index, line, auth)
        found["response"]["body"]["choices"] = found["response"]["body"]["choices"][:1]
        return ok, found

    async def advance(self, batch: dict[str, Any]) -> None:
        if batch["_number"] > 1 and self.waits:
            self.polled_later = True
            return
        await super().advance(batch)


def test_a_batch_sent_for_the_choices_a_server_left_out_is_read_for_them_on_resume(tmp_path: Path) -> None:
    """n=2 at a server that answers one choice: the second choice's row was an error, asked again in a second batch,
    and the run was killed while that batch ran. The resume read the batch's answer as if it answered the first
    choice (saved already) and dropped it: billed, counted nowhere, and the request was sent a third time."""
    store = _OneChoiceSecondHeld()
    with FakeOpenAIServer("mixed", batches=store) as srv:
        args = ("eval", "--model", "m", "--limit", "2", "--api-url", srv.url, "--batch", *FAST)
        first = run_cli(*args, "--generation-config", "n=2", "--work-dir", str(tmp_path))
        run = only_run_dir(tmp_path)
        proc = spawn_cli("eval", "--use-cache", str(run), *FAST, quiet=True)
        _wait_for(lambda: store.polled_later, "the second batch to be polled")
        proc.send_signal(signal.SIGKILL)
        proc.wait(60)
        store.waits = False
        resumed = run_cli("eval", "--use-cache", str(run), *FAST)
    assert first.returncode == 1 and resumed.returncode == 0, resumed.stderr
    assert set(store.seen_ids.values()) == {2} and store.created == 2, store.seen_ids  # never a third send
    rows = read_jsonl(run / "predictions/m/coin_flip.jsonl")
    latest = {(r["id"], r["repeat"]): r for r in rows}
    assert len(latest) == 4 and all(r["error"] is None and r["usage"] for r in latest.values()), rows
    assert _report(run)["tokens"]["prompt"] == sum(r["usage"]["prompt_tokens"] for r in latest.values())


def test_a_choice_a_batch_left_out_may_be_asked_online_or_written_out_on_resume(tmp_path: Path) -> None:
    """n=2 at a batch that answers one choice: the run ended (exit 1), the second choice's row an error. A resume with
    --batch-write or --no-batch was refused forever ('batch ... holds answers, billed, that no row holds yet'): that
    error row named no batch, so the batch, whose answer and usage the first row holds, was taken as unread."""
    store = _OneChoiceSecondHeld()
    store.waits = False
    with FakeOpenAIServer("mixed", batches=store) as srv:
        args = ("eval", "--model", "m", "--limit", "2", "--api-url", srv.url, "--batch", *FAST)
        first = run_cli(*args, "--generation-config", "n=2", "--work-dir", str(tmp_path))
        run = only_run_dir(tmp_path)
        written = run_cli("eval", "--use-cache", str(run), "--batch-write", str(tmp_path / "requests.jsonl"))
        online = run_cli("eval", "--use-cache", str(run), "--no-batch")
    assert first.returncode == 1 and written.returncode == 0 and online.returncode == 0, written.stderr + online.stderr
    latest = {(r["id"], r["repeat"]): r for r in read_jsonl(run / "predictions/m/coin_flip.jsonl")}
    assert len(latest) == 4 and all(r["error"] is None for r in latest.values()) and store.created == 1
    assert _report(run)["tokens"]["prompt"] == sum((r["usage"] or {}).get("prompt_tokens", 0) for r in latest.values())


def test_a_batch_line_s_billed_usage_counts_before_its_request_may_go_online_under_max_cost(tmp_path: Path) -> None:
    """With --batch-rest-online, --max-cost and max_tokens (the run never passes the cap), a batch line of 200
    without an answer reported usage, and its request was let online as if that usage cost nothing: the online row
    then held it at the full price, and the run passed --max-cost 0.005 by 0.0073, blaming 'the replies in flight'."""
    prices = ("--price-input", "1", "--price-output", "100", "--generation-config", "max_tokens=32")
    with FakeOpenAIServer("mixed", batches=_NoAnswerFirst()) as srv:
        capped = run_cli("eval", "--model", "m", "--limit", "1", "--api-url", srv.url, *prices, "--batch-discount",
                         "0.1", "--batch", "--batch-rest-online", *FAST, "--max-cost", "0.005",
                         "--work-dir", str(tmp_path))  # fmt: skip
    run = only_run_dir(tmp_path)
    assert capped.returncode == 1 and "passed" not in capped.stderr, capped.stderr
    assert _report(run)["cost"]["total"] == pytest.approx((1000 + 100 * 100) * 0.1 / 1e6)  # the line, at batch price
    (row,) = read_jsonl(run / "predictions/m/coin_flip.jsonl")
    assert row["error"] and row["usage"]["prompt_tokens"] == 1000, row


class _TwiceFirst(_Twice):
    """The first batch's output file holds each line twice (a conflict); later ones are whole."""

    async def finish(self, batch: dict[str, Any], status: str, done: int) -> None:
        whole = batch["_number"] > 1
        await (BatchStore.finish(self, batch, status, done) if whole else super().finish(batch, status, done))


def test_killed_between_the_rows_of_a_resent_n_choice_answer_a_resume_counts_its_sends_once(tmp_path: Path) -> None:
    """n=2: a request's first send was a conflict, its second answered; the kill came between the answer's two rows
    (the first saved, holding both sends' usage). The resume read both batches again and gave the restored row the
    first send's usage a second time."""
    with FakeOpenAIServer("mixed", batches=_TwiceFirst()) as srv:
        args = ("eval", "--model", "m", "--limit", "2", "--api-url", srv.url, "--batch", *FAST, "--generation-config")
        assert run_cli(*args, "n=2", "--work-dir", str(tmp_path)).returncode == 0
        run = only_run_dir(tmp_path)
        predictions = run / "predictions/m/coin_flip.jsonl"
        whole = predictions.read_text()
        predictions.write_text(whole[: whole.rindex("\n", 0, -1) + 1])  # its last row lost
        resumed = run_cli("eval", "--use-cache", str(run), *FAST)
    assert resumed.returncode == 0, resumed.stderr
    saved = [json.loads(line) for line in whole.split("\n") if line]
    assert [(r["id"], r["repeat"], r["reply"], r["usage"]) for r in read_jsonl(predictions)] == [
        (r["id"], r["repeat"], r["reply"], r["usage"]) for r in saved
    ]


class _BilledLineBeside(BatchStore):
    """The first batch's output holds, beside each answer, a 200 without an answer that reports usage (1000 prompt
    tokens): before the answer (`first`), or after it."""

    first = True

    async def finish(self, batch: dict[str, Any], status: str, done: int) -> None:
        await super().finish(batch, status, done)
        if batch["_number"] == 1:
            purpose, content = self.files[batch["output_file_id"]]
            usage = {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100}
            lines = []
            for line in content.splitlines(keepends=True):
                spent = json.loads(line)
                spent["response"]["body"] = {"object": "chat.completion", "choices": [], "usage": usage}
                pair = [json.dumps(spent).encode() + b"\n", line]
                lines += pair if self.first else pair[::-1]
            self.files[batch["output_file_id"]] = (purpose, b"".join(lines))


@pytest.mark.parametrize("first", [True, False], ids=["billed-line-first", "billed-line-after"])
def test_a_billed_line_beside_an_answer_for_the_same_request_counts_too(tmp_path: Path, first: bool) -> None:
    """An output file with two lines for one request, an answer and a 200 without an answer reporting usage: the
    answer was kept and the other line's usage dropped (two answers count both; two failed lines, the first only),
    though the server billed both."""
    store = _BilledLineBeside()
    store.first = first
    with FakeOpenAIServer("mixed", batches=store) as srv:
        args = ("eval", "--model", "m", "--limit", "2", "--api-url", srv.url, "--batch", *FAST)
        done = run_cli(*args, "--work-dir", str(tmp_path))
    assert done.returncode == 0 and store.created == 1, done.stderr
    rows = read_jsonl(only_run_dir(tmp_path) / "predictions/m/coin_flip.jsonl")
    assert all(r["error"] is None and 1000 < r["usage"]["prompt_tokens"] < 2000 for r in rows), rows


def test_a_resume_that_reads_no_batch_is_refused_while_a_collected_batch_holds_billed_answers_no_row_holds(
    tmp_path: Path,
) -> None:
    """With --batch-rest-online, a batch line of 200 without an answer (billed) was collected and its request went
    online, where the run was stopped (SIGTERM): no row held the line. A --no-batch resume was allowed (every batch
    collected), asked the request online only, and the line's 1000 billed prompt tokens counted nowhere; the same
    held for a batch collected just before a kill, its rows unwritten (sent a second time). It is refused in one
    line naming --batch, which reads the line and counts it."""
    store = _NoAnswerFirst()
    with FakeOpenAIServer("mixed", batches=store) as srv:
        healthy, arrived = srv.chat, []

        async def held(headers: dict[str, str], body: bytes, *rest: Any) -> Any:
            if b"coin" in body:  # a question, not the endpoint's probe: held until the run is stopped
                arrived.append(body)
                await asyncio.sleep(3600)
            return await healthy(headers, body, *rest)

        srv.chat = held
        proc = spawn_cli("eval", "--model", "m", "--limit", "1", "--api-url", srv.url, "--batch", "--batch-rest-online",
                         *FAST, "--work-dir", str(tmp_path), quiet=True)  # fmt: skip
        _wait_for(lambda: arrived, "the request to go online")
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        srv.chat = healthy
        run = only_run_dir(tmp_path)
        online = srv.state.requests.total()
        for mode in ("--no-batch", "--batch-write"):
            refused = run_cli("eval", "--use-cache", str(run), mode, *(["x.jsonl"] if mode == "--batch-write" else []))
            assert refused.returncode == 2 and "resume with --batch to read them" in refused.stderr, refused.stderr
            assert f"move {run / 'batch'} away" in refused.stderr  # the way out where the Batch API is gone
            assert len(refused.stderr.strip().splitlines()) == 1 and srv.state.requests.total() == online
        resumed = run_cli("eval", "--use-cache", str(run), "--batch")
    rows = read_jsonl(run / "predictions/m/coin_flip.jsonl")
    assert proc.returncode == 1 and resumed.returncode == 0, resumed.stderr
    assert rows and all(r["usage"]["prompt_tokens"] > 1000 for r in rows), rows  # the billed line counted


def test_batch_lines_a_rate_limit_refused_are_sent_again_later_and_spend_no_resend(tmp_path: Path) -> None:
    """A server that ran a batch's lines under a rate limit answered most of them 429: each was sent again at
    once and, a third time refused, became its sample's error (12 of 12 asked, 9 errors). Online, a 429 slows the
    run and spends no retry; so here: sent again in a later batch until the patience runs out."""
    with FakeOpenAIServer("correct", limits=Limits(rate=20, burst=3)) as srv:
        args = ("eval", "--model", "m", "--limit", "12", "--api-url", srv.url, "--batch", *FAST)
        result = run_cli(*args, "--work-dir", str(tmp_path))
        sent = sum(srv.state.batches.seen_ids.values())
    rows = read_jsonl(only_run_dir(tmp_path) / "predictions/m/coin_flip.jsonl")
    assert result.returncode == 0 and len(rows) == 12, result.stderr
    assert [row["error"] for row in rows] == [None] * 12 and sent > 12  # some were refused, and sent again


def test_batch_lines_refused_for_the_whole_patience_stay_owed_not_failed(tmp_path: Path) -> None:
    with FakeOpenAIServer("correct", limits=Limits(rate=0.001, burst=2)) as srv:
        args = ("eval", "--model", "m", "--limit", "5", "--api-url", srv.url, "--batch", *FAST, "--patience", "1")
        result = run_cli(*args, "--work-dir", str(tmp_path))
    rows = read_jsonl(only_run_dir(tmp_path) / "predictions/m/coin_flip.jsonl")
    assert result.returncode == 1 and "--use-cache" in result.stderr.splitlines()[-1], result.stderr
    assert len(rows) == 2 and [row["error"] for row in rows] == [None, None]  # the 3 refused: owed, no error row
    assert "a rate limit (429) refused 3 request(s) for the whole --patience (1 s); they stay owed" in result.stderr
