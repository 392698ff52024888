"""The probe's variants and verdicts: a variant question is the base one with one thing changed (the fresh twin:
everyone renamed), its answer from the grammar; a difference counts when McNemar's exact p < 0.05."""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..data import grammar
from ..data.grammar import Style, Surface
from ..data.load import Record
from ..errors import ConfigError
from ..scoring.paired import difference, pair


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


ALPHA = 0.05
UNCLEAR = 0.1  # a difference this large that is not significant says "too few questions", not "holds"
BUNDLED_NOTE = (
    " [bundled set: coinflip generated it, so no model has seen it; --dataset-hub huggingface probes the official set]"
)


def paired(base: Mapping[str, bool], variant: Mapping[str, bool]) -> dict[str, Any]:
    """McNemar's test and the accuracy difference (variant minus base) on the questions both answered."""
    found = pair(base, variant)
    return {**found.stats(), **difference(len(found.only_a), len(found.only_b), found.shared)}


def significant(stats: Mapping[str, Any]) -> bool:
    return bool(stats["shared"]) and stats["p_exact"] < ALPHA and (stats["low"] > 0 or stats["high"] < 0)


def at_floor(base: Mapping[str, Any], baselines: Mapping[str, Mapping[str, Any]]) -> str | None:
    """A line when the base set's 95% interval reaches the better trivial baseline (always-yes or always-no
    on its questions), else None: a guesser can neither drop on a variant nor hold."""
    accuracy, (low, high) = base["metrics"]["accuracy"], base["intervals"]["accuracy"] or (0.0, 1.0)
    name, level = max(((n, b["accuracy"]) for n, b in baselines.items()), key=lambda nb: nb[1] or 0.0)
    if accuracy is None or level is None or low > level:
        return None
    return (
        f"the variants cannot show anything: the base set is not above a trivial baseline (accuracy "
        f"{accuracy:.3f}, 95% interval {low:.3f} to {high:.3f}; {name} {level:.3f} on the same questions)"
    )


def verdict(
    variant: Variant,
    stats: Mapping[str, Any],
    bundled: bool = False,
    memorised: Mapping[str, Any] | None = None,
    floor: str | None = None,
) -> str:
    """What the variant's paired difference says. `memorised`: the variant against a contaminated fresh
    twin (a drop no larger than the twin's is the memorised base set's); `floor`: `at_floor`'s line."""
    if floor:  # the headline says it in full: each variant says it in short
        return f"{variant.title}: nothing to tell, the base set is not above a trivial baseline"
    if not stats["shared"]:
        return f"{variant.title}: no questions answered in both runs, nothing to compare"
    points, p = _points(stats["difference"]), _p(stats["p_exact"])
    if variant.name == "fresh":  # contamination: the base set above its twin
        note = BUNDLED_NOTE if bundled else ""
        if drops(stats):
            above = f"{points} points above its fresh twin ({_interval(stats, flip=True)}, {p})"
            return f"sign of contamination: the base set scores {above}{note}"
        if significant(stats):
            return f"no sign of contamination: the fresh twin scores {points} points above the base set ({p}){note}"
        return f"no sign of contamination: fresh twin within {points} points, {p}{note}"
    if not significant(stats) and abs(stats["difference"]) >= UNCLEAR:
        signed = f"{stats['difference'] * 100:+.1f}".replace(".0", "")
        return f"no clear change {variant.change}: {signed} points, {p} (too few questions to tell)"
    if not significant(stats):
        return f"holds {variant.change}: within {points} points, {p}"
    if stats["difference"] > 0:
        return f"gains {points} points {variant.change} ({_interval(stats)}, {p})"
    if memorised is not None and not drops(memorised):
        against = f"{memorised['difference'] * 100:+.1f}"
        return (
            f"drops {points} points {variant.change}, no worse than the fresh twin ({against} points against it): "
            "the base set is memorised"
        )
    return f"drops {points} points {variant.change}: {variant.meaning} ({_interval(stats)}, {p})"


def drops(stats: Mapping[str, Any]) -> bool:
    return significant(stats) and stats["difference"] < 0


def headline(
    verdicts: Mapping[str, str],
    variants: Sequence[Variant],
    stats: Mapping[str, Mapping[str, Any]],
    memorised: Mapping[str, Mapping[str, Any]],
    floor: str | None = None,
) -> str:
    """The probe in one line: contamination, then the surface variants it fails beyond that."""
    if floor:
        return floor
    parts = [verdicts["fresh"]] if "fresh" in verdicts else []
    surface = [v for v in variants if v.style is not None and v.name in stats]
    failed = [v for v in surface if drops(stats[v.name]) and (v.name not in memorised or drops(memorised[v.name]))]
    if failed:
        parts.append("drops " + ", ".join(f"{v.change} ({v.meaning})" for v in failed))
    elif surface and "fresh" in verdicts and drops(stats["fresh"]):
        parts.append(f"the {len(surface)} surface variants drop no more than the fresh twin")
    elif surface:
        unclear = [v for v in surface if not significant(stats[v.name]) and abs(stats[v.name]["difference"]) >= UNCLEAR]
        if unclear:
            parts.append(
                f"no significant drop on the {len(surface)} surface variants "
                f"({len(unclear)} moved 10 points or more: too few questions to tell)"
            )
        else:
            parts.append(f"holds on all {len(surface)} surface variants")
    return "; ".join(parts)


def length_verdict(points: Sequence[Mapping[str, Any]]) -> tuple[int | None, str]:
    """The first number of people whose accuracy interval reaches the always-yes baseline, and a line."""
    if not points:
        return None, "no length curve"
    for p in points:
        low, high = p["interval"] or (0.0, 1.0)  # no interval (nothing scored): it reaches any baseline
        if low <= p["always_yes"]:  # the interval, not the accuracy: few questions reach it from far above
            return p["people"], (
                f"its 95% interval reaches the always-yes baseline at {p['people']} people (accuracy "
                f"{p['accuracy']:.3f}, interval {low:.3f} to {high:.3f}; always-yes {p['always_yes']:.3f})"
            )
    last = points[-1]
    return None, f"stays above the always-yes baseline up to {last['people']} people (accuracy {last['accuracy']:.3f})"


def _points(fraction: float) -> str:
    return f"{abs(fraction) * 100:.1f}".removesuffix(".0")


def _p(value: float) -> str:
    return "p < 0.001" if value < 0.001 else f"p = {value:.2g}" if value < 0.1 else f"p = {value:.2f}"


def _interval(stats: Mapping[str, Any], flip: bool = False) -> str:
    low, high = (-stats["high"], -stats["low"]) if flip else (stats["low"], stats["high"])
    return f"95% interval {low * 100:+.1f} to {high * 100:+.1f} points"
