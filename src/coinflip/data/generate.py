"""Seeded CoinFlip question generator: fresh, uncontaminated sets of any length, streamed to disk.

Each question is a sequence (who flips and who does not) drawn from the seed. Written in the
official form by default, byte for byte; a `Style` (grammar.py) writes the same sequences another
way: tails-up start, the other side asked, rephrased actions, idle sentences, names in other
scripts, Chinese. The same seed gives the same sequences in every style, and each answer is
computed from its sequence.
"""

from __future__ import annotations

import contextlib
import io
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, TextIO

from .._files import replacing
from ..errors import ConfigError
from .grammar import FLIP, KEEP, Sequence, Style, apply

OPENING = "Q: A coin is heads up."
CLOSING = "  Is the coin still heads up?"
FLIPS = " {} flips the coin."
KEEPS = " {} does not flip the coin."


@lru_cache(maxsize=1)
def names() -> tuple[str, ...]:
    """First names shipped with the package (built from Faker's locales by scripts/make_names.py)."""
    from .grammar import bundled_dir

    text = (bundled_dir() / "names.txt").read_text(encoding="utf-8")
    return tuple(text.split())


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


def _table() -> list[str]:
    """Every piece a line is made of, by code: i = name i flips, size + i = name i keeps,
    then the empty piece (padding for shorter questions), the JSON head and the two tails."""
    pool = names()
    pieces = [FLIPS.format(n) for n in pool] + [KEEPS.format(n) for n in pool]
    return [
        *pieces,
        "",
        '{"question": "' + OPENING,
        f'{CLOSING}", "answer": "YES"}}\n',
        f'{CLOSING}", "answer": "NO"}}\n',
    ]


def _chunk(rng: Any, size: int, count: int, people: PeopleRange) -> tuple[Any, Any]:
    """Draw `count` questions at once: piece codes per person (padded with the empty piece) and flip counts."""
    import numpy as np

    high = people.high
    ks = rng.integers(people.low, high + 1, count)
    idx = rng.integers(0, size, (count, high))
    while high > 1:  # redraw rows that name someone twice
        ordered = np.sort(idx, axis=1)
        bad = (ordered[:, 1:] == ordered[:, :-1]).any(axis=1)
        redraw = int(bad.sum())
        if not redraw:
            break
        idx[bad] = rng.integers(0, size, (redraw, high))
    bits = rng.integers(0, 2, (count, high))
    present = np.arange(high) < ks[:, None]
    codes = np.where(present, idx + size * (1 - bits), 2 * size)
    return codes, (bits * present).sum(axis=1)


def _drawn(people: PeopleRange, count: int, seed: int, chunk: int = 50_000) -> Iterator[tuple[Any, Any]]:
    import numpy as np

    rng = np.random.default_rng(seed)
    size = len(names())
    left = count
    while left > 0:
        codes, flips = _chunk(rng, size, min(chunk, left), people)
        left -= len(flips)
        yield codes, flips


def iter_questions(people: PeopleRange, count: int, seed: int, style: Style | None = None) -> Iterator[tuple[str, str]]:
    """Yield (question, answer) pairs; in the official form the answer is YES exactly when the
    number of flips is even, in any other style it is computed from the sequence.

    Random draws are vectorised per chunk (numpy), so memory stays flat however many are asked for.
    """
    if style is not None and not style.is_default():
        yield from _styled(people, count, seed, style)
        return
    piece = _table().__getitem__
    join = "".join
    for codes, flips in _drawn(people, count, seed):
        for row, f in zip(codes.tolist(), flips.tolist(), strict=True):
            yield OPENING + join(map(piece, row)) + CLOSING, "NO" if f & 1 else "YES"


def iter_sequences(people: PeopleRange, count: int, seed: int) -> Iterator[Sequence]:
    """The sequences behind `iter_questions(people, count, seed)`, in the same order."""
    pool = names()
    size = len(pool)
    for codes, _ in _drawn(people, count, seed):
        for row in codes.tolist():
            steps = [(pool[c], FLIP) if c < size else (pool[c - size], KEEP) for c in row if c < 2 * size]
            yield Sequence(tuple(steps))


def _styled(people: PeopleRange, count: int, seed: int, style: Style) -> Iterator[tuple[str, str]]:
    """The same sequences as the official form, written in `style`; its random choices (idle
    sentences, names) come from a second generator, so they never move the sequences."""
    rng = random.Random(f"{seed}:style")
    for sequence in iter_sequences(people, count, seed):
        yield apply(sequence, style, rng)


def write_jsonl(rows: Iterable[tuple[str, str]], out: TextIO, chunk: int = 8192) -> int:
    """Stream rows as JSON lines; names hold no quote, backslash or control character, so no escaping."""
    written = 0
    buffer: list[str] = []
    for question, answer in rows:
        buffer.append(f'{{"question": "{question}", "answer": "{answer}"}}\n')
        if len(buffer) >= chunk:
            out.writelines(buffer)
            written += len(buffer)
            buffer.clear()
    out.writelines(buffer)
    return written + len(buffer)


def generate_file(
    path: Path, people: PeopleRange, count: int, seed: int, style: Style | None = None, whole: bool = False
) -> int:
    """The lines `write_jsonl(iter_questions(...))` makes; in the official form each chunk is
    joined inside numpy: a million questions in a few seconds."""
    import numpy as np

    if count < 1:
        raise ConfigError(f"--count must be at least 1, got {count}")
    if seed < 0:
        raise ConfigError(f"--seed must be a whole number >= 0, got {seed}")
    if style is not None and not style.is_default():
        return write_rows(path, iter_questions(people, count, seed, style), whole)
    table = np.array(_table(), dtype=object)
    head = len(table) - 3
    try:
        with _text_file(path, whole) as out:
            for codes, flips in _drawn(people, count, seed):
                line = np.empty((len(flips), codes.shape[1] + 2), dtype=np.int64)
                line[:, 0] = head
                line[:, 1:-1] = codes
                line[:, -1] = head + 1 + (flips & 1)
                out.write("".join(np.add.reduce(table[line], axis=1).tolist()))
        return count
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror}") from None


def write_rows(path: Path, rows: Iterable[tuple[str, str]], whole: bool = False) -> int:
    """`rows` as a JSON Lines file (its folder made if need be); a failure to write is one line."""
    try:
        with _text_file(path, whole) as out:
            return write_jsonl(rows, out)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror}") from None


@contextlib.contextmanager
def _text_file(path: Path, whole: bool) -> Iterator[TextIO]:
    """`path` opened to write: in place (the user's --out, which may be /dev/stdout), or with
    `whole` through `_files.replacing`, for a probe's own data in a folder a resume
    finds as someone left it (a link there is replaced, never written through; a FIFO never waited on)."""
    if whole:
        with replacing(path, "the runs written so far are kept") as raw, io.TextIOWrapper(raw, encoding="utf-8") as out:
            yield out
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        yield out


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
