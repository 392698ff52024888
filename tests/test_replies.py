"""Reply parsing, field by field: each odd value becomes text, a whole number, or nothing."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from coinflip.models._replies import BadReply, StreamReply, parse_body, server_message, text_of, usage
from coinflip.models._request import endpoint_url
from coinflip.models.openai_api import EarlyStop


@pytest.mark.parametrize(
    ("content", "text"),
    [
        ("plain", "plain"),
        (None, None),
        (1, "1"),
        (2.5, "2.5"),
        (True, "true"),
        ([{"type": "text", "text": "a"}, "b", {"type": "image_url", "image_url": {}}, 3, {"text": "c"}], "abc"),
    ],
)
def test_content_becomes_text(content: Any, text: str | None) -> None:
    assert text_of(content) == text


def test_content_that_is_an_object_is_a_bad_reply() -> None:
    with pytest.raises(BadReply, match="content is a JSON dict"):
        text_of({"text": "x"})


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"prompt_tokens": "120", "completion_tokens": 5}, {"prompt_tokens": 120, "completion_tokens": 5}),
        ({"prompt_tokens": math.nan, "completion_tokens": math.inf, "total_tokens": -1}, None),
        ({"prompt_tokens": 3.0, "completion_tokens": 2.5, "total_tokens": True}, {"prompt_tokens": 3}),
        ({"completion_tokens_details": {"reasoning_tokens": 4}}, {"reasoning_tokens": 4}),
        ({"prompt_tokens": "1" * 40}, None),
        ([1, 2], None),
    ],
)  # fmt: skip
def test_usage_keeps_whole_token_counts_only(raw: Any, expected: dict[str, int] | None) -> None:
    assert usage(raw) == expected


def test_non_finite_log_probabilities_are_kept_by_name() -> None:
    body = (
        b'{"choices": [{"message": {"content": "ab"}, "logprobs": {"content": ['
        b'{"token": "a", "logprob": -Infinity, "top_logprobs": '
        b'[{"token": "a", "logprob": NaN}, {"token": "b", "logprob": -2}]},'
        b'{"token": 7, "logprob": -1}, {"token": "b", "logprob": -0.5, "top_logprobs": "oops"}]}}]}'
    )  # fmt: skip
    reply = parse_body(body, "chat")
    a = {"token": "a", "logprob": "-Infinity", "top": {"a": "NaN", "b": -2.0}}
    b = {"token": "b", "logprob": -0.5, "top": {}}
    assert reply.logprobs == [a, b]


def test_completion_log_probabilities_and_more_choices() -> None:
    logprobs = {"tokens": ["A", "B"], "token_logprobs": [-0.1, None], "top_logprobs": [{"A": -0.1, "C": -3}, None]}
    body = (
        b'{"choices": [{"index": 1, "text": "second"}, {"index": 0, "text": "AB", "finish_reason": "length", '
        b'"logprobs": ' + json.dumps(logprobs).encode() + b"}]}"
    )
    reply = parse_body(body, "completions")
    assert (reply.text, reply.finish_reason, [r.text for r in reply.more]) == ("AB", "length", ["second"])
    a, b = {"token": "A", "logprob": -0.1, "top": {"A": -0.1, "C": -3.0}}, {"token": "B", "logprob": None, "top": {}}
    assert reply.logprobs == [a, b]


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b"[1, 2]", "not a JSON object"),
        (b'{"choices": []}', "no choices"),
        (b'{"choices": [{"message": "hi"}]}', "no choices[0].message"),
        (b'{"choices": [{"text": "x"}], "error": {"message": "quota"}}', "HTTP 200 with an error: quota"),
        (b"[" * 50_000 + b"]" * 50_000, "nested too deeply"),
        (b"\xff\xfe", "malformed response body"),
    ],
)
@pytest.mark.usefixtures("no_old_garbage")
def test_unusable_bodies_are_bad_replies(body: bytes, error: str) -> None:
    with pytest.raises(BadReply, match=error.replace("[", r"\[").replace("]", r"\]")):
        parse_body(body, "chat")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"error": {"message": "model   not\\nfound"}}', "model   not\ufffdfound"),
        (b'{"detail": [{"loc": ["body"], "msg": "too big"}]}', '[{"loc": ["body"], "msg": "too big"}]'),
        (b'{"error": "plain"}', "plain"),
        (b"<h1>502 Bad Gateway</h1>\n", "<h1>502 Bad Gateway</h1>"),
        (b"<html><head><title>502 Bad\n Gateway &amp; co</title><style>p{}</style></head><body>x</body></html>",
         "502 Bad\ufffd Gateway & co (an HTML page)"),
        (b"<html><title></title><body>x</body></html>", "<html><title></title><body>x</body></html>"),
        (b"x" * 5000, "x" * 1999 + "…"),
    ],
)  # fmt: skip
def test_the_servers_message_is_kept_on_one_line(body: bytes, message: str) -> None:
    assert server_message(body) == message


def test_a_stream_without_choices_is_a_bad_reply() -> None:
    with pytest.raises(BadReply, match="without any choice"):
        stream = StreamReply("chat")
        stream.add(0.0, "message", '{"choices": [], "usage": {"prompt_tokens": 1}}')
        assert stream.add(0.0, "message", "[DONE]")
        stream.reply(0.0)


@pytest.mark.parametrize(
    ("url", "mode", "query", "expected"),
    [
        ("https://h/openai/deployments/x?api-version=2024-02-01", "chat", None,
         "https://h/openai/deployments/x/chat/completions?api-version=2024-02-01"),
        ("https://h/v1/chat/completions?a=1", "completions", {"b": "two words", "c": True},
         "https://h/v1/completions?a=1&b=two+words&c=true"),
        ("http://h:8000/", "chat", {"v": 1}, "http://h:8000/v1/chat/completions?v=1"),
    ],
)  # fmt: skip
def test_endpoint_urls_keep_their_query(url: str, mode: str, query: dict[str, Any] | None, expected: str) -> None:
    assert endpoint_url(url, mode, query) == expected


def test_the_early_stop_rule() -> None:
    stop = EarlyStop(3)
    assert not stop.failure("HTTP 500: request 1 failed") and not stop.failure("HTTP 500: request 22 failed")
    assert stop.failure("HTTP 500: request 333 failed")  # digits aside, the same error three times
    mixed = EarlyStop(3)
    assert not any(mixed.failure(m) for m in ("HTTP 500: a", "HTTP 503: b", "HTTP 500: a", "HTTP 500: a"))
    assert mixed.failure("HTTP 500: a")  # the last three alike
    revived = EarlyStop(3)  # a server that dies mid-run: the recent outcomes, not only the first
    revived.success()
    assert not revived.failure("HTTP 500: a") and not revived.failure("HTTP 500: a")
    assert revived.failure("Connection refused") is False and not revived.failure("HTTP 500: a")
    assert not revived.failure("HTTP 500: a") and revived.failure("HTTP 500: a")


def test_a_finish_reason_is_kept_to_its_first_64_characters_in_a_body_and_a_stream() -> None:
    """A server may send anything as finish_reason: a megabyte of it, in every reply, was saved in
    every row and counted as its own kind in the report."""
    noise = "length" + "x" * 1_000_000
    body = json.dumps({"choices": [{"index": 0, "message": {"content": "ANSWER: NO"}, "finish_reason": noise}]})
    stream = StreamReply("chat")
    delta = {"choices": [{"index": 0, "delta": {"content": "ANSWER: NO"}, "finish_reason": noise}]}
    stream.add(0.0, "message", json.dumps(delta))
    assert stream.add(0.0, "message", "[DONE]")
    for reply in (parse_body(body.encode(), "chat"), stream.reply(0.0)):
        assert reply.finish_reason == noise[:64]
