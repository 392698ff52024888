"""An OpenAI-compatible chat server on 127.0.0.1 that answers CoinFlip questions by a known policy.

Used by the tests and the benchmarks, and handy for trying coinflip without a model:

    python -m coinflip.testing.server --port 8000 --policy mixed --fail-rate 0.3

Policies: `correct` always answers right; `mixed` answers by a hash of the question (right,
wrong, invalid or always YES), so the expected metrics can be computed from `Policy.expected`.
Faults (`fail_rate`): 429 with Retry-After, 500, a stalled reply, a dropped connection, a
malformed body or an empty choice list - what real servers do under load.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import re
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

_QUESTION = re.compile(r"Q: A coin is heads up\..*?Is the coin still heads up\?", re.S)
MIXED = ("right",) * 6 + ("wrong", "wrong", "invalid", "yes")  # what `mixed` does, by question hash
FAULTS = ("429", "500", "stall", "drop", "malformed", "empty")


def truth(question: str) -> str:
    flips = len(re.findall(r"\S flips the coin\.", question))
    return "NO" if flips % 2 else "YES"


def last_question(prompt: str) -> str:
    found = _QUESTION.findall(prompt)
    return found[-1] if found else ""


@dataclass(frozen=True)
class Policy:
    name: str = "correct"

    def kind(self, question: str) -> str:
        if self.name == "correct":
            return "right"
        return MIXED[int(hashlib.sha256(question.encode()).hexdigest(), 16) % len(MIXED)]

    def expected(self, question: str) -> str | None:
        """What extraction should find in this policy's reply: YES, NO or None."""
        kind, right = self.kind(question), truth(question)
        return {"right": right, "wrong": "NO" if right == "YES" else "YES", "invalid": None, "yes": "YES"}[kind]

    def reply(self, question: str) -> str:
        answer = self.expected(question)
        if answer is None:
            return "The coin... I am not sure.\nANSWER: maybe"
        return f"Tracking the coin person by person.\n**ANSWER: {answer}**"


@dataclass
class ServerState:
    policy: Policy
    api_key: str | None = None
    models: tuple[str, ...] = ()
    latency: float = 0.0
    fail_rate: float = 0.0
    stall: float = 30.0
    seed: int = 0
    requests: Counter[str] = field(default_factory=Counter)
    answered: Counter[str] = field(default_factory=Counter)
    auth_headers: list[str] = field(default_factory=list)
    faults: Counter[str] = field(default_factory=Counter)
    rng: random.Random = field(default_factory=random.Random)


def make_app(state: ServerState) -> web.Application:
    state.rng.seed(state.seed)

    async def chat(request: web.Request) -> web.StreamResponse:
        auth = request.headers.get("Authorization", "")
        state.auth_headers.append(auth)
        if state.api_key is not None and auth != f"Bearer {state.api_key}":
            return web.json_response({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}}, status=401)
        body = await request.json()
        if state.models and body.get("model") not in state.models:
            return web.json_response({"error": {"message": f"model {body.get('model')} does not exist"}}, status=404)
        prompt = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
        question = last_question(prompt)
        state.requests[question] += 1
        if state.latency:
            await asyncio.sleep(state.latency)
        if state.fail_rate and state.rng.random() < state.fail_rate:
            return await _fault(request, state)
        text = state.policy.reply(question)
        state.answered[question] += 1
        return web.json_response({
            "id": "chatcmpl-fake", "object": "chat.completion", "model": body.get("model"),
            "choices": [{"index": 0, "finish_reason": "stop", "message": {
                "role": "assistant", "content": text,
                "reasoning_content": "Scratch work that must never be scored. ANSWER: " + ("NO" if "YES" in text else "YES"),
            }}],
            "usage": {"prompt_tokens": len(prompt) // 4, "completion_tokens": len(text) // 4, "total_tokens": (len(prompt) + len(text)) // 4},
        })

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": m, "object": "model"} for m in state.models or ("fake",)]})

    async def stats(request: web.Request) -> web.Response:
        return web.json_response({"requests": dict(state.requests), "answered": dict(state.answered), "faults": dict(state.faults)})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/stats", stats)
    return app


async def _fault(request: web.Request, state: ServerState) -> web.StreamResponse:
    fault = state.rng.choice(FAULTS)
    state.faults[fault] += 1
    if fault == "429":
        return web.json_response({"error": {"message": "rate limited"}}, status=429, headers={"Retry-After": "0"})
    if fault == "500":
        return web.json_response({"error": {"message": "internal error"}}, status=500)
    if fault == "stall":
        await asyncio.sleep(state.stall)
        return web.json_response({"error": {"message": "too late"}}, status=504)
    if fault == "drop":
        if request.transport is not None:
            request.transport.close()
        raise asyncio.CancelledError
    if fault == "malformed":
        return web.Response(text='{"choices": [{"message": ', content_type="application/json")
    return web.json_response({"id": "x", "choices": []})


class FakeOpenAIServer:
    """Runs the server on a free 127.0.0.1 port in a background thread; use as a context manager."""

    def __init__(self, policy: str = "correct", **options: Any) -> None:
        self.state = ServerState(Policy(policy), **options)
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> FakeOpenAIServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _start(self) -> None:
        self._runner = web.AppRunner(make_app(self.state), handle_signals=False, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


def serve(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m coinflip.testing.server", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--policy", choices=("correct", "mixed"), default="correct")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each reply")
    parser.add_argument("--fail-rate", type=float, default=0.0)
    parser.add_argument("--api-key", default=None)
    args = parser.parse_args(argv)
    state = ServerState(Policy(args.policy), api_key=args.api_key, latency=args.latency, fail_rate=args.fail_rate)
    web.run_app(make_app(state), host="127.0.0.1", port=args.port, access_log=None, print=None, backlog=1024)


if __name__ == "__main__":
    serve()
