"""The report record (reports/<model>/coin_flip.json), declared once; every reader goes through `checked`,
which leaves out a field of another type than declared (old versions, hand edits) and never raises."""

from __future__ import annotations

import functools
import json
import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any, TypedDict

import msgspec

from .._files import unique_keys
from .._terminal import one_line
from ..records import Requests, checked_requests

ALTERED = "the saved report was edited by hand or is of another version"  # how `checked` says what it left out
Count = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]  # a hand-edited -5 samples (or 10**30) is left out, as a text
Rate = Annotated[float, msgspec.Meta(ge=0, le=1)]  # every metric is a share: an f1_score of 1.7 or NaN, left out
Amount = Annotated[float, msgspec.Meta(ge=0)]  # seconds, tokens per request, money
Interval = Annotated[list[Rate], msgspec.Meta(min_length=2, max_length=2)]  # [low, high]
Numbers = dict[str, Rate | None]  # one value per metric name (metrics.METRICS); None: undefined
Intervals = dict[str, Interval | None]


class Quantiles(TypedDict, total=False):
    mean: Amount
    p50: Amount
    p90: Amount
    p99: Amount
    max: Amount


class UsageSummary(TypedDict, total=False):
    latency_s: Quantiles
    completion_tokens: Quantiles
    prompt_tokens_total: Count
    completion_tokens_total: Count
    finish_reasons: dict[str, Count]
    ttft_s: Quantiles
    reasoning_tokens: Quantiles
    reasoning_tokens_total: Count


class Counts(TypedDict, total=False):
    samples: Count
    correct: Count
    tp: Count
    fp: Count
    tn: Count
    fn: Count
    invalid: Count
    invalid_rate: Rate
    errors: Count
    target_yes: Count
    answered_yes: Count
    answered_no: Count
    invalid_on_yes: Count
    invalid_on_no: Count
    errors_on_yes: Count
    errors_on_no: Count


class People(TypedDict, total=False):
    samples: Count
    correct: Count
    accuracy: Rate
    interval: Interval


class Forced(TypedDict, total=False):
    metrics: Numbers
    intervals: Intervals
    counts: Counts
    by_people: dict[str, People]
    invalid_strict: Count
    asked: Count
    recovered_correct: Count
    recovered_wrong: Count
    still_invalid: Count
    usage: UsageSummary
    repeat_metrics: Repeats  # --repeats above 1: the forced view's reducers


class Spread(TypedDict, total=False):
    mean: Rate | None
    std: Amount | None
    values: list[Rate | None]


class Repeats(TypedDict, total=False):
    k: Count
    questions: Count
    per_repeat: dict[str, Spread]
    majority_vote: Numbers
    pass_at_k: Rate | None
    consistency: Rate | None


class Bin(TypedDict, total=False):
    lo: Rate
    hi: Rate
    samples: Count
    mean_p_yes: Rate | None
    yes_share: Rate | None


class Calibration(TypedDict, total=False):
    available: bool
    reason: str
    coverage: Rate
    samples: Count
    auroc: Rate | None
    brier: Rate
    ece: Rate
    bins: list[Bin]
    impossible_logprobs: Count  # samples left without P(YES): the server sent impossible log probabilities


class Tokens(TypedDict, total=False):
    requests: Count
    prompt: Count
    completion: Count
    reasoning: Count
    per_request: dict[str, Amount | None]
    batch_prompt: Count  # of `prompt`, what a Batch API answered (billed at its discount)
    batch_completion: Count
    unreported: Count  # answers whose usage left out prompt or completion tokens, or was not reported: not counted


class Cost(TypedDict, total=False):
    input: Amount
    output: Amount
    batch_discount: Rate
    batch: bool
    total: Amount
    full_price: Amount


class ErrorCount(TypedDict):
    message: str
    count: Count


class Dataset(TypedDict, total=False):
    source: str
    path: str
    id: str
    split: str
    rows: Count
    sha256: str


class Subset(TypedDict, total=False):
    mode: str
    seed: int
    count: Count
    of: Count


class Template(TypedDict, total=False):
    name: str
    sha256: str
    multiturn: bool
    text: str


class FewShot(TypedDict, total=False):
    seed: int | None  # None: the first rows of the validation split
    random: bool
    examples_sha256: str  # of the validation rows shown, questions and answers


