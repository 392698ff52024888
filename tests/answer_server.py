"""A real HTTP server on 127.0.0.1 whose every answer a test writes byte for byte: the odd reply
shapes, echoes, redirects and errors that real servers and gateways send."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from coinflip.testing.policy import Policy, last_question


class QuietHandler(BaseHTTPRequestHandler):
    """An http.server handler for a test's own small server: `reply` sends a whole answer, and
    nothing is logged to the test's output."""

    def reply(self, status: int, payload: Any, content_type: str | None = "application/json") -> None:
        """`payload` as the body (bytes as they are, anything else as JSON), framed by its length."""
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        if content_type is not None:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        return None


@contextlib.contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """`handler` served on 127.0.0.1, a thread a request; yields the server's base URL (…/v1)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def read_head(reader: Any) -> bytes | None:
    """A request's or response's head, through its blank line; None when the peer hung up."""
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        line = reader.readline()
        if not line:
            return None
        head += line
    return head


def content_length(head: bytes) -> int:
    lines = head.split(b"\r\n")
    return next((int(h.split(b":")[1]) for h in lines if h.lower().startswith(b"content-length")), 0)


@dataclass
class Seen:
    """One request as the server saw it."""

    index: int
    path: str
    headers: dict[str, str]
    body: Any

    @property
    def right_answer(self) -> str:
        """What a correct model would say to this request's question."""
        messages = self.body.get("messages") or [{"content": self.body.get("prompt", "")}]
        return Policy("correct").reply(last_question("\n".join(str(m.get("content")) for m in messages)))


@dataclass
class Pieces:
    """An answer sent in pieces, `gap` seconds apart, then maybe a hang-up (close-delimited bodies)."""

    pieces: list[bytes]
    close: bool = True
    gap: float = 0.001


def answer(payload: Any, status: int = 200, *headers: str, raw: bytes | None = None) -> bytes:
    body = raw if raw is not None else json.dumps(payload).encode()
    head = [f"HTTP/1.1 {status} X", f"Content-Length: {len(body)}", "Content-Type: application/json", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def chat(content: Any, **extra: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}], **extra}


class AnswerServer:
    """`respond(seen)` writes each answer (bytes, or Pieces); None hangs up. Use as a context manager."""

    def __init__(self, respond: Callable[[Seen], bytes | Pieces | None]) -> None:
        self.respond = respond
        self.seen: list[Seen] = []
        self.lock = threading.Lock()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        threading.Thread(target=self._accept, daemon=True).start()

    def __enter__(self) -> AnswerServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):  # the client may hang up at any point, as it should on odd answers
            self._converse(conn)

    def _converse(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as reader:
            while (head := read_head(reader)) is not None:
                raw = reader.read(content_length(head))
                lines = head.decode("latin-1").split("\r\n")
                headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:] if h)}
                method, path = lines[0].split(" ")[:2]
                if method == "GET" and (path in ("/props", "/slots") or path.endswith("/models")):
                    conn.sendall(answer({"error": "not found"}, 404))  # coinflip asks what a server can serve
                    continue
                with self.lock:
                    seen = Seen(len(self.seen), lines[0].split(" ")[1], headers, json.loads(raw or b"null"))
                    self.seen.append(seen)
                data = self.respond(seen)
                if data is None:
                    return
                pieces = data if isinstance(data, Pieces) else Pieces([data], close=False)
                for piece in pieces.pieces:
                    conn.sendall(piece)
                    time.sleep(pieces.gap)
                if pieces.close:
                    return
