"""Report stage: reviews per sample, the JSON report, and the short terminal summary."""

from __future__ import annotations

import heapq
import json
import math
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from ..config import BENCHMARK
from ..errors import DataError
from .evalscope import EXTRACTION as EVALSCOPE_EXTRACTION
from .evalscope import REASONS as EVALSCOPE_REASONS
from .evalscope import read_verdict
from .extract import REASONS, read_answer
from .metrics import METRICS, Outcome, Tally

EXTRACTION = "coinflip.extract_answer/1"
MAX_ROWS = 3333  # samples the HTML page lists: the official test split; failures first beyond that


def review(prediction: dict[str, Any], compat: str = "coinflip") -> dict[str, Any]:
    """Score one saved prediction by coinflip's strict rule, or by EvalScope's (compat "evalscope").

    The strict rule never looks at a separate reasoning field; EvalScope's only checks whether
    there was one (scoring/evalscope.py `completion`). An errored sample has no answer and no
    invalid reason: it is counted as an error.
    """
    target = prediction.get("target")
    if target not in ("YES", "NO"):
        raise DataError(f"prediction {prediction.get('id')!r}: target must be YES or NO, got {target!r}")
    error = prediction.get("error") is not None
    extracted, reason = (None, None) if error else _read(prediction, compat)
    return {
        "id": int(prediction["id"]),
        "people": max(0, int(prediction.get("people") or 0)),
        "target": prediction["target"],
        "extracted": extracted,
        "correct": extracted == prediction["target"],
        "invalid": extracted is None and not error,
        "invalid_reason": reason,
        "error": error,
    }


def _read(prediction: dict[str, Any], compat: str) -> tuple[str | None, str | None]:
    reply, finish = prediction.get("reply"), prediction.get("finish_reason")
    if compat == "evalscope":
        return read_verdict(reply, prediction.get("reasoning"), finish)
    return read_answer(reply, finish)


def _quantiles(values: Sequence[float]) -> dict[str, float]:
    """Mean and order statistics; sorted in one numpy array, not a list of a Python float each."""
    if not values:
        return {}
    import numpy as np

    ordered = np.sort(np.asarray(values, dtype=np.float64))
    n = len(ordered)

    def q(p: float) -> float:
        return round(float(ordered[min(n - 1, int(p * n))]), 6)

    return {
        "mean": round(math.fsum(values) / n, 6),
        "p50": q(0.5),
        "p90": q(0.9),
        "p99": q(0.99),
        "max": float(ordered[-1]),
    }


class Usage:
    """Latency and token distributions, in compact arrays rather than rows."""

    def __init__(self) -> None:
        self.latency = array("d")
        self.completion = array("d")
        self.prompt_tokens = 0

    def add(self, p: dict[str, Any]) -> None:
        if p.get("error") is None:
            self.latency.append(p.get("latency_s") or 0.0)
        usage = p.get("usage") or {}
        self.prompt_tokens += usage.get("prompt_tokens") or 0
        if usage.get("completion_tokens") is not None:
            self.completion.append(float(usage["completion_tokens"]))

    def result(self) -> dict[str, Any]:
        return {
            "latency_s": _quantiles(self.latency),
            "completion_tokens": _quantiles(self.completion),
            "prompt_tokens_total": self.prompt_tokens,
            "completion_tokens_total": int(sum(self.completion)),
        }


