"""An OpenAI-compatible server on 127.0.0.1 that answers CoinFlip questions by a known policy.

Used by the tests and the benchmarks, and handy for trying coinflip without a model:

    python -m coinflip.testing.server --port 8000 --policy mixed --fail-rate 0.3

The endpoints, one module each: chat and completions, plain or streamed (completions.py), the
Batch API's files and batches (batches.py), and the limits a real server has (limited.py): a
requests-per-second token bucket and an in-flight cap that answer 429, and slots that serve
requests one after another, published at /props as llama.cpp does. The policies and what the
server keeps are in policy.py. Here: the routes, just enough HTTP/1.1, and a server on a
thread. A gateway is imitated by `require_headers` and `require_query`; `stream_gap` seconds
between events splits a stream into packets, and `stream_stalls` pause the first streams
halfway through. `kill()` makes the server die mid-run (connection refused).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import threading
from http.client import responses
from typing import Any
from urllib.parse import parse_qsl

from .batches import BatchRoutes, BatchStore
from .completions import completion
from .limited import Gate, Limits
from .policy import POLICIES, Policy, Response, ServerState, Stream, reply_json


class Handler:
    """The routes. Kept apart from HTTP parsing so the policy reads plainly."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.limiter = Gate(state.limits)
        self.connections: set[HttpProtocol] = set()
        state.rng.seed(state.seed)
        self.batch_routes = BatchRoutes(state.batches, self.chat)

    async def __call__(
        self, method: str, target: str, headers: dict[str, str], body: bytes, arrived: float = 0.0
    ) -> Response | Stream | None:
        path, _, query = target.partition("?")
        refused = self.gateway(headers, dict(parse_qsl(query)))
        if refused is not None:
            return refused
        if method == "GET" and path.endswith("/models"):
            owner = {"owned_by": self.limiter.limits.owned_by} if self.limiter.limits.owned_by else {}
            models = [{"id": m, "object": "model", **owner} for m in self.state.models or ("fake",)]
            return reply_json(200, {"object": "list", "data": models})
        if method == "GET" and path in ("/props", "/slots") and self.limiter.publishes:
            return reply_json(200, self.limiter.published(path))
        if method == "GET" and path == "/stats":
            s = self.state
            gate = self.limiter
            return reply_json(
                200,
                {
                    "requests": dict(s.requests),
                    "answered": dict(s.answered),
                    "faults": dict(s.faults),
                    "refused": gate.refused,
                    "peak_in_flight": gate.peak,
                    "latencies": gate.latencies,
                },
            )
        if method == "POST" and path.endswith("/completions"):
            return await self.chat(headers, body, arrived, chat=path.endswith("/chat/completions"))
        if re.search(r"/(files|batches)(/|$)", path):
            if self.state.api_key is not None and headers.get("authorization") != f"Bearer {self.state.api_key}":
                return reply_json(401, {"error": {"message": "Incorrect API key provided"}})
            return await self.batch_routes(method, path, headers, body)
        return reply_json(404, {"error": {"message": f"no route {method} {path}"}})

    def gateway(self, headers: dict[str, str], query: dict[str, str]) -> Response | None:
        for name, value in self.state.require_headers.items():
            if headers.get(name.lower()) != value:
                return reply_json(401, {"error": {"message": f"Access denied: header {name} missing or wrong"}})
        for name, value in self.state.require_query.items():
            if query.get(name) != value:
                return reply_json(404, {"error": {"message": f"Resource not found: query parameter {name} missing"}})
        return None

    async def chat(
        self, headers: dict[str, str], raw: bytes, arrived: float, chat: bool = True
    ) -> Response | Stream | None:
        return await completion(self.state, self.limiter, headers, raw, arrived, chat)


