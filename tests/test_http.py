"""The HTTP transport (aiohttp, with coinflip's limits and messages) against a real TCP server on
127.0.0.1 that answers byte for byte as scripted: the framings, encodings and failures that real
servers and proxies send."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gzip
import json
import os
import socket
import ssl
import struct
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pytest

from coinflip.errors import EndpointBroken, EndpointError, FatalAPIError
from coinflip.models._http import ConnectionPool, ReplyTooLarge, Response
from coinflip.models._wire import ProtocolError, Target
from coinflip.models.base import Request
from coinflip.models.openai_api import OpenAIClient

from .answer_server import content_length, read_head
from .conftest import run_cli


@dataclass
class Say:
    """One scripted answer: sent in `pieces` (to split it across reads), `gap` seconds apart, then
    maybe a hang-up (`close`), a reset (`reset`: no FIN, an RST) or silence with the connection open
    (`hang`)."""

    pieces: list[bytes]
    close: bool = False
    hang: bool = False
    reset: bool = False
    gap: float = 0.01


@dataclass
class ScriptedServer:
    script: list[Say]
    tls: ssl.SSLContext | None = None
    requests: list[bytes] = field(default_factory=list)
    connections: int = 0

    def __post_init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.port}/v1/chat/completions"

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            if self.tls is not None:
                try:
                    conn = self.tls.wrap_socket(conn, server_side=True)
                except (ssl.SSLError, OSError):  # the client refused our certificate
                    conn.close()
                    continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as reader, contextlib.suppress(OSError):  # a client may reset it
            while self.script:
                head = read_head(reader)
                if head is None:
                    return
                self.requests.append(head + reader.read(content_length(head)))
                say = self.script.pop(0)
                try:
                    for piece in say.pieces:
                        conn.sendall(piece)
                        time.sleep(say.gap)
                except OSError:  # the client hung up, as it should on a malformed reply
                    return
                if say.reset:
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                if say.hang:
                    self.stop.wait(10)
                if say.close or say.reset or say.hang:
                    return

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


@pytest.fixture
def scripted() -> Iterator[Any]:
    servers: list[ScriptedServer] = []

    def make(*script: Say, tls: ssl.SSLContext | None = None) -> ScriptedServer:
        servers.append(ScriptedServer(list(script), tls))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


def ok(body: bytes, *headers: str) -> bytes:
    head = ["HTTP/1.1 200 OK", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def post_all(url: str, count: int = 1, timeout: float = 5.0, proxy: str | None = None) -> list[Response]:
    async def go() -> list[Response]:
        client = ConnectionPool({"Content-Type": "application/json", "Authorization": "Bearer k"}, timeout, proxy)
        try:
            return [await client.post(url, b'{"n": %d}' % i) for i in range(count)]
        finally:
            await client.aclose()

    return asyncio.run(go())


def test_keep_alive_reuses_one_connection_and_sends_a_proper_request(scripted: Any) -> None:
    srv = scripted(Say([ok(b"one")]), Say([ok(b"two")]))
    first, second = post_all(srv.url(), 2)
    assert (first.status, first.body, second.body) == (200, b"one", b"two")
    assert srv.connections == 1
    head, _, body = srv.requests[0].partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "POST /v1/chat/completions HTTP/1.1"
    assert f"Host: 127.0.0.1:{srv.port}" in lines and "Authorization: Bearer k" in lines
    assert f"Content-Length: {len(body)}" in lines and body == b'{"n": 0}'


def test_chunked_body_with_extensions_and_trailers_split_across_reads(scripted: Any) -> None:
    raw = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;note=x\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nX-Trailer: 1\r\n\r\n"
    )
    srv = scripted(Say([raw[i : i + 7] for i in range(0, len(raw), 7)]), Say([ok(b"next")]))
    first, second = post_all(srv.url(), 2)
    assert first.body == b"hello world" and second.body == b"next"
    assert srv.connections == 1  # the chunked reply ended cleanly, so the connection was kept


def test_body_delimited_by_close_then_a_fresh_connection(scripted: Any) -> None:
    srv = scripted(Say([b"HTTP/1.1 200 OK\r\n\r\nuntil ", b"the end"], close=True), Say([ok(b"again")]))
    first, second = post_all(srv.url(), 2)
    assert first.body == b"until the end" and second.body == b"again"
    assert srv.connections == 2


def test_interim_100_continue_is_skipped(scripted: Any) -> None:
    srv = scripted(Say([b"HTTP/1.1 100 Continue\r\n\r\n", ok(b"real")]))
    (response,) = post_all(srv.url())
    assert (response.status, response.body) == (200, b"real")


@pytest.mark.parametrize(
    ("encoding", "encode"),
    [("gzip", gzip.compress), ("deflate", zlib.compress), ("deflate", lambda b: zlib.compress(b)[2:-4])],
)
def test_compressed_bodies_are_decoded(scripted: Any, encoding: str, encode: Any) -> None:
    srv = scripted(Say([ok(encode(b'{"ok": true}'), f"Content-Encoding: {encoding}")]))
    assert post_all(srv.url())[0].body == b'{"ok": true}'


@pytest.mark.parametrize("header", ["Content-Encoding:", "Content-Encoding:   "])
def test_an_empty_content_encoding_names_no_coding(scripted: Any, header: str) -> None:
    """Servers that compress nothing may still send the header, empty; aiohttp reads the body as
    sent, and so is the reply read (each sample failed: the reply is encoded as '')."""
    srv = scripted(Say([ok(YES, header)]))
    reply = _ask(srv.url())
    assert (reply.text, reply.error) == ("ANSWER: YES", None)


def test_http_1_0_and_connection_close_are_not_reused(scripted: Any) -> None:
    srv = scripted(
        Say([b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nv0"]),
        Say([b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nv1"]),
        Say([ok(b"v2")]),
    )
    assert [r.body for r in post_all(srv.url(), 3)] == [b"v0", b"v1", b"v2"]
    assert srv.connections == 3


def test_a_kept_connection_the_server_dropped_is_replaced_at_once(scripted: Any) -> None:
    srv = scripted(Say([ok(b"first")], close=True), Say([ok(b"second")]))  # hangs up without saying so
    started = time.perf_counter()
    assert [r.body for r in post_all(srv.url(), 2)] == [b"first", b"second"]
    assert srv.connections == 2 and time.perf_counter() - started < 2


def test_hang_up_mid_body_is_a_connection_error(scripted: Any) -> None:
    srv = scripted(Say([b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part"], close=True))
    with pytest.raises(ConnectionResetError):
        post_all(srv.url())


def test_garbage_is_a_protocol_error(scripted: Any) -> None:
    srv = scripted(Say([b"SSH-2.0-OpenSSH_9.2\r\n\r\n"]))
    with pytest.raises(ProtocolError, match="not valid HTTP/1.1"):
        post_all(srv.url())


CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
REJECTED = {  # each fails the attempt at once, never waiting out the timeout
    "a four-digit status": b"HTTP/1.1 2000 OK\r\nContent-Length: 2\r\n\r\nok",
    "version 1.10": b"HTTP/1.10 200 OK\r\nContent-Length: 2\r\n\r\nok",
    "a signed Content-Length": b"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nok",
    "a 0x chunk size": CHUNKED + b"0x2\r\nok\r\n0\r\n\r\n",
    "no CRLF after chunk data": CHUNKED + b"2\r\nokXY0\r\n\r\n",
    "conflicting Content-Length headers": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok",
    "conflicting Content-Length values": b"HTTP/1.1 200 OK\r\nContent-Length: 2, 3\r\n\r\nok",
    "Transfer-Encoding: xchunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: xchunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
    "Transfer-Encoding: chunked, identity": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, identity\r\n\r\n",
    "a space in a header name": b"HTTP/1.1 200 OK\r\nContent Length: 2\r\n\r\nok",
    "a body that is not gzip": ok(b"not gzip at all", "Content-Encoding: gzip"),
    "an encoding coinflip cannot decode": ok(b"...", "Content-Encoding: br"),
    # read before the move to aiohttp, refused since (the README's HTTP section lists them)
    "a repeated equal Content-Length": b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nok",
    "gzip, gzip": ok(gzip.compress(gzip.compress(b"ok")), "Content-Encoding: gzip, gzip"),
    "gzip on two header lines": ok(
        gzip.compress(gzip.compress(b"ok")), "Content-Encoding: gzip", "Content-Encoding: gzip"
    ),
    "gzip, identity": ok(gzip.compress(b"ok"), "Content-Encoding: gzip, identity"),
}


@pytest.mark.parametrize("case", REJECTED)
def test_malformed_framing_fails_at_once(scripted: Any, case: str) -> None:
    srv = scripted(Say([REJECTED[case]]))  # the server then keeps the connection open, silent
    started = time.perf_counter()
    with pytest.raises(ProtocolError):
        post_all(srv.url(), timeout=10)
    assert time.perf_counter() - started < 2


def test_a_close_delimited_body_that_does_not_decode_fails_cleanly(scripted: Any) -> None:
    srv = scripted(
        Say([b"HTTP/1.1 200 OK\r\nContent-Encoding: deflate\r\n\r\n", zlib.compress(b"x" * 99)[:-5]], close=True)
    )
    with pytest.raises(ProtocolError, match="does not decode"):
        post_all(srv.url())


def test_a_truncated_gzip_body_fails_its_sample_at_once_as_malformed(scripted: Any) -> None:
    """aiohttp hands over what decoded (it does not check the gzip trailer): the JSON is then cut."""
    body = json.dumps({"choices": [{"message": {"content": "ANSWER: YES " * 20}}]}).encode()
    srv = scripted(Say([ok(gzip.compress(body)[:-30], "Content-Encoding: gzip")]))

    async def go() -> Any:
        chat = OpenAIClient("m", srv.url(), retries=0, timeout=10)
        try:
            return await chat.complete(Request(0, "p", "q", [{"role": "user", "content": "p"}]))
        finally:
            await chat.aclose()

    started = time.perf_counter()
    reply = asyncio.run(go())
    assert reply.text is None and reply.error is not None and reply.error.startswith("malformed response body")
    assert time.perf_counter() - started < 5


ACCEPTED = {  # lenient forms real servers send
    "bare LF line endings": b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok",
    "identity": ok(b"ok", "Content-Encoding: identity"),
    "gzip": ok(gzip.compress(b"ok"), "Content-Encoding: gzip"),
}


@pytest.mark.parametrize("case", ACCEPTED)
def test_lenient_forms_work(scripted: Any, case: str) -> None:
    srv = scripted(Say([ACCEPTED[case]]), Say([ok(b"next")]))
    assert [r.body for r in post_all(srv.url(), 2)] == [b"ok", b"next"]


@pytest.mark.parametrize("piece", [1 << 20, 4096, 1000])
def test_the_head_limits_do_not_depend_on_how_the_bytes_arrive(scripted: Any, piece: int) -> None:
    """aiohttp's limits: 128 header lines of at most 8190 bytes each, so a head costs at most 1 MB."""

    def head(lines: int, size: int = 90) -> bytes:
        filler = "".join(f"X-Filler-{i}: {'v' * size}\r\n" for i in range(lines))
        return f"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n{filler}\r\nok".encode()

    heads = (head(100), head(200), head(1, 10_000))
    srv = scripted(*(Say([raw[i : i + piece] for i in range(0, len(raw), piece)]) for raw in heads))
    assert post_all(srv.url())[0].body == b"ok"
    for _ in heads[1:]:
        started = time.perf_counter()
        with pytest.raises(ProtocolError, match="not valid HTTP/1.1"):
            post_all(srv.url())
        assert time.perf_counter() - started < 2


