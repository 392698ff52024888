"""The API key never reaches a file or the terminal, in whatever form a server echoes it."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from urllib.parse import quote

from coinflip.models._redact import Redactor
from coinflip.models.base import Reply
from coinflip.testing.server import FakeOpenAIServer

from .answer_server import AnswerServer, Seen, answer, chat
from .conftest import only_run_dir, read_jsonl, run_cli

KEY = "sk-live/Secret\"Key<&>+'42"  # every escaping changes it


def forms(key: str) -> list[str]:
    lower_hex = re.sub("%[0-9A-F]{2}", lambda m: m.group().lower(), quote(key, safe=""))
    return [key, json.dumps(key)[1:-1], html.escape(key), quote(key, safe=""), lower_hex]


def test_every_form_of_the_key_is_masked() -> None:
    redact = Redactor([KEY])
    for form in [*forms(KEY), json.dumps(KEY)[1:-1].replace("/", "\\/"), f"Bearer {KEY}"]:
        assert redact(f"echo: {form}.") in ("echo: ***.", "echo: Bearer ***."), form
    assert redact("nothing here") == "nothing here" and Redactor([None])("sk") == "sk"


def test_a_reply_that_spells_the_key_loses_its_text_and_token_log_probabilities() -> None:
    reply = Reply(text=f"ANSWER: YES {KEY}", reasoning=html.escape(KEY), logprobs=[{"token": KEY, "logprob": -1.0}])
    clean = Redactor([KEY]).reply(reply)
    assert clean.text == "ANSWER: YES ***" and clean.reasoning == "***" and clean.logprobs is None


def _echo(seen: Seen) -> bytes:
    """Echo the key back: JSON-escaped in a 500, HTML-escaped in a 502, inside a reply."""
    key = seen.headers["authorization"].removeprefix("Bearer ")
    if seen.index % 3 == 0:
        return answer({"error": {"message": f"upstream refused key {key}"}}, 500)
    if seen.index % 3 == 1:
        page = f"<html><body>Bad gateway for key {html.escape(key)}</body></html>".encode()
        return answer(None, 502, raw=page)
    return answer(chat(f"{seen.right_answer} (you sent {key} / {quote(key, safe='')})"))


def test_an_echoed_key_reaches_no_prediction_report_or_terminal(tmp_path: Path) -> None:
    with AnswerServer(_echo) as srv:
        result = run_cli("eval", "--model", "m", "--api-url", srv.url, "--api-key", KEY, "--limit", "9",
                         "--retries", "0", "--eval-batch-size", "1", "--work-dir", str(tmp_path))  # fmt: skip
    assert result.returncode == 1, result.stderr
    run = only_run_dir(tmp_path)
    rows = read_jsonl(run / "predictions/m/coin_flip.jsonl")
    errors = sorted(r["error"] for r in rows if r["error"])
    assert errors[0] == "HTTP 500: upstream refused key ***"
    assert errors[-1] == "HTTP 502: <html><body>Bad gateway for key ***</body></html>"
    replies = [r["reply"] for r in rows if r["reply"]]
    assert len(replies) == 3 and all(r.endswith("(you sent *** / ***)") for r in replies)
    files = [p for p in run.rglob("*") if p.is_file()]
    assert any(p.suffix == ".html" for p in files)
    for text in [result.stdout + result.stderr, *(p.read_text(encoding="utf-8", errors="replace") for p in files)]:
        for form in forms(KEY):
            assert form not in text


def test_a_key_echoed_only_as_an_alternative_token_reaches_no_file(tmp_path: Path) -> None:
    """The reply's text is clean; the key is one of the top alternatives at the answer, which a run keeps."""

    def alternatives(seen: Seen) -> bytes:
        key = seen.headers["authorization"].removeprefix("Bearer ")
        reply = chat(seen.right_answer)
        tokens = ["ANSWER", ":", " YES"]
        top = [[{"token": t, "logprob": -0.1}, {"token": key, "logprob": -3.0}] for t in tokens]
        reply["choices"][0]["logprobs"] = {"content": [{**t[0], "top_logprobs": t} for t in top]}
        return answer(reply)

    with AnswerServer(alternatives) as srv:
        result = run_cli("eval", "--model", "m", "--api-url", srv.url, "--api-key", KEY, "--limit", "2", "--work-dir",
                         str(tmp_path), "--generation-config", "logprobs=true,top_logprobs=2")  # fmt: skip
    assert result.returncode == 0, result.stderr
    for path in [p for p in tmp_path.rglob("*") if p.is_file()]:
        text = path.read_text(encoding="utf-8", errors="replace")
        assert not any(form in text for form in forms(KEY)), path


