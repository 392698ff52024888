"""Whatever a server sends, whole or streamed, a Reply or a BadReply: never a crash, never a NaN (log
probabilities keep NaN and infinities by name, so calibration tells an impossible value from a missing one)."""

from __future__ import annotations

import contextlib
import html
import json
import math
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import msgspec  # imported with the transport, not with `import coinflip`

from .._terminal import one_line
from ..records import MAX_FINISH, TOKENS_MAX, whole
from ._sse import SSEDecoder
from .base import Reply, Request

MAX_FLOAT = sys.float_info.max
MAX_MESSAGE = 2000  # characters of a server's message kept in an error: enough for any real one
_DECODER = json.JSONDecoder(parse_constant=str)  # one for all: json.loads(..., **kw) builds one a call
_FAST = msgspec.json.Decoder()
_REFUSALS = (("ratelimit", 429), ("throttl", 429), ("toomanyrequests", 429), ("overload", 529))
_PAGE_TITLE = re.compile(r"<title(?:\s[^<>]{0,200})?>([^<]{1,500})</title", re.I)  # bounded: a page is untrusted


class BadReply(Exception):
    """The body is not a usable answer (retried)."""

    status: int | None = None  # the HTTP status a server's error object names


class ServerSaidError(BadReply):
    """The server answered with an error object, in a 200 body or a stream event: its `code` (429, "429") or,
    in words, its type or code (rate_limit_exceeded, throttling_error, overloaded_error) names a `status`."""

    def __init__(self, message: str, said: Any) -> None:
        super().__init__(message)
        err = said.get("error", said) if isinstance(said, dict) else None
        if not isinstance(err, dict):  # text-generation-inference's {"error": "Model is overloaded", "error_type": ...}
            err = {"type": said.get("error_type")} if isinstance(said, dict) else {}
        code, kind = str(err.get("code")), err.get("type")
        digits = code.isascii() and code.isdigit() and len(code) < 5 and 100 <= int(code) < 600
        words = "".join(c for c in f"{kind}{code}".lower() if c.isalpha())
        self.status = int(code) if digits else next((n for word, n in _REFUSALS if word in words), None)


def load_json(raw: bytes | str) -> Any:
    """JSON with NaN and Infinity read as their names; too deep a nesting is a BadReply. msgspec reads
    first (fast); what it refuses (NaN, 1e400, UTF-16, malformed) json reads: the result is json's."""
    try:
        try:
            return _FAST.decode(raw)
        except (msgspec.DecodeError, UnicodeError):
            text = raw if isinstance(raw, str) else raw.decode(json.detect_encoding(raw), "surrogatepass")
            return _DECODER.decode(text)
    except RecursionError:
        raise BadReply("malformed response body (JSON nested too deeply)") from None
    except ValueError as exc:
        raise BadReply(f"malformed response body ({type(exc).__name__}: {str(exc)[:120]})") from None


def server_message(raw: bytes) -> str:
    """The message in an error body: `{"error": {"message": ...}}`, an HTML page's title, or the text."""
    try:
        data = load_json(raw)
    except BadReply:
        text = raw[: MAX_MESSAGE * 4].decode("utf-8", "replace")
        title = _PAGE_TITLE.search(text) if text.lstrip()[:1] == "<" else None
        page = one_line(html.unescape(title.group(1)).strip()) if title else ""
        return f"{page} (an HTML page)" if page else one_line(text.strip())
    return one_line(_message_of(data).strip())


def _message_of(data: Any) -> str:
    err = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(err, dict):
        for key in ("message", "detail", "msg", "error"):
            if isinstance(err.get(key), str | dict | list):
                return _message_of(err[key]) if not isinstance(err[key], str) else str(err[key])
    if isinstance(err, str):
        return err
    return json.dumps(err, ensure_ascii=False)[: MAX_MESSAGE * 2]


def parse_body(raw: bytes, mode: str) -> Reply:
    if not raw.strip():  # a 204, or a server that answered 200 and nothing
        raise BadReply("empty response body")
    if raw.lstrip().startswith((b"data:", b"event:", b"id:", b":")):  # no JSON: events (a server that always streams)
        return _unasked_stream(raw, mode)
    data = load_json(raw)
    if not isinstance(data, dict):
        raise BadReply("malformed response body (not a JSON object)")
    if data.get("error"):
        raise ServerSaidError(f"HTTP 200 with an error: {one_line(_message_of(data))}", data)
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise BadReply("malformed response body (no choices)")
    ordered = sorted(choices, key=lambda c: _index(c.get("index")) if isinstance(c, dict) else 0)
    first, *more = [_choice(c, mode) for c in ordered]
    first.usage, first.more = usage(data.get("usage")), more
    return first


def _unasked_stream(raw: bytes, mode: str) -> Reply:
    """Server-sent events where no stream was asked: the answer they carry, untimed (none was asked), or why not."""
    sink = StreamReply(mode)
    any(sink.add(0.0, kind, data) for kind, data in SSEDecoder().feed(raw + b"\n\n"))  # to the first that stops it
    try:
        return replace(sink.reply(0.0), ttft_s=None)
    except BadReply as exc:
        exc.args = (f"the server streamed though no stream was asked (try --stream), and {exc}",)
        raise


