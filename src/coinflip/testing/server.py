"""An OpenAI-compatible server on 127.0.0.1 (chat and completions) that answers CoinFlip questions by a known policy.

Used by the tests and the benchmarks, and handy for trying coinflip without a model:

    python -m coinflip.testing.server --port 8000 --policy mixed --fail-rate 0.3

Policies: `correct` always answers right (it tracks the coin in every form of the grammar);
`mixed` answers by a hash of the question (right, wrong, invalid or always YES), so the expected
metrics can be computed from `Policy.expected`. Two policies stand for models the probes must
catch: `shortcut` counts the phrase " flips the coin." from an assumed heads-up start (right on
the official form, lost when the coin starts tails up or flips are worded otherwise), and
`contaminated` knows the bundled splits' questions by heart and gets any other question right
60% of the time (by a hash of the question, so runs repeat).
Faults (`fail_rate`): 429 with Retry-After, 500, a stalled reply, a dropped connection, a
malformed body or an empty choice list - what real servers do under load.

A request with `"stream": true` gets server-sent events in HTTP chunks, as vLLM sends them:
reasoning deltas, content deltas, the finish reason, a usage chunk when the request asked for
it (`stream_options.include_usage`, unless `stream_usage` is off) and `data: [DONE]`;
`stream_gap` seconds between events splits them into separate packets, and `stream_stalls`
pause the first streams halfway through. `n` choices and `logprobs` are
answered in both forms. A gateway is imitated by `require_headers` and `require_query`.

Limits (`limits`, see limited.py): a requests-per-second token bucket and an in-flight cap that
answer 429, and slots that serve requests one after another, published at /props as llama.cpp
does. `kill()` makes the server die mid-run (connection refused).

Forced answers: a request that continues a reply with coinflip's forced-answer turn (chat) or
cue (completions) gets the policy's `forced` answer line. Log probabilities put the policy's
`confidence` on the answer token and the rest on the other answer, so P(YES) is known.
`impossible_logprobs` sends log probabilities no model can give at the answer of every other
question (`ServerState.impossible`): "positive" puts +50 on the other answer, "nan" puts NaN on
the answer token and +Infinity on the other answer.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import hashlib
import json
import math
import random
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from ..data.grammar import solve
from ..data.prompts import FORCE_CUE, FORCE_PROMPT
from .batches import BatchRoutes, BatchStore
from .limited import Gate, Limits

_QUESTION = re.compile(
    r"Q: A coin is (?:heads|tails) up\..*?Is the coin (?:still )?(?:heads|tails) up\?|问：一枚硬币.*?吗？", re.S
)
MIXED = ("right",) * 6 + ("wrong", "wrong", "invalid", "yes")  # what `mixed` does, by question hash
FAULTS = ("429", "500", "stall", "drop", "malformed", "empty")


def _draw(text: str, n: int) -> int:
    """A number below `n` fixed by `text`: the policies' choices repeat from run to run."""
    return int(hashlib.sha256(text.encode()).hexdigest(), 16) % n


def _other(answer: str) -> str:
    return "NO" if answer == "YES" else "YES"


def truth(question: str) -> str:
    """The right answer, from the question's own sequence (any form of the grammar)."""
    solved = solve(question)
    if solved is not None:
        return solved
    flips = len(re.findall(r"\S flips the coin\.", question))
    return "NO" if flips % 2 else "YES"


def shortcut(question: str) -> str:
    """What a phrase counter answers: an odd number of " flips the coin." means tails, from a
    heads-up start it never reads; the side asked about it does read."""
    heads = question.count(" flips the coin.") % 2 == 0
    asks_tails = re.search(r"tails up\?$|反面朝上吗？$", question) is not None
    return "YES" if heads != asks_tails else "NO"


@functools.lru_cache(maxsize=1)
def known_questions() -> frozenset[str]:
    """The questions a contaminated model has seen: the bundled splits."""
    from ..data import bundled_dir, load_file

    return frozenset(
        r.question for split in ("test", "validation") for r in load_file(bundled_dir() / f"{split}.jsonl")
    )


def contaminated(question: str) -> str:
    """Right on every question it has seen; right 60% of the time on any other."""
    right = truth(question)
    return right if question in known_questions() or _draw(f"fresh:{question}", 10) < 6 else _other(right)


