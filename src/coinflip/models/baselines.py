"""Baselines that need no server: floors and ceilings that take the same path as a real model."""

from __future__ import annotations

import random
import time

from ..config import BASELINES as NAMES
from ..data.prompts import reasoning
from .base import Reply, Request


class Baseline:
    """Replies with reasoning text and an ANSWER line, so extraction and scoring run as usual;
    `choices` answers per request, as a server asked for n choices would."""

    def __init__(self, name: str, seed: int = 42, choices: int = 1) -> None:
        if name not in NAMES:
            raise ValueError(f"unknown baseline {name!r}")
        self.name, self.seed, self.choices = name, seed, choices

    def answer(self, request: Request, repeat: int | None = None) -> str:
        if self.name == "oracle":
            return reasoning(request.question)
        if self.name == "random":  # seeded per sample, so order and resumes do not change it
            draw = request.repeat if repeat is None else repeat
            key = f"{self.seed}:{request.id}" if draw == 0 else f"{self.seed}:{request.id}:{draw}"
            choice = random.Random(key).choice(("YES", "NO"))
            return f"A guess.\nANSWER: {choice}"
        return f"Always the same.\nANSWER: {'YES' if self.name == 'always-yes' else 'NO'}"

    async def complete(self, request: Request) -> Reply:
        start = time.perf_counter()
        if len(request.messages) > 1 and request.messages[-2].get("role") == "assistant":  # a forced answer
            text = self.answer(request).rsplit("\n", 1)[-1]
            return Reply(text=text, finish_reason="stop", latency_s=time.perf_counter() - start)
        count = int(request.params.get("n", self.choices))
        first, *more = [Reply(self.answer(request, request.repeat + i), finish_reason="stop") for i in range(count)]
        first.latency_s, first.more = time.perf_counter() - start, more
        return first

    async def aclose(self) -> None:
        return None
