"""An OpenAI-compatible server on 127.0.0.1 that answers CoinFlip questions by a known policy, for the tests,
the benchmarks and trying coinflip without a model: its routes, just enough HTTP/1.1, and its thread."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import re
import threading
from http.client import responses
from typing import Any
from urllib.parse import parse_qsl

from .batches import BatchStore
from .completions import completion
from .limited import Gate, Limits, Response, error_json, reply_json
from .policy import POLICIES, Policy, ServerState, Stream


class FakeOpenAIServer:
    """The routes, served on 127.0.0.1 (a free port unless told) by a background thread; a context manager."""

    def __init__(self, policy: str = "correct", port: int = 0, **options: Any) -> None:
        self.state = state = ServerState(Policy(policy), **options)
        self.gate = Gate(state.limits)  # the limits at work: latencies, peak in flight, refusals
        self.chat = functools.partial(completion, state, self.gate)
        state.batches.chat = self.chat
        state.rng.seed(state.seed)
        self.connections: set[HttpProtocol] = set()
        self.port = port
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.base_events.Server | None = None

    async def __call__(
        self, method: str, target: str, headers: dict[str, str], body: bytes, arrived: float = 0.0
    ) -> Response | Stream | None:
        path, _, query = target.partition("?")
        state, gate = self.state, self.gate
        for name, value in state.require_headers.items():  # a gateway's header and query parameter
            if headers.get(name.lower()) != value:
                return reply_json(401, {"error": {"message": f"Access denied: header {name} missing or wrong"}})
        for name, value in state.require_query.items():
            if dict(parse_qsl(query)).get(name) != value:
                return reply_json(404, {"error": {"message": f"Resource not found: query parameter {name} missing"}})
        if method == "GET" and path.endswith("/models"):
            owner = {"owned_by": gate.limits.owned_by} if gate.limits.owned_by else {}
            models = [{"id": m, "object": "model", **owner} for m in state.models or ("fake",)]
            return reply_json(200, {"object": "list", "data": models})
        if method == "GET" and path == "/props" and gate.limits.slots > 0 and gate.limits.publish_slots:  # llama.cpp's
            return reply_json(200, {"total_slots": gate.limits.slots, "default_generation_settings": {"n_ctx": 2048}})
        if method == "GET" and path == "/stats":
            counts = {"requests": dict(state.requests), "answered": dict(state.answered), "faults": dict(state.faults)}
            gated = {"refused": gate.refused, "peak_in_flight": gate.peak, "latencies": gate.latencies}
            return reply_json(200, counts | gated)
        if method == "POST" and path.endswith("/completions"):
            return await self.chat(headers, body, arrived, path.endswith("/chat/completions"))
        if re.search(r"/(files|batches)(/|$)", path):
            if state.api_key is not None and headers.get("authorization") != f"Bearer {state.api_key}":
                return reply_json(401, {"error": {"message": "Incorrect API key provided"}})
            return await state.batches(method, path, headers, body, query)
        return reply_json(404, {"error": {"message": f"no route {method} {path}"}})

    def __enter__(self) -> FakeOpenAIServer:
        self._thread.start()
        start = self._loop.create_server(lambda: HttpProtocol(self), "127.0.0.1", self.port, backlog=1024)
        self._server = asyncio.run_coroutine_threadsafe(start, self._loop).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        return self

    def kill(self, tasks: bool = False) -> None:
        """Die as a crashed server does: stop listening (connection refused) and drop every connection."""

        async def die() -> None:
            assert self._server is not None
            self._server.close()
            for connection in list(self.connections):
                if connection.transport is not None:
                    connection.transport.abort()
            for task in asyncio.all_tasks() if tasks else ():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(die(), self._loop).result(10)

    def __exit__(self, *exc: object) -> None:
        self.kill(tasks=True)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


class HttpProtocol(asyncio.Protocol):
    """Just enough HTTP/1.1 (keep-alive, Content-Length bodies): it must cost far less than the client it serves."""

    def __init__(self, handler: FakeOpenAIServer) -> None:
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
            headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
            try:
                method, path, _ = lines[0].split(" ", 2)
                size = int(headers.get("content-length") or 0)
            except ValueError:  # no request line, or a length that is no number: answered, then closed
                self._write(error_json(400, "Malformed HTTP request: a request line and a Content-Length were due"))
                self.transport.close()
                return
            headers[":path"] = path
            if len(self.buffer) < end + 4 + size:
                return
            body = bytes(self.buffer[end + 4 : end + 4 + size])
            del self.buffer[: end + 4 + size]
            try:
                response = await self.handler(method, path, headers, body, self.arrived)
            except (ValueError, TypeError, AttributeError, KeyError) as exc:  # a field it cannot read, as servers do
                response = error_json(400, f"Invalid request: {type(exc).__name__}: {exc}")
            if self.transport is None:  # the client hung up while we were thinking
                return
            if response is None:
                self.transport.close()
                return
            if isinstance(response, Stream):
                await self._stream(response)
                continue
            self._write(response)

    def _write(self, response: Response) -> None:
        status, payload, extra = response
        fields = {"Content-Type": "application/json", "Content-Length": len(payload), **extra}
        head = [f"HTTP/1.1 {status} {responses.get(status, 'Status')}", *(f"{k}: {v}" for k, v in fields.items())]
        if self.transport is not None:
            self.transport.write(("\r\n".join(head) + "\r\n\r\n").encode() + payload)

    async def _stream(self, stream: Stream) -> None:
        gap = self.handler.state.stream_gap
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        chunks = [b"%x\r\n%s\r\n" % (len(e), e) for e in stream.events] + [b"0\r\n\r\n"]
        parts = [head + chunks[0], *chunks[1:]] if gap or stream.stall else [head + b"".join(chunks)]
        for i, part in enumerate(parts):
            if self.transport is not None:
                self.transport.write(part)
            pause = stream.stall if i == len(parts) // 2 else gap
            if pause:
                await asyncio.sleep(pause)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.handler.connections.discard(self)


def serve(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m coinflip.testing.server", description=__doc__.split(":")[0])
    parser.add_argument("--port", type=int, default=8000)
    policies = "correct: always right; mixed: 60%% right, 20%% wrong, 10%% no answer, 10%% YES; see docs/testing.md"
    parser.add_argument("--policy", choices=POLICIES, default="correct", help=policies)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each reply")
    parser.add_argument("--fail-rate", type=float, default=0.0, help="share failing: 429, 500, drops, 30 s stalls, ...")
    parser.add_argument("--api-key", default=None, help="the key a request must bear (401 without it)")
    parser.add_argument("--stream-gap", type=float, default=0.0, help="seconds between streamed events")
    parser.add_argument("--batch-delay", type=float, default=0.0, help="seconds a batch stays in progress")
    parser.add_argument("--batch-expire", type=int, default=0, help="the first N batches expire half done")
    parser.add_argument("--batch-fail-every", type=int, default=0, help="every K-th batch line fails once")
    parser.add_argument("--rate", type=float, default=0.0, help="requests per second allowed, beyond: 429")
    parser.add_argument("--burst", type=int, default=1, help="requests allowed at once by --rate")
    parser.add_argument("--no-retry-after", dest="retry_after", action="store_false", help="--rate's 429s bare")
    parser.add_argument("--max-in-flight", type=int, default=0, help="requests in flight allowed, beyond: 429")
    parser.add_argument("--slots", type=int, default=0, help="serve this many at a time, one after another")
    parser.add_argument("--hide-slots", dest="publish_slots", action="store_false", help="no --slots at /props")
    parser.add_argument("--owned-by", default="", help="the owner /v1/models names (me: the Python llama.cpp server)")
    args = parser.parse_args(argv)
    for name, value in vars(args).items():  # counts, seconds and a share: never negative, NaN or infinite
        top = {"port": 65535, "fail_rate": 1}.get(name, 10**9)
        if type(value) in (int, float) and not 0 <= value <= top:
            parser.error(f"--{name.replace('_', '-')} must be a number from 0 to {top}, got {value}")
    batches = BatchStore(delay=args.batch_delay, expire=args.batch_expire, fail_every=args.batch_fail_every)
    limits = Limits(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Limits)})
    options = {name: getattr(args, name) for name in ("api_key", "latency", "fail_rate", "stream_gap")}
    server = FakeOpenAIServer(args.policy, args.port, batches=batches, limits=limits, **options)
    try:
        with contextlib.suppress(KeyboardInterrupt), server:
            print(f"serving the {args.policy} policy on {server.url} (Ctrl-C stops)", flush=True)
            threading.Event().wait()
    except OSError as error:  # the port is taken
        parser.exit(2, f"{parser.prog}: error: --port {args.port}: {error.strerror}\n")  # one line, no usage


if __name__ == "__main__":
    serve()