def last_question(prompt: str) -> str:
    found = _QUESTION.findall(prompt)
    return found[-1] if found else ""


ANSWERERS = {"shortcut": shortcut, "contaminated": contaminated}
POLICIES = ("correct", "mixed", *ANSWERERS)


def _answer_of(kind: str, right: str) -> str | None:
    """The answer a reply of this kind gives (MIXED's kinds; "invalid": none)."""
    return {"right": right, "wrong": _other(right), "invalid": None, "yes": "YES"}[kind]


@dataclass(frozen=True)
class Policy:
    name: str = "correct"

    def kind(self, question: str) -> str:
        if self.name == "correct":
            return "right"
        return MIXED[_draw(question, len(MIXED))]

    def expected(self, question: str) -> str | None:
        """What extraction should find in this policy's reply: YES, NO or None."""
        if self.name in ANSWERERS:
            return ANSWERERS[self.name](question)
        return _answer_of(self.kind(question), truth(question))

    def reply(self, question: str) -> str:
        answer = self.expected(question)
        if answer is None:
            return "The coin... I am not sure.\nANSWER: maybe"
        return f"Tracking the coin person by person.\n**ANSWER: {answer}**"

    def forced(self, question: str) -> str | None:
        """The answer to a forced turn: right half the time, wrong a quarter, still invalid a quarter."""
        return _answer_of(("right", "right", "wrong", "invalid")[_draw(f"forced:{question}", 4)], truth(question))

    def confidence(self, question: str) -> float:
        """The probability the answer token gets; the other answer gets the rest."""
        return (0.55, 0.7, 0.85, 0.95)[_draw(f"confidence:{question}", 4)]

    def p_yes(self, question: str, answer: str | None) -> float | None:
        """P(YES) at the answer position of a reply that answered `answer`; None for "maybe" (its
        alternatives hold YES 0.3 and NO 0.2, but the word written is no answer)."""
        if answer is None:
            return None
        c = self.confidence(question)
        return c if answer == "YES" else 1 - c


@dataclass
class ServerState:
    policy: Policy
    api_key: str | None = None
    models: tuple[str, ...] = ()
    latency: float = 0.0
    fail_rate: float = 0.0
    stall: float = 30.0
    seed: int = 0
    throttle: list[str] = field(default_factory=list)  # Retry-After values for the first requests' 429s
    arrivals: list[float] = field(default_factory=list)
    requests: Counter[str] = field(default_factory=Counter)
    answered: Counter[str] = field(default_factory=Counter)
    auth_headers: list[str] = field(default_factory=list)
    faults: Counter[str] = field(default_factory=Counter)
    rng: random.Random = field(default_factory=random.Random)
    stream_usage: bool = True  # a usage chunk at the end of a stream that asked for one
    stream_gap: float = 0.0  # seconds between streamed events (0: all in one write)
    stream_stalls: list[float] = field(default_factory=list)  # pauses for the first streams, mid-reply
    require_headers: dict[str, str] = field(default_factory=dict)  # a gateway's api-key header, say
    require_query: dict[str, str] = field(default_factory=dict)  # and its api-version parameter
    impossible_logprobs: str = ""  # "positive" or "nan": impossible values at some answers (see the docstring)
    record: bool = False  # keep each request (path, headers, body) in `seen`
    seen: list[tuple[str, dict[str, str], Any]] = field(default_factory=list)
    batches: BatchStore = field(default_factory=BatchStore)  # /v1/files and /v1/batches (batches.py)
    limits: Limits = field(default_factory=lambda: Limits())  # rate, in-flight and slot limits

    def impossible(self, question: str) -> bool:
        """Whether this question's answer gets the impossible log probabilities (about half do)."""
        return bool(self.impossible_logprobs) and _draw(f"impossible:{question}", 2) == 0


@dataclass
class Stream:
    """A streamed answer: each item one whole server-sent event; `stall` pauses it halfway."""

    events: list[bytes]
    stall: float = 0.0


Response = tuple[int, bytes, dict[str, str]]
REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    429: "Too Many Requests",
    500: "Internal Server Error",
    504: "Gateway Timeout",
}


