"""Report stage: reviews per sample, the JSON report, and the short terminal summary."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .config import BENCHMARK
from .extract import extract_answer
from .metrics import METRICS, Outcome, compute

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


def _quantiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)

    def q(p: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(p * len(ordered)))], 6)

    return {"mean": round(sum(ordered) / len(ordered), 6), "p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "max": ordered[-1]}


def usage_stats(predictions: Iterable[dict[str, Any]]) -> dict[str, Any]:
    latency: list[float] = []
    completion: list[float] = []
    prompt_tokens = 0
    for p in predictions:
        if p.get("error") is None:
            latency.append(p.get("latency_s") or 0.0)
        usage = p.get("usage") or {}
        prompt_tokens += usage.get("prompt_tokens") or 0
        if usage.get("completion_tokens") is not None:
            completion.append(float(usage["completion_tokens"]))
    return {
        "latency_s": _quantiles(latency),
        "completion_tokens": _quantiles(completion),
        "prompt_tokens_total": prompt_tokens,
        "completion_tokens_total": int(sum(completion)),
    }


def build_report(
    saved: dict[str, Any], run_name: str, predictions: list[dict[str, Any]], compat: str, expected: int
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The report and reviews of a run, computed only from its saved config and predictions."""
    config, fingerprint = saved["config"], saved["fingerprint"]
    reviews = [review(p) for p in predictions]
    scores = compute(
        (Outcome(r["target"], r["extracted"], r["error"], r["people"]) for r in reviews),
        compat=compat, seed=int(config.get("seed", 0)),
    )
    errors = scores["counts"]["errors"]
    missing = expected - len(predictions)
    complete = errors == 0 and missing == 0
    warnings = []
    if errors:
        warnings.append(f"{errors} sample(s) got no reply after retries and are scored wrong; resume to retry them")
    if missing > 0:
        warnings.append(f"{missing} sample(s) were never run; resume to run them")
    report = {
        "benchmark": BENCHMARK,
        "model": config["model"],
        "run": run_name,
        "complete": complete,
        "warnings": warnings,
        **scores,
        "dataset": fingerprint["dataset"],
        "few_shot_num": config.get("few_shot_num", 0),
        "generation_config": config.get("generation_config", {}),
        "extraction": EXTRACTION,
        "usage": usage_stats(predictions),
    }
    return report, reviews


def write_report(path: Path, report: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def summary_lines(report: dict[str, Any]) -> list[str]:
    """Plain-text summary; the rich table in the CLI shows the same rows."""
    rows = []
    for name in METRICS:
        lo, hi = report["intervals"].get(name, [None, None])
        ci = f"  [{lo:.3f}, {hi:.3f}]" if lo is not None else ""
        rows.append(f"{name:<10} {report['metrics'][name]:.4f}{ci}")
    return rows


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
