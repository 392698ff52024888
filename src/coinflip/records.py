"""The records a run directory holds, each declared once: a prediction (one JSON line per sample
in predictions/), the forced answer it may carry, and a review (one line per sample in reviews/).

Writers build these types and write them with `dumps`; readers parse every line with
`read_prediction` or `read_review`, which keep a line only if it has the shape declared here
(never by the writers' key order): anything else is skipped, never fatal, and counted
(rundir.PredictionIndex.unreadable). A saved file may come from an older version or a hand
edit, so a reader checks only what it needs to place a row (its id and repeat); the scorer copes
with the rest.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypedDict, TypeGuard

if TYPE_CHECKING:
    import msgspec

REPEATS_BITS = 12  # a sample is (question, repeat), one int key: question << REPEATS_BITS | repeat
REPEATS_MAX = 1 << REPEATS_BITS
MAX_FINISH = 64  # characters of a finish_reason kept, written or read (the rest is a server's noise)
TOKENS_MAX = 10**18  # a token count at or past this is not one: far beyond any request, and still a float
ANSWERS: tuple[str | None, ...] = ("YES", "NO", None)  # the index of an answer in arrays; None: no answer
FORCED_ANSWERS: tuple[str | None, ...] = (None, "YES", "NO", "invalid")  # None: no forced answer asked


class Forced(TypedDict, total=False):
    """The follow-up that asks a reply without a valid answer for only its answer line
    (forced.py). `pending` alone: asked for, not yet answered."""

    pending: bool
    reply: str | None
    finish_reason: str | None
    usage: dict[str, Any] | None
    latency_s: float
    attempts: int
    error: str | None
    answer_logprobs: list[Any]
    batch: bool  # answered through a Batch API (priced at its discount); absent: online


class _Sample(TypedDict):
    id: int
    repeat: int
    target: str
    people: int
    flips: int
    question: str
    prompt: str
    reply: str | None
    reasoning: str | None
    finish_reason: str | None
    usage: dict[str, Any] | None
    latency_s: float
    attempts: int
    error: str | None  # after retries: the sample has no reply


class Prediction(_Sample, total=False):
    """One sample: the question, what was sent, what came back (or the error after retries);
    the fields of `_Sample` always, these where they apply."""

    ttft_s: float  # streamed replies: time to the first token
    answer_logprobs: list[Any]  # log probabilities around the answer (scoring/calibration.py)
    status: int  # the HTTP status of a failed request
    forced: Forced  # --force-answer, for a reply without a valid answer
    batch: bool  # answered through a Batch API (priced at its discount); absent: online


class Review(TypedDict):
    """One sample's verdict, by coinflip's strict rule or EvalScope's (the report says which)."""

    id: int
    repeat: int
    people: int
    target: str
    extracted: str | None  # YES, NO, or None: no valid answer
    correct: bool
    invalid: bool  # a reply without a valid answer (an errored sample is not invalid)
    invalid_reason: str | None
    error: bool
    forced: str | None  # FORCED_ANSWERS
    p_yes: float | None


def make_review(
    id: int,
    repeat: int,
    people: int,
    target: str,
    extracted: str | None,
    invalid_reason: str | None,
    error: bool,
    forced: str | None,
    p_yes: float | None,
) -> Review:
    """A review, with what follows from its fields (`correct`, `invalid`) worked out here only."""
    return {
        "id": id,
        "repeat": repeat,
        "people": people,
        "target": target,
        "extracted": extracted,
        "correct": extracted == target,
        "invalid": extracted is None and not error,
        "invalid_reason": invalid_reason,
        "error": error,
        "forced": forced,
        "p_yes": p_yes,
    }


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def loads(line: bytes | str) -> Any:
    """Strict JSON: a line holding NaN or Infinity (which Python's json accepts) is not a record."""
    return json.loads(line, parse_constant=_not_json)


def by_batch(answer: Mapping[str, Any]) -> bool:
    """Whether a Batch API gave this answer (a prediction row, or its forced answer), so it is
    priced at the batch discount. Only `true` says so: a hand-edited "yes" or 1 is read as online."""
    return answer.get("batch") is True


def token_count(usage: Any, name: str) -> int | None:
    """A saved token count (`usage[name]` of a row or its forced answer), as the writer saves one:
    a whole number below TOKENS_MAX; anything else a hand edit left (a float, 400 digits) is none.
    The report's tokens and the --max-cost budget both read counts here."""
    value = usage.get(name) if isinstance(usage, dict) else None
    return value if whole(value, TOKENS_MAX) else None


