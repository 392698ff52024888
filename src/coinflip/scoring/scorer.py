"""Reviews: one verdict per prediction, gathered in any order (a live run's replies as they land, or a
rescore's saved rows) into compact typed arrays, and written in key order: both give the same bytes."""

from __future__ import annotations

import heapq
import math
from array import array
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, BinaryIO

from ..errors import DataError
from ..records import (
    ANSWERS,
    FORCED_ANSWERS,
    MAX_FINISH,
    REPEATS_MAX,
    Prediction,
    Review,
    by_batch,
    dumps,
    make_review,
    sample_key,
    split_key,
    token_count,
    whole,
)
from . import extract
from . import forced as forcing
from .calibration import impossible_in, p_yes
from .evalscope import REASONS as EVALSCOPE
from .evalscope import read_verdict
from .extract import read_answer
from .metrics import Outcomes
from .schema import ErrorCount, Quantiles, UsageSummary

MAX_ROWS = 3333  # samples the HTML page lists: the official test split; failures first beyond that
REASONS: tuple[str | None, ...] = (None, *extract.REASONS)  # EvalScope's reasons are a subset


def review(prediction: Prediction, compat: str = "coinflip") -> Review:
    """One saved prediction by coinflip's strict rule or EvalScope's; an errored one has no answer and no reason."""
    target = prediction.get("target")
    if target not in ("YES", "NO"):
        raise DataError(f"prediction {prediction.get('id')!r}: target must be YES or NO, got {target!r}")
    error = prediction.get("error") is not None
    extracted, reason = (None, None) if error else _read(prediction, compat)
    probability = _probability(prediction, extracted is not None)
    p = None if probability is None else round(probability, 6)
    id_, repeat, people = (value if whole(value := prediction.get(k)) else 0 for k in ("id", "repeat", "people"))
    return make_review(id_, repeat, people, target, extracted, reason, error, forcing.said(prediction), p)


def _probability(prediction: Prediction, answered: bool) -> float | None:
    """P(YES) where the answer that counts was given: the reply's, else the forced answer's, else the reply's."""
    forced = prediction.get("forced")
    mine = p_yes(prediction.get("answer_logprobs"))
    if answered or not isinstance(forced, dict):
        return mine
    again = p_yes(forced.get("answer_logprobs"), bare=True)
    return again if again is not None else mine


def _read(prediction: Prediction, compat: str) -> tuple[str | None, str | None]:
    text = {k: v for k in ("reply", "reasoning", "finish_reason") if isinstance(v := prediction.get(k), str)}
    if compat == "evalscope":
        return read_verdict(text.get("reply"), text.get("reasoning"), text.get("finish_reason"))
    return read_answer(text.get("reply"), text.get("finish_reason"))


class Columns:
    """Reviews as typed arrays (a few bytes a sample, not a dict's hundreds), a column per records.Review field;
    `answer`, `forced` and `reason` index ANSWERS, FORCED_ANSWERS and REASONS."""

    def __init__(self) -> None:
        self.key = array("q")
        self.target_no = array("b")
        self.answer = array("b")
        self.error = array("b")
        self.reason = array("b")
        self.forced = array("b")
        self.people = array("i")
        self.p_yes = array("d")  # NaN: none

    def __len__(self) -> int:
        return len(self.key)

    def append(self, r: Review) -> None:
        self.p_yes.append(math.nan if r["p_yes"] is None else r["p_yes"])
        self.key.append(sample_key(r["id"], r["repeat"]))
        self.target_no.append(r["target"] == "NO")
        self.answer.append(ANSWERS.index(r["extracted"]))
        self.error.append(r["error"])
        self.reason.append(REASONS.index(r["invalid_reason"]))
        self.forced.append(FORCED_ANSWERS.index(r["forced"]))
        self.people.append(min(r["people"], 2**31 - 1))

    def column(self, name: str) -> Any:
        """One column as a numpy array, in arrival order, without a copy."""
        import numpy as np

        values = getattr(self, name)
        return np.frombuffer(values, dtype=values.typecode)

    def outcomes(self, forced: bool = False) -> Outcomes:
        """Every sample as small arrays; with `forced`, an invalid strict answer replaced by its forced one."""
        import numpy as np

        answer, error = self.column("answer"), self.column("error")
        if forced:
            answer = forcing.recovered(answer, error, self.column("forced"))
        question, repeat = np.divmod(self.column("key"), REPEATS_MAX)
        cell = (self.column("target_no") * len(ANSWERS) + answer).astype(np.int8)  # metrics.CELLS' order
        return Outcomes(question, repeat.astype(np.int16), cell, error, self.column("people"))

    def review(self, i: int) -> Review:
        question, repeat = split_key(self.key[i])
        target, p = "NO" if self.target_no[i] else "YES", self.p_yes[i]
        answer, reason, forced = ANSWERS[self.answer[i]], REASONS[self.reason[i]], FORCED_ANSWERS[self.forced[i]]
        p_yes = None if math.isnan(p) else p
        return make_review(question, repeat, self.people[i], target, answer, reason, bool(self.error[i]), forced, p_yes)


