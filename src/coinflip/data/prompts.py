"""Prompt stage: the specification's templates byte for byte, named variants (built-in or a custom text
holding `{question}` and optionally `{fewshot}`), worked few-shot examples."""

from __future__ import annotations

import hashlib
import random
import re
import string
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import ConfigError
from . import grammar
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
FEW_SHOT_HEAD = "Here are some examples of how to solve similar problems:\n\n{fewshot}\n\n"
FEW_SHOT_TEMPLATE = FEW_SHOT_HEAD + ZERO_SHOT_TEMPLATE
DIRECT_TEMPLATE = (
    "\nAnswer the following coin flip problem without explaining. Reply with one line of the form "
    '"ANSWER: [ANSWER]" (without quotes) where [ANSWER] is YES or NO.\n'
    "\n"
    "{question}\n"
)
ZH_ZERO_SHOT_TEMPLATE = (
    '\n请逐步解答下面的硬币翻转问题。回答的最后一行应为 "ANSWER: [ANSWER]"（不含引号）的形式，'
    "其中 [ANSWER] 是问题的答案。\n"
    "\n"
    "{question}\n"
    "\n"
    '记得在回答的最后单独一行写出 "ANSWER: [ANSWER]"（不含引号），其中 [ANSWER] 为 YES（是）或 NO（否）。\n'
    "\n"
    "推理：\n"
)
# --force-answer: the turn after a chat reply without an answer, the cue after such a completion
FORCE_PROMPT = 'Give only your final answer, in one line of the form "ANSWER: YES" or "ANSWER: NO".'
FORCE_CUE = "\n\nSo the final answer (YES or NO) is:"  # neutral: it names both answers, favours neither
ZH_FEW_SHOT_HEAD = "以下是一些类似问题的解答示例：\n\n{fewshot}\n\n"
ZH_DIRECT_TEMPLATE = (
    '\n请直接回答下面的硬币翻转问题，不要解释。只回复一行 "ANSWER: [ANSWER]"（不含引号），'
    "其中 [ANSWER] 为 YES（是）或 NO（否）。\n"
    "\n"
    "{question}\n"
)
_STEP = re.compile(r"(\S+) (flips|does not flip) the coin\.")


@dataclass(frozen=True)
class Template:
    """How a question becomes messages; `reasoning` says whether worked examples show their steps."""

    name: str
    zero_shot: str
    few_shot: str  # holds {fewshot}; unused when `multiturn`
    multiturn: bool = False
    reasoning: bool = True

    def describe(self) -> dict[str, object]:
        text = "\0".join((self.zero_shot, self.few_shot, str(self.multiturn), str(self.reasoning)))
        sha256 = hashlib.sha256(text.encode()).hexdigest()
        return {"name": self.name, "sha256": sha256[:16], "multiturn": self.multiturn}


BUILT_IN = {
    "default": Template("default", ZERO_SHOT_TEMPLATE, FEW_SHOT_TEMPLATE),
    "direct": Template("direct", DIRECT_TEMPLATE, FEW_SHOT_HEAD + DIRECT_TEMPLATE, reasoning=False),
    "multiturn": Template("multiturn", ZERO_SHOT_TEMPLATE, FEW_SHOT_TEMPLATE, multiturn=True),
    "zh": Template("zh", ZH_ZERO_SHOT_TEMPLATE, ZH_FEW_SHOT_HEAD + ZH_ZERO_SHOT_TEMPLATE),
    "direct-zh": Template("direct-zh", ZH_DIRECT_TEMPLATE, ZH_FEW_SHOT_HEAD + ZH_DIRECT_TEMPLATE, reasoning=False),
}
IN_CHINESE = {"default": "zh", "direct": "direct-zh"}  # a built-in template's Chinese twin