def _json(status: int, payload: Any, headers: dict[str, str] | None = None) -> Response:
    return status, json.dumps(payload).encode(), headers or {}


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
            return _json(200, {"object": "list", "data": models})
        if method == "GET" and path in ("/props", "/slots") and self.limiter.publishes:
            return _json(200, self.limiter.published(path))
        if method == "GET" and path == "/stats":
            s = self.state
            gate = self.limiter
            return _json(
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
                return _json(401, {"error": {"message": "Incorrect API key provided"}})
            return await self.batch_routes(method, path, headers, body)
        return _json(404, {"error": {"message": f"no route {method} {path}"}})

    def gateway(self, headers: dict[str, str], query: dict[str, str]) -> Response | None:
        for name, value in self.state.require_headers.items():
            if headers.get(name.lower()) != value:
                return _json(401, {"error": {"message": f"Access denied: header {name} missing or wrong"}})
        for name, value in self.state.require_query.items():
            if query.get(name) != value:
                return _json(404, {"error": {"message": f"Resource not found: query parameter {name} missing"}})
        return None

    async def chat(
        self, headers: dict[str, str], raw: bytes, arrived: float, chat: bool = True
    ) -> Response | Stream | None:
        state = self.state
        auth = headers.get("authorization", "")
        state.auth_headers.append(auth)
        if state.api_key is not None and auth != f"Bearer {state.api_key}":
            return _json(401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}})
        body = json.loads(raw)
        if state.record:
            state.seen.append((str(headers.get(":path", "")), headers, body))
        if state.models and body.get("model") not in state.models:
            return _json(404, {"error": {"message": f"model {body.get('model')} does not exist"}})
        messages = body.get("messages", []) if chat else [{"content": body.get("prompt", "")}]
        prompt = "\n".join(str(m.get("content", "")) for m in messages)
        question = last_question(prompt)
        state.requests[question] += 1
        state.arrivals.append(time.monotonic())
        if state.throttle:
            return _json(429, {"error": {"message": "slow down"}}, {"Retry-After": state.throttle.pop(0)})
        refused = self.limiter.admit()
        if refused is not None:
            return refused
        try:
            await self.limiter.serve(state.latency, arrived)
        finally:
            self.limiter.done()
        if state.fail_rate and state.rng.random() < state.fail_rate:
            return await self.fault()
        forced = _forced_turn(messages, chat)
        answer = state.policy.forced(question) if forced else state.policy.expected(question)
        text = state.policy.reply(question) if not forced else f"ANSWER: {answer or 'maybe'}"
        if forced and not chat:
            text = f" {answer or 'maybe'}"  # the continuation of the cue
        state.answered[question] += 1
        usage = {
            "prompt_tokens": len(prompt) // 4,
            "completion_tokens": len(text) // 4,
            "total_tokens": (len(prompt) + len(text)) // 4,
        }
        p_yes = state.policy.p_yes(question, answer)
        fault = state.impossible_logprobs if state.impossible(question) else ""
        scratch = "Scratch work that must never be scored. ANSWER: " + ("NO" if "YES" in text else "YES")
        n = body.get("n") if isinstance(body.get("n"), int) else 1
        if body.get("stream"):
            include = bool((body.get("stream_options") or {}).get("include_usage")) and state.stream_usage
            return self.stream(text, scratch if chat else None, n, usage if include else None, body, p_yes, fault)
        logprobs = _logprobs(text, chat, p_yes, fault) if body.get("logprobs") else None
        if not chat:
            choices = [{"index": i, "finish_reason": "stop", "text": text, "logprobs": logprobs} for i in range(n)]
            return _json(200, {"id": "cmpl-fake", "object": "text_completion", "choices": choices, "usage": usage})
        message = {"role": "assistant", "content": text, "reasoning_content": scratch}
        choices = [{"index": i, "finish_reason": "stop", "message": message, "logprobs": logprobs} for i in range(n)]
        return _json(
            200,
            {
                "id": "chatcmpl-fake",
                "object": "chat.completion",
                "model": body.get("model"),
                "choices": choices,
                "usage": usage,
            },
        )

    def stream(
        self,
        text: str,
        scratch: str | None,
        n: int,
        usage: Any,
        body: dict[str, Any],
        p_yes: float | None = 0.5,
        fault: str = "",
    ) -> Stream:
        """Chunks as vLLM streams them: role, reasoning pieces, content pieces, finish, usage, [DONE]."""
        chat = scratch is not None
        kind = "chat.completion.chunk" if chat else "text_completion"
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}] if chat else []
        deltas += [{"reasoning_content": piece} for piece in _pieces(scratch or "")]
        deltas += [{"content": piece} for piece in _pieces(text)]
        events = []
        for delta in deltas:
            choices = []
            for i in range(n):
                if chat:
                    choice: dict[str, Any] = {"index": i, "delta": delta, "finish_reason": None}
                else:
                    choice = {"index": i, "text": delta["content"], "finish_reason": None}
                if body.get("logprobs") and delta.get("content"):
                    choice["logprobs"] = _logprobs(delta["content"], chat, p_yes, fault)
                choices.append(choice)
            events.append({"id": "x", "object": kind, "choices": choices})
        finish = {"index": 0, "delta": {}, "finish_reason": "stop"} if chat else {"index": 0, "text": ""}
        events.append(
            {"id": "x", "object": kind, "choices": [{**finish, "index": i, "finish_reason": "stop"} for i in range(n)]}
        )
        if usage is not None:
            events.append({"id": "x", "object": kind, "choices": [], "usage": usage})
        raw = [b"data: " + json.dumps(e).encode() + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]
        return Stream(raw, self.state.stream_stalls.pop(0) if self.state.stream_stalls else 0.0)

    async def fault(self) -> Response | None:
        """None means: drop the connection without answering."""
        state = self.state
        fault = state.rng.choice(FAULTS)
        state.faults[fault] += 1
        if fault == "429":
            return _json(429, {"error": {"message": "rate limited"}}, {"Retry-After": "0"})
        if fault == "500":
            return _json(500, {"error": {"message": "internal error"}})
        if fault == "stall":
            await asyncio.sleep(state.stall)
            return _json(504, {"error": {"message": "too late"}})
        if fault == "drop":
            return None
        if fault == "malformed":
            return 200, b'{"choices": [{"message": ', {}
        return _json(200, {"id": "x", "choices": []})


