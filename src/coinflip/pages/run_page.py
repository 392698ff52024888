"""A self-contained HTML page per run: no CDN, no network, charts as inline SVG.

The page is templates/run.html, rendered with autoescape: a reply holding <script>, or a config
value someone edited into markup, is shown as text and runs nothing. This module only decides
what to show; it reads the report as it would read any file (a value of the wrong type is
shown as written, never trusted as a number).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import storage_error
from ..scoring.metrics import METRICS
from . import charts
from .board import dig, mapping, utf8
from .html import fmt, number, render_template

if TYPE_CHECKING:
    from ..scoring.scorer import Scorer

STRICT, FORCED = "strict", "forced"


def _cards(report: Mapping[str, Any], block: Mapping[str, Any]) -> list[dict[str, Any]]:
    out = []
    for name in METRICS:
        pair = dig(block, "intervals", name)
        lo, hi = (pair + [None, None])[:2] if isinstance(pair, list) else (None, None)
        out.append(
            {
                "name": name,
                "primary": name == report.get("primary"),
                "value": fmt(dig(block, "metrics", name)),
                "interval": "95% -" if number(lo) is None or number(hi) is None else f"95% {lo:.3f} - {hi:.3f}",
            }
        )
    return out


def _key(r: dict[str, Any], name: str) -> float:
    return number(r.get(name)) or 0.0


def _kind(r: dict[str, Any]) -> str:
    return "error" if r.get("error") else "invalid" if r.get("invalid") else "correct" if r.get("correct") else "wrong"


def _forcing(r: dict[str, Any]) -> str:
    """What the forced answer did for an invalid sample: recovered (right), wrong, still invalid, or ''."""
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
    classes = ["s", kind] + ([] if r.get("correct") else ["notok"])
    reason = r.get("invalid_reason") or r.get("reason") or ""
    classes += [f"r-{reason}"] if reason else []
    classes += [forcing] if forcing else []
    forced = p.get("forced") if isinstance(p.get("forced"), dict) else None
    repeat = r.get("repeat")
    return {
        "classes": " ".join(str(c) for c in classes),
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


def _filters(report: Mapping[str, Any], samples: list[dict[str, Any]]) -> list[tuple[str, str]]:
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
    reasons = mapping(report.get("invalid_reasons"))
    buttons += [(f"r-{reason}", f"invalid: {reason} ({fmt(n, 'd')})") for reason, n in reasons.items()]
    return buttons


def _by_people(block: Any) -> list[charts.Point]:
    out = []
    for k, v in mapping(block).items():
        pair = dig(v, "interval")
        lo, hi = (pair + [None, None])[:2] if isinstance(pair, list) else (None, None)
        out.append((f"{k}p", dig(v, "accuracy"), lo, hi))
    return out


def _people_chart(report: Mapping[str, Any]) -> dict[str, Any]:
    series = [(STRICT, charts.BLUE, _by_people(report.get("by_people")))]
    forced = dig(report, "forced", "by_people")
    if isinstance(forced, dict) and forced:
        strict_keys = [p[0] for p in series[0][2]]
        points = {p[0]: p for p in _by_people(forced)}
        series.append((FORCED, charts.ORANGE, [points.get(k, (k, None, None, None)) for k in strict_keys]))
    return charts.bars(series, title="accuracy by number of people")


def _yes_chart(report: Mapping[str, Any]) -> dict[str, Any]:
    counts = mapping(report.get("counts"))
    samples, target_yes = number(counts.get("samples")), number(counts.get("target_yes"))
    true_yes = target_yes / samples if samples and target_yes is not None else None
    points: list[tuple[str, str, list[charts.Point]]] = []

    def ratio(block: Any, name: str) -> tuple[str, str, list[charts.Point]]:
        pair = dig(block, "intervals", "yes_ratio")
        lo, hi = (pair + [None, None])[:2] if isinstance(pair, list) else (None, None)
        return (
            name,
            "#8a63d2" if name == STRICT else charts.ORANGE,
            [("yes_ratio", dig(block, "metrics", "yes_ratio"), lo, hi)],
        )

    points.append(ratio(report, STRICT))
    if report.get("forced"):
        points.append(ratio(report.get("forced"), FORCED))
    chart = charts.bars(
        points + [("true YES share", "#7a8291", [("yes_ratio", true_yes, None, None)])], title="yes_ratio"
    )
    return chart


def _calibration(report: Mapping[str, Any]) -> dict[str, Any]:
    c = mapping(report.get("calibration"))
    if not c.get("available"):
        return {"available": False, "reason": c.get("reason", "not available")}
    coverage = number(c.get("coverage"))
    return {
        "available": True,
        "auroc": fmt(c.get("auroc")),
        "brier": fmt(c.get("brier")),
        "ece": fmt(c.get("ece")),
        "samples": fmt(c.get("samples"), "d"),
        "coverage": fmt(coverage, ".0%", "?"),
        "chart": charts.reliability(c.get("bins")),
    }


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [] if value is None else [value]


def _repeats(report: Mapping[str, Any]) -> dict[str, Any] | None:
    r = report.get("repeat_metrics")
    if not isinstance(r, dict):
        return None
    rows = [
        {
            "name": name,
            "mean": fmt(dig(s, "mean")),
            "std": fmt(dig(s, "std")),
            "each": " ".join(fmt(v) for v in _listed(dig(s, "values"))),
            "majority": fmt(dig(r, "majority_vote", name)),
        }
        for name, s in mapping(r.get("per_repeat")).items()
    ]
    return {
        "k": r.get("k"),
        "rows": rows,
        "pass_at_k": fmt(r.get("pass_at_k")),
        "consistency": fmt(r.get("consistency")),
    }


def _meta(report: Mapping[str, Any]) -> list[str]:
    """The settings line under the title, one item each."""
    data, c = mapping(report.get("dataset")), mapping(report.get("counts"))
    subset, template, prov = (
        mapping(report.get("subset")),
        mapping(report.get("template")),
        mapping(report.get("provenance")),
    )
    source = data.get("id") or data.get("path") or data.get("source")
    sha = data.get("sha256")
    return [
        f"run {report.get('run')}",
        f"data {data.get('source')}: {source} ({data.get('split')}, {fmt(data.get('rows'), 'd', '?')} rows, "
        f"sha256 {str(sha)[:16] if sha else '?'})",
        f"subset {subset.get('mode', 'all')} {fmt(subset.get('count', c.get('samples')), 'd', '?')} of "
        f"{fmt(subset.get('of', c.get('samples')), 'd', '?')}",
        f"template {template.get('name', 'default')} ({str(template.get('sha256', ''))[:12]})",
        f"few-shot {fmt(report.get('few_shot_num'), 'd', '0')}",
        f"repeats {fmt(report.get('repeats', 1), 'd', '1')}",
        f"arithmetic {report.get('metric_compat')}",
        f"extraction {report.get('extraction')}",
        f"coinflip {prov.get('coinflip_version', '')}, Python {prov.get('python', '')}",
    ] + (
        [f"started {prov['created']}" + (f", resumed {prov['resumed']}" if prov.get("resumed") else "")]
        if prov.get("created")
        else []
    )


def context(
    report: Mapping[str, Any], samples: list[tuple[dict[str, Any], dict[str, Any]]], latency: Any, tokens: Any
) -> dict[str, Any]:
    """Everything the template shows, computed from the report and the listed samples."""
    ordered = sorted(samples, key=lambda pr: (bool(pr[1].get("correct")), _key(pr[1], "id"), _key(pr[1], "repeat")))
    rows = [_sample(p, r) for p, r in ordered]
    forced = mapping(report.get("forced"))
    cards = [{"title": "Strict (the specification's score)" if forced else "", "cards": _cards(report, report)}]
    if forced:
        cards.append({"title": "Forced (invalid answers asked again)", "cards": _cards(report, forced)})
    counts = mapping(report.get("counts"))
    usage = mapping(report.get("usage"))
    return {
        "model": report.get("model"),
        "complete": report.get("complete") is not False,
        "warnings": [w for w in report.get("warnings") or []],
        "notes": [n for n in report.get("notes") or []],
        "meta": _meta(report),
        "card_groups": cards,
        "counts": counts,
        "invalid_rate": fmt(counts.get("invalid_rate"), ".1%", "?"),
        "people_chart": _people_chart(report),
        "yes_chart": _yes_chart(report),
        "reasons": list(mapping(report.get("invalid_reasons")).items()),
        "finish": list(mapping(usage.get("finish_reasons")).items()),
        "errors_top": [e for e in report.get("errors_top") or [] if isinstance(e, dict)],
        "extra": _extra(report),
        "repeats": _repeats(report),
        "forced": forced or None,
        "calibration": _calibration(report),
        "latency": charts.histogram(list(latency), "s"),
        "tokens": charts.histogram(list(tokens), "tokens"),
        "filters": _filters(report, rows),
        "samples": rows,
        "total": counts.get("samples"),
    }


def _extra(report: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Report fields other parts of coinflip add (requests, retries, tokens, cost): one line each
    in the "More about this run" panel, whatever they hold, so a new field shows without a
    change here."""
    known = {
        "benchmark", "model", "served_model", "run", "complete", "warnings", "notes", "metric_compat", "primary",
        "metrics", "intervals", "undefined", "counts", "by_people", "baselines", "invalid_reasons", "errors_top",
        "dataset", "subset", "template", "few_shot_num", "repeats", "api_mode", "generation_config", "extraction",
        "usage", "provenance", "repeat_metrics", "forced", "calibration", "errors_ignored", "evalscope",
    }  # fmt: skip
    from .board import details

    out = [(k, v) for k, v in details({k: v for k, v in report.items() if k not in known})]
    for key, value in mapping(report.get("usage")).items():
        if key not in ("finish_reasons", "latency_s", "completion_tokens") and not isinstance(value, (dict, list)):
            out.append((f"usage.{key}", fmt(value, ".6g", "—")))
    return [(str(k), str(v)) for k, v in out]


def render(
    report: Mapping[str, Any], samples: list[tuple[dict[str, Any], dict[str, Any]]], latency: Any, tokens: Any
) -> str:
    """`samples`: (prediction, review) pairs to list; `latency` and `tokens`: values for the histograms."""
    return render_template("run.html", **context(report, samples, latency, tokens))


def write_html(path: Path, report: Mapping[str, Any], scorer: Scorer) -> None:
    page = render(report, scorer.showcase.rows(), scorer.usage.latency, scorer.usage.completion)
    from ..rundir import replacing

    try:
        with replacing(path) as handle:  # never written through a link or into a FIFO
            handle.write(utf8(page))  # a lone surrogate in a reply must not fail the run
    except OSError as exc:
        raise storage_error(path, exc) from None
