"""The test server's chat and completions, plain or streamed as vLLM streams them, with faults
(`fail_rate`); a forced-answer turn or cue gets the policy's `forced` answer. Log probabilities put the
policy's confidence on the answer token, the rest on the other answer, so P(YES) is known."""

from __future__ import annotations

import asyncio
import functools
import json
import math
import re
import time
from typing import Any

from ..data.prompts import FORCE_CUE, FORCE_PROMPT
from .limited import Gate, Response, reply_json
from .policy import ServerState, Stream, _other, last_question

FAULTS: dict[str, Response | None] = {  # in the order the draw picks them
    "429": reply_json(429, {"error": {"message": "rate limited"}}, {"Retry-After": "0"}),
    "500": reply_json(500, {"error": {"message": "internal error"}}),
    "stall": reply_json(504, {"error": {"message": "too late"}}),
    "drop": None,  # the connection dropped, unanswered
    "malformed": (200, b'{"choices": [{"message": ', {}),
    "empty": reply_json(200, {"id": "x", "choices": []}),
}


async def completion(
    state: ServerState, gate: Gate, headers: dict[str, str], raw: bytes, arrived: float, chat: bool = True
) -> Response | Stream | None:
    auth = headers.get("authorization", "")
    state.auth_headers.append(auth)
    if state.api_key is not None and auth != f"Bearer {state.api_key}":
        return reply_json(401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}})
    body = json.loads(raw)
    if state.record:
        state.seen.append((str(headers.get(":path", "")), headers, body))
    if state.models and body.get("model") not in state.models:
        return reply_json(404, {"error": {"message": f"model {body.get('model')} does not exist"}})
    messages = body.get("messages", []) if chat else [{"content": body.get("prompt", "")}]
    prompt = "\n".join(str(m.get("content", "")) for m in messages)
    question = last_question(prompt)
    state.requests[question] += 1
    state.arrivals.append(time.monotonic())
    if state.throttle:
        return reply_json(429, {"error": {"message": "slow down"}}, {"Retry-After": state.throttle.pop(0)})
    if (refused := gate.admit()) is not None:
        return refused
    await gate.serve(state.latency, arrived)
    if state.fail_rate and state.rng.random() < state.fail_rate:
        fault = state.rng.choice(list(FAULTS))
        state.faults[fault] += 1
        await asyncio.sleep(state.stall if fault == "stall" else 0)
        return FAULTS[fault]
    return _answer(state, body, prompt, question, _forced_turn(messages, chat), chat)


def _answer(
    state: ServerState, body: dict[str, Any], prompt: str, question: str, forced: bool, chat: bool
) -> Response | Stream:
    answer = state.policy.forced(question) if forced else state.policy.expected(question)
    text = state.policy.reply(question) if not forced else f"ANSWER: {answer or 'maybe'}"
    if forced and not chat:
        text = f" {answer or 'maybe'}"  # the continuation of the cue
    state.answered[question] += 1
    if state.reply_tokens and not forced:  # a long reply, cut where max_tokens says, as a server cuts it
        most = body.get("max_tokens") or body.get("max_completion_tokens")
        text = ("flip" * state.reply_tokens + text)[: 4 * most if isinstance(most, int) else None]
    usage = {"prompt_tokens": len(prompt) // 4, "completion_tokens": len(text) // 4}
    usage["total_tokens"] = (len(prompt) + len(text)) // 4
    bad = state.impossible_logprobs if state.impossible(question) else ""
    p_yes = state.policy.p_yes(question, answer)
    logprobs = functools.partial(_logprobs, chat=chat, p_yes=p_yes, fault=bad) if body.get("logprobs") else None
    scratch = "Scratch work that must never be scored. ANSWER: " + ("NO" if "YES" in text else "YES")
    n = int(body["n"]) if isinstance(body.get("n"), int) else 1
    if body.get("stream"):
        include = bool((body.get("stream_options") or {}).get("include_usage")) and state.stream_usage
        events = stream(text, scratch if chat else None, n, usage if include else None, logprobs)
        return Stream(events, state.stream_stalls.pop(0) if state.stream_stalls else 0.0)
    found = logprobs(text) if logprobs else None
    if not chat:
        choices = [{"index": i, "finish_reason": "stop", "text": text, "logprobs": found} for i in range(n)]
        return reply_json(200, {"id": "cmpl-fake", "object": "text_completion", "choices": choices, "usage": usage})
    message = {"role": "assistant", "content": text, "reasoning_content": scratch}
    choices = [{"index": i, "finish_reason": "stop", "message": message, "logprobs": found} for i in range(n)]
    reply = {"id": "chatcmpl-fake", "object": "chat.completion", "model": body.get("model"), "choices": choices}
    return reply_json(200, {**reply, "usage": usage})


def stream(text: str, scratch: str | None, n: int, usage: Any, logprobs: Any) -> list[bytes]:
    """Role, reasoning pieces (chat: `scratch`), content pieces, finish, usage (if given), [DONE]."""
    chat = scratch is not None
    kind = "chat.completion.chunk" if chat else "text_completion"
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}] if chat else []
    deltas += [{"reasoning_content": piece} for piece in _pieces(scratch or "")]
    deltas += [{"content": piece} for piece in _pieces(text)]
    events = []
    for delta in deltas:
        piece = delta.get("content")
        choice: dict[str, Any] = {"delta": delta} if chat else {"text": piece}
        if logprobs and piece:
            choice["logprobs"] = logprobs(piece)
        events.append(
            {"id": "x", "object": kind, "choices": [{"index": i, **choice, "finish_reason": None} for i in range(n)]}
        )
    finish: dict[str, Any] = {"delta": {}} if chat else {"text": ""}
    events.append(
        {"id": "x", "object": kind, "choices": [{"index": i, **finish, "finish_reason": "stop"} for i in range(n)]}
    )
    if usage is not None:
        events.append({"id": "x", "object": kind, "choices": [], "usage": usage})
    return [b"data: " + json.dumps(e).encode() + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]


def _pieces(text: str) -> list[str]:
    """A text in a few word-sized deltas that join back to it exactly."""
    return re.findall(r"\s*\S+\s*", text) if text.strip() else ([text] if text else [])


def _forced_turn(messages: list[Any], chat: bool) -> bool:
    last = str(messages[-1].get("content", "")) if messages and isinstance(messages[-1], dict) else ""
    return last.startswith(FORCE_PROMPT) if chat else last.rstrip().endswith(FORCE_CUE.strip())


def _alternatives(token: str, p_yes: float | None, fault: str) -> list[tuple[str, float]]:
    """The answer token and the others, with probabilities that make P(YES) = p_yes (a `fault`: impossible ones)."""
    word = re.sub(r"[^A-Za-z]", "", token).upper()
    side = word if word in ("YES", "NO", "MAYBE") else None
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


def _logprobs(text: str, chat: bool, p_yes: float | None, fault: str) -> dict[str, Any]:
    tokens = _pieces(text)
    options = [_alternatives(t, p_yes, fault) for t in tokens]
    if chat:
        content = [
            {"token": t, "logprob": alts[0][1], "top_logprobs": [{"token": a, "logprob": lp} for a, lp in alts]}
            for t, alts in zip(tokens, options, strict=True)
        ]
        return {"content": content}
    top = [dict(alts) for alts in options]
    return {"tokens": tokens, "token_logprobs": [alts[0][1] for alts in options], "top_logprobs": top}
