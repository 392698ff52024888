"""The CoinFlip grammar: a coin starts on one side, people act on it in turn, a question asks about one side;
a `Surface` words a sequence (the official form is one), and `parse` reads every question back into it."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from functools import lru_cache
from itertools import product
from pathlib import Path

from ..errors import ConfigError

FLIP, KEEP, IDLE = "flip", "keep", "idle"  # a step turns the coin, leaves it, or changes nothing
SIDES = ("heads", "tails")
OTHER_SIDE = {"heads": "tails", "tails": "heads"}
PHRASINGS = ("plain", "rephrased")
LANGUAGES = ("en", "zh")


@dataclass(frozen=True)
class Surface:
    """How a sequence is put into words; the default is the official form, byte for byte."""

    start: str = "heads"
    asked: str = "heads"
    phrasing: str = "plain"
    language: str = "en"


@dataclass(frozen=True)
class Phrasebook:
    """The sentences of one language: `{side}` and `{}` (the person) are filled in."""

    opening: str
    steps: dict[tuple[str, str], str]  # (action, phrasing) -> sentence
    idle: tuple[str, ...]
    still: str  # the question when it asks about the start side
    other: str  # the question when it asks about the other side
    sides: dict[str, str]


EN = Phrasebook(
    opening="Q: A coin is {side} up.",
    steps={
        (FLIP, "plain"): " {} flips the coin.",
        (KEEP, "plain"): " {} does not flip the coin.",
        (FLIP, "rephrased"): " {} turns the coin over.",
        (KEEP, "rephrased"): " {} leaves the coin as it is.",
    },
    idle=(" {} looks at the coin.", " {} points at the coin.", " {} reads the date on the coin."),
    still="  Is the coin still {side} up?",
    other="  Is the coin {side} up?",
    sides={"heads": "heads", "tails": "tails"},
)
ZH = Phrasebook(
    opening="问：一枚硬币{side}朝上。",
    steps={
        (FLIP, "plain"): "{}翻转了硬币。",
        (KEEP, "plain"): "{}没有翻转硬币。",
        (FLIP, "rephrased"): "{}把硬币翻了个面。",
        (KEEP, "rephrased"): "{}让硬币保持原样。",
    },
    idle=("{}看了看硬币。", "{}指了指硬币。", "{}读了读硬币上的年份。"),
    still="硬币仍然{side}朝上吗？",
    other="硬币是{side}朝上吗？",
    sides={"heads": "正面", "tails": "反面"},
)
BOOKS = {"en": EN, "zh": ZH}


@dataclass(frozen=True)
class Sequence:
    """What happens to the coin: who does what, in order, from which side, and what is asked."""

    steps: tuple[tuple[str, str], ...]  # (person, FLIP | KEEP | IDLE)
    start: str = "heads"
    asked: str = "heads"

    @property
    def flips(self) -> int:
        return sum(action == FLIP for _, action in self.steps)

    @property
    def answer(self) -> str:
        final = self.start if self.flips % 2 == 0 else OTHER_SIDE[self.start]
        return "YES" if final == self.asked else "NO"


def render(sequence: Sequence, surface: Surface, choices: tuple[int, ...] = ()) -> str:
    """The question text, from the sequence's sides; `choices` picks each idle sentence (default: the first)."""
    book = BOOKS[surface.language]
    parts = [book.opening.format(side=book.sides[sequence.start])]
    idle = iter(choices)
    for person, action in sequence.steps:
        said = book.idle[next(idle, 0) % len(book.idle)] if action == IDLE else book.steps[action, surface.phrasing]
        parts.append(said.format(person))
    closing = book.still if sequence.asked == sequence.start else book.other
    parts.append(closing.format(side=book.sides[sequence.asked]))
    return "".join(parts)


@dataclass(frozen=True)
class Style:
    """A surface plus what is drawn at random when it is applied: idle sentences and other names."""

    surface: Surface = Surface()
    idle: float = 0.0  # the chance of an idle sentence after each step
    names: str = "pool"  # pool: the names as drawn; scripts: each person renamed from `script_names()`


