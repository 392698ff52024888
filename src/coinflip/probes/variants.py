"""The probe's variants and their questions: each the base question at the same position with one thing
changed, so it pairs with the base (McNemar) and its answer comes from the grammar. The fresh twin renames
everyone with same-length names from the set's own, so counts, names and prompt lengths match, unseen.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from ..data import grammar
from ..data.grammar import Style, Surface
from ..data.load import Record
from ..errors import ConfigError


@dataclass(frozen=True)
class Variant:
    """One probe: how its questions differ from the base, and what a drop there would mean."""

    name: str  # its folder under runs/ and data/, and its key in probe.json
    title: str
    style: Style | None  # None: the base itself, or the fresh twin
    change: str  # finishes "drops 38 points ..."
    meaning: str  # what a significant drop says about the model


BASE = Variant("base", "base set", None, "", "")
FRESH = Variant("fresh", "fresh twin", None, "on a fresh twin", "")
VARIANTS = (
    BASE,
    FRESH,
    Variant(
        "tails",
        "tails-up start",
        Style(Surface(start="tails", asked="tails")),  # "still tails up?": every answer stays the base's
        "when the coin starts tails up",
        "assumes the coin starts heads up",
    ),
    Variant(
        "inverted",
        "question inverted",
        Style(Surface(asked="tails")),
        "when asked 'Is the coin tails up?'",
        "answers the usual question, not the one asked",
    ),
    Variant(
        "rephrased",
        "rephrased actions",
        Style(Surface(phrasing="rephrased")),
        "when flips are phrased as 'turns the coin over'",
        "counts the phrase, not the state",
    ),
    Variant(
        "idle",
        "idle sentences",
        Style(idle=0.5),
        "with sentences that change nothing ('X looks at the coin.')",
        "counts sentences or people, not flips",
    ),
    Variant(
        "scripts",
        "names in other scripts",
        Style(names="scripts"),
        "with names in other scripts",
        "leans on familiar names",
    ),
    Variant(
        "zh",
        "in Chinese",
        Style(Surface(language="zh")),
        "when asked in Chinese",
        "tracks the coin in English only",
    ),
)
BY_NAME = {v.name: v for v in VARIANTS}


def choose(names: Iterable[str]) -> tuple[Variant, ...]:
    """The variants asked for, in the standard order; the base is always run (all pair with it)."""
    wanted = set(names)
    unknown = sorted(wanted - set(BY_NAME))
    if unknown:
        raise ConfigError(f"unknown probe variant(s) {unknown}; known: {', '.join(BY_NAME)}")
    return tuple(v for v in VARIANTS if v is BASE or v.name in wanted)


def _parsed(record: Record) -> grammar.Parsed:
    """The question's sequence; a question outside the grammar cannot be probed."""
    parsed = grammar.parse(record.question)
    if parsed is None:
        raise ConfigError(
            f"question {record.id} is not a CoinFlip question the probes can rewrite "
            f"({record.question[:60]!r}...): probe a set in CoinFlip's wording"
        )
    return parsed


def restyled(records: Sequence[Record], style: Style, seed: int, salt: str) -> list[tuple[str, str]]:
    """(question, answer) per record in `style`, seeded per question: it does not depend on the others chosen."""
    parsed = [_parsed(r) for r in records]  # every question checked before any is written
    return [
        grammar.apply(p.sequence, style, random.Random(f"{seed}:{salt}:{r.question}"))
        for r, p in zip(records, parsed, strict=True)
    ]


def name_pool(records: Iterable[Record]) -> dict[int, list[str]]:
    """The evaluated set's own names, by length."""
    pool: dict[int, set[str]] = {}
    for r in records:
        parsed = grammar.parse(r.question)
        for person, _ in parsed.sequence.steps if parsed else ():
            pool.setdefault(len(person), set()).add(person)
    return {length: sorted(found) for length, found in pool.items()}


def fresh_twins(
    records: Sequence[Record], pool: dict[int, list[str]], seen: set[str], seed: int
) -> list[tuple[str, str]]:
    """(question, answer) per record: the same actions and form, everyone renamed with a name of the
    same length from `pool`; never a question in `seen` (the whole evaluated set)."""
    everyone = sorted(name for names in pool.values() for name in names)
    rows = []
    for record, parsed in zip(records, [_parsed(r) for r in records], strict=True):
        rng = random.Random(f"{seed}:fresh:{record.question}")
        for attempt in range(40):
            sequence = _renamed(parsed.sequence, pool if attempt < 20 else {}, everyone, rng)
            text = grammar.render(sequence, parsed.surface, parsed.idle_choices)
            if text not in seen:
                break
        else:
            raise ConfigError(f"question {record.id}: no fresh twin found (the set has too few distinct names)")
        rows.append((text, sequence.answer))
    return rows


def _renamed(
    sequence: grammar.Sequence, pool: dict[int, list[str]], everyone: list[str], rng: random.Random
) -> grammar.Sequence:
    """Everyone renamed, a different name each, of the same length where the pool allows."""
    people = list(dict.fromkeys(person for person, _ in sequence.steps))
    taken = set(people)
    renamed: dict[str, str] = {}
    for person in people:
        same = [n for n in pool.get(len(person), ()) if n not in taken]
        choices = same or [n for n in everyone if n not in taken]
        if not choices:
            raise ConfigError("the set has too few distinct names to build a fresh twin")
        renamed[person] = rng.choice(choices)
        taken.add(renamed[person])
    return replace(sequence, steps=tuple((renamed[p], action) for p, action in sequence.steps))