def _index(value: Any) -> int:
    return value if whole(value) else 0


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def dicts(value: Any) -> list[dict[str, Any]]:
    """The objects of a list a server sent; anything else in it, or no list at all, is none."""
    return [item for item in _list(value) if isinstance(item, dict)]


def _choice(choice: Any, mode: str) -> Reply:
    """A whole choice: the one delta of a stream, its `message` for `delta`."""
    part = "message" if mode == "chat" else "text"
    if not isinstance(choice, dict) or not (isinstance(choice.get(part), dict) or mode != "chat" and part in choice):
        raise BadReply(f"malformed response body (no choices[0].{part})")
    whole = _Choice()
    _add_delta(whole, choice, mode, "message")
    return whole.reply()


def text_of(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, float) and not math.isfinite(value):
        raise BadReply("malformed response body (content is not a finite number)")
    if isinstance(value, int | float):  # a boolean too: its JSON text
        return json.dumps(value)
    if isinstance(value, list):
        return "".join(_part_text(p) for p in value)
    raise BadReply(f"malformed response body (content is a JSON {type(value).__name__})")


def _part_text(part: Any) -> str:
    if isinstance(part, str):
        return part
    if isinstance(part, dict) and isinstance(part.get("text"), str) and part.get("type", "text") != "image_url":
        return str(part["text"])
    return ""


def token_count(value: Any) -> int | None:
    """A whole count below TOKENS_MAX (a whole float or a string of decimal digits too: "²" is none), else None."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    elif isinstance(value, str) and value.strip().isdecimal() and len(value.strip()) <= 18:
        value = int(value.strip())
    return value if whole(value, TOKENS_MAX) else None


USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens", "reasoning_tokens")


def usage(value: Any) -> dict[str, int] | None:
    if not isinstance(value, dict):
        return None
    found = {key: token_count(value.get(key)) for key in ("prompt_tokens", "completion_tokens", "total_tokens")}
    prompt, completion, total = found.values()
    if total is not None and (prompt is None) != (completion is None) and total >= (prompt or completion or 0):
        found["prompt_tokens" if prompt is None else "completion_tokens"] = total - (prompt or completion or 0)
    details = value.get("completion_tokens_details")
    reasoning = token_count(details.get("reasoning_tokens")) if isinstance(details, dict) else None
    found["reasoning_tokens"] = reasoning if reasoning is not None else token_count(value.get("reasoning_tokens"))
    kept = {key: n for key, n in found.items() if n is not None}
    return kept or None


def loaded(raw: bytes | str) -> Any:
    """`load_json`'s value, or None where it is no JSON."""
    with contextlib.suppress(BadReply):
        return load_json(raw)
    return None


def foreign_json(raw: bytes) -> bool:
    """JSON with no choices, error or API object (another JSON API's answer: a health check, a stub, `null`)."""
    try:
        data = load_json(raw)
    except BadReply:  # no JSON at all: a malformed reply, retried
        return False
    return not (isinstance(data, dict) and data.keys() & {"choices", "error", "object"})


def usage_of(raw: bytes) -> dict[str, int] | None:
    """The usage a body that is no answer still reports (a retry's cost), or None."""
    data = loaded(raw)
    return usage(data.get("usage")) if isinstance(data, dict) else None


def saved_usage(value: Any) -> dict[str, int] | None:
    """A saved row's usage, its counts as the writer saves them (a hand-edited file's others left out)."""
    if not isinstance(value, dict):
        return None
    kept = {k: n for k, n in value.items() if k in USAGE_KEYS and whole(n, TOKENS_MAX)}
    return kept or None


def added(one: dict[str, int] | None, other: dict[str, int] | None) -> dict[str, int] | None:
    """Two usages summed, count by count (within TOKENS_MAX); None where neither says anything."""
    if not one or not other:
        return one or other
    return {k: min(one.get(k, 0) + other.get(k, 0), TOKENS_MAX - 1) for k in {**one, **other}}


def unkept(reply: Reply, request: Request) -> Reply:
    """A saved batch's answer read again for a draw some of whose n choices are saved (a stop between their rows):
    the other choices, its usage only where the first choice's row (which holds it) is not saved."""
    if reply.error is not None or not request.kept:
        return reply
    left = [c for i, c in enumerate((reply, *reply.more)) if request.repeat + i not in request.kept]
    first, *more = left or [Reply(None, error="the saved batch's answer has no choice not saved already")]
    return replace(first, more=more, usage=None if request.repeat in request.kept else reply.usage)


