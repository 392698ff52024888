"""A self-contained HTML page per run (templates/run.html): no network, charts as inline SVG. The
report comes through scoring/schema.py `checked`: each field has its declared type or is missing."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import KEPT
from ..scoring.metrics import METRICS
from ..scoring.schema import Counts, Forced, People, Report, checked
from . import charts
from .board import details, write_whole
from .html import ends, fmt, number, stream_template, warning_label

if TYPE_CHECKING:
    from ..scoring.scorer import Scorer

STRICT, FORCED = "strict", "forced"
FORCED_COUNTS = ("asked", "invalid_strict", "recovered_correct", "recovered_wrong", "still_invalid")


def _key(r: dict[str, Any], name: str) -> float:
    return number(r.get(name)) or 0.0


def _kind(r: dict[str, Any]) -> str:
    return "error" if r.get("error") else "invalid" if r.get("invalid") else "correct" if r.get("correct") else "wrong"


def _forcing(r: dict[str, Any]) -> str:
    """What the forced answer did for an invalid sample: recovered, wrong, still invalid, or ''."""
    said = r.get("forced")
    if not r.get("invalid") or not isinstance(said, str) or said in ("", "none"):
        return ""
    if said == r.get("target"):
        return "recovered"
    return "forced-wrong" if said in ("YES", "NO") else "forced-invalid"


RESULT_LABELS = {
    "recovered": "recovered by forcing",
    "forced-wrong": "forced answer wrong",
    "forced-invalid": "still invalid when forced",
}


def _sample(p: dict[str, Any], r: dict[str, Any]) -> dict[str, Any]:
    kind, forcing = _kind(r), _forcing(r)
    reason = r.get("invalid_reason") or r.get("reason") or ""
    classes = ["s", kind, "" if r.get("correct") else "notok", f"r-{reason}" if reason else "", forcing]
    forced = p.get("forced") if isinstance(p.get("forced"), dict) else None
    repeat = r.get("repeat")
    return {
        "classes": " ".join(str(c) for c in classes if c),
        "id": f"{r.get('id')}" + (f".{repeat}" if repeat else ""),
        "people": r.get("people"),
        "question": p.get("question", ""),
        "prompt": p.get("prompt", ""),
        "reply": p.get("reply") if p.get("error") is None else f"[error] {p.get('error')}",
        "extracted": r.get("extracted") or "—",
        "target": r.get("target"),
        "kind": kind,
        "mark": {"correct": "ok", "wrong": "bad", "invalid": "inv", "error": "bad"}[kind],
        "reason": reason,
        "forcing": RESULT_LABELS.get(forcing, ""),
        "forcing_mark": "rec" if forcing == "recovered" else "bad",
        "forced_reply": None if forced is None else forced.get("reply") or forced.get("error") or "",
        "forced_error": forced is not None and forced.get("error") is not None and not forced.get("reply"),
        "forced_verdict": r.get("forced") if isinstance(r.get("forced"), str) and r.get("forced") != "none" else "",
        "p_yes": fmt(r.get("p_yes"), ".3f", ""),
    }


def _filters(report: Report, samples: list[dict[str, Any]]) -> list[tuple[str, str]]:
    buttons = [
        ("all", "all"),
        ("notok", "not correct"),
        ("wrong", "wrong"),
        ("invalid", "invalid"),
        ("error", "errored"),
    ]
    if report.get("forced"):
        n = sum(1 for s in samples if "recovered" in s["classes"].split())
        buttons.append(("recovered", f"recovered by forcing ({n})"))
    buttons += [(f"r-{reason}", f"invalid: {reason} ({n})") for reason, n in report.get("invalid_reasons", {}).items()]
    return buttons


def _by_people(block: dict[str, People]) -> list[charts.Point]:
    return [(f"{k}p", v.get("accuracy"), *ends(v.get("interval"))) for k, v in block.items()]


def _people_chart(report: Report) -> dict[str, Any]:
    series = [(STRICT, charts.BLUE, _by_people(report.get("by_people", {})))]
    forced = report.get("forced", {}).get("by_people")
    if forced:
        strict_keys = [p[0] for p in series[0][2]]
        points = {p[0]: p for p in _by_people(forced)}
        series.append((FORCED, charts.ORANGE, [points.get(k, (k, None, None, None)) for k in strict_keys]))
    return charts.bars(series, title="accuracy by number of people")


def _yes_chart(report: Report) -> dict[str, Any]:
    share = report.get("baselines", {}).get("always-yes", {}).get("accuracy")  # of the samples yes_ratio counts
    true_yes = share if share is not None and 0 <= share <= 1 else None  # a share: never past 1

    def ratio(name: str, block: Report | Forced) -> tuple[str, str, list[charts.Point]]:
        pair = ends(block.get("intervals", {}).get("yes_ratio"))
        color = "#8a63d2" if name == STRICT else charts.ORANGE
        return name, color, [("yes_ratio", block.get("metrics", {}).get("yes_ratio"), *pair)]

    points = [ratio(STRICT, report)] + ([ratio(FORCED, report["forced"])] if report.get("forced") else [])
    points.append(("true YES share", "#7a8291", [("yes_ratio", true_yes, None, None)]))
    return charts.bars(points, title="yes_ratio")


def context(
    report: Report, samples: list[tuple[dict[str, Any], dict[str, Any]]], latency: Any, tokens: Any
) -> dict[str, Any]:
    """The report itself goes to the page (templates/run.html words and formats it), with what is computed here."""
    ordered = sorted(samples, key=lambda pr: (bool(pr[1].get("correct")), _key(pr[1], "id"), _key(pr[1], "repeat")))
    rows = [_sample(p, r) for p, r in ordered]
    forced, counts = report.get("forced"), report.get("counts", {})
    return {
        "report": report,
        "warnings": [(warning_label(report, w), w) for w in report.get("warnings", [])],
        "metrics": METRICS,
        "counts": {k: fmt(counts.get(k), "d", "?") for k in Counts.__annotations__},
        "people_chart": _people_chart(report),
        "yes_chart": _yes_chart(report),
        "finish": _most(report.get("usage", {}).get("finish_reasons", {})),
        "extra": _extra(report),
        "forced": {k: fmt(forced.get(k), "d", "?") for k in FORCED_COUNTS} if forced else None,
        "reliability": charts.reliability(report.get("calibration", {}).get("bins", [])),
        "latency": charts.histogram(list(latency), "s"),
        "tokens": charts.histogram(list(tokens), "tokens"),
        "filters": _filters(report, rows),
        "samples": rows,
    }


def _most(counts: Mapping[str, Any], keep: int = 10) -> list[tuple[str, Any]]:
    """The `keep` largest, then one line for the rest: a server may send a new finish_reason per reply."""
    ranked = sorted(counts.items(), key=lambda kv: -(number(kv[1]) or 0.0))
    rest = ranked[keep:]
    total = sum(number(n) or 0.0 for _, n in rest)
    return ranked[:keep] + ([(f"{len(rest):,} others", fmt(total, "d"))] if rest else [])


def _extra(report: Report) -> list[list[str]]:
    """Fields other parts of coinflip add (requests, cost...), one line each: a new one shows unchanged here."""
    known = {
        "benchmark", "model", "served_model", "run", "complete", "warnings", "notes", "metric_compat", "primary",
        "metrics", "intervals", "undefined", "counts", "by_people", "baselines", "invalid_reasons", "errors_top",
        "dataset", "subset", "template", "few_shot_num", "repeats", "api_mode", "generation_config", "extraction",
        "usage", "provenance", "repeat_metrics", "forced", "calibration", "errors_ignored", "evalscope",
    }  # fmt: skip
    out = details({k: v for k, v in report.items() if k not in known})
    for key, value in report.get("usage", {}).items():
        if key not in ("finish_reasons", "latency_s", "completion_tokens") and not isinstance(value, (dict, list)):
            out.append([f"usage.{key}", fmt(value, ".6g", "—")])
    return out


def render(
    report: Mapping[str, Any], samples: list[tuple[dict[str, Any], dict[str, Any]]], latency: Any, tokens: Any
) -> str:
    """`samples`: (prediction, review) pairs to list; `latency`, `tokens`: values for the histograms."""
    return "".join(pieces(report, samples, latency, tokens))


def pieces(
    report: Mapping[str, Any], samples: list[tuple[dict[str, Any], dict[str, Any]]], latency: Any, tokens: Any
) -> Iterator[str]:
    return stream_template("run.html", **context(checked(report), samples, latency, tokens))


def write_html(path: Path, report: Mapping[str, Any], scorer: Scorer) -> None:
    page = pieces(report, scorer.showcase.rows(), scorer.usage.latency, scorer.usage.completion)
    write_whole(path, page, KEPT)  # never through a link; a lone surrogate in a reply must not fail the run
