"""The terminal summary of a run: what a user or a model wrote prints as text, never as rich markup;
the report comes through scoring/schema.py `checked` (a missing field shows as "?")."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._terminal import one_line
from ..records import checked_requests, requests_line
from ..scoring.metrics import METRICS
from ..scoring.schema import ErrorCount, Report, checked
from .html import fmt, span, warning_label


def value(x: float | None, undefined: bool = False) -> str:
    return fmt(x) + (" (undefined)" if undefined and x is not None else "")


def data_line(report: Report) -> str:
    data = report.get("dataset", {})
    where = data.get("id") or data.get("path") or data.get("source")
    return (
        f"data {data.get('source')}:{where} ({data.get('split')}, sha256 {(data.get('sha256') or '?')[:12]})  "
        f"template {report.get('template', {}).get('name', 'default')}  arithmetic {report.get('metric_compat')}"
    )


def title(report: Report) -> str:
    """What tells two runs of one model apart: shots, API mode, repeats (the template is on the data line)."""
    parts = [f"coin_flip - {report.get('model')}", f"{report.get('few_shot_num', '?')}-shot"]
    parts.append(report.get("api_mode", "chat"))
    if report.get("repeats", 1) > 1:
        parts.append(f"{report.get('repeats')} repeats")
    return "  ".join(parts)


def timing_line(report: Report) -> str | None:
    """Latency and, streamed, time to first token (median and p90, in seconds)."""
    usage = report.get("usage", {})
    latency = "batch turnaround" if report.get("batch") else "latency"  # a batch has no per-request time
    shown = [
        f"{name} median {q['p50']:.2f} s, p90 {q['p90']:.2f} s"
        for name, q in ((latency, usage.get("latency_s", {})), ("time to first token", usage.get("ttft_s", {})))
        if "p50" in q and "p90" in q
    ]
    tokens = usage.get("completion_tokens", {})
    if "p50" in tokens:
        shown.append(f"reply tokens median {tokens['p50']:.0f}")
    return "  ".join(shown) or None


def print_summary(
    report: Mapping[str, Any], run_dir: Path | None = None, console: Any = None, page: Path | None = None
) -> None:
    """`page`: the HTML report to point to (default: the run's own)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    report = checked(report)
    console = console or Console()
    for warning in report.get("warnings", []):
        label = warning_label(report, warning) + ": "
        style = "bold red" if label.startswith("INC") else "bold yellow"
        console.print(Text.assemble((label, style), one_line(warning)), soft_wrap=True)
    table = Table(title=Text(one_line(title(report))), title_justify="left")
    table.add_column("metric")
    forced = report.get("forced")
    for column in ["value", "95% interval"] + (["forced"] if forced else []):
        table.add_column(column, justify="right")
    metrics, intervals, undefined = report.get("metrics", {}), report.get("intervals", {}), report.get("undefined", [])
    for name in METRICS:
        label = f"{name} (primary)" if name == report.get("primary") else name
        row = [label, value(metrics.get(name), name in undefined), span(intervals.get(name))]
        if forced:
            row.append(value(forced.get("metrics", {}).get(name)))
        table.add_row(*row)
    console.print(table)
    shown = lines(report)
    if run_dir is not None:
        pages = [page] if page is not None and page.is_file() else sorted(run_dir.glob("reports/*/coin_flip.html"))
        shown += [f"run directory: {run_dir}", *(f"page: {p}" for p in pages[:1])]
        shown.append(f"answers, one line per sample: coinflip answers {shlex.quote(str(run_dir))}")
    for line in shown:
        console.print(Text(one_line(line)), soft_wrap=True)


def _errors(listed: list[ErrorCount], errors: Any) -> list[str]:
    """The commonest three messages, and a count of the rest: the count above is all of them."""
    top = listed[:3]
    rest = errors - sum(error["count"] for error in top) if isinstance(errors, int) else 0
    if len(listed) == 4 and listed[3]["count"] == rest:  # one message left: shown in the line "other" would take
        top, rest = listed, 0
    said = [f"  {error['count']} x {error['message']}" for error in top]
    return said + ([f"  {rest} x other messages (coinflip answers shows each sample's)"] if top and rest > 0 else [])


def lines(report: Report) -> list[str]:
    c, primary = report.get("counts", {}), report.get("primary", "accuracy")
    scored = report.get("evalscope", {}).get("scored_samples")  # EvalScope's arithmetic leaves errors out
    out = [
        f"samples {c.get('samples', '?')}{'' if scored is None else f' ({scored} scored)'}  "
        f"invalid {c.get('invalid', '?')} ({fmt(c.get('invalid_rate'), '.1%', '?')})"
        f"  errors {c.get('errors', '?')}  "
        + "  ".join(f"{k} {v}" for k, v in report.get("invalid_reasons", {}).items())
    ]
    out += _errors(report.get("errors_top", []), c.get("errors"))

    requests = checked_requests(report.get("requests"))
    if requests:
        out.append(requests_line(requests))
        out.extend(f"  hint: {hint}" for hint in requests.get("hints", []))
    repeats = report.get("repeat_metrics")
    if repeats:
        spread, k = repeats.get("per_repeat", {}).get(primary, {}), repeats.get("k", "?")
        out.append(
            f"repeats {k}: {primary} per repeat {value(spread.get('mean'))} +- {value(spread.get('std'))}, "
            f"majority vote {value(repeats.get('majority_vote', {}).get(primary))}, "
            f"pass@{k} {value(repeats.get('pass_at_k'))}, consistency {value(repeats.get('consistency'))}"
        )
    forced = report.get("forced")
    if forced:
        strict, again = report.get("metrics", {}).get("accuracy"), forced.get("metrics", {}).get("accuracy")
        first = "EvalScope's" if report.get("metric_compat") == "evalscope" else "strict"  # its own reading
        gap = f"{again - strict:+.4f}" if strict is not None and again is not None else "undefined"
        out.append(
            f"forced answers for {forced.get('asked', '?')} of {forced.get('invalid_strict', '?')} invalid: "
            f"{forced.get('recovered_correct', '?')} right, {forced.get('recovered_wrong', '?')} wrong, "
            f"{forced.get('still_invalid', '?')} still invalid. Accuracy {first} {value(strict)}, forced {value(again)} ({gap}): the "
            f"{first} score counts format and state tracking together, the forced one mostly state tracking"
        )
    timing = timing_line(report)
    if timing:
        out.append(timing)
    calibration = report.get("calibration", {})
    if calibration.get("available"):
        out.append(
            f"P(YES) on {calibration.get('samples', '?')} samples: AUROC {value(calibration.get('auroc'))}  "
            f"Brier {value(calibration.get('brier'))}  ECE {value(calibration.get('ece'))}"
        )
    base = report.get("baselines", {})
    if base:
        out.append(
            "baselines on the same questions: "
            + ", ".join(
                f"{name} f1 {value(v.get('f1_score'))} acc {value(v.get('accuracy'))}" for name, v in base.items()
            )
        )
    out.append(data_line(report))
    out.extend(report.get("notes", []))
    return out
