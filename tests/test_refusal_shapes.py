"""A refusal is a refusal however a server words it (real servers on 127.0.0.1): a rate limit or an overload
sent as an error object in a 200 body or as an error event in a stream, and a 429 or 503 whose body passes
--max-reply-mb, each slow the run and use none of --retries, as a plain 429 does: no sample is lost."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from coinflip.models.base import Reply, Request
from coinflip.models.limits import Traffic
from coinflip.models.openai_api import OpenAIClient

from .answer_server import AnswerServer, Pieces, Seen, answer, chat

QUESTION = "Q: A coin is heads up. Ann flips the coin. Bob does not flip the coin. Is the coin still heads up?"
SSE = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
AT_ONCE = "Retry-After: 0"  # a refusal's wait as the server words it (without one: about a second each)

# what servers send for a rate limit or an overload, as their error object
SHAPES = {
    "OpenAI": {"message": "Rate limit reached for requests", "type": "requests", "code": "rate_limit_exceeded"},
    "Anthropic": {"type": "rate_limit_error", "message": "Number of request tokens has exceeded your rate limit"},
    "Anthropic overloaded": {"type": "overloaded_error", "message": "Overloaded"},
    "LiteLLM": {"message": "No deployments available", "type": "throttling_error", "param": None, "code": "429"},
    "vLLM or SGLang": {"message": "Too many requests", "type": "TooManyRequestsError", "code": 429},
    "a 503 as a code": {"message": "Service unavailable", "type": "ServiceUnavailableError", "code": 503},
}


def ask(respond: Any, **options: Any) -> tuple[Reply, Traffic, int]:
    """One request with --retries 0 to a server whose first answer is `respond`'s; then a right answer."""

    def reply(seen: Seen) -> bytes | Pieces:
        if seen.index == 0:
            return respond(seen)
        if options.get("stream"):
            delta = {"choices": [{"index": 0, "delta": {"content": seen.right_answer}, "finish_reason": "stop"}]}
            return Pieces([SSE + f"data: {json.dumps(delta)}\r\n\r\ndata: [DONE]\r\n\r\n".encode()])
        return answer(chat(seen.right_answer))

    async def go(url: str) -> tuple[Reply, Traffic]:
        client = OpenAIClient("m", url, **{"retries": 0, **options})
        await client.start()
        try:
            got = await client.complete(Request(0, QUESTION, QUESTION, [{"role": "user", "content": QUESTION}]))
            return got, client.traffic()
        finally:
            await client.aclose()

    with AnswerServer(reply) as srv:
        got, traffic = asyncio.run(go(srv.url))
        return got, traffic, len(srv.seen)


def _refused_then_answered(got: Reply, traffic: Traffic, sent: int) -> None:
    assert got.error is None and got.text is not None and got.text.endswith("**"), got
    assert sent == 2 and traffic.rejected == 1 and traffic.retried == 0 and got.attempts == 2


@pytest.mark.parametrize("shape", SHAPES)
def test_a_refusal_in_a_200_body_waits_and_loses_no_sample(shape: str) -> None:
    got, traffic, sent = ask(lambda seen: answer({"error": SHAPES[shape]}, 200, AT_ONCE))
    _refused_then_answered(got, traffic, sent)


@pytest.mark.parametrize("shape", SHAPES)
def test_a_refusal_as_a_stream_event_waits_and_loses_no_sample(shape: str) -> None:
    event = f"data: {json.dumps({'error': SHAPES[shape]})}\r\n\r\n".encode()
    head = SSE.replace(b"\r\n\r\n", f"\r\n{AT_ONCE}\r\n\r\n".encode())
    got, traffic, sent = ask(lambda seen: Pieces([head + event]), stream=True)
    _refused_then_answered(got, traffic, sent)


def test_an_anthropic_error_event_waits_and_loses_no_sample() -> None:
    """Anthropic's own stream: `event: error` with `{"type": "error", "error": {"type": "overloaded_error"}}`."""
    said = {"type": "error", "error": SHAPES["Anthropic overloaded"]}
    event = f"event: error\r\ndata: {json.dumps(said)}\r\n\r\n".encode()
    got, traffic, sent = ask(lambda seen: Pieces([SSE + event]), stream=True)
    _refused_then_answered(got, traffic, sent)