def test_a_fatal_answer_that_echoes_the_key_prints_it_masked(tmp_path: Path) -> None:
    def refuse(seen: Seen) -> bytes:
        return answer({"error": {"message": f"Incorrect API key provided: {json.dumps(KEY)[1:-1]}"}}, 401)

    with AnswerServer(refuse) as srv:
        result = run_cli("eval", "--model", "m", "--api-url", srv.url, "--api-key", KEY, "--work-dir", str(tmp_path))
    assert result.returncode == 2
    assert "Incorrect API key provided: ***" in result.stderr
    for form in forms(KEY):
        assert form not in result.stdout + result.stderr


def test_a_gateways_secret_header_and_query_never_reach_a_file(tmp_path: Path) -> None:
    secret, sig = "azure-SECRET-4242", "sig-SECRET-9191"
    generation = json.dumps({"extra_headers": {"api-key": secret}, "extra_query": {"sig": sig, "api-version": "2024"}})
    with FakeOpenAIServer("correct") as srv:
        result = run_cli(
            "eval", "--model", "m", "--api-url", srv.url, "--generation-config", generation, "--limit", "3",
            "--work-dir", str(tmp_path),
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    for path in [p for p in tmp_path.rglob("*") if p.is_file()]:
        data = path.read_bytes()
        assert secret.encode() not in data and sig.encode() not in data, path
    assert b"2024" in next(tmp_path.rglob("task_config.yaml")).read_bytes()  # what is not secret stays


def test_the_resume_hint_names_the_options_whose_secrets_were_not_saved(tmp_path: Path) -> None:
    """The hint said `coinflip eval --use-cache RUN` alone, which then refused: the gateway's header and the
    URL's query value are not saved, so the options holding them are given again."""
    generation = json.dumps({"extra_headers": {"api-key": "azure-SECRET-4242"}})
    with FakeOpenAIServer("correct") as srv:
        url = f"{srv.url}?sig=sig-SECRET-9191"
        given = ("--api-url", url, "--generation-config", generation)
        costs = ("--price-input", "0", "--price-output", "0")
        capped = run_cli("eval", "--model", "m", *given, *costs, "--max-cost", "0", "--work-dir", str(tmp_path))
        hint = capped.stderr.strip().splitlines()[-1]
        run = next(tmp_path.glob("2*"))
        alone = run_cli("eval", "--use-cache", str(run))
        resumed = run_cli("eval", "--use-cache", str(run), *given, "--max-cost", "1")
    assert capped.returncode == 1 and "resume with: coinflip eval --use-cache" in hint, capped.stderr
    assert "give --generation-config and --api-url again" in hint and "SECRET" not in hint
    predictions = run / "predictions/m/coin_flip.jsonl"
    predictions.write_text("".join(predictions.read_text().splitlines(keepends=True)[:-1]))  # a sample owed
    rescored = run_cli("rescore", str(run))  # an incomplete run's report: the hint finish prints
    assert rescored.returncode == 1 and "give --generation-config and --api-url again" in rescored.stderr
    assert alone.returncode == 2 and resumed.returncode == 0, resumed.stderr
