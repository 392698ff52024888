"""Streaming against real servers on 127.0.0.1 that send server-sent events in small chunks."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from coinflip.models._sse import SSEDecoder
from coinflip.models.base import Reply, Request
from coinflip.models.openai_api import OpenAIClient
from coinflip.testing.policy import Policy
from coinflip.testing.server import FakeOpenAIServer

from .answer_server import AnswerServer, Pieces
from .conftest import only_run_dir, read_jsonl, run_cli
from .test_eval_server import expected_metrics

QUESTION = "Q: A coin is heads up. Ann flips the coin. Bob does not flip the coin. Is the coin still heads up?"


def ask(url: str, **options: Any) -> Reply:
    async def go() -> Reply:
        chat = OpenAIClient("m", url, **{"stream": True, "retries": 0, **options})
        await chat.start()
        try:
            return await chat.complete(Request(0, QUESTION, QUESTION, [{"role": "user", "content": QUESTION}]))
        finally:
            await chat.aclose()

    return asyncio.run(go())


@pytest.mark.parametrize("usage", [True, False])
@pytest.mark.parametrize("mode", ["chat", "completions"])
def test_a_streamed_run_scores_like_a_plain_one(usage: bool, mode: str, tmp_path: Path) -> None:
    with FakeOpenAIServer("mixed", stream_gap=0.002, stream_usage=usage, record=True) as srv:
        result = run_cli("eval", "--model", "m", "--api-url", srv.url, "--stream", "--api-mode", mode, "--limit", "12",
                         "--work-dir", str(tmp_path))  # fmt: skip
        body = srv.state.seen[0][2]
    assert result.returncode == 0, result.stderr
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    run = only_run_dir(tmp_path)
    report = json.loads((run / "reports/m/coin_flip.json").read_text())
    assert report["metrics"] == pytest.approx(expected_metrics(run, Policy("mixed")))
    rows = read_jsonl(run / "predictions/m/coin_flip.jsonl")
    assert all(r["finish_reason"] == "stop" and r["error"] is None for r in rows)
    assert all((r["usage"] is not None) == usage for r in rows)
    if mode == "chat":  # the reasoning deltas, joined apart from the answer
        assert all(r["reasoning"].startswith("Scratch work that must never be scored.") for r in rows)


def test_deltas_are_joined_and_the_first_token_is_timed() -> None:
    with FakeOpenAIServer("correct", stream_gap=0.01, latency=0.2) as srv:
        started = time.monotonic()
        reply = ask(srv.url, generation={"n": 2, "logprobs": True})
        elapsed = time.monotonic() - started
    assert reply.error is None and reply.text == Policy("correct").reply(QUESTION)
    assert reply.reasoning == "Scratch work that must never be scored. ANSWER: YES"
    assert reply.usage is not None and reply.usage["completion_tokens"] > 0
    assert reply.ttft_s is not None and 0.2 <= reply.ttft_s < 0.2 + 0.15 < elapsed  # before the rest of the stream
    assert len(reply.more) == 1 and reply.more[0].text == reply.text
    assert reply.logprobs is not None and "".join(e["token"] for e in reply.logprobs) == reply.text


def test_an_idle_gap_longer_than_the_timeout_fails_the_attempt_and_the_retry_succeeds() -> None:
    with FakeOpenAIServer("correct", stream_gap=0.005, stream_stalls=[3.0, 3.0]) as srv:
        started = time.monotonic()
        failed = ask(srv.url, timeout=0.5)
        waited = time.monotonic() - started
        retried = ask(srv.url, timeout=0.5, retries=1, backoff_base=0.01)
    assert failed.text is None and waited < 2.0
    assert failed.error is not None and failed.error.startswith("TimeoutError: no complete reply within 0.5 s (")
    assert "events received" in failed.error
    assert retried.error is None and retried.attempts == 2 and retried.text == Policy("correct").reply(QUESTION)


def _events(*chunks: dict[str, Any] | str) -> list[bytes]:
    return [f"data: {c if isinstance(c, str) else json.dumps(c)}\r\n\r\n".encode() for c in chunks]


def _delta(content: str) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {"content": content}}]}


def test_a_close_delimited_stream_split_byte_by_byte() -> None:
    """An HTTP/1.0-style stream (no length, no chunks: it ends when the server hangs up), with
    CRLF line ends, a comment and an event id, arriving one byte at a time."""
    events = b": keep-alive\r\n\r\nid: 1\r\n" + b"".join(_events(_delta("ANSWER: "), _delta("YES"), "[DONE]"))
    raw = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + events
    with AnswerServer(lambda s: Pieces([raw[i : i + 1] for i in range(len(raw))], gap=0.0005)) as srv:
        reply = ask(srv.url)
    assert reply.error is None and reply.text == "ANSWER: YES" and reply.usage is None


@pytest.mark.parametrize("media", [b"Content-Type: Text/Event-Stream; charset=UTF-8\r\n", b""])
def test_a_media_type_in_capitals_or_none_is_a_stream_too(media: bytes) -> None:
    """RFC 9110 8.3.1: a media type's type and subtype are case-insensitive; and a stream sent without one
    (FastAPI's StreamingResponse given no media_type) is read as the stream asked for, as OpenAI's SDK does."""
    head = b"HTTP/1.1 200 OK\r\n" + media + b"\r\n"
    events = b"".join(_events(_delta("ANSWER: "), _delta("YES"), "[DONE]"))
    with AnswerServer(lambda s: Pieces([head + events])) as srv:
        reply = ask(srv.url)
    assert reply.error is None and reply.text == "ANSWER: YES"


def test_an_error_event_is_recorded_with_the_servers_message() -> None:
    """(One naming a refusal, a 429 or 529 say, is a refusal: see test_refusal_shapes.py.)"""
    body = b"".join(_events(_delta("ANSWER:"), {"error": {"message": "upstream crashed", "code": 500}}))
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n" % len(body)
    with AnswerServer(lambda s: head + body) as srv:
        reply = ask(srv.url)
    assert reply.text is None and reply.error == "the stream carried an error: upstream crashed"


def test_an_error_event_in_plain_text_is_recorded_with_the_servers_words() -> None:
    body = b"".join(_events(_delta("ANSWER:"))) + b"event: error\r\ndata: upstream overloaded\r\n\r\n"
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n" % len(body)
    with AnswerServer(lambda s: head + body) as srv:
        reply = ask(srv.url)
    assert reply.text is None and reply.error == "the stream carried an error: upstream overloaded"


def test_a_server_that_ignores_stream_is_read_as_plain_json() -> None:
    with FakeOpenAIServer("correct") as srv:
        reply = ask(srv.url, generation={"extra_body": {"stream": False}})
    assert reply.error is None and reply.text == Policy("correct").reply(QUESTION) and reply.ttft_s is None


@pytest.mark.parametrize("size", [1, 2, 3, 7])
def test_the_sse_decoder_gives_the_same_events_however_the_bytes_are_split(size: int) -> None:
    stream = (
        b"\xef\xbb\xbfdata: one\r\n\r\n"  # a byte order mark opens the stream
        b": a comment\n"
        b"event: error\ndata: two\ndata:  three\r\r"  # two data lines; CR alone ends lines too
        b"data\n\n"  # a field without a colon: empty data
        b"id: 7\nretry: 10\n\n"  # no data: no event
        b"data: caf\xc3\xa9\n\n"
        b"data: never finished"  # pending at the end: dropped
    )
    decoder = SSEDecoder()
    got = [e for i in range(0, len(stream), size) for e in decoder.feed(stream[i : i + size])]
    assert got == [("message", "one"), ("error", "two\n three"), ("message", ""), ("message", "café")]


@pytest.mark.parametrize("ending", [b"data: [DONE]\n\n", b"data: {cut\n\n"])
def test_events_where_no_stream_was_asked_are_read_as_the_stream_they_are(ending: bytes) -> None:
    """A server that always streams: the sample's error said "malformed response body (JSONDecodeError...)". Events
    that parse are the answer (untimed: no stream was asked); others say the server streamed unasked."""
    body = b"".join(_events(_delta("ANSWER: "), _delta("YES"))) + ending
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n" % len(body)
    with AnswerServer(lambda s: head + body) as srv:
        reply = ask(srv.url, stream=False)
    if b"DONE" in ending:
        assert reply.error is None and reply.text == "ANSWER: YES" and reply.ttft_s is None, reply
    else:
        assert reply.text is None and (reply.error or "").startswith("the server streamed though no stream was asked")