def test_an_error_object_that_is_no_refusal_still_uses_up_the_retries() -> None:
    got, traffic, sent = ask(lambda seen: answer({"error": {"message": "upstream crashed", "type": "server_error"}}))
    assert got.error == "HTTP 200 with an error: upstream crashed" and sent == 1 and traffic.rejected == 0


@pytest.mark.parametrize("status", [429, 503])
@pytest.mark.parametrize("framing", ["length", "chunked"])
def test_a_refusal_with_a_body_past_the_reply_cap_waits_and_loses_no_sample(status: int, framing: str) -> None:
    """Its body is no answer, only words: past --max-reply-mb it is dropped, unread, and the status counts."""
    big = json.dumps({"error": {"message": "x" * (2 << 20)}}).encode()
    head = f"HTTP/1.1 {status} Refused\r\nContent-Type: application/json\r\n{AT_ONCE}\r\n"
    if framing == "length":
        raw = head.encode() + b"Content-Length: %d\r\n\r\n" % len(big) + big
    else:
        raw = head.encode() + b"Transfer-Encoding: chunked\r\n\r\n%x\r\n" % len(big) + big + b"\r\n0\r\n\r\n"
    got, traffic, sent = ask(lambda seen: Pieces([raw]), max_reply_bytes=1 << 20)
    _refused_then_answered(got, traffic, sent)


REFUSED = f"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n{AT_ONCE}\r\n".encode()
BROKEN_BODIES = {
    "bad gzip": Pieces([REFUSED + b"Content-Encoding: gzip\r\nContent-Length: 9\r\n\r\n\x1f\x8bnot gz"]),
    "an unknown coding": Pieces([REFUSED + b"Content-Encoding: x-foo\r\nContent-Length: 2\r\n\r\n{}"]),
    "cut short": Pieces([REFUSED + b'Content-Length: 99\r\n\r\n{"error": '], close=True),
    "never ending": Pieces([REFUSED + b'Transfer-Encoding: chunked\r\n\r\n9\r\n{"error":\r\n'], close=False),
}


@pytest.mark.parametrize("body", BROKEN_BODIES)
def test_a_refusal_whose_body_cannot_be_read_waits_and_loses_no_sample(body: str) -> None:
    """The 429 was said in its head: a body that does not decode, ends early or never ends is only lost words."""
    got, traffic, sent = ask(lambda seen: BROKEN_BODIES[body], timeout=1.0)
    _refused_then_answered(got, traffic, sent)


@pytest.mark.parametrize("code", [401, 404, 500, "302"])
def test_an_error_object_naming_no_refusal_is_recorded_with_the_status_that_came(code: Any) -> None:
    """The reply was a 200: its object's code is no HTTP status of the request (the message says `HTTP 200`)."""
    got, traffic, sent = ask(lambda seen: answer({"error": {"message": "no", "code": code}}))
    assert got.error == "HTTP 200 with an error: no" and got.status == 200 and sent == 1 and traffic.rejected == 0


def test_text_generation_inferences_overloaded_event_waits_and_loses_no_sample() -> None:
    """TGI streams its semaphore's refusal in the 200 stream, the error a string beside its `error_type`."""
    event = b'data: {"error":"Model is overloaded","error_type":"overloaded"}\r\n\r\n'
    got, traffic, sent = ask(lambda seen: Pieces([SSE + event]), stream=True)
    _refused_then_answered(got, traffic, sent)


def test_an_error_line_as_the_llama_cpp_server_sends_it_is_the_servers_error() -> None:
    """llama.cpp's server sends a failure as an `error:` line, then [DONE]: its words, not 'without any choice'."""
    said = {"code": 400, "message": "the request exceeds the available context size", "type": "exceed_context"}
    event = f"error: {json.dumps(said)}\n\ndata: [DONE]\n\n".encode()
    got, traffic, sent = ask(lambda seen: Pieces([SSE + event]), stream=True)
    assert got.error == "the stream carried an error: the request exceeds the available context size" and sent == 1