def template(value: str) -> Template:
    """A built-in name, or a custom text with {question} (and optionally {fewshot}); checked at start."""
    if value in BUILT_IN:
        return BUILT_IN[value]
    braces = "write a literal brace as {{ or }}"
    try:
        fields = [(name, spec, conv) for _, name, spec, conv in string.Formatter().parse(value) if name is not None]
    except ValueError as exc:  # a lone brace
        raise ConfigError(f"prompt_template cannot be filled in ({exc}); {braces}") from None
    if any(spec or conv for _, spec, conv in fields):  # {question:>99999999999} fills gigabytes; {question!z} fails
        raise ConfigError(f"prompt_template placeholders take no format spec or conversion (':' or '!'); {braces}")
    names = {name for name, _, _ in fields}
    unknown = sorted(names - {"question", "fewshot"})
    if "question" not in names or unknown:
        extra = f" (unknown placeholder(s) {unknown}; {braces})" if unknown else ""
        raise ConfigError(f"prompt_template must be one of {', '.join(BUILT_IN)} or a text holding {{question}}{extra}")
    few_shot = value if "fewshot" in names else FEW_SHOT_HEAD + value
    return Template("custom", value, few_shot)


def reasoning(question: str) -> str:
    """A short correct solution tracking the coin person by person, ending in the answer line; any
    question of the grammar is solved from its own sequence, any other from the official sentences in it."""
    parsed = grammar.parse(question)
    if parsed is None:
        steps = tuple((n, grammar.FLIP if a == "flips" else grammar.KEEP) for n, a in _STEP.findall(question))
        parsed = grammar.Parsed(grammar.Sequence(steps), grammar.Surface(), ())
    sequence, words = parsed.sequence, grammar.EN.steps
    side = sequence.start
    lines = [f"The coin starts {side} up."]
    for name, action in sequence.steps:
        if action == grammar.FLIP:
            side = grammar.OTHER_SIDE[side]
        did = " {} does nothing to the coin." if action == grammar.IDLE else words[action, parsed.surface.phrasing]
        then = "is now" if action == grammar.FLIP else "stays"
        lines.append(f"{did.format(name)[1:-1]}, so it {then} {side} up.")
    asked = sequence.asked
    if side != asked:
        verdict = f"{side} up, not {asked} up"
    else:
        verdict = f"still {asked} up" if asked == sequence.start else f"{asked} up"
    return "\n".join([*lines, f"The coin ends {verdict}.", f"ANSWER: {sequence.answer}"])


def answer(record: Record, worked: bool = True) -> str:
    """What a good reply to `record` looks like: worked reasoning, or the answer line alone."""
    return reasoning(record.question) if worked else f"ANSWER: {record.answer}"


def choose_examples(pool: Sequence[Record], count: int, seed: int, shuffle: bool = True) -> list[Record]:
    """Candidates drawn once, one spare so a question is never its own example; no `shuffle`: the first rows."""
    if count >= len(pool):
        return list(pool)
    if not shuffle:
        return list(pool[: count + 1])
    return random.Random(seed).sample(list(pool), count + 1)


def build_prompt(question: str, examples: Sequence[Record] = (), style: Template = BUILT_IN["default"]) -> str:
    """The one user message of a single-message prompt (the last one of a multiturn prompt)."""
    if not examples or style.multiturn:
        return style.zero_shot.format(question=question, fewshot="")
    head = "Reasoning:\n" if style.reasoning else ""
    fewshot = "\n\n".join(f"{r.question}\n\n{head}{answer(r, style.reasoning)}" for r in examples)
    return style.few_shot.format(fewshot=fewshot, question=question)


def build_messages(
    question: str, examples: Sequence[Record], style: Template, system_prompt: str | None = None
) -> list[dict[str, str]]:
    """Chat messages for one question: one user message, or one user/assistant pair per example first."""
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    for r in examples if style.multiturn else ():
        messages.append({"role": "user", "content": build_prompt(r.question, (), style)})
        messages.append({"role": "assistant", "content": answer(r, style.reasoning)})
    messages.append({"role": "user", "content": build_prompt(question, examples, style)})
    return messages
