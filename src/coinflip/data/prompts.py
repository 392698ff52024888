"""Prompt stage: the specification's templates, byte for byte, and worked few-shot examples."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from .load import Record

ZERO_SHOT_TEMPLATE = (
    "\nSolve the following coin flip problem step by step. The last line of your response should be of "
    'the form "ANSWER: [ANSWER]" (without quotes) where [ANSWER] is the answer to the problem.\n'
    "\n"
    "{question}\n"
    "\n"
    'Remember to put your answer on its own line at the end in the form "ANSWER: [ANSWER]" (without '
    "quotes) where [ANSWER] is the answer YES or NO to the problem.\n"
    "\n"
    "Reasoning:\n"
)
FEW_SHOT_TEMPLATE = "Here are some examples of how to solve similar problems:\n\n{fewshot}\n\n" + ZERO_SHOT_TEMPLATE

_STEP = re.compile(r"(\S+) (flips|does not flip) the coin\.")


def reasoning(question: str) -> str:
    """A short correct solution that tracks the coin person by person, ending in the answer line."""
    heads = True
    lines = ["The coin starts heads up."]
    for name, action in _STEP.findall(question):
        if action == "flips":
            heads = not heads
            lines.append(f"{name} flips the coin, so it is now {'heads' if heads else 'tails'} up.")
        else:
            lines.append(f"{name} does not flip the coin, so it stays {'heads' if heads else 'tails'} up.")
    verdict = "still heads up" if heads else "tails up, not heads up"
    lines.append(f"The coin ends {verdict}.")
    lines.append(f"ANSWER: {'YES' if heads else 'NO'}")
    return "\n".join(lines)


def format_example(record: Record) -> str:
    return f"{record.question}\n\nReasoning:\n{reasoning(record.question)}"


def choose_examples(pool: Sequence[Record], count: int, seed: int) -> list[Record]:
    """Candidates drawn once from the seed: one spare, so a question is never its own example."""
    if count <= 0:
        return []
    if count >= len(pool):
        return list(pool)
    return random.Random(seed).sample(list(pool), count + 1)


def examples_for(question: str, candidates: Sequence[Record], count: int) -> list[Record]:
    return [r for r in candidates if r.question != question][:count]


def build_prompt(question: str, examples: Sequence[Record] = ()) -> str:
    if not examples:
        return ZERO_SHOT_TEMPLATE.format(question=question)
    fewshot = "\n\n".join(format_example(r) for r in examples)
    return FEW_SHOT_TEMPLATE.format(fewshot=fewshot, question=question)


def to_messages(prompt: str, system_prompt: str | None = None) -> list[dict[str, str]]:
    """The same text as chat messages; a plain completion endpoint takes `prompt` itself."""
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    messages.append({"role": "user", "content": prompt})
    return messages
