"""A run's records, each declared once: a prediction, its forced answer, a review (a JSON line a sample each).
Readers keep a line only if its id and repeat are sound; others are skipped and counted, never fatal."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict, TypeGuard

if TYPE_CHECKING:
    import msgspec

REPEATS_BITS = 12  # a sample is (question, repeat), one int key: question << REPEATS_BITS | repeat
REPEATS_MAX = 1 << REPEATS_BITS
MAX_FINISH = 64  # characters of a finish_reason kept, written or read (the rest is a server's noise)
TOKENS_MAX = 10**18  # a token count at or past this is not one: far beyond any request, and still a float
ANSWERS: tuple[str | None, ...] = ("YES", "NO", None)  # the index of an answer in arrays; None: no answer
FORCED_ANSWERS: tuple[str | None, ...] = (None, "YES", "NO", "invalid")  # None: no forced answer asked


class Forced(TypedDict, total=False):
    """The follow-up asking a reply without a valid answer for its answer line; `pending` alone: unanswered."""

    pending: bool
    reply: str | None
    finish_reason: str | None
    usage: dict[str, Any] | None
    latency_s: float | None  # None: not known
    attempts: int
    error: str | None
    answer_logprobs: list[Any]
    batch: bool  # answered through a Batch API (priced at its discount); absent: online
    source: str  # the key of the last saved batch (batch/state.json) whose usage it holds


class Prediction(TypedDict):
    """One sample: the fields without NotRequired always, those with it where they apply."""

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
    latency_s: float | None  # None: not known
    attempts: int
    error: str | None  # after retries: the sample has no reply
    ttft_s: NotRequired[float]  # streamed replies: time to the first token
    answer_logprobs: NotRequired[list[Any]]  # log probabilities around the answer (scoring/calibration.py)
    status: NotRequired[int]  # the HTTP status of a failed request
    forced: NotRequired[Forced]  # --force-answer, for a reply without a valid answer
    batch: NotRequired[bool]  # answered through a Batch API (priced at its discount); absent: online
    source: NotRequired[str]  # the key of the last saved batch (batch/state.json) whose usage it holds
    stopped: NotRequired[bool]  # no sample done: the run stopped it between attempts, what they were billed kept


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
    """A review, `correct` and `invalid` worked out here only."""
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
    """Whether a Batch API gave this answer (priced at its discount); only `true` says so."""
    return answer.get("batch") is True


def token_count(usage: Any, name: str) -> int | None:
    """A saved token count, as the writer saves one (a whole number below TOKENS_MAX), or None."""
    value = usage.get(name) if isinstance(usage, dict) else None
    return value if whole(value, TOKENS_MAX) else None


def sample_key(question: int, repeat: int = 0) -> int:
    return question * REPEATS_MAX + repeat


def split_key(key: int) -> tuple[int, int]:
    return divmod(key, REPEATS_MAX)


def key_of(row: Prediction | Review) -> int:
    return sample_key(row["id"], row.get("repeat") or 0)  # rows of older versions have no repeat: 0


def whole(value: Any, below: float = float("inf")) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < below


PENDING: Forced = {"pending": True}  # a forced answer asked for, no reply yet (scoring/forced.py)
ERROR, STARTED, DONE = 0, 1, 2  # how far a row got: an error, a reply with its forced answer pending, done


def pending(row: Prediction) -> bool:
    """The reply is kept, its forced answer still to be asked (never answered, or it failed)."""
    forced = row.get("forced")
    return isinstance(forced, dict) and (bool(forced.get("pending")) or forced.get("error") is not None)


def stopped(row: Prediction) -> bool:
    """A request the run stopped between billed attempts: its row holds what they cost, it is no sample done (owed)."""
    return row.get("stopped") is True


def scored(row: Prediction) -> bool:
    """A row counts unless its forced answer is pending (a failed one counts, as invalid)."""
    forced = row.get("forced")
    return not (isinstance(forced, dict) and forced.get("pending"))


def progress(row: Prediction) -> int:
    """How far a row got; of two rows for one sample, the later wins unless it got less far."""
    return ERROR if row.get("error") is not None else STARTED if pending(row) else DONE


def _placed(line: bytes | str) -> Any:
    """A line's JSON object if it has a whole id and a whole repeat below REPEATS_MAX (or none); else
    None. msgspec parses (8x json's speed); an escaped lone surrogate, which it refuses, `loads` reads."""
    import msgspec  # imported when the first line is read, not with coinflip

    try:
        row = msgspec.json.decode(line)  # as fast as a kept Decoder's, untyped
    except (msgspec.DecodeError, UnicodeDecodeError):  # bytes not UTF-8: msgspec raises the latter
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
    """The prediction a line holds, or None (a target not YES or NO too: a resume asks it again)."""
    row = _placed(line)
    return row if row is not None and row.get("target") in ("YES", "NO") else None


def read_review(line: bytes | str) -> Review | None:
    return _placed(line)  # type: ignore[no-any-return]


def dumps(record: Prediction | Review) -> bytes:
    """One JSON line (msgspec: a tenth of json's time); NaN and Infinity become null, half a
    surrogate pair from a server a \\u escape."""
    try:
        return escape_line_breaks(_encoder().encode(record)) + b"\n"
    except UnicodeEncodeError:  # a lone surrogate: json escapes it, msgspec cannot
        return (json.dumps(_finite(record), allow_nan=False) + "\n").encode("utf-8")


_LINE_BREAKS = tuple((mark.encode(), f"\\u{ord(mark):04x}".encode()) for mark in "\u0085\u2028\u2029")


def escape_line_breaks(text: bytes) -> bytes:
    """Unicode's own line breaks (NEL, U+2028, U+2029), which JSON leaves raw, as \\u escapes: a
    reader splitting lines with str.splitlines() would break there. Exact in valid UTF-8."""
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


class Requests(TypedDict):
    """What went to the endpoints: models.limits.describe writes it (mypy holds it to these keys), the
    report and the log show it, and checked_requests reads it back."""

    sent: int
    succeeded: int
    refused: int
    timeouts: int
    retries: int
    in_flight_max: int
    in_flight_lowest_limit: int | None
    in_flight_setting: int
    server_slots: int | None
    waited_on_limits_s: float
    hints: list[str]


RECORD_INTS = ("sent", "succeeded", "refused", "timeouts", "retries", "in_flight_max", "in_flight_setting")


def checked_requests(data: Any) -> Requests | None:
    """The requests record read back from a run directory (untrusted), or None where it is not one."""
    if not isinstance(data, dict) or data.keys() != Requests.__required_keys__:
        return None
    counts = [data[k] for k in RECORD_INTS] + [data["in_flight_lowest_limit"] or 0, data["server_slots"] or 0]
    waited, hints = data["waited_on_limits_s"], data["hints"]
    seconds = isinstance(waited, int | float) and not isinstance(waited, bool) and 0 <= waited < 1e9
    texts = isinstance(hints, list) and len(hints) <= 8 and all(isinstance(h, str) and len(h) < 500 for h in hints)
    return data if all(whole(v, 2**53) for v in counts) and seconds and texts else None  # type: ignore[return-value]


def requests_line(requests: Mapping[str, Any]) -> str:
    """The requests record as the terminal and the log show it."""
    parts = [f"requests {requests['sent']} sent", f"{requests['refused']} refused (429/overloaded)"]
    parts.append(f"in flight up to {requests['in_flight_max']} of {requests['in_flight_setting']}")
    if requests.get("in_flight_lowest_limit"):
        parts[-1] += f" (lowered to {requests['in_flight_lowest_limit']})"
    if requests.get("server_slots"):
        parts.append(f"server slots {requests['server_slots']}")
    if requests["waited_on_limits_s"]:  # named by its cause: a server's queue is no throttling
        why = "refusals" if requests["refused"] else "timeouts" if requests["timeouts"] else "the server's queue"
        parts.append(f"{requests['waited_on_limits_s']:.1f} s holding requests back for {why}")
    parts.append(f"{requests['timeouts']} timeouts, {requests['retries']} retries")
    return ", ".join(parts)
