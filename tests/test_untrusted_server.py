"""What a server sends is untrusted: streams split at any byte, a stream that never ends its HTTP
message, replies that cost far more than their bytes, header names that would forge a request,
and escape sequences in a server's messages. Each against a real server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import http.client
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coinflip.config import parse_generation_config
from coinflip.errors import ConfigError
from coinflip.models._sse import SSEDecoder
from coinflip.models.base import Reply, Request
from coinflip.models.openai_api import OpenAIClient
from coinflip.testing.server import FakeOpenAIServer

from .answer_server import AnswerServer, Pieces, answer, chat
from .conftest import only_run_dir, read_jsonl, run_cli
from .test_http import Say, ScriptedServer
from .test_streaming import QUESTION, ask

MB = 1024 * 1024


def _real_stream() -> bytes:
    """The bytes of a streamed answer as the test server sends them: reasoning and content deltas,
    two choices, log probabilities, usage, [DONE]."""
    body = {
        "model": "m",
        "stream": True,
        "stream_options": {"include_usage": True},
        "n": 2,
        "logprobs": True,
        "messages": [{"role": "user", "content": QUESTION}],
    }
    with FakeOpenAIServer("correct") as srv:
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
        conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        raw = conn.getresponse().read()
        conn.close()
    return raw


REAL = _real_stream()
STREAMS = {"LF": REAL, "CRLF": REAL.replace(b"\n", b"\r\n"), "CR": REAL.replace(b"\n", b"\r")}


def decode(pieces: list[bytes]) -> list[tuple[str, str]]:
    decoder = SSEDecoder()
    return [event for piece in pieces for event in decoder.feed(piece)]


def split(raw: bytes, cuts: list[int]) -> list[bytes]:
    points = [0, *sorted(cuts), len(raw)]
    return [raw[a:b] for a, b in zip(points, points[1:], strict=False)]


def test_the_real_stream_decodes_the_same_with_any_line_ending() -> None:
    events = decode([REAL])
    assert len(events) == REAL.count(b"data:") > 20 and events[-1] == ("message", "[DONE]")
    assert decode([STREAMS["CRLF"]]) == events and decode([STREAMS["CR"]]) == events


@pytest.mark.parametrize("ending", STREAMS)
def test_every_single_split_of_a_real_stream_gives_the_same_events(ending: str) -> None:
    raw = STREAMS[ending]
    whole = decode([raw])
    for cut in range(len(raw) + 1):
        assert decode(split(raw, [cut])) == whole, cut


def test_a_crlf_whose_lf_arrives_alone_before_a_blank_line_loses_nothing() -> None:
    """`...\\r` | `\\n` | `\\n...`: the LF ends the CRLF, the next LF is the blank line that dispatches."""
    raw = STREAMS["CRLF"]
    whole = decode([raw])
    for at in (i for i in range(len(raw)) if raw[i : i + 1] == b"\r"):
        assert decode(split(raw, [at + 1, at + 2])) == whole, at
    assert decode([b"data: x\r", b"\n", b"\n"]) == [("message", "x")]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ending=st.sampled_from(sorted(STREAMS)), data=st.data())
def test_any_split_of_a_real_stream_gives_the_same_events(ending: str, data: st.DataObject) -> None:
    raw = STREAMS[ending]
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=40))
    assert decode(split(raw, cuts)) == decode([raw])


_LINE_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"), max_size=12)
_EVENT = st.tuples(
    st.one_of(st.none(), st.text("abcdefgh", min_size=1, max_size=6)),  # the event type
    st.lists(_LINE_TEXT, max_size=3),  # data lines; none: an event that is never dispatched
    st.booleans(),  # a comment line before it
)


@settings(max_examples=300, deadline=None)
@given(events=st.lists(_EVENT, max_size=8), endings=st.lists(st.sampled_from(["\n", "\r", "\r\n"]), min_size=1),
       data=st.data())  # fmt: skip
def test_generated_streams_give_their_events_however_split(
    events: list[tuple[str | None, list[str], bool]], endings: list[str], data: st.DataObject
) -> None:
    lines: list[str] = []
    expected = []
    for kind, texts, comment in events:
        lines += [": note"] * comment + ([f"event: {kind}"] if kind else []) + [f"data: {t}" for t in texts] + [""]
        if texts:
            expected.append((kind or "message", "\n".join(texts)))
    text, previous = "", ""
    for i, line in enumerate(lines):
        ending = endings[i % len(endings)]
        if previous == "\r" and not line and ending.startswith("\n"):
            ending = "\r"  # "\r" then "\n" would be one CRLF, not a blank line
        text, previous = text + line + ending, ending
    raw = text.encode()
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=20))
    assert decode(split(raw, cuts)) == expected


def _events(*chunks: dict[str, Any] | str) -> bytes:
    return b"".join(f"data: {c if isinstance(c, str) else json.dumps(c)}\r\n\r\n".encode() for c in chunks)


def _delta(content: str) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {"content": content}}]}


CHUNKED_STREAM = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def test_done_completes_a_reply_whose_http_message_never_ends() -> None:
    """The server sends [DONE] but neither the last chunk nor a hang-up: the reply is whole at
    [DONE], so no timeout is waited out and nothing is asked twice."""
    stream = _events(_delta("ANSWER: "), _delta("YES"), "[DONE]")
    with AnswerServer(lambda s: Pieces([CHUNKED_STREAM + _chunk(stream)], close=False)) as srv:
        started = time.monotonic()
        reply = ask(srv.url, timeout=30, retries=2)
        elapsed = time.monotonic() - started
        asked = len(srv.seen)
    assert reply.error is None and reply.text == "ANSWER: YES" and reply.attempts == 1 and asked == 1
    assert elapsed < 30  # the timeout, which the old client waited out before asking again


def test_done_keeps_the_connection_when_the_message_ends_just_after() -> None:
    """The usual case (vLLM writes the last chunk apart from [DONE]): the connection is kept."""
    answer_ = [CHUNKED_STREAM + _chunk(_events(_delta("ANSWER: YES"), "[DONE]")), b"0\r\n\r\n"]
    srv = ScriptedServer([Say(answer_), Say(answer_)])  # 10 ms between [DONE] and the last chunk
    try:

        async def twice() -> list[Reply]:
            chat = OpenAIClient("m", srv.url(), stream=True, retries=0)
            request = Request(0, QUESTION, QUESTION, [{"role": "user", "content": QUESTION}])
            try:
                return [await chat.complete(request), await chat.complete(request)]
            finally:
                await chat.aclose()

        replies = asyncio.run(twice())
    finally:
        srv.close()
    assert [r.text for r in replies] == ["ANSWER: YES", "ANSWER: YES"] and srv.connections == 1


def test_a_stream_of_tiny_events_fails_its_sample_cheaply_and_is_not_retried() -> None:
    """3 MB of `data: {}` under a 4 MB cap: 300,000 events, each costing far more than its 10 bytes;
    the sample fails within the first chunks read, not at the cap."""
    tiny = b"data: {}\n\n" * 300_000
    pieces = [CHUNKED_STREAM] + [_chunk(tiny[i : i + 65536]) for i in range(0, len(tiny), 65536)] + [b"0\r\n\r\n"]
    with AnswerServer(lambda s: Pieces(pieces, close=False, gap=0)) as srv:
        reply = ask(srv.url, max_reply_bytes=4 * MB, retries=3)
        asked = len(srv.seen)
    assert reply.text is None and reply.error is not None and reply.attempts == 1 and asked == 1
    assert re.fullmatch(r"the stream sent \d+ events in \d+ bytes; real streams' events average over 32 bytes",
                        reply.error)  # fmt: skip


def test_a_long_stream_of_real_events_under_the_cap_is_kept() -> None:
    deltas = [_delta("x") for _ in range(20_000)]  # 20,000 events of 61 bytes, as small as real ones get
    stream = _events(*deltas, _delta(" ANSWER: YES"), "[DONE]")
    with AnswerServer(lambda s: Pieces([CHUNKED_STREAM + _chunk(stream), b"0\r\n\r\n"], close=False)) as srv:
        reply = ask(srv.url, max_reply_bytes=4 * MB)
    assert reply.error is None and reply.text == "x" * 20_000 + " ANSWER: YES"


def test_a_reply_of_many_small_json_objects_fails_its_sample_and_the_run_says_why(tmp_path: Path) -> None:
    """1.2 MB of `{}` would build 400,000 dicts (some 30 MB); under a 4 MB cap at most 262,144
    JSON values are read. The same characters inside a string cost nothing and are kept."""
    pad = b"[" + b"{}," * 400_000 + b"{}]"

    def respond(seen: Any) -> bytes:
        if seen.index % 2:
            return answer(chat(seen.right_answer + " {}," * 150_000))
        head = json.dumps(chat(seen.right_answer)).encode()[:-1]
        return answer(None, raw=head + b', "pad": ' + pad + b"}")

    with AnswerServer(respond) as srv:
        result = run_cli("eval", "--model", "m", "--api-url", srv.url, "--limit", "4", "--eval-batch-size", "1",
                         "--retries", "2", "--max-reply-mb", "4", "--work-dir", str(tmp_path))  # fmt: skip
        asked = len(srv.seen)
    assert result.returncode == 1, result.stderr
    rows = sorted(read_jsonl(only_run_dir(tmp_path) / "predictions/m/coin_flip.jsonl"), key=lambda r: r["id"])
    errors = [r["error"] for r in rows if r["error"]]
    assert len(errors) == 2 and asked == 4  # not retried
    expected = "the reply holds more than 262144 JSON values (one per 16 bytes of 4 MB); raise max_reply_mb"
    assert errors == [expected + " to keep such replies"] * 2
    assert all(r["reply"].endswith(" {}," * 150_000) for r in rows if not r["error"])


@pytest.mark.parametrize("name", ["X-Api-Key: forged", "X Api", "X-Api\t", " X-Api", "X-Api:", "Ünïcode"])
def test_header_names_that_would_forge_a_request_are_refused_before_anything_is_sent(name: str, tmp_path: Path) -> None:
    config = json.dumps({"extra_headers": {name: "v"}})
    with FakeOpenAIServer("correct", record=True) as srv:
        result = run_cli("eval", "--model", "m", "--api-url", srv.url, "--limit", "2", "--generation-config", config,
                         "--work-dir", str(tmp_path))  # fmt: skip
        sent = len(srv.state.seen)
    assert result.returncode == 2 and sent == 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "a header name is letters, digits and" in lines[0] and "Traceback" not in result.stderr


_TOKEN = set("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


@settings(max_examples=300, deadline=None)
@given(name=st.text(min_size=1, max_size=8))
def test_a_header_name_is_accepted_exactly_when_it_is_a_token(name: str) -> None:
    try:
        parse_generation_config(json.dumps({"extra_headers": {name: "v"}}))
        accepted = True
    except ConfigError:
        accepted = False
    assert accepted == (set(name) <= _TOKEN)


def test_escape_sequences_in_a_servers_message_are_neutralised_everywhere(tmp_path: Path) -> None:
    hostile = "\x1b[2J\x1b]0;pwned\x07upstream \x9b31mexploded\x1b[0m"
    with AnswerServer(lambda s: answer({"error": {"message": hostile}}, 500)) as srv:
        result = run_cli("eval", "--model", "m", "--api-url", srv.url, "--limit", "3", "--retries", "0",
                         "--work-dir", str(tmp_path))  # fmt: skip
    assert result.returncode == 1
    run = only_run_dir(tmp_path)
    log = (run / "logs/eval_log.log").read_text(encoding="utf-8")
    rows = read_jsonl(run / "predictions/m/coin_flip.jsonl")
    assert "upstream" in log and "exploded" in log
    for text in (log, result.stderr, result.stdout, *(r["error"] for r in rows)):
        assert not set(text) & {"\x1b", "\x07", "\x9b"}, text
    assert all("upstream" in r["error"] and "\ufffd" in r["error"] for r in rows)