class Showcase:
    """The samples the HTML page lists: failures first, then correct ones, each in id order, up to a
    cap. Kept as the lowest ids of each kind, so the order samples arrive in does not matter."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._seq = 0
        self.failed: list[tuple[int, int, dict[str, Any], dict[str, Any]]] = []
        self.passed: list[tuple[int, int, dict[str, Any], dict[str, Any]]] = []

    def add(self, prediction: dict[str, Any], review: dict[str, Any]) -> None:
        heap = self.passed if review["correct"] else self.failed
        self._seq += 1
        entry = (-int(review["id"]), self._seq, prediction, review)  # max-heap on id
        if len(heap) < self.cap:
            heapq.heappush(heap, entry)
        elif entry[0] > heap[0][0]:
            heapq.heapreplace(heap, entry)

    def rows(self) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        failed = [(p, r) for _, _, p, r in sorted(self.failed, reverse=True)]
        passed = [(p, r) for _, _, p, r in sorted(self.passed, reverse=True)]
        return failed + passed[: max(0, self.cap - len(failed))]


_EXTRACTED: tuple[str | None, ...] = (None, "YES", "NO")
_REASONS: tuple[str | None, ...] = (None, *REASONS)  # EvalScope's reasons are a subset


def _pack(r: dict[str, Any]) -> int:
    outcome = (r["people"] * 2 + (r["target"] == "NO")) * 3 + _EXTRACTED.index(r["extracted"])
    return int((outcome * len(_REASONS) + _REASONS.index(r["invalid_reason"])) * 2 + r["error"])


def _unpack(key: int, code: int) -> dict[str, Any]:
    rest, error = divmod(code, 2)
    rest, reason = divmod(rest, len(_REASONS))
    rest, extracted = divmod(rest, 3)
    people, no = divmod(rest, 2)
    target = "NO" if no else "YES"
    answer = _EXTRACTED[extracted]
    return {
        "id": key,
        "people": people,
        "target": target,
        "extracted": answer,
        "correct": answer == target,
        "invalid": answer is None and not error,
        "invalid_reason": _REASONS[reason],
        "error": bool(error),
    }


class Scorer:
    """What a report is made of, gathered one prediction at a time and in any order.

    A live run feeds it replies as they land, so the report is ready when the last one does;
    a rescore feeds it the saved predictions. Both give the same bytes: every part is
    order-free, and each review is kept as two integers (`ids`, in arrival order, and its
    outcome) and written out in id order.
    """

    def __init__(self, showcase_cap: int = MAX_ROWS, compat: str = "coinflip") -> None:
        self.compat = compat  # whose rule reviews each reply: coinflip's strict one or EvalScope's
        self.reasons = dict.fromkeys(EVALSCOPE_REASONS if compat == "evalscope" else REASONS, 0)
        self.tally = Tally()
        self.usage = Usage()
        self.showcase = Showcase(showcase_cap)
        self.ids = array("i")  # 4 bytes each: enough for two billion samples
        self.codes = array("i")

    def add(self, prediction: dict[str, Any]) -> None:
        r = review(prediction, self.compat)
        if r["invalid_reason"] is not None:
            self.reasons[r["invalid_reason"]] += 1
        self.ids.append(r["id"])
        self.codes.append(_pack(r))
        self.tally.add(Outcome(r["target"], r["extracted"], r["error"], r["people"]))
        self.usage.add(prediction)
        self.showcase.add(prediction, r)

    def write_reviews(self, out: TextIO) -> None:
        import numpy as np

        keys = np.frombuffer(self.ids, dtype=np.int32)
        order = None if bool((keys[1:] > keys[:-1]).all()) else np.argsort(keys, kind="stable")
        ids, codes = self.ids, self.codes
        for first in range(0, len(keys), 4096):  # a slice at a time keeps Python ints few
            part = range(first, min(first + 4096, len(keys))) if order is None else order[first : first + 4096].tolist()
            out.write("".join(json.dumps(_unpack(ids[i], codes[i])) + "\n" for i in part))


def build_report(saved: dict[str, Any], run_name: str, scorer: Scorer, compat: str) -> dict[str, Any]:
    """The report of a run: its saved config plus what the scorer gathered from its predictions."""
    if scorer.compat != compat:
        raise ValueError(f"the reviews follow {scorer.compat!r} rules, the report was asked for {compat!r}")
    config, fingerprint = saved["config"], saved["fingerprint"]
    tally = scorer.tally
    scores = tally.result(compat, seed=int(config.get("seed", 0)))
    errors = scores["counts"]["errors"]
    missing = int(saved.get("samples") or tally.total) - tally.total
    warnings = []
    if errors:
        counted = "are left out, as EvalScope's ignore_errors does" if compat == "evalscope" else "are scored wrong"
        warnings.append(f"{errors} sample(s) got no reply after retries and {counted}; resume to retry them")
    if missing > 0:
        warnings.append(f"{missing} sample(s) were never run; resume to run them")
    return {
        "benchmark": BENCHMARK,
        "model": config["model"],
        "run": run_name,
        "complete": errors == 0 and missing <= 0,
        "warnings": warnings,
        **scores,
        "dataset": fingerprint["dataset"],
        "few_shot_num": config.get("few_shot_num", 0),
        "generation_config": config.get("generation_config", {}),
        "extraction": EVALSCOPE_EXTRACTION if compat == "evalscope" else EXTRACTION,
        "usage": scorer.usage.result(),
    }


def write_report(path: Path, report: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def print_summary(report: dict[str, Any], run_dir: Path | None = None, console: Any = None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    for warning in report["warnings"]:
        console.print(f"[bold red]INCOMPLETE:[/] {warning}")
    data = report["dataset"]
    where = data.get("id") or data.get("path") or data.get("source")
    table = Table(title=f"coin_flip - {report['model']}", title_justify="left")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("95% interval", justify="right")
    for name in METRICS:
        lo, hi = report["intervals"][name]
        label = f"{name} (primary)" if name == report["primary"] else name
        table.add_row(label, f"{report['metrics'][name]:.4f}", f"{lo:.3f} - {hi:.3f}")
    console.print(table)
    c = report["counts"]
    console.print(
        f"samples {c['samples']}  invalid {c['invalid']} ({c['invalid_rate']:.1%})  errors {c['errors']}  "
        f"data {data['source']}:{where} ({data['split']}, sha256 {data['sha256'][:12]})  "
        f"arithmetic {report['metric_compat']}"
    )
    if run_dir is not None:
        console.print(f"run directory: {run_dir}")
