"""What every model backend takes and gives back, whether it is a server, a baseline or llama.cpp."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class Request:
    """One prompt; `question` lets the baselines solve it. `params`: body settings for this request
    alone (a repeat's seed); `repeat`: the first repeat it answers (n choices: repeat .. repeat + n - 1)."""

    id: int
    prompt: str
    question: str
    messages: list[dict[str, str]] = field(default_factory=list)
    repeat: int = 0
    params: dict[str, Any] = field(default_factory=dict)
    forced: bool = False  # the follow-up that asks for the answer line alone
    kept: frozenset[int] = frozenset()  # repeats of these n already answered (a resume): their rows stay
    paid: dict[str, int] | None = None  # what the rows it rewrites reported they cost (failed attempts')
    seen: frozenset[str] = frozenset()  # the `source` of each row it rewrites: answers whose usage is in `paid`
    filled: frozenset[str] = frozenset()  # the `source` of each row it keeps: batches whose choices begin at `repeat`


class Unanswered(Exception):
    """A backend that cannot answer a request now: nothing is recorded, it stays owed for a resume."""


@dataclass
class Reply:
    """A model's answer, or the error that stood in for it after the last retry. `logprobs`: per token
    {"token", "logprob", "top": {token: logprob}}; `more`: the other choices of a request for n > 1."""

    text: str | None
    reasoning: str | None = None
    finish_reason: str | None = None
    usage: dict[str, int] | None = None
    latency_s: float | None = 0.0  # None: not known (answers read from a file, a batch without dates)
    attempts: int = 1
    error: str | None = None
    status: int | None = None  # the HTTP status of the last failed attempt, when there was one
    ttft_s: float | None = None  # streaming: seconds to the first content or reasoning token
    logprobs: list[dict[str, Any]] | None = None
    more: list[Reply] = field(default_factory=list)
    batch: bool = False  # answered through a Batch API, which bills at its discount
    source: str | None = None  # the saved batch that gave it (its key): a resume never reads it again for a row
    stopped: bool = False  # no answer: the run stopped it between attempts; it holds what they were billed


class Model(Protocol):
    name: str

    async def complete(self, request: Request) -> Reply: ...

    async def aclose(self) -> None: ...