def _logprob(value: Any) -> float | str | None:
    """A finite number, None if none was sent, else a text saying what came ("NaN", "not a number")."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value if isinstance(value, str) else "not a number"
    if isinstance(value, int) and abs(value) > MAX_FLOAT:  # 400 digits: float() would raise
        return "inf" if value > 0 else "-inf"
    number = float(value)
    return number if math.isfinite(number) else str(number)


def _entry(token: Any, logprob: Any, top: Iterable[tuple[Any, Any]]) -> dict[str, Any] | None:
    if not isinstance(token, str):
        return None
    alternatives = {t: f for t, lp in top if isinstance(t, str) and (f := _logprob(lp)) is not None}
    return {"token": token, "logprob": _logprob(logprob), "top": alternatives}


def chat_logprobs(value: Any) -> list[dict[str, Any]]:
    """`choices[i].logprobs.content`: [{token, logprob, top_logprobs: [{token, logprob}]}]."""
    content = value.get("content") if isinstance(value, dict) else None
    items = dicts(content)
    entries = [_entry(item.get("token"), item.get("logprob"), _pairs(item.get("top_logprobs"))) for item in items]
    return [entry for entry in entries if entry is not None]


def _pairs(top: Any) -> list[tuple[Any, Any]]:
    return [(t.get("token"), t.get("logprob")) for t in dicts(top)]


def completion_logprobs(value: Any) -> list[dict[str, Any]]:
    """`choices[i].logprobs`: {tokens: [...], token_logprobs: [...], top_logprobs: [{token: logprob}]}."""
    if not isinstance(value, dict) or not isinstance(value.get("tokens"), list):
        return []
    logprobs, tops = _list(value.get("token_logprobs")), _list(value.get("top_logprobs"))
    entries = [
        _entry(token, logprobs[i] if i < len(logprobs) else None, _dict(tops[i] if i < len(tops) else None).items())
        for i, token in enumerate(value["tokens"])
    ]
    return [entry for entry in entries if entry is not None]


def _dict(value: Any) -> dict[Any, Any]:
    return value if isinstance(value, dict) else {}


@dataclass
class _Choice:
    """One choice of a streamed answer, put together from its deltas."""

    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    finish: str | None = None
    logprobs: list[dict[str, Any]] = field(default_factory=list)

    def reply(self) -> Reply:
        return Reply("".join(self.text), "".join(self.reasoning) or None, self.finish, logprobs=self.logprobs or None)


class StreamReply:
    """A streamed answer put together as events arrive, keeping only what the Reply needs; the first
    malformed or error event ends it (`add` says stop) and `reply` raises it."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.choices: dict[int, _Choice] = {}
        self.usage: dict[str, int] | None = None
        self.first: float | None = None  # arrival of the first text or reasoning
        self.done = False
        self.error: BadReply | None = None

    def add(self, at: float, kind: str, data: str) -> bool:
        if data.strip() == "[DONE]":
            self.done = True
            return True
        try:
            chunk = load_json(data) if kind != "error" else loaded(data)  # an error event's data may be plain text
            if kind == "error" or (isinstance(chunk, dict) and chunk.get("error")):
                raise ServerSaidError(f"the stream carried an error: {server_message(data.encode())}", chunk)
            if not isinstance(chunk, dict):
                raise BadReply("malformed stream chunk (not a JSON object)")
            self.usage = usage(chunk.get("usage")) or self.usage
            for item in chunk.get("choices") or ():
                if not isinstance(item, dict):
                    continue
                index = item.get("index", 0)
                choice = self.choices.get(index) if type(index) is int else None  # noqa: E721 - bool is no index
                if choice is None:
                    choice = self.choices.setdefault(_index(index), _Choice())
                if _add_delta(choice, item, self.mode, "delta") and self.first is None:
                    self.first = at
        except BadReply as exc:
            self.error = exc
            return True
        return False

    def reply(self, sent: float) -> Reply:
        if self.error is not None:
            raise self.error
        if not self.choices:
            raise BadReply("the stream ended without any choice")
        if not self.done and any(c.finish is None for c in self.choices.values()):  # a proxy cut it off
            raise BadReply("the stream ended before the reply was complete (no finish_reason and no [DONE])")
        first, *more = [self.choices[i].reply() for i in sorted(self.choices)]
        first.usage, first.more = self.usage, more
        first.ttft_s = None if self.first is None else max(0.0, self.first - sent)
        return first


def _add_delta(choice: _Choice, item: dict[str, Any], mode: str, key: str) -> bool:
    """Add a choice's `key` (its delta or its message); True when it brought text or reasoning."""
    reasoning = None
    if mode == "chat":
        delta = _dict(item.get(key))
        text = delta.get("content")
        if text is not None and type(text) is not str:  # noqa: E721 - the common case, checked fast
            text = text_of(text)
        if "reasoning_content" in delta or "reasoning" in delta:
            reasoning = text_of(delta.get("reasoning_content")) or text_of(delta.get("reasoning"))
    else:
        text = text_of(item.get("text"))
    if item.get("logprobs") is not None:
        choice.logprobs += chat_logprobs(item["logprobs"]) if mode == "chat" else completion_logprobs(item["logprobs"])
    if text:
        choice.text.append(text)
    if reasoning:
        choice.reasoning.append(reasoning)
    if isinstance(item.get("finish_reason"), str):
        choice.finish = item["finish_reason"][:MAX_FINISH]
    return bool(text or reasoning)
