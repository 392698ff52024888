"""The test server's chat and completions, plain or streamed as vLLM streams them, with faults (`fail_rate`);
log probabilities put the policy's confidence on the answer token, the rest on the other, so P(YES) is known."""

from __future__ import annotations

import asyncio
import functools
import json
import math
import re
import time
from typing import Any

from ..data.prompts import FORCE_CUE, FORCE_PROMPT
from .limited import Gate, Response, error_json, reply_json
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
    try:
        body = json.loads(raw)
    except ValueError:  # not JSON, or not UTF-8
        return error_json(400, "We could not parse the JSON body of your request: it is not valid JSON.")
    field = "messages" if chat else "prompt"
    if not isinstance(body, dict) or field not in body:
        return error_json(400, f"Missing required parameter: '{field}' (the body must be a JSON object).", field)
    if chat and not (isinstance(body["messages"], list) and all(isinstance(m, dict) for m in body["messages"])):
        return error_json(400, "Invalid type for 'messages': expected an array of objects.", "messages")
    if state.record:
        state.seen.append((str(headers.get(":path", "")), headers, body))
    if state.models and body.get("model") not in state.models:
        return reply_json(404, {"error": {"message": f"model {body.get('model')} does not exist"}})
    messages = body.get("messages", []) if chat else [{"content": body.get("prompt", "")}]
    prompt = "\n".join(str(m.get("content", "")) for m in messages)
    question = last_question(prompt)
    state.requests[question] += 1
    state.arrivals.append(time.monotonic())
    if state.context and len(prompt) // 4 > state.context:
        message = f"This model's maximum context length is {state.context} tokens. However, you requested more."
        return reply_json(400, {"object": "error", "message": message, "type": "BadRequestError", "code": 400})
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
    top = body.get("top_logprobs")
    alternatives = top if isinstance(top, int) else 0
    logprobs = functools.partial(_logprobs, chat=chat, p_yes=p_yes, fault=bad, alternatives=alternatives)
    asked = logprobs if body.get("logprobs") else None
    scratch = "Scratch work that must never be scored. ANSWER: " + ("NO" if "YES" in text else "YES")
    n = int(body["n"]) if isinstance(body.get("n"), int) else 1
    if body.get("stream"):
        include = bool((body.get("stream_options") or {}).get("include_usage")) and state.stream_usage
        events = stream(text, scratch if chat else None, n, usage if include else None, asked)
        return Stream(events, state.stream_stalls.pop(0) if state.stream_stalls else 0.0)
    message = {"role": "assistant", "content": text, "reasoning_content": scratch}
    content = {"message": message} if chat else {"text": text}
    found = asked(text) if asked else None
    choices = [{"index": i, "finish_reason": "stop", **content, "logprobs": found} for i in range(n)]
    kind = {"id": "chatcmpl-fake", "object": "chat.completion", "model": body.get("model")} if chat else {}
    return reply_json(200, {"id": "cmpl-fake", "object": "text_completion", **kind, "choices": choices, "usage": usage})


def stream(text: str, scratch: str | None, n: int, usage: Any, logprobs: Any) -> list[bytes]:
    """Role, reasoning pieces (chat: `scratch`), content pieces, finish, usage (if given), [DONE]."""
    chat = scratch is not None
    kind = "chat.completion.chunk" if chat else "text_completion"
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}] if chat else []
    deltas += [{"reasoning_content": piece} for piece in _pieces(scratch or "")]
    deltas += [{"content": piece} for piece in _pieces(text)]
    steps: list[tuple[dict[str, Any], str | None]] = []  # each event's choice, and its finish reason
    for delta in deltas:
        piece = delta.get("content")
        choice: dict[str, Any] = {"delta": delta} if chat else {"text": piece}
        if logprobs and piece:
            choice["logprobs"] = logprobs(piece)
        steps.append((choice, None))
    steps.append(({"delta": {}} if chat else {"text": ""}, "stop"))
    choices = ([{"index": i, **choice, "finish_reason": end} for i in range(n)] for choice, end in steps)
    events: list[dict[str, Any]] = [{"id": "x", "object": kind, "choices": each} for each in choices]
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
    if word == "MAYBE":
        return [(token, math.log(0.5)), (" YES", math.log(0.3)), (" NO", math.log(0.2))]
    if word not in ("YES", "NO") or p_yes is None:
        return [(token, -0.25), ("?", -3.0)]
    mine = p_yes if word == "YES" else 1 - p_yes
    faults = {"positive": (math.log(mine), 50.0), "nan": (math.nan, math.inf)}
    first, second = faults.get(fault, (math.log(mine), math.log(1 - mine)))
    return [(token, first), (token.replace(word, _other(word)), second)]


def _logprobs(text: str, chat: bool, p_yes: float | None, fault: str, alternatives: int) -> dict[str, Any]:
    tokens = _pieces(text)
    options = [_alternatives(t, p_yes, fault) for t in tokens]  # each token's first is itself
    if chat:  # as OpenAI: the alternatives only where top_logprobs asks for them
        tops = [[{"token": a, "logprob": lp} for a, lp in alts] for alts in options]
        return {"content": [{**top[0], "top_logprobs": top[:alternatives]} for top in tops]}
    top = [dict(alts) for alts in options]
    return {"tokens": tokens, "token_logprobs": [alts[0][1] for alts in options], "top_logprobs": top}