def apply(sequence: Sequence, style: Style, rng: random.Random) -> tuple[str, str]:
    """(question, answer) for `sequence` in `style`; `rng` draws only idle sentences and names, never actions."""
    steps = list(sequence.steps)
    if style.names == "scripts":
        people = list(dict.fromkeys(person for person, _ in steps))
        if len(people) > len(script_names()):
            raise ConfigError(
                f"a question with {len(people)} people, but only {len(script_names())} names in other scripts "
                "(--names scripts, the probe's scripts variant)"
            )
        renamed = dict(zip(people, rng.sample(script_names(), len(people)), strict=True))
        steps = [(renamed[person], action) for person, action in steps]
    choices: list[int] = []
    if style.idle:
        people = [person for person, action in steps if action != IDLE] or [person for person, _ in steps]
        with_idle: list[tuple[str, str]] = []
        for step in steps:
            with_idle.append(step)
            if rng.random() < style.idle:
                with_idle.append((rng.choice(people), IDLE))
                choices.append(rng.randrange(len(BOOKS[style.surface.language].idle)))
        steps = with_idle
    written = Sequence(tuple(steps), style.surface.start, style.surface.asked)
    return render(written, style.surface, tuple(choices)), written.answer


def bundled_dir() -> Path:
    """The shipped splits and name lists, beside this package (importlib.resources: 10 ms of start-up)."""
    return Path(__file__).resolve().parent.parent / "_data"


@lru_cache(maxsize=1)
def script_names() -> tuple[str, ...]:
    """First names in other scripts (Cyrillic, Greek, Arabic, Hebrew, Devanagari, Chinese, ...)."""
    lines = (bundled_dir() / "names_scripts.txt").read_text(encoding="utf-8").splitlines()
    return tuple(line.strip() for line in lines if line.strip() and not line.startswith("#"))


@dataclass(frozen=True)
class Parsed:
    sequence: Sequence
    surface: Surface
    idle_choices: tuple[int, ...]


def parse(question: str) -> Parsed | None:
    """The sequence and surface a question was written from, if its steps write it back exactly; else None."""
    text = question.strip()
    for (language, book), start, asked in product(BOOKS.items(), SIDES, SIDES):
        closing = (book.still if start == asked else book.other).format(side=book.sides[asked])
        if not (text.startswith(book.opening.format(side=book.sides[start])) and text.endswith(closing)):
            continue
        meaning = {_key(s): (action, how) for (action, how), s in book.steps.items()}
        meaning |= {_key(s): (IDLE, str(i)) for i, s in enumerate(book.idle)}
        found = [(person, *meaning[sentence]) for person, sentence in _step_pattern(language).findall(text)]
        steps = tuple((person, action) for person, action, _ in found)
        choices = tuple(int(how) for _, action, how in found if action == IDLE)
        phrasings = {how for _, action, how in found if action != IDLE}
        phrasing = phrasings.pop() if len(phrasings) == 1 else "plain"  # mixed phrasings write nothing back
        sequence, surface = Sequence(steps, start, asked), Surface(start, asked, phrasing, language)
        if render(sequence, surface, choices) == text:
            return Parsed(sequence, surface, choices)
    return None


def solve(question: str) -> str | None:
    """YES or NO, computed from the question's own sequence; None when it is not of this grammar."""
    parsed = parse(question)
    return parsed.sequence.answer if parsed else None


def _key(sentence: str) -> str:
    """A sentence without its person, as the step pattern captures it."""
    return sentence.replace("{}", "").strip()


@lru_cache(maxsize=4)
def _step_pattern(language: str) -> re.Pattern[str]:
    book = BOOKS[language]
    sentences = sorted({_key(s) for s in [*book.steps.values(), *book.idle]}, key=len, reverse=True)
    alternatives = "|".join(re.escape(s) for s in sentences)
    if language == "en":
        return re.compile(rf" (\S+) ({alternatives})")
    return re.compile(rf"([^。？]+?)({alternatives})")


def _steps() -> re.Pattern[str]:
    """Someone flipping or keeping the coin, in any phrasing and language of this grammar, found in one scan: a
    flip sets group 1 (English) or 2 (Chinese). An English step follows its person's name (a non-space)."""

    def either(book: Phrasebook, action: str) -> str:
        return "|".join(re.escape(_key(book.steps[action, p])) for p in PHRASINGS)

    return re.compile(rf"(?<=\S) (?:({either(EN, FLIP)})|{either(EN, KEEP)})|({either(ZH, FLIP)})|{either(ZH, KEEP)}")


STEPS_PATTERN = _steps()
