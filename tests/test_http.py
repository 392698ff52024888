"""The lean HTTP/1.1 client against a real TCP server on 127.0.0.1 that answers byte for byte
as scripted: the framings, encodings and failures that real servers and proxies send."""

from __future__ import annotations

import asyncio
import gzip
import json
import socket
import ssl
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from coinflip.models._http import ConnectionPool, ProtocolError, Response
from coinflip.models.base import Request
from coinflip.models.openai_api import OpenAIChat


@dataclass
class Say:
    """One scripted answer: sent in `pieces` (to split it across reads), then maybe a hang-up."""

    pieces: list[bytes]
    close: bool = False
    hang: bool = False


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

    def _read_request(self, conn: socket.socket) -> bytes | None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return None
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(
            (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")),
            0,
        )
        while len(body) < length:
            body += conn.recv(65536)
        return head + b"\r\n\r\n" + body

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            while self.script:
                request = self._read_request(conn)
                if request is None:
                    return
                self.requests.append(request)
                say = self.script.pop(0)
                if say.hang:
                    self.stop.wait(10)
                    return
                for piece in say.pieces:
                    conn.sendall(piece)
                    time.sleep(0.01)
                if say.close:
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


def post_all(url: str, count: int = 1, timeout: float = 5.0) -> list[Response]:
    async def go() -> list[Response]:
        client = ConnectionPool({"Content-Type": "application/json", "Authorization": "Bearer k"}, timeout)
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
    with pytest.raises(ProtocolError, match="not an HTTP/1.x response"):
        post_all(srv.url())


def test_silence_times_out(scripted: Any) -> None:
    srv = scripted(Say([], hang=True))
    started = time.perf_counter()
    with pytest.raises(TimeoutError, match="no complete reply within 0.3 s"):
        post_all(srv.url(), timeout=0.3)
    assert time.perf_counter() - started < 3


def test_tls_with_a_trusted_certificate(scripted: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    srv = scripted(Say([ok(b"secret")]), tls=server_context)
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))  # how users trust a private CA
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
        chat = OpenAIChat("m", [srv.url()], retries=0)
        try:
            return await chat.complete(Request(0, "p", "q", [{"role": "user", "content": "p"}]))
        finally:
            await chat.aclose()

    reply = asyncio.run(go())
    assert reply.error is None and reply.text == "\ud83d ANSWER: YES"
