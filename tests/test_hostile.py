"""What a hostile tester found, each kept fixed: keys, resumes, templates, streams, secrets, types, pages."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from coinflip.config import TaskConfig, parse_pairs
from coinflip.errors import ConfigError
from coinflip.testing.server import FakeOpenAIServer

from .answer_server import AnswerServer, Pieces, answer, chat
from .conftest import PATIENCE_S, only_run_dir, read_jsonl, run_cli, spawn_cli, wait_for
from .test_streaming import ask


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("flags", "env", "message"),
    [
        (["--api-key", "sk-abc\u200bdef-1234"], {}, "cannot be sent in an HTTP header"),
        ([], {"COINFLIP_API_KEY": "sk-abcdef-1234\n"}, "line break"),
        (["--api-key", "sk-abc\x1bdef-1234"], {}, "control character"),  # aiohttp's ValueError: a traceback
        (["--generation-config", '{"extra_headers": {"X-A": "a\\u007fb"}}'], {}, "control character"),
        (["--generation-config", '{"extra_headers": {"X-A": "\u2603"}}'], {}, "cannot be sent in an HTTP header"),
        (["--api-key", "sk-\u00fcnicodeKEY12345"], {}, "not ASCII"),  # a server echoed it as UTF-8 read as Latin-1
        (["--generation-config", '{"extra_headers": {"X-A": "s\u00e9cret0002xyz"}}'], {}, "not ASCII"),
        ([], {"OPENAI_API_KEY": "sk-abcdef\u00a01234"}, "not ASCII"),  # a no-break space, copied from a page
        (["--api-url", "http://127.0.0.1:9/v1/\u00fc"], {}, "percent-encode"),
        (["--prompt-template", "Q {question:d}"], {}, "no format spec or conversion"),
        (["--prompt-template", "x {question!z}"], {}, "no format spec or conversion"),
        (["--prompt-template", "{question:>99999999999}"], {}, "no format spec"),  # was a MemoryError
        (["--prompt-template", "{question:>{fewshot}}", "--few-shot-num", "1"], {}, "no format spec"),  # mid-run
        (["--prompt-template", "{question!s:^9}"], {}, "no format spec"),  # once filled, then not any more
        (["--repeats", "4097"], {}, "at most 4096"),
        (["--generation-config", '{"extra_body": {"stream": true}}'], {}, "coinflip sets these itself"),
    ],
)
def test_bad_keys_urls_and_templates_are_one_line_and_create_nothing(
    tmp_path: Path, flags: list[str], env: dict[str, str], message: str
) -> None:
    result = run_cli(
        "eval", "--model", "m", "--api-url", "http://127.0.0.1:9/v1", *flags, "--work-dir", str(tmp_path / "w"), env=env
    )
    assert result.returncode == 2 and message in _one_line(result)
    assert not (tmp_path / "w").exists()


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"model_id": 5}, "model_id must be a text"),
        ({"work_dir": 5}, "work_dir must be a text"),
        ({"no_timestamp": "false"}, "no_timestamp must be true or false"),
        ({"stream": "no"}, "stream must be true or false"),
        ({"use_cache": True}, "use_cache must be a text"),
        ({"dataset_args": {"coin_flip": {"local_path": 5}}}, "dataset_path must be a text"),
        ({"system_prompt": ["a"]}, "system_prompt must be a text"),
        ({"api_url": 5}, "api_url must be a URL"),
    ],
)
def test_settings_from_files_are_type_checked(settings: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TaskConfig(model="m", **settings)


def test_key_value_settings_keep_every_pair() -> None:
    assert parse_pairs("stop=don't,temperature=0.5") == {"stop": "don't", "temperature": 0.5}
    assert parse_pairs("stop=}},max_tokens=5") == {"stop": "}}", "max_tokens": 5}
    assert parse_pairs("stop='Q:, A:',n=2") == {"stop": "Q:, A:", "n": 2}
    assert parse_pairs('extra_body={"a": {"b": "},"}},n=2') == {"extra_body": {"a": {"b": "},"}}, "n": 2}


def test_resume_takes_what_is_given_and_refuses_another_model_id(tmp_path: Path) -> None:
    first = run_cli(
        "eval", "--model", "random", "--limit", "10", "--metric-compat", "evalscope", "--no-html",
        "--work-dir", str(tmp_path),
    )  # fmt: skip
    assert first.returncode == 0
    run = only_run_dir(tmp_path)
    other = run_cli("eval", "--use-cache", str(run), "--model-id", "other")
    assert other.returncode == 2 and "model_id" in _one_line(other)
    again = run_cli("eval", "--use-cache", str(run), "--metric-compat", "coinflip", "--html", "--limit", "0")
    assert again.returncode == 0, again.stderr
    report = json.loads((run / "reports/random/coin_flip.json").read_text())
    assert report["metric_compat"] == "coinflip" and report["counts"]["samples"] == 3333  # given: taken
    assert (run / "reports/random/coin_flip.html").is_file()
    assert run_cli("rescore", str(run)).returncode == 0


def test_a_forced_answer_adds_no_max_tokens_the_user_did_not_set(tmp_path: Path) -> None:
    with FakeOpenAIServer("mixed", record=True) as srv:
        plain = run_cli(
            "eval",
            "--model",
            "m",
            "--api-url",
            srv.url,
            "--limit",
            "40",
            "--force-answer",
            "--work-dir",
            str(tmp_path / "a"),
        )
        capped = run_cli(
            "eval", "--model", "m", "--api-url", srv.url, "--limit", "40", "--force-answer",
            "--generation-config", "max_tokens=300", "--work-dir", str(tmp_path / "b"),
        )  # fmt: skip
        forced = [b for _, _, b in srv.state.seen if "Give only your final answer" in json.dumps(b)]
    assert plain.returncode == capped.returncode == 0
    assert forced and {b.get("max_tokens") for b in forced} == {None, 16}  # 16 only where the user capped


def test_a_stream_cut_before_its_end_is_not_a_reply() -> None:
    chunk = {"choices": [{"index": 0, "delta": {"content": "ANSWER: YES"}}]}
    raw = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: " + json.dumps(chunk).encode() + b"\n\n"
    with AnswerServer(lambda s: Pieces([raw], close=True)) as srv:
        reply = ask(srv.url)
    assert reply.text is None and "ended before the reply was complete" in (reply.error or "")


def test_a_placeholder_key_leaves_replies_alone(tmp_path: Path) -> None:
    with AnswerServer(lambda s: answer(chat("none of the people flip it: none\nANSWER: YES"))) as srv:
        result = run_cli(
            "eval",
            "--model",
            "m",
            "--api-url",
            srv.url,
            "--api-key",
            "none",
            "--limit",
            "2",
            "--work-dir",
            str(tmp_path),
        )
    assert result.returncode == 0
    rows = read_jsonl(only_run_dir(tmp_path) / "predictions/m/coin_flip.jsonl")
    assert all(r["reply"].startswith("none of the people") for r in rows)


def test_more_choices_than_asked_add_no_samples(tmp_path: Path) -> None:
    two = {"choices": [{"index": i, "message": {"content": "maybe"}} for i in range(2)]}

    def respond(seen: object) -> bytes:
        return answer(chat("ANSWER: NO") if "Give only" in json.dumps(seen.body) else two)

    with AnswerServer(respond) as srv:
        result = run_cli(
            "eval", "--model", "m", "--api-url", srv.url, "--limit", "3", "--force-answer", "--work-dir", str(tmp_path)
        )
        asked = len(srv.seen)
    assert result.returncode == 0, result.stderr
    rows = read_jsonl(only_run_dir(tmp_path) / "predictions/m/coin_flip.jsonl")
    assert len(rows) == 3 and {r["repeat"] for r in rows} == {0} and asked == 6  # 3 first, 3 forced


def test_long_replies_are_clipped_on_the_page_not_in_the_file(tmp_path: Path) -> None:
    long = "<think>" + "x" * 200_000 + "</think>\nANSWER: YES"
    with AnswerServer(lambda s: answer(chat(long))) as srv:
        result = run_cli("eval", "--model", "m", "--api-url", srv.url, "--limit", "5", "--work-dir", str(tmp_path))
    assert result.returncode == 0
    run = only_run_dir(tmp_path)
    assert all(len(r["reply"]) == len(long) for r in read_jsonl(run / "predictions/m/coin_flip.jsonl"))
    page = (run / "reports/m/coin_flip.html").read_text()
    assert len(page) < 200_000 and "characters not shown" in page and "ANSWER: YES" in page


def test_secrets_in_cookies_bodies_and_url_queries_never_reach_a_file(tmp_path: Path) -> None:
    generation = json.dumps(
        {"extra_headers": {"Cookie": "session=SECRET-C4c4c4"}, "extra_body": {"api_key": "SECRET-B5b5b5"}}
    )
    with FakeOpenAIServer("correct") as srv:
        url = f"{srv.url}?code=SECRET-Q3q3q3&api-version=1"
        result = run_cli(
            "eval", "--model", "m", "--api-url", url, "--generation-config", generation, "--limit", "3",
            "--work-dir", str(tmp_path),
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    for path in [p for p in tmp_path.rglob("*") if p.is_file()]:
        assert b"SECRET-" not in path.read_bytes(), path
    assert "SECRET-" not in result.stdout + result.stderr


def test_escape_sequences_from_a_server_are_not_printed_raw(tmp_path: Path) -> None:
    evil = "\x1b[2J\x1b]8;;http://evil/\x07click\x1b]8;;\x07 down"
    with AnswerServer(lambda s: answer({"error": {"message": evil}}, 500)) as srv:
        result = run_cli(
            "eval", "--model", "m", "--api-url", srv.url, "--limit", "3", "--retries", "0", "--work-dir", str(tmp_path)
        )
    assert result.returncode == 1
    assert "\x1b" not in result.stdout + result.stderr and "\ufffd[2J" in result.stdout + result.stderr


def test_rescore_finishes_on_rows_it_cannot_read(tmp_path: Path) -> None:
    done = run_cli("eval", "--model", "oracle", "--limit", "6", "--limit-mode", "first", "--work-dir", str(tmp_path))
    assert done.returncode == 0
    run = only_run_dir(tmp_path)
    predictions = run / "predictions/oracle/coin_flip.jsonl"
    rows = read_jsonl(predictions)
    rows[0]["answer_logprobs"], rows[1]["answer_logprobs"] = 1.5, ["x", {"token": 3, "top": "no"}]
    rows[2]["target"] = "MAYBE"
    predictions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = run_cli("rescore", str(run))
    assert result.returncode == 1 and "Traceback" not in result.stderr  # finished, and one sample short
    report = json.loads((run / "reports/oracle/coin_flip.json").read_text())
    assert report["counts"]["samples"] == 5 and any("no YES or NO target" in w for w in report["warnings"])


def test_rescore_counts_a_saved_finish_reason_as_a_live_run_keeps_it(tmp_path: Path) -> None:
    """A live run keeps a finish_reason's first 64 characters; a run directory written before that
    (or by hand) held a server's megabyte of it, which a rescore put into the report whole, one
    kind per row."""
    done = run_cli("eval", "--model", "oracle", "--limit", "4", "--limit-mode", "first", "--work-dir", str(tmp_path))
    assert done.returncode == 0
    run = only_run_dir(tmp_path)
    predictions = run / "predictions/oracle/coin_flip.jsonl"
    rows = read_jsonl(predictions)
    for i, row in enumerate(rows):
        row["finish_reason"] = "stop" + "x" * 100_000 + str(i)
    predictions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert run_cli("rescore", str(run)).returncode == 0
    report = json.loads((run / "reports/oracle/coin_flip.json").read_text())
    assert report["usage"]["finish_reasons"] == {("stop" + "x" * 100_000)[:64]: 4}


def test_a_run_in_progress_cannot_be_resumed_beside_itself(tmp_path: Path) -> None:
    with FakeOpenAIServer("correct", latency=PATIENCE_S) as srv:  # no reply comes while the twin tries
        proc = spawn_cli(
            "eval",
            "--model",
            "m",
            "--api-url",
            srv.url,
            "--eval-batch-size",
            "2",
            "--limit",
            "200",
            "--work-dir",
            str(tmp_path),
        )
        wait_for(lambda: list(tmp_path.glob("*/predictions/m/coin_flip.jsonl")), "the run's predictions file")
        run = only_run_dir(tmp_path)
        twin = run_cli("eval", "--use-cache", str(run))
        proc.terminate()
        _, err = proc.communicate(timeout=PATIENCE_S)
    assert twin.returncode == 2 and "in use by another coinflip process" in _one_line(twin)
    assert proc.returncode == 1 and "--use-cache" in err


def test_the_resume_command_is_quoted_for_a_shell(tmp_path: Path) -> None:
    work = tmp_path / "my runs $HOME"
    with AnswerServer(lambda s: answer({"error": {"message": "down"}}, 500)) as srv:
        result = run_cli(
            "eval", "--model", "m", "--api-url", srv.url, "--limit", "2", "--retries", "0", "--work-dir", str(work)
        )
    assert result.returncode == 1
    assert f"--use-cache '{only_run_dir(work)}'" in result.stderr


def test_a_web_page_where_the_api_should_be_fails_at_once(tmp_path: Path) -> None:
    page = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 15\r\n\r\n<html>UI</html>"
    with AnswerServer(lambda s: page) as srv:
        start = time.monotonic()
        result = run_cli("eval", "--model", "m", "--api-url", srv.url, "--limit", "50", "--work-dir", str(tmp_path))
        elapsed = time.monotonic() - start
    assert result.returncode == 2 and "web page" in _one_line(result) and elapsed < 10
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def test_a_refused_key_leaves_no_work_directory_it_made(tmp_path: Path) -> None:
    with FakeOpenAIServer("correct", api_key="right") as srv:
        result = run_cli(
            "eval",
            "--model",
            "m",
            "--api-url",
            srv.url,
            "--api-key",
            "wrong-key-123",
            "--work-dir",
            str(tmp_path / "new"),
        )
    assert result.returncode == 2 and not (tmp_path / "new").exists()


def test_a_model_path_alone_names_the_missing_file(tmp_path: Path) -> None:
    result = run_cli("eval", "--model-path", str(tmp_path / "nope.gguf"), "--work-dir", str(tmp_path / "w"))
    assert result.returncode == 2 and "nope.gguf: no such file" in _one_line(result)


def test_a_tampered_target_is_asked_again_on_resume(tmp_path: Path) -> None:
    """A predictions row whose target is MAYBE is untrusted input: before, every --use-cache said
    'resume to run them' and never sent it."""
    done = run_cli("eval", "--model", "oracle", "--limit", "6", "--limit-mode", "first", "--work-dir", str(tmp_path))
    assert done.returncode == 0
    run = only_run_dir(tmp_path)
    predictions = run / "predictions/oracle/coin_flip.jsonl"
    rows = read_jsonl(predictions)
    target, rows[2]["target"] = rows[2]["target"], "MAYBE"
    predictions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    resumed = run_cli("eval", "--use-cache", str(run))
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    again = {r["id"]: r for r in read_jsonl(predictions)}
    assert len(again) == 6 and again[rows[2]["id"]]["target"] == target  # asked again, from the data
    report = json.loads((run / "reports/oracle/coin_flip.json").read_text())
    assert report["complete"] and report["counts"]["samples"] == 6 and report["metrics"]["accuracy"] == 1.0


def test_a_work_dir_longer_than_the_system_takes_is_one_line(tmp_path: Path) -> None:
    work = tmp_path / "/".join(["d" * 200] * 25)  # 5,000 bytes: past PATH_MAX (4,096 on Linux)
    result = run_cli("eval", "--model", "oracle", "--limit", "3", "--work-dir", str(work))
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr[-500:]
    assert "Traceback" not in result.stderr and "work_dir is a path of" in result.stderr


def test_a_key_that_is_never_sent_stops_no_run(tmp_path: Path) -> None:
    """A baseline answers in-process and --batch-write sends nothing: a $OPENAI_API_KEY with an accented letter,
    which a request could not carry, refused them (exit 2); a run that sends it still is."""
    env = {"OPENAI_API_KEY": "sk-abc\u00e9defgh1234"}
    baseline = run_cli("eval", "--model", "oracle", "--limit", "2", "--work-dir", str(tmp_path / "a"), env=env)
    assert baseline.returncode == 0, baseline.stderr
    written = run_cli("eval", "--model", "m", "--limit", "2", "--batch-write", str(tmp_path / "r.jsonl"),
                      "--work-dir", str(tmp_path / "b"), env=env)  # fmt: skip
    assert written.returncode == 0, written.stderr
    sent = run_cli("eval", "--model", "m", "--api-url", "http://127.0.0.1:9/v1", "--work-dir", str(tmp_path), env=env)
    assert sent.returncode == 2 and "not ASCII" in sent.stderr, sent.stderr