def sample_key(question: int, repeat: int = 0) -> int:
    """One int per sample (question, repeat): how samples are indexed and ordered everywhere."""
    return question * REPEATS_MAX + repeat


def split_key(key: int) -> tuple[int, int]:
    return divmod(key, REPEATS_MAX)


def key_of(row: Prediction | Review) -> int:
    return sample_key(row["id"], row.get("repeat") or 0)  # rows of older versions have no repeat: 0


def whole(value: Any, below: float = float("inf")) -> TypeGuard[int]:
    """A whole number (not a bool) from 0 up to `below`: what every saved count and id must be."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < below


PENDING: Forced = {"pending": True}  # a forced answer asked for, no reply yet (scoring/forced.py)
ERROR, STARTED, DONE = 0, 1, 2  # how far a row got: an error, a reply with its forced answer pending, done


def pending(row: Prediction) -> bool:
    """The row's reply is kept, its forced answer is still to be asked (never answered, or it failed)."""
    forced = row.get("forced")
    return isinstance(forced, dict) and (bool(forced.get("pending")) or forced.get("error") is not None)


def scored(row: Prediction) -> bool:
    """A row counts in the report unless its forced answer was asked for and nothing came back yet
    (a failed forced answer counts, as invalid)."""
    forced = row.get("forced")
    return not (isinstance(forced, dict) and forced.get("pending"))


def progress(row: Prediction) -> int:
    """How far a row got; of two rows for one sample, the later wins unless it got less far."""
    if row.get("error") is not None:
        return ERROR
    return STARTED if pending(row) else DONE


@functools.cache
def _decoder() -> Any:
    import msgspec  # imported when the first line is read, not with coinflip

    return msgspec.json.Decoder()


def _placed(line: bytes | str) -> Any:
    """A line's JSON object if it has a whole id, and a whole repeat below REPEATS_MAX or none
    (0.0 or false is not one); else None. What places the row is checked, the rest is read
    tolerantly. msgspec parses (8x faster than json, and it refuses NaN and Infinity as JSON
    does); what it refuses that JSON allows, an escaped lone surrogate (which `dumps` writes for
    half a surrogate pair from a server), is parsed again by `loads`."""
    import msgspec

    try:
        row = _decoder().decode(line)
    except msgspec.DecodeError:
        try:
            row = loads(line)
        except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            return None
    except RecursionError:
        return None
    if not isinstance(row, dict):
        return None
    repeat = row.get("repeat")
    return row if whole(row.get("id")) and whole(0 if repeat is None else repeat, REPEATS_MAX) else None


def read_prediction(line: bytes | str) -> Prediction | None:
    """The prediction a line holds; None for a line that is not one. Every reader of predictions
    goes through here. A row whose target is not YES or NO (tampered, or hand-edited) is none: a
    resume asks its question again rather than trust it."""
    row = _placed(line)
    return row if row is not None and row.get("target") in ("YES", "NO") else None


def read_review(line: bytes | str) -> Review | None:
    """The review a line holds; None for a line that is not one."""
    return _placed(line)  # type: ignore[no-any-return]


def dumps(record: Prediction | Review) -> bytes:
    """One JSON line; NaN and Infinity (not JSON) become null, and half a surrogate pair from a
    server is kept as a \\u escape rather than crashing the run. msgspec writes it: a tenth of
    json's time, on every sample."""
    try:
        return escape_line_breaks(_encoder().encode(record)) + b"\n"
    except UnicodeEncodeError:  # a lone surrogate: json escapes it, msgspec cannot
        return (json.dumps(_finite(record), allow_nan=False) + "\n").encode("utf-8")


_LINE_BREAKS = tuple((mark.encode(), f"\\u{ord(mark):04x}".encode()) for mark in "\u0085\u2028\u2029")


def escape_line_breaks(text: bytes) -> bytes:
    """A JSON text (UTF-8) with Unicode's own line breaks (NEL, U+2028, U+2029), which JSON leaves
    raw, as \\u escapes: a reader that splits a JSONL file with str.splitlines() (Python's,
    pandas' for some engines, many editors') would break a line at them. In valid UTF-8 their
    bytes never occur inside another character, so replacing them is exact."""
    for raw, escaped in _LINE_BREAKS:
        text = text.replace(raw, escaped)
    return text


@functools.cache
def _encoder() -> msgspec.json.Encoder:
    import msgspec

    return msgspec.json.Encoder()


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value