def _pieces(text: str) -> list[str]:
    """A text in a few word-sized deltas that join back to it exactly."""
    return re.findall(r"\s*\S+\s*", text) if text.strip() else ([text] if text else [])


def _forced_turn(messages: list[Any], chat: bool) -> bool:
    last = str(messages[-1].get("content", "")) if messages and isinstance(messages[-1], dict) else ""
    return last.startswith(FORCE_PROMPT) if chat else last.rstrip().endswith(FORCE_CUE.strip())


def _answer_side(token: str) -> str | None:
    word = re.sub(r"[^A-Za-z]", "", token).upper()
    return word if word in ("YES", "NO", "MAYBE") else None


def _alternatives(token: str, p_yes: float | None, fault: str = "") -> list[tuple[str, float]]:
    """The answer token and the other answers, with the probabilities that make P(YES) = p_yes
    (with a `fault`, impossible ones)."""
    side = _answer_side(token)
    if side == "MAYBE":
        return [(token, math.log(0.5)), (" YES", math.log(0.3)), (" NO", math.log(0.2))]
    if side is None or p_yes is None:
        return [(token, -0.25), ("?", -3.0)]
    other = token.replace(side, _other(side))
    mine = p_yes if side == "YES" else 1 - p_yes
    if fault == "positive":
        return [(token, math.log(mine)), (other, 50.0)]
    if fault == "nan":
        return [(token, math.nan), (other, math.inf)]
    return [(token, math.log(mine)), (other, math.log(1 - mine))]


def _logprobs(text: str, chat: bool, p_yes: float | None = 0.5, fault: str = "") -> dict[str, Any]:
    tokens = _pieces(text)
    options = [_alternatives(t, p_yes, fault) for t in tokens]
    if chat:
        content = [
            {"token": t, "logprob": alts[0][1], "top_logprobs": [{"token": a, "logprob": lp} for a, lp in alts]}
            for t, alts in zip(tokens, options, strict=True)
        ]
        return {"content": content}
    return {
        "tokens": tokens,
        "token_logprobs": [alts[0][1] for alts in options],
        "top_logprobs": [dict(alts) for alts in options],
    }


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
                f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}",
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
