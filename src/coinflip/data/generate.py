"""Seeded CoinFlip question generator: fresh sets of any length, streamed to disk; the same seed gives the
same sequences in every `Style` (grammar.py), the official form byte for byte."""

from __future__ import annotations

import io
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, TextIO

from .._files import replacing
from ..errors import ConfigError, short, storage_error
from .grammar import EN, FLIP, KEEP, Sequence, Style, apply, bundled_dir, script_names

OPENING = EN.opening.format(side="heads")
CLOSING = EN.still.format(side="heads")


@lru_cache(maxsize=1)
def names() -> tuple[str, ...]:
    """First names shipped with the package (built from Faker's locales by scripts/make_names.py)."""
    return tuple((bundled_dir() / "names.txt").read_text(encoding="utf-8").split())


@dataclass(frozen=True)
class PeopleRange:
    low: int
    high: int

    @classmethod
    def parse(cls, value: str | int) -> PeopleRange:
        """`6` or `2-12`; every question gets a uniform draw from the range."""
        text = str(value).strip()
        low_s, sep, high_s = text.partition("-")
        try:
            low = int(low_s)
            high = int(high_s) if sep else low
        except ValueError:
            raise ConfigError(f"--people must be a number or a range like 2-12, got {text!r}") from None
        if not 1 <= low <= high:
            raise ConfigError(f"--people range must satisfy 1 <= low <= high, got {text!r}")
        if high > len(names()):
            raise ConfigError(f"--people can be at most {len(names())} (distinct names per question)")
        return cls(low, high)

    def __str__(self) -> str:
        return str(self.low) if self.low == self.high else f"{self.low}-{self.high}"


def _drawn(people: PeopleRange, count: int, seed: int, chunk: int = 50_000) -> Iterator[tuple[Any, Any]]:
    """Questions drawn a chunk at a time (numpy, so memory stays flat): flip counts and a code per
    person, i = name i flips, size + i = name i keeps, 2 * size = nobody (padding)."""
    import numpy as np

    rng, size, high = np.random.default_rng(seed), len(names()), people.high
    chunk = min(chunk, max(1, 600_000 // high))  # fewer rows of many people: 50,000 of 15,000 took 6 GB a table
    for start in range(0, count, chunk):
        n = min(chunk, count - start)
        ks = rng.integers(people.low, high + 1, n)
        idx = rng.integers(0, size, (n, high))
        for _ in range(100):  # redraw rows that name someone twice
            ordered = np.sort(idx, axis=1)
            bad = (ordered[:, 1:] == ordered[:, :-1]).any(axis=1)
            if not bad.any():
                break
            idx[bad] = rng.integers(0, size, (int(bad.sum()), high))
        else:  # hundreds of people: hardly a row comes without a repeat, so those left are drawn without one
            idx[bad] = [rng.choice(size, high, replace=False) for _ in range(int(bad.sum()))]
        bits = rng.integers(0, 2, (n, high))
        present = np.arange(high) < ks[:, None]
        yield np.where(present, idx + size * (1 - bits), 2 * size), (bits * present).sum(axis=1)


def iter_questions(people: PeopleRange, count: int, seed: int, style: Style | None = None) -> Iterator[tuple[str, str]]:
    """(question, answer) pairs; the official form is joined from ready sentences: a million in seconds."""
    if style not in (None, Style()):
        rng = random.Random(f"{seed}:style")  # a second generator, so style choices never move the sequences
        yield from (apply(sequence, style, rng) for sequence in iter_sequences(people, count, seed))
        return
    pool = names()
    piece = [*(EN.steps[FLIP, "plain"].format(n) for n in pool), *(EN.steps[KEEP, "plain"].format(n) for n in pool), ""]
    for codes, flips in _drawn(people, count, seed):
        for row, f in zip(codes.tolist(), flips.tolist(), strict=True):
            yield OPENING + "".join(map(piece.__getitem__, row)) + CLOSING, "NO" if f & 1 else "YES"


def iter_sequences(people: PeopleRange, count: int, seed: int) -> Iterator[Sequence]:
    """The sequences behind `iter_questions(people, count, seed)`, in the same order."""
    pool = names()
    size = len(pool)
    for codes, _ in _drawn(people, count, seed):
        for row in codes.tolist():
            steps = [(pool[c], FLIP) if c < size else (pool[c - size], KEEP) for c in row if c < 2 * size]
            yield Sequence(tuple(steps))


def write_jsonl(rows: Iterable[tuple[str, str]], out: TextIO) -> int:
    """Rows as JSON lines; names hold no quote, backslash or control character, so nothing is escaped."""
    count = 0
    for question, answer in rows:
        out.write(f'{{"question": "{question}", "answer": "{answer}"}}\n')
        count += 1
    return count


def generate_file(
    path: Path, people: PeopleRange, count: int, seed: int, style: Style | None = None, whole: bool = False
) -> int:
    if not 1 <= count < 2**63:  # a question's id is a whole number of 64 bits, as everywhere
        raise ConfigError(f"--count must be a whole number from 1 to 2**63 - 1, got {short(count)}")
    if seed < 0:
        raise ConfigError(f"--seed must be a whole number >= 0, got {seed}")
    if path.suffix.lower() in (".json", ".csv", ".parquet"):  # --dataset-path reads a file by its name's format
        raise ConfigError(f"--out {path}: coinflip generate writes JSON Lines; name the file .jsonl")
    if style is not None and style.names == "scripts" and people.high > len(script_names()):
        raise ConfigError(f"--names scripts has {len(script_names())} names, fewer than {people.high} people")
    return write_rows(path, iter_questions(people, count, seed, style), whole)


def write_rows(path: Path, rows: Iterable[tuple[str, str]], whole: bool = False) -> int:
    """`rows` as a JSON Lines file: in place (the user's --out, maybe /dev/stdout), or with `whole`
    through `_files.replacing` (a probe's data, where a resume may find a link or a FIFO left)."""
    try:
        if whole:
            with replacing(path, "the runs written so far are kept") as raw, io.TextIOWrapper(raw, "utf-8") as out:
                return write_jsonl(rows, out)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8") as out:
            return write_jsonl(rows, out)
    except OSError as exc:
        raise storage_error(path, exc, "give --out another path") from None


BUNDLED_SEED = 20240501


def build_bundled(seed: int = BUNDLED_SEED) -> dict[str, list[tuple[str, str]]]:
    """The shipped splits, shaped like the official set; no question appears twice across them."""
    seen: set[str] = set()
    rng = random.Random(seed)

    def take(people: int, count: int) -> list[tuple[str, str]]:
        rows: list[tuple[str, str]] = []
        while len(rows) < count:
            for row in iter_questions(PeopleRange(people, people), count - len(rows), rng.getrandbits(32)):
                if row[0] not in seen:
                    seen.add(row[0])
                    rows.append(row)
        return rows

    test = take(4, 2000) + take(2, 1333)
    return {"test": test, "validation": take(2, 1333)}
