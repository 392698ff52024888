"""Report stage: reviews per sample, the JSON report, and the short terminal summary."""

from __future__ import annotations

import json
from array import array
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TextIO

from .config import BENCHMARK
from .extract import extract_answer
from .metrics import METRICS, Outcome, Tally

EXTRACTION = "coinflip.extract_answer/1"


def review(prediction: dict[str, Any]) -> dict[str, Any]:
    """Score one saved prediction; never looks at a separate reasoning field."""
    error = prediction.get("error") is not None
    extracted = None if error else extract_answer(prediction.get("reply"))
    return {
        "id": prediction["id"],
        "people": prediction.get("people", 0),
        "target": prediction["target"],
        "extracted": extracted,
        "correct": extracted == prediction["target"],
        "invalid": extracted is None and not error,
        "error": error,
    }


def _quantiles(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)

    def q(p: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(p * len(ordered)))], 6)

    return {
        "mean": round(sum(ordered) / len(ordered), 6),
        "p50": q(0.5),
        "p90": q(0.9),
        "p99": q(0.99),
        "max": ordered[-1],
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
    """The samples the HTML page lists: every failure first, then correct ones, up to a cap."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.failed: list[tuple[dict[str, Any], dict[str, Any]]] = []
        self.passed: list[tuple[dict[str, Any], dict[str, Any]]] = []

    def add(self, prediction: dict[str, Any], review: dict[str, Any]) -> None:
        bucket = self.passed if review["correct"] else self.failed
        if len(bucket) < self.cap:
            bucket.append((prediction, review))

    def rows(self) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        return self.failed + self.passed[: max(0, self.cap - len(self.failed))]


def build_report(
    saved: dict[str, Any],
    run_name: str,
    predictions: Iterable[dict[str, Any]],
    compat: str,
    reviews_out: TextIO,
    showcase: Showcase,
    usage: Usage,
) -> dict[str, Any]:
    """The report of a run, computed only from its saved config and predictions, in one pass.

    Reviews are written to `reviews_out` as they are made; nothing grows with the run's size
    but a few numbers per sample.
    """
    config, fingerprint = saved["config"], saved["fingerprint"]
    tally = Tally()
    for prediction in predictions:
        r = review(prediction)
        reviews_out.write(json.dumps(r) + "\n")
        tally.add(Outcome(r["target"], r["extracted"], r["error"], r["people"]))
        usage.add(prediction)
        showcase.add(prediction, r)
    scores = tally.result(compat, seed=int(config.get("seed", 0)))
    errors = scores["counts"]["errors"]
    missing = int(saved.get("samples") or tally.total) - tally.total
    warnings = []
    if errors:
        warnings.append(f"{errors} sample(s) got no reply after retries and are scored wrong; resume to retry them")
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
        "extraction": EXTRACTION,
        "usage": usage.result(),
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
