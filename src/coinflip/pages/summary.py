"""The terminal summary of a run. Everything a user or a model wrote is printed as literal text:
a model named `[bold red]x` or `x[/]` is shown as written, never read as markup."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._terminal import printable
from ..scoring.metrics import METRICS


def value(x: float | None, undefined: bool = False) -> str:
    if x is None:
        return "undefined"
    return f"{x:.4f}" + (" (undefined)" if undefined else "")


def interval(pair: list[float] | None) -> str:
    return "-" if pair is None else f"{pair[0]:.3f} - {pair[1]:.3f}"


def data_line(report: Mapping[str, Any]) -> str:
    data = report["dataset"]
    where = data.get("id") or data.get("path") or data.get("source")
    template = report.get("template", {})
    return (
        f"data {data['source']}:{where} ({data['split']}, sha256 {str(data['sha256'])[:12]})  "
        f"template {template.get('name', 'default')}  arithmetic {report['metric_compat']}"
    )


def title(report: Mapping[str, Any]) -> str:
    """What tells two runs of one model apart at a glance: shots, API mode, repeats (the template
    is on the data line below)."""
    parts = [f"coin_flip - {report['model']}", f"{report.get('few_shot_num') or 0}-shot"]
    parts.append(str(report.get("api_mode", "chat")))
    if int(report.get("repeats") or 1) > 1:
        parts.append(f"{report['repeats']} repeats")
    return "  ".join(parts)


def timing_line(report: Mapping[str, Any]) -> str | None:
    """Latency and, for streamed runs, time to first token (medians and p90, in seconds)."""
    usage = report.get("usage") or {}
    shown = []
    latency = "batch turnaround" if report.get("batch") else "latency"  # a batch has no per-request time
    for key, name in (("latency_s", latency), ("ttft_s", "time to first token")):
        q = usage.get(key)
        if isinstance(q, dict) and q.get("p50") is not None:
            shown.append(f"{name} median {q['p50']:.2f} s, p90 {q['p90']:.2f} s")
    tokens = usage.get("completion_tokens")
    if isinstance(tokens, dict) and tokens.get("p50") is not None:
        shown.append(f"reply tokens median {tokens['p50']:.0f}")
    return "  ".join(shown) or None


def print_summary(
    report: Mapping[str, Any], run_dir: Path | None = None, console: Any = None, page: Path | None = None
) -> None:
    """The run in a screen; `page` is the HTML report to point to (default: the run's own)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = console or Console()
    for warning in report["warnings"]:
        label = "INCOMPLETE: " if not report["complete"] and _incomplete(warning) else "WARNING: "
        style = "bold red" if label.startswith("INC") else "bold yellow"
        console.print(Text.assemble((label, style), printable(warning)), soft_wrap=True)
    table = Table(title=Text(printable(title(report))), title_justify="left")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("95% interval", justify="right")
    forced = report.get("forced")
    if forced:
        table.add_column("forced", justify="right")
    undefined = set(report.get("undefined", []))
    for name in METRICS:
        label = f"{name} (primary)" if name == report["primary"] else name
        row = [label, value(report["metrics"][name], name in undefined), interval(report["intervals"][name])]
        if forced:
            row.append(value(forced["metrics"][name]))
        table.add_row(*row)
    console.print(table)
    for line in lines(report):
        console.print(Text(printable(line)), soft_wrap=True)
    if run_dir is not None:
        console.print(Text(printable(f"run directory: {run_dir}")), soft_wrap=True)
        pages = [page] if page is not None and page.is_file() else sorted(run_dir.glob("reports/*/coin_flip.html"))
        if pages:
            console.print(Text(printable(f"page: {pages[0]}")), soft_wrap=True)
        hint = f"answers, one line per sample: coinflip answers {shlex.quote(str(run_dir))}"
        console.print(Text(printable(hint)), soft_wrap=True)


def _expected(report: Mapping[str, Any]) -> str | None:
    """What a bundled local model is expected to score, so a tiny model's zeros read as expected."""
    from ..models.llama_local import EXPECTED

    return EXPECTED.get(str(report.get("served_model")))


def _incomplete(warning: str) -> bool:
    return "resume" in warning


def lines(report: Mapping[str, Any]) -> list[str]:
    """The plain lines under the table: counts, errors, forced answers, calibration, data."""
    c = report["counts"]
    out = [
        f"samples {c['samples']}  invalid {c['invalid']} ({c['invalid_rate']:.1%})  errors {c['errors']}  "
        + "  ".join(f"{k} {v}" for k, v in report.get("invalid_reasons", {}).items())
    ]
    for error in report.get("errors_top", [])[:3]:
        out.append(f"  {error['count']} x {error['message']}")
    requests = report.get("requests")
    if requests:
        from ..models.limits import line

        out.append(line(requests))
        out.extend(f"  hint: {hint}" for hint in requests.get("hints", []))
    repeats = report.get("repeat_metrics")
    if repeats:
        spread = repeats["per_repeat"][report["primary"]]
        out.append(
            f"repeats {repeats['k']}: {report['primary']} per repeat {value(spread['mean'])} +- "
            f"{value(spread['std'])}, majority vote {value(repeats['majority_vote'][report['primary']])}, "
            f"pass@{repeats['k']} {value(repeats['pass_at_k'])}, consistency {value(repeats['consistency'])}"
        )
    forced = report.get("forced")
    if forced:
        strict, again = report["metrics"]["accuracy"], forced["metrics"]["accuracy"]
        gap = f"{again - strict:+.4f}" if strict is not None and again is not None else "undefined"
        out.append(
            f"forced answers for {forced['asked']} of {forced['invalid_strict']} invalid: "
            f"{forced['recovered_correct']} right, {forced['recovered_wrong']} wrong, {forced['still_invalid']} "
            f"still invalid. Accuracy strict {value(strict)}, forced {value(again)} ({gap}): the strict score "
            "counts format and state tracking together, the forced one mostly state tracking"
        )
    timing = timing_line(report)
    if timing:
        out.append(timing)
    calibration = report.get("calibration") or {}
    if calibration.get("available"):
        out.append(
            f"P(YES) on {calibration['samples']} samples: AUROC {value(calibration.get('auroc'))}  "
            f"Brier {value(calibration.get('brier'))}  ECE {value(calibration.get('ece'))}"
        )
    expected = _expected(report)
    if expected:
        out.append(expected)
    base = report.get("baselines", {})
    if base:
        out.append(
            "baselines on the same questions: "
            + ", ".join(f"{name} f1 {value(v['f1_score'])} acc {value(v['accuracy'])}" for name, v in base.items())
        )
    out.append(data_line(report))
    out.extend(report.get("notes", []))
    return out
