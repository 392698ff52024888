"""How the test server answers (its policies: docs/testing.md; `mixed` by a hash of the question, so runs
repeat) and what it keeps (`ServerState`)."""

from __future__ import annotations

import functools
import hashlib
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
    """Fixed by `text`: the policies' choices repeat from run to run."""
    return int(hashlib.sha256(text.encode()).hexdigest(), 16) % n


def _other(answer: str) -> str:
    return "NO" if answer == "YES" else "YES"


def truth(question: str) -> str:
    solved = solve(question)
    flips = len(re.findall(r"\S flips the coin\.", question))
    return solved if solved is not None else "NO" if flips % 2 else "YES"


def shortcut(question: str) -> str:
    """Odd " flips the coin." means tails, from a heads-up start it never reads; the side asked it reads."""
    heads = question.count(" flips the coin.") % 2 == 0
    asks_tails = re.search(r"tails up\?$|反面朝上吗？$", question) is not None
    return "YES" if heads != asks_tails else "NO"


@functools.lru_cache(maxsize=1)
def known_questions() -> frozenset[str]:
    from ..data.grammar import bundled_dir
    from ..data.load import load_file

    return frozenset(
        r.question for split in ("test", "validation") for r in load_file(bundled_dir() / f"{split}.jsonl")
    )


def contaminated(question: str) -> str:
    right = truth(question)
    return right if question in known_questions() or _draw(f"fresh:{question}", 10) < 6 else _other(right)


def last_question(prompt: str) -> str:
    found = _QUESTION.findall(prompt)
    return found[-1] if found else ""


ANSWERERS = {"shortcut": shortcut, "contaminated": contaminated}
POLICIES = ("correct", "mixed", *ANSWERERS)


def _answer_of(kind: str, right: str) -> str | None:
    return {"right": right, "wrong": _other(right), "invalid": None, "yes": "YES"}[kind]


@dataclass(frozen=True)
class Policy:
    name: str = "correct"

    def kind(self, question: str) -> str:
        return "right" if self.name == "correct" else MIXED[_draw(question, len(MIXED))]

    def expected(self, question: str) -> str | None:
        if self.name in ANSWERERS:
            return ANSWERERS[self.name](question)
        return _answer_of(self.kind(question), truth(question))

    def reply(self, question: str) -> str:
        answer = self.expected(question)
        if answer is None:
            return "The coin... I am not sure.\nANSWER: maybe"
        return f"Tracking the coin person by person.\n**ANSWER: {answer}**"

    def forced(self, question: str) -> str | None:
        return _answer_of(("right", "right", "wrong", "invalid")[_draw(f"forced:{question}", 4)], truth(question))

    def p_yes(self, question: str, answer: str | None) -> float | None:
        """P(YES) at the answer, the answer token's share drawn; None for "maybe", which is no answer."""
        if answer is None:
            return None
        c = (0.55, 0.7, 0.85, 0.95)[_draw(f"confidence:{question}", 4)]
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
    context: int = 0  # prompt tokens (4 characters each) past which a request gets vLLM's 400
    stream_gap: float = 0.0  # seconds between streamed events (0: all in one write)
    stream_stalls: list[float] = field(default_factory=list)  # pauses for the first streams, mid-reply
    require_headers: dict[str, str] = field(default_factory=dict)  # a gateway's api-key header, say
    require_query: dict[str, str] = field(default_factory=dict)  # and its api-version parameter
    impossible_logprobs: str = ""  # "positive" or "nan": impossible log probabilities at about half the answers
    record: bool = False  # keep each request (path, headers, body) in `seen`
    seen: list[tuple[str, dict[str, str], Any]] = field(default_factory=list)
    batches: BatchStore = field(default_factory=BatchStore)  # /v1/files and /v1/batches (batches.py)
    limits: Limits = field(default_factory=lambda: Limits())  # rate, in-flight and slot limits

    def impossible(self, question: str) -> bool:
        return bool(self.impossible_logprobs) and _draw(f"impossible:{question}", 2) == 0


@dataclass
class Stream:
    """Whole server-sent events; `stall` pauses it halfway."""

    events: list[bytes]
    stall: float = 0.0