def _post_with_limit(url: str, limit: int) -> Response:
    async def go() -> Response:
        client = ConnectionPool({}, 5.0, max_body=limit)
        try:
            return await client.post(url, b"{}")
        finally:
            await client.aclose()

    return asyncio.run(go())


def test_a_declared_length_over_the_limit_fails_before_the_body_arrives(scripted: Any) -> None:
    srv = scripted(Say([b"HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\n"]))
    started = time.perf_counter()
    with pytest.raises(ReplyTooLarge, match="100000000 bytes, larger than"):
        _post_with_limit(srv.url(), 1000)
    assert time.perf_counter() - started < 2


@pytest.mark.parametrize(
    "raw",
    [
        CHUNKED + b"".join(b"100\r\n" + b"x" * 256 + b"\r\n" for _ in range(8)) + b"0\r\n\r\n",
        ok(gzip.compress(b"x" * 10_000_000), "Content-Encoding: gzip"),  # 10 MB from 10 KB
    ],
)
def test_a_body_growing_past_the_limit_fails(scripted: Any, raw: bytes) -> None:
    srv = scripted(Say([raw[i : i + 300] for i in range(0, min(len(raw), 3000), 300)] + [raw[3000:]]))
    with pytest.raises(ReplyTooLarge, match="larger than"):
        _post_with_limit(srv.url(), 1000)