class HttpProtocol(asyncio.Protocol):
    """Just enough HTTP/1.1 (keep-alive, Content-Length bodies) to be fast: a benchmark's server
    must cost far less than the client it measures."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.busy: asyncio.Task[None] | None = None
        self.arrived = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.handler.connections.add(self)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self.arrived = asyncio.get_running_loop().time()
        if self.busy is None or self.busy.done():
            self.busy = asyncio.ensure_future(self._drain())

    async def _drain(self) -> None:
        while self.transport is not None and not self.transport.is_closing():
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            lines = bytes(self.buffer[:end]).decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
            headers[":path"] = path
            size = int(headers.get("content-length") or 0)
            if len(self.buffer) < end + 4 + size:
                return
            body = bytes(self.buffer[end + 4 : end + 4 + size])
            del self.buffer[: end + 4 + size]
            response = await self.handler(method, path, headers, body, self.arrived)
            if self.transport is None:  # the client hung up while we were thinking
                return
            if response is None:
                self.transport.close()
                return
            if isinstance(response, Stream):
                await self._stream(response)
                continue
            status, payload, extra = response
            head = [
                f"HTTP/1.1 {status} {responses.get(status, 'Status')}",
                "Content-Type: application/json",
                f"Content-Length: {len(payload)}",
                *(f"{k}: {v}" for k, v in extra.items()),
            ]
            self.transport.write(("\r\n".join(head) + "\r\n\r\n").encode() + payload)

    async def _stream(self, stream: Stream) -> None:
        gap = self.handler.state.stream_gap
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        chunks = [b"%x\r\n%s\r\n" % (len(e), e) for e in stream.events] + [b"0\r\n\r\n"]
        if not gap and not stream.stall:
            self._write(head + b"".join(chunks))
            return
        self._write(head)
        for i, chunk in enumerate(chunks):
            self._write(chunk)
            pause = stream.stall if i == len(chunks) // 2 else gap
            if pause:
                await asyncio.sleep(pause)

    def _write(self, data: bytes) -> None:
        if self.transport is not None:
            self.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.handler.connections.discard(self)


async def start_server(state: ServerState, port: int = 0, handler: Handler | None = None) -> asyncio.base_events.Server:
    loop = asyncio.get_running_loop()
    handler = handler or Handler(state)
    return await loop.create_server(lambda: HttpProtocol(handler), "127.0.0.1", port, backlog=1024)


class FakeOpenAIServer:
    """Runs the server on a free 127.0.0.1 port in a background thread; use as a context manager."""

    def __init__(self, policy: str = "correct", **options: Any) -> None:
        self.state = ServerState(Policy(policy), **options)
        self.handler = Handler(self.state)
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.base_events.Server | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> FakeOpenAIServer:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(start_server(self.state, 0, self.handler), self._loop).result(
            10
        )
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    @property
    def gate(self) -> Gate:
        """The server's limits at work: its latencies, its peak in flight, its refusals."""
        return self.handler.limiter

    def kill(self) -> None:
        """Die as a crashed server does: stop listening (connection refused) and drop every connection."""

        async def die() -> None:
            assert self._server is not None
            self._server.close()
            for connection in list(self.handler.connections):
                if connection.transport is not None:
                    connection.transport.abort()

        asyncio.run_coroutine_threadsafe(die(), self._loop).result(10)

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            assert self._server is not None
            self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def serve(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m coinflip.testing.server", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--policy", choices=POLICIES, default="correct")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each reply")
    parser.add_argument("--fail-rate", type=float, default=0.0)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--stream-gap", type=float, default=0.0, help="seconds between streamed events")
    parser.add_argument("--batch-delay", type=float, default=0.0, help="seconds a batch stays in progress")
    parser.add_argument("--batch-expire", type=int, default=0, help="the first N batches expire half done")
    parser.add_argument("--batch-fail-every", type=int, default=0, help="every K-th batch line fails once")
    parser.add_argument("--rate", type=float, default=0.0, help="requests per second allowed, beyond: 429")
    parser.add_argument("--burst", type=int, default=1, help="requests allowed at once by --rate")
    parser.add_argument(
        "--no-retry-after", dest="retry_after", action="store_false", help="--rate's 429s without Retry-After"
    )
    parser.add_argument("--max-in-flight", type=int, default=0, help="requests in flight allowed, beyond: 429")
    parser.add_argument("--slots", type=int, default=0, help="serve this many at a time, one after another")
    parser.add_argument(
        "--hide-slots", dest="publish_slots", action="store_false", help="do not publish --slots at /props"
    )
    parser.add_argument(
        "--owned-by", default="", help="the owner /v1/models names (me: like the Python llama.cpp server)"
    )
    args = parser.parse_args(argv)
    state = ServerState(
        Policy(args.policy),
        api_key=args.api_key,
        latency=args.latency,
        fail_rate=args.fail_rate,
        stream_gap=args.stream_gap,
        batches=BatchStore(delay=args.batch_delay, expire=args.batch_expire, fail_every=args.batch_fail_every),
        limits=Limits(
            args.rate, args.burst, args.retry_after, args.max_in_flight, args.slots, args.publish_slots, args.owned_by
        ),
    )

    async def main() -> None:
        server = await start_server(state, args.port)
        print(f"serving the {args.policy} policy on http://127.0.0.1:{args.port}/v1 (Ctrl-C stops)", flush=True)
        async with server:
            await server.serve_forever()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())


if __name__ == "__main__":
    serve()
