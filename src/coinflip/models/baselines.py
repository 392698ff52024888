"""Baselines that need no server: floors and ceilings that take the same path as a real model."""

from __future__ import annotations

import random
import time

from ..data.prompts import reasoning
from .base import Reply, Request

NAMES = ("oracle", "random", "always-yes", "always-no")


class Baseline:
    """Replies with reasoning text and an ANSWER line, so extraction and scoring run as usual."""

    def __init__(self, name: str, seed: int = 42) -> None:
        if name not in NAMES:
            raise ValueError(f"unknown baseline {name!r}")
        self.name = name
        self.seed = seed

    def answer(self, request: Request) -> str:
        if self.name == "oracle":
            return reasoning(request.question)
        if self.name == "random":  # seeded per sample, so order and resumes do not change it
            choice = random.Random(f"{self.seed}:{request.id}").choice(("YES", "NO"))
            return f"A guess.\nANSWER: {choice}"
        return f"Always the same.\nANSWER: {'YES' if self.name == 'always-yes' else 'NO'}"

    async def complete(self, request: Request) -> Reply:
        start = time.perf_counter()
        text = self.answer(request)
        return Reply(text=text, finish_reason="stop", latency_s=time.perf_counter() - start)

    async def aclose(self) -> None:
        return None