def _quantiles(values: Sequence[float]) -> Quantiles:
    if not values:
        return {}
    import numpy as np

    ordered = np.sort(np.asarray(values, dtype=np.float64))
    n = len(ordered)

    def q(p: float) -> float:
        return round(float(ordered[min(n - 1, int(p * n))]), 6)

    return {"mean": round(math.fsum(values) / n, 6), "p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "max": q(1.0)}


SECONDS_MAX = 1e9  # a saved duration past 30 years is a hand edit, not a request's time


def _seconds(value: Any) -> float | None:
    """A saved duration as a float; None for anything else (400 digits or 1e308 would overflow the mean)."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if number and 0 <= value <= SECONDS_MAX else None


class Usage:
    def __init__(self, choices: int = 1) -> None:
        self.choices = choices  # answers per request: a request's usage is in its first answer's row alone
        self.latency = array("d")
        self.ttft = array("d")
        self.completion = array("d")
        self.reasoning = array("d")
        self.prompt_tokens = 0
        self.prompt_answers = 0  # answers whose usage gave prompt tokens (`completion` has one entry per such answer)
        self.usage_answers = 0  # answers whose usage gave either: the requests the token counts cover
        self.batch_tokens = [0, 0]  # prompt and completion tokens of the replies a Batch API gave
        self.batch_answers = 0  # replies a Batch API gave (or a result file read with --batch-results)
        self.unreported = 0  # answers whose usage gave some counts but not both prompt and completion tokens
        self.silent = 0  # answers with no usage at all: a baseline's, or a server's that reports none
        self.finish: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()

    def add(self, p: Mapping[str, Any]) -> None:
        error = p.get("error")
        if error is None:
            latency, ttft = _seconds(p.get("latency_s")), _seconds(p.get("ttft_s"))
            if latency is not None:  # not known (--batch-results) is not 0 s
                self.latency.append(latency)
            self.finish[str(p.get("finish_reason"))[:MAX_FINISH]] += 1  # a saved row as a reply is cut
            if ttft is not None:
                self.ttft.append(ttft)
        else:
            self.errors[" ".join(str(error).split())[:300]] += 1
        usage = p.get("usage")
        prompt, completion = token_count(usage, "prompt_tokens"), token_count(usage, "completion_tokens")
        self.unreported += bool(usage) and None in (prompt, completion)  # the cost leaves out what it did not say
        self.silent += not usage and error is None and (p.get("repeat") or 0) % self.choices == 0
        self.prompt_answers += prompt is not None
        self.usage_answers += prompt is not None or completion is not None
        prompt = prompt or 0
        self.prompt_tokens += prompt
        if completion is not None:
            self.completion.append(float(completion))
        if by_batch(p):
            self.batch_answers += 1
            self.batch_tokens[0] += prompt
            self.batch_tokens[1] += completion or 0
        if (reasoning := token_count(usage, "reasoning_tokens")) is not None:
            self.reasoning.append(float(reasoning))

    def result(self) -> UsageSummary:
        out: UsageSummary = {
            "latency_s": _quantiles(self.latency),
            "completion_tokens": _quantiles(self.completion),
            "prompt_tokens_total": self.prompt_tokens,
            "completion_tokens_total": int(sum(self.completion)),
            "finish_reasons": dict(sorted(self.finish.items(), key=lambda kv: (-kv[1], kv[0]))),
        }
        if self.ttft:
            out["ttft_s"] = _quantiles(self.ttft)
        if self.reasoning:
            out["reasoning_tokens"] = _quantiles(self.reasoning)
            out["reasoning_tokens_total"] = int(sum(self.reasoning))
        return out

    def top_errors(self, n: int = 5) -> list[ErrorCount]:
        ranked = sorted(self.errors.items(), key=lambda kv: (-kv[1], kv[0]))
        return [{"message": message, "count": count} for message, count in ranked[:n]]


SHOWN_CHARS = 4000  # of a prompt or reply on the page: the JSONL files keep every character


def _clip(text: Any) -> Any:
    """A long text's start and its end (where the answer line is)."""
    if not isinstance(text, str) or len(text) <= SHOWN_CHARS:
        return text
    head, tail = SHOWN_CHARS // 4, SHOWN_CHARS * 3 // 4
    return f"{text[:head]}\n[... {len(text) - head - tail:,} characters not shown ...]\n{text[-tail:]}"


def _lean(prediction: Prediction) -> dict[str, Any]:
    """What the page shows of a prediction: thousands of long replies do not fill the memory."""
    lean = {k: _clip(prediction.get(k)) for k in ("question", "prompt", "reply", "error")}
    if isinstance(forced := prediction.get("forced"), dict):
        lean["forced"] = {k: _clip(forced.get(k)) for k in ("reply", "error")}
    return lean


class Showcase:
    """The samples the HTML page lists: failures first, then correct ones, each by key, up to a cap."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._seq = 0
        self._heap: list[tuple[int, int, int, dict[str, Any], Review]] = []  # a max-heap on (correct, key)

    def add(self, key: int, prediction: Prediction, review: Review) -> None:
        rank = (-review["correct"], -key)
        if len(self._heap) >= self.cap and rank <= self._heap[0][:2]:
            return
        self._seq += 1
        entry = (*rank, self._seq, _lean(prediction), review)
        if len(self._heap) < self.cap:
            heapq.heappush(self._heap, entry)
        else:
            heapq.heapreplace(self._heap, entry)

    def rows(self) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        return [(p, dict(r)) for *_, p, r in sorted(self._heap, reverse=True)]


class Scorer(Columns):
    """What a report is made of, gathered one prediction at a time and in any order."""

    def __init__(self, showcase_cap: int = MAX_ROWS, compat: str = "coinflip", choices: int = 1) -> None:
        super().__init__()
        self.compat = compat  # whose rule reviews each reply: coinflip's strict one or EvalScope's
        self.usage = Usage(choices)
        self.forced_usage = Usage()
        self.outside = Usage()  # cost only: predictions outside the subset scored (a narrower --limit), stopped rows
        self.showcase = Showcase(showcase_cap)
        self.unreadable = 0  # saved lines left out: no prediction, or no YES or NO target (a hand-edited file)
        self.corrected = 0  # saved rows whose target, people or flips were not the data's: scored by the data's
        self.impossible_logprobs = 0  # samples without P(YES): the server sent an impossible log probability

    def add(self, prediction: Prediction) -> None:
        r = review(prediction, self.compat)
        self.append(r)
        if r["p_yes"] is None and impossible_in(prediction):
            self.impossible_logprobs += 1
        self.usage.add(prediction)
        if isinstance(forced := prediction.get("forced"), dict):
            self.forced_usage.add(forced)
        self.showcase.add(sample_key(r["id"], r["repeat"]), prediction, r)

    @property
    def reasons(self) -> dict[str, int]:
        """Invalid answers by reason (every reason of the scorer's rule, zeros included)."""
        import numpy as np

        names = EVALSCOPE if self.compat == "evalscope" else extract.REASONS
        counts = np.bincount(self.column("reason"), minlength=len(REASONS))
        return {name: int(counts[REASONS.index(name)]) for name in names}

    def order(self) -> Any:
        """Positions in key order (None: already in order)."""
        import numpy as np

        keys = self.column("key")
        return None if bool((keys[1:] > keys[:-1]).all()) else np.argsort(keys, kind="stable")

    def write_reviews(self, out: BinaryIO) -> None:
        order = self.order()
        positions = range(len(self)) if order is None else order.tolist()
        for first in range(0, len(self), 4096):  # a slice at a time keeps Python objects few
            out.write(b"".join(dumps(self.review(i)) for i in positions[first : first + 4096]))