class Report(TypedDict, total=False):
    benchmark: str
    model: str  # the name shown (model_id where given)
    served_model: str  # the name sent to the server
    run: str
    complete: bool
    warnings: list[str]
    notes: list[str]
    metric_compat: str  # metric_compat to by_people: metrics.summarize, for the forced view too
    primary: str
    evalscope: dict[str, Any]  # evalscope arithmetic only: how the numbers relate to EvalScope's
    metrics: Numbers
    intervals: Intervals
    undefined: list[str]
    counts: Counts
    by_people: dict[str, People]
    baselines: dict[str, Numbers]  # always-yes, always-no on the same targets
    invalid_reasons: dict[str, Count]
    errors_top: list[ErrorCount]
    dataset: Dataset
    subset: Subset
    template: Template
    few_shot_num: Count
    few_shot: FewShot
    repeats: Count
    api_mode: str
    generation_config: dict[str, Any]
    extraction: str
    usage: UsageSummary
    tokens: Tokens
    provenance: dict[str, Any]
    batch: bool  # answered by a Batch API
    cost: Cost | None  # None: no prices given
    repeat_metrics: Repeats
    forced: Forced
    calibration: Calibration
    errors_ignored: bool
    unreadable_rows: Count  # saved lines left out: not a row, or no YES or NO target
    corrected_rows: Count  # saved rows scored by the data's target, people and flips, not their own
    requests: Requests  # the last session's requests: models/limits.py `describe` writes it, `checked` reads it


def read_report(raw: bytes | str) -> Report | None:
    """The one way a saved report is read; None when the file is not a JSON object, or names a key twice in one
    (the last would win unseen: a second f1_score)."""
    try:  # Python's parser: NaN and numbers past a float's range still read (and are left out)
        found = json.loads(raw, object_pairs_hook=unique_keys)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
    return checked(found) if isinstance(found, dict) else None


def checked(report: Mapping[str, Any]) -> Report:
    """Each field of its declared type and bounds; what is left out is named first among its warnings, so that no
    page or ranking shows an altered report as it was saved."""
    left: list[str] = []
    try:  # a report as written checks whole in one call (30 us, against 1 ms field by field)
        msgspec.convert(report, Report)
        found = dict(report)
    except (msgspec.ValidationError, RecursionError):
        found = _fields(report, Report, left, "")
    if "requests" in found and checked_requests(found["requests"]) is None:  # its record's own check (records.py)
        del found["requests"]
        left.append("requests")
    if left:
        named = ", ".join(left[:6]) + (f" and {len(left) - 6} more" if len(left) > 6 else "")
        note = f"{ALTERED}: left out {named}"
        found["warnings"] = [note, *found.get("warnings", [])]
    return found  # type: ignore[return-value]


def altered(report: Mapping[str, Any]) -> str | None:
    """The warning in which `checked` named what it left out of a report (or a board row), if any."""
    return next((w for w in report.get("warnings") or [] if isinstance(w, str) and w.startswith(ALTERED)), None)


_LEFT_OUT = object()
_hints = functools.cache(functools.partial(typing.get_type_hints, include_extras=True))  # Count's bound kept


def _fields(found: Mapping[str, Any], declared: Any, left: list[str], at: str) -> dict[str, Any]:
    """The entries of `found` of their declared type (`left`: where one was not): `declared` is a TypedDict (a
    field it does not name is kept) or dict[str, T] (one odd metric leaves the others)."""
    hints, other = (_hints(declared), Any) if typing.is_typeddict(declared) else ({}, typing.get_args(declared)[1])
    kept = {}
    for key, value in found.items():
        where = f"{at}.{key}" if at else str(key)
        if (value := _checked(value, hints.get(key, other), left, where)) is _LEFT_OUT:
            left.append(one_line(where, 60))
        else:
            kept[key] = value
    return kept


def _checked(value: Any, hint: Any, left: list[str], at: str) -> Any:
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    for option in options:
        if typing.is_typeddict(option) or typing.get_origin(option) is dict:
            if isinstance(value, dict):
                return _fields(value, option, left, at)
            continue
        try:
            msgspec.convert(value, option)  # checks only: the value is kept as it was written
        except (msgspec.ValidationError, RecursionError):
            continue
        return value
    return _LEFT_OUT
