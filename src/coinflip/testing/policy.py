"""How the fake server answers CoinFlip questions (its policies), and what it keeps (`ServerState`).

Policies: `correct` always answers right (it tracks the coin in every form of the grammar);
`mixed` answers by a hash of the question (right, wrong, invalid or always YES), so the expected
metrics can be computed from `Policy.expected`. Two policies stand for models the probes must
catch: `shortcut` counts the phrase " flips the coin." from an assumed heads-up start (right on
the official form, lost when the coin starts tails up or flips are worded otherwise), and
`contaminated` knows the bundled splits' questions by heart and gets any other question right
60% of the time (by a hash of the question, so runs repeat).
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..data.grammar import solve
from .batches import BatchStore
from .limited import Limits

_QUESTION = re.compile(
    r"Q: A coin is (?:heads|tails) up\..*?Is the coin (?:still )?(?:heads|tails) up\?|问：一枚硬币.*?吗？", re.S
)
MIXED = ("right",) * 6 + ("wrong", "wrong", "invalid", "yes")  # what `mixed` does, by question hash


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
    from ..data.grammar import bundled_dir
    from ..data.load import load_file

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
    reply_tokens: int = 0  # replies padded to about this many tokens (4 characters each), cut at max_tokens
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


def reply_json(status: int, payload: Any, headers: dict[str, str] | None = None) -> Response:
    return status, json.dumps(payload).encode(), headers or {}