def test_silence_times_out(scripted: Any) -> None:
    srv = scripted(Say([], hang=True))
    started = time.perf_counter()
    with pytest.raises(TimeoutError, match="no complete reply within 0.3 s"):
        post_all(srv.url(), timeout=0.3)
    assert time.perf_counter() - started < 3


YES = json.dumps({"choices": [{"index": 0, "message": {"content": "ANSWER: YES"}, "finish_reason": "stop"}]}).encode()
SSE = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _events(*data: bytes, end: bytes = b"\n") -> bytes:
    return b"".join(b"data: " + d + end + end for d in data)


def _delta(text: str, finish: str | None = None) -> bytes:
    return json.dumps({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}).encode()


def _head(*lines: str) -> bytes:
    return ("\r\n".join(["HTTP/1.1 200 OK", *lines]) + "\r\n\r\n").encode()


_STREAM = _events(_delta("ANSWER: "), _delta("YES"), b"[DONE]")
_TIMED_OUT = "TimeoutError: no complete reply within 1 s"
_INVALID = "ProtocolError: the reply is not valid HTTP/1.1"
_CUT = "ConnectionResetError: the server closed the connection before the reply was complete"
# name: (the answer, whether streaming was asked, the sample's reply text or the start of its error)
HOSTILE: dict[str, tuple[Say, bool, str]] = {
    "a quoted chunk extension": (
        Say([CHUNKED + b'%x;name="v;a\\"l"\r\n' % len(YES) + YES + b"\r\n0\r\n\r\n"]),
        False,
        "ANSWER: YES",
    ),
    "an obsolete folded header line": (
        Say([_head("X-Note: one", "  folded", f"Content-Length: {len(YES)}") + YES]),
        False,
        "ANSWER: YES",
    ),
    "103 Early Hints first": (Say([b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n", ok(YES)]), False, "ANSWER: YES"),
    "HTTP/1.0 without a length, ended by closing": (
        Say([b"HTTP/1.0 200 OK\r\n\r\n" + YES], close=True),
        False,
        "ANSWER: YES",
    ),
    "a stream whose choice finished, no [DONE], then closed": (
        Say([SSE + b"\r\n" + _events(_delta("ANSWER: YES", "stop"))], close=True),
        True,
        "ANSWER: YES",
    ),
    "a stream with [DONE], no length, never closed": (Say([SSE + b"\r\n" + _STREAM], hang=True), True, "ANSWER: YES"),
    "a stream with CR line ends, a BOM, comments, retry and multi-line data": (
        Say(
            [
                SSE
                + b"\r\n\xef\xbb\xbf: hi\r\rretry: 100\rid: 3\r\r"
                + b'data: {"choices":\rdata: [{"index": 0, "delta": {"content": "ANSWER: YES"}}]}\r\r'
                + _events(b"[DONE]", end=b"\r")
            ],
            close=True,
        ),
        True,
        "ANSWER: YES",
    ),  # fmt: skip
    "two equal Content-Length lines": (
        Say([_head(f"Content-Length: {len(YES)}", f"Content-Length: {len(YES)}") + YES]),
        False,
        _INVALID,
    ),
    "Content-Length and chunked": (
        Say([_head("Content-Length: 5", "Transfer-Encoding: chunked") + _chunk(YES)]),
        False,
        _INVALID,
    ),  # fmt: skip
    "a chunk size that is not hex": (Say([CHUNKED + b"zz\r\n" + YES + b"\r\n0\r\n\r\n"]), False, _INVALID),
    "a chunk size past 64 bits": (Say([CHUNKED + b"f" * 20 + b"\r\n" + YES]), False, _INVALID),
    "an empty chunk extension": (Say([CHUNKED + b"%x;\r\n" % len(YES) + YES + b"\r\n0\r\n\r\n"]), False, _INVALID),
    "no last chunk, then closed": (Say([CHUNKED + _chunk(YES)], close=True), False, _CUT),
    "no status line": (Say([f"Content-Length: {len(YES)}\r\n\r\n".encode() + YES]), False, _INVALID),
    "a status line without a status": (Say([b"HTTP/1.1 OK\r\nContent-Length: 2\r\n\r\nok"]), False, _INVALID),
    "a header line of 1 MB": (
        Say([_head("X-Big: " + "v" * (1 << 20), f"Content-Length: {len(YES)}") + YES]),
        False,
        _INVALID,
    ),
    "10,000 header lines": (
        Say([_head(*(f"X-{i}: v" for i in range(10_000)), f"Content-Length: {len(YES)}") + YES]),
        False,
        _INVALID,
    ),
    "a 200 with no body": (Say([ok(b"")]), False, "empty response body"),
    "a 204": (Say([b"HTTP/1.1 204 No Content\r\n\r\n"]), False, "empty response body"),
    "204 with a body": (Say([b"HTTP/1.1 204 No Content\r\n\r\n" + YES]), False, _INVALID),
    "304 with a body": (Say([ok(YES).replace(b"200 OK", b"304 Not Modified")]), False, _INVALID),
    "a reset before any answer": (Say([], reset=True), False, "ConnectionResetError: [Errno"),
    "a gzip stream cut short": (
        Say([SSE + b"Content-Encoding: gzip\r\n\r\n" + gzip.compress(_STREAM)[:-12]], close=True),
        True,
        "the stream ended before the reply was complete",
    ),
    "a gzip bomb in a stream": (
        Say([SSE + b"Content-Encoding: gzip\r\n\r\n" + gzip.compress(b": " + b"x" * (40 << 20) + b"\n\n")], close=True),
        True,
        "the reply is larger than 16 MB",
    ),
    "a body that stops half way": (Say([ok(YES)[:-20]], hang=True), False, _TIMED_OUT),
    "no last chunk, connection left open": (Say([CHUNKED + _chunk(YES)], hang=True), False, _TIMED_OUT),
    "a reply trickled a byte at a time (slow loris)": (Say([bytes([b]) for b in ok(YES)], gap=0.05), False, _TIMED_OUT),
    "a stream trickled a byte at a time": (
        Say([SSE + b"\r\n", *(bytes([b]) for b in _STREAM)], gap=0.05),
        True,
        _TIMED_OUT,
    ),
    "a stream that stalls before its end": (
        Say([SSE + b"\r\n" + _events(_delta("ANSWER: YES"))], hang=True),
        True,
        _TIMED_OUT + " (1 events received)",
    ),
}


def _ask(url: str, stream: bool = False, timeout: float = 5.0, patience: float = 300.0) -> Any:
    async def go() -> Any:
        chat = OpenAIClient("m", url, retries=0, timeout=timeout, stream=stream, patience=patience)
        try:
            return await chat.complete(Request(0, "p", "q", [{"role": "user", "content": "p"}]))
        finally:
            await chat.aclose()

    return asyncio.run(go())


@pytest.mark.parametrize("case", HOSTILE)
def test_a_hostile_reply_is_read_or_fails_its_sample_with_one_line(scripted: Any, case: str) -> None:
    """Each ends at once, or at the timeout for a stall (the error says which: a server that is only
    slow, a byte at a time, is bounded by --timeout too); the server keeps the connection open after
    what it says unless the case closes it, so waiting for more would show as a timeout."""
    say, stream, expected = HOSTILE[case]
    srv = scripted(say, say)  # a reset before any answer is tried once more, as a kept connection the server dropped
    reply = _ask(srv.url(), stream, timeout=1.0 if expected.startswith(_TIMED_OUT) else 5.0)
    if expected == "ANSWER: YES":
        assert (reply.text, reply.error) == ("ANSWER: YES", None)
    else:
        assert reply.text is None and reply.error is not None and reply.error.startswith(expected), reply.error
        assert "\n" not in reply.error


_PAGE = b"<html><head><title>%s</title><style>body{width:35em}</style></head><body><h1>%s</h1></body></html>"


def _page(status: str, *headers: str) -> bytes:
    body = _PAGE % (status.encode(), status.encode())
    return ok(body, "Content-Type: text/html", *headers).replace(b"200 OK", status.encode(), 1)


@pytest.mark.parametrize(
    ("say", "raised", "message"),
    [
        (Say([_page("401 Authorization Required")]), FatalAPIError,
         "answered 401 unauthorized: 401 Authorization Required (an HTML page) - no API key was sent: give"),
        (Say([_page("404 Not Found")]), FatalAPIError, "answered 404 not found: 404 Not Found (an HTML page) - check"),
        (Say([_page("403 Forbidden")]), FatalAPIError, "answered 403 forbidden: 403 Forbidden (an HTML page) - check"),
        (Say([_page("503 Service Unavailable")]), EndpointBroken,
         "its last word: HTTP 503: 503 Service Unavailable (an HTML page)"),
        (Say([_page("429 Too Many Requests")]), EndpointBroken,
         "its last word: HTTP 429: 429 Too Many Requests (an HTML page)"),
        (Say([ok(b"", "Location: http://[::1/x").replace(b"200 OK", b"307 Temporary Redirect")]), EndpointError,
         "redirects (307) to http://[::1/x; give the final URL as --api-url"),
    ],
)  # fmt: skip
def test_error_pages_and_odd_redirects_stop_the_run_with_one_line(
    scripted: Any, say: Say, raised: type[Exception], message: str
) -> None:
    """An HTML page says what it is in its title (the rest is markup); a Location that is no URL
    is refused, not a traceback; a 429 waits, within --patience."""
    srv = scripted(*[say] * 30)
    with pytest.raises(raised) as caught:
        _ask(srv.url(), patience=0.5)
    assert message in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("coding", ["br", "zstd"])
def test_a_reply_in_a_coding_coinflip_does_not_decode_fails_its_sample_at_once(scripted: Any, coding: str) -> None:
    """A server that ignores `Accept-Encoding: identity` and sends br or zstd would do so again:
    no retry, and our own line (aiohttp's was advice to install Brotli)."""
    srv = scripted(*[Say([ok(b"\x8b\x05\x80{}\x03", f"Content-Encoding: {coding}")])] * 6)

    async def go() -> Any:
        chat = OpenAIClient("m", srv.url(), retries=5, timeout=5.0, backoff_base=0.01)
        try:
            return await chat.complete(Request(0, "p", "q", [{"role": "user", "content": "p"}]))
        finally:
            await chat.aclose()

    reply = asyncio.run(go())
    assert reply.text is None and reply.attempts == 1 and len(srv.requests) == 1
    assert reply.error == (
        f"the reply is encoded as '{coding}', which coinflip does not decode (it asks for none: "
        "Accept-Encoding: identity)"
    )
    assert b"accept-encoding: identity" in srv.requests[0].lower()


def test_an_html_error_page_is_recorded_by_its_title(scripted: Any) -> None:
    reply = _ask(scripted(Say([_page("502 Bad Gateway")])).url())
    assert reply.text is None and reply.error == "HTTP 502: 502 Bad Gateway (an HTML page)"


def trusted_tls(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> ssl.SSLContext:
    """A server context for 127.0.0.1 whose throwaway CA the client trusts through SSL_CERT_FILE."""
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
    return server_context


def test_tls_with_a_trusted_certificate(scripted: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    server_context = trusted_tls(monkeypatch, tmp_path)  # SSL_CERT_FILE: how users trust a private CA
    srv = scripted(Say([ok(b"secret")]), tls=server_context)
    assert post_all(srv.url("https"))[0].body == b"secret"


def test_tls_with_an_unknown_certificate_is_refused(scripted: Any) -> None:
    trustme = pytest.importorskip("trustme")
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    trustme.CA().issue_cert("127.0.0.1").configure_cert(server_context)
    srv = scripted(Say([ok(b"secret")]), tls=server_context)
    with pytest.raises(ssl.SSLCertVerificationError):
        post_all(srv.url("https"))


def test_a_reply_with_a_lone_surrogate_is_kept_and_scored(scripted: Any) -> None:
    """JSON may escape half a surrogate pair; the reply must still reach the predictions file."""
    body = json.dumps({"choices": [{"message": {"content": "\ud83d ANSWER: YES"}}]}).encode()
    srv = scripted(Say([ok(body)]))

    async def go() -> Any:
        chat = OpenAIClient("m", srv.url(), retries=0)
        try:
            return await chat.complete(Request(0, "p", "q", [{"role": "user", "content": "p"}]))
        finally:
            await chat.aclose()

    reply = asyncio.run(go())
    assert reply.error is None and reply.text == "\ud83d ANSWER: YES"


def test_a_lone_surrogate_sent_back_to_the_server_goes_as_an_escape(scripted: Any) -> None:
    """A forced answer sends the reply back; half a surrogate pair in it is JSON's \\ud83d escape,
    not a crash of the body's encoder."""
    body = json.dumps({"choices": [{"message": {"content": "ANSWER: YES"}}]}).encode()
    srv = scripted(Say([ok(body)]))
    messages = [{"role": "user", "content": "p"}, {"role": "assistant", "content": "\ud83d maybe"}]

    async def go() -> Any:
        chat = OpenAIClient("m", srv.url(), retries=0)
        try:
            return await chat.complete(Request(0, "p", "q", messages))
        finally:
            await chat.aclose()

    reply = asyncio.run(go())
    assert reply.error is None and reply.text == "ANSWER: YES"
    sent = json.loads(srv.requests[-1].split(b"\r\n\r\n", 1)[1])
    assert sent["messages"][-1]["content"] == "\ud83d maybe"


class ForwardProxy:
    """A real proxy on 127.0.0.1: CONNECT tunnels for https, absolute-form requests for http."""

    def __init__(self, answer_connect: bytes | None = None) -> None:
        self.answer_connect = answer_connect  # e.g. a 407, instead of opening the tunnel
        self.heads: list[str] = []
        self.connections = 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://user:p%40ss@127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with client, client.makefile("rb") as reader:
            while True:
                head = read_head(reader)
                if head is None:
                    return
                self.heads.append(head.decode())
                method, target, _ = head.split(b"\r\n", 1)[0].decode().split(" ")
                if method == "CONNECT":
                    self._tunnel(client, reader, target)
                    return
                self._forward(client, reader, head, target)

    def _tunnel(self, client: socket.socket, reader: Any, target: str) -> None:
        if self.answer_connect is not None:
            client.sendall(self.answer_connect)
            return
        host, _, port = target.rpartition(":")
        upstream = socket.create_connection((host, int(port)))
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")

        def pump(src: Any, dst: socket.socket) -> None:
            with contextlib.suppress(OSError):
                while data := src.read1(65536) if hasattr(src, "read1") else src.recv(65536):
                    dst.sendall(data)
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)

        threading.Thread(target=pump, args=(upstream, client), daemon=True).start()
        pump(reader, upstream)

    def _forward(self, client: socket.socket, reader: Any, head: bytes, target: str) -> None:
        url = urlsplit(target)
        lines = head.decode().split("\r\n")
        kept = [f"POST {url.path} HTTP/1.1"] + [h for h in lines[1:] if h and not h.lower().startswith("proxy-")]
        body = reader.read(content_length(head))
        with socket.create_connection((url.hostname, url.port)) as upstream, upstream.makefile("rb") as answer:
            upstream.sendall(("\r\n".join(kept) + "\r\n\r\n").encode() + body)
            response = read_head(answer)
            assert response is not None
            client.sendall(response + answer.read(content_length(response)))

    def close(self) -> None:
        self.sock.close()


def test_http_through_a_proxy_in_absolute_form_with_credentials(scripted: Any) -> None:
    srv, proxy = scripted(Say([ok(b"one")]), Say([ok(b"two")])), ForwardProxy()
    try:
        assert [r.body for r in post_all(srv.url(), 2, proxy=proxy.url)] == [b"one", b"two"]
    finally:
        proxy.close()
    assert proxy.connections == 1  # kept alive through the proxy
    first = proxy.heads[0].split("\r\n")
    assert first[0] == f"POST http://127.0.0.1:{srv.port}/v1/chat/completions HTTP/1.1"
    assert "Proxy-Authorization: Basic " + base64.b64encode(b"user:p@ss").decode() in first
    assert b"Proxy-Authorization" not in srv.requests[0]


def test_https_through_a_proxy_tunnel(scripted: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    server_context = trusted_tls(monkeypatch, tmp_path)
    srv, proxy = scripted(Say([ok(b"secret")]), Say([ok(b"again")]), tls=server_context), ForwardProxy()
    try:
        assert [r.body for r in post_all(srv.url("https"), 2, proxy=proxy.url)] == [b"secret", b"again"]
    finally:
        proxy.close()
    assert proxy.heads[0].startswith(f"CONNECT 127.0.0.1:{srv.port} HTTP/1.1\r\n")
    assert "Proxy-Authorization: Basic" in proxy.heads[0] and proxy.connections == 1
    assert "Bearer k" not in proxy.heads[0]  # the API key is for the server, never for the proxy
    assert srv.requests[0].startswith(b"POST /v1/chat/completions HTTP/1.1")  # the server saw origin form


def test_the_connection_checked_before_a_run_carries_its_first_request(
    scripted: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """`check` opens the first connection (through the proxy's tunnel here) and the pool keeps it."""
    server_context = trusted_tls(monkeypatch, tmp_path)
    srv, proxy = scripted(Say([ok(b"first")]), tls=server_context), ForwardProxy()

    async def go() -> Response:
        client = ConnectionPool({"Authorization": "Bearer k"}, 5.0, proxy.url)
        try:
            await client.check(srv.url("https"))
            return await client.post(srv.url("https"), b"{}")
        finally:
            await client.aclose()

    try:
        assert asyncio.run(go()).body == b"first"
    finally:
        proxy.close()
    assert proxy.connections == 1 and srv.connections == 1 and "Bearer k" not in proxy.heads[0]


def test_a_proxy_that_wants_credentials_stops_the_run(scripted: Any) -> None:
    proxy = ForwardProxy(answer_connect=b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n")
    try:
        with pytest.raises(FatalAPIError, match="wants credentials"):
            post_all("https://127.0.0.1:9/v1/chat/completions", proxy=proxy.url)
    finally:
        proxy.close()


@pytest.mark.parametrize(
    ("url", "env", "expected"),
    [
        ("https://api.example.com/v1", {}, None),
        ("https://api.example.com/v1", {"HTTPS_PROXY": "http://p:3128"}, "p:3128"),
        ("https://api.example.com/v1", {"https_proxy": "http://p2:8080", "HTTPS_PROXY": "http://p:3128"}, "p2:8080"),
        ("http://api.example.com/v1", {"HTTPS_PROXY": "http://p:3128"}, None),
        ("https://api.example.com/v1", {"HTTPS_PROXY": "http://p", "NO_PROXY": "example.com"}, None),
        ("https://api.example.com/v1", {"HTTPS_PROXY": "http://p", "NO_PROXY": ".example.com"}, None),
        ("https://api.example.com/v1", {"HTTPS_PROXY": "http://p", "no_proxy": "*"}, None),
        ("https://api.example.com/v1", {"HTTPS_PROXY": "https://p", "NO_PROXY": "example.com"}, None),  # not read
        ("https://api.example.com/v1", {"HTTPS_PROXY": "http://p", "NO_PROXY": "ample.com"}, "p:80"),
        ("https://api.example.com/v1", {"HTTPS_PROXY": "http://p", "NO_PROXY": "api.example.com:8443"}, "p:80"),
        ("http://127.0.0.1:8000/v1", {"HTTP_PROXY": "http://p"}, None),  # loopback never
        ("http://localhost:8000/v1", {"HTTP_PROXY": "http://p"}, None),
        ("http://[::1]:8000/v1", {"HTTP_PROXY": "http://p"}, None),
        ("http://h/v1", {"HTTP_PROXY": "http://u:pw@p:1"}, "p:1 u:pw"),
    ],
)
def test_which_proxy_the_environment_names(
    url: str, env: dict[str, str], expected: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """aiohttp reads the environment (lower case first, NO_PROXY); loopback is never proxied."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    target = Target.parse(url, {})
    found = f"{target.proxy.host}:{target.proxy.port}" if target.proxy else None
    credentials = target.secrets[1:2]  # the token, then what it decodes to
    assert " ".join([str(found), *credentials]) == str(expected)


def test_an_https_proxy_url_is_one_clear_line(tmp_path: Any) -> None:
    env = {**os.environ, "HTTPS_PROXY": "https://proxy.example:3128"}
    result = run_cli("eval", "--model", "m", "--api-url", "https://api.example.com/v1", "--limit", "1",
                     "--work-dir", str(tmp_path), env=env)  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        "error: proxy 'https://proxy.example:3128': give an http:// proxy URL, e.g. http://proxy.example:3128"
    ]


def test_a_certificate_error_as_aiohttp_before_3_13_4_makes_it_is_named_not_a_traceback() -> None:
    """aiohttp >= 3.10 is allowed, and before 3.13.4 its certificate error has no os_error (reading it
    raises AttributeError): taken as any connect error's os_error, an untrusted certificate was a
    traceback instead of the line that names SSL_CERT_FILE."""
    import aiohttp
    from aiohttp.client_reqrep import ConnectionKey

    from coinflip.models._wire import connect_failure

    target = Target.parse("https://127.0.0.1:8443/v1", {}, proxy=None)
    key = ConnectionKey("127.0.0.1", 8443, True, True, None, None, None)
    cause = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")
    cause.verify_message = "unable to get local issuer certificate"
    exc = aiohttp.ClientConnectorCertificateError(key, cause)
    exc.__dict__.pop("_os_error", None)  # as aiohttp 3.10-3.13.3 build it: no os_error
    message = str(connect_failure(exc, target, 5.0))
    assert "TLS certificate verification failed (unable to get local issuer certificate)" in message
    assert "SSL_CERT_FILE" in message
