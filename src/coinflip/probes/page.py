"""probe.html (pages/templates/probe.html, autoescaped): the variants side by side with their 95% intervals,
the verdicts and the length curve, as plain SVG computed here; no script, nothing fetched."""

from __future__ import annotations

import shlex
from typing import Any

from ..pages.charts import BLUE
from ..pages.html import ends, render_template, span

ROW_H = 30
CHART_W, LEFT, RIGHT = 1000, 190, 190  # RIGHT: room for each row's numbers
CURVE_W, CURVE_H, PAD = 760, 260, 40

VIEW_NOTES = {
    "strict": "Accuracy is strict: an answer without a valid ANSWER line counts as wrong.",
    "forced": "Accuracy is the forced view: a reply without a valid answer counts by its forced answer.",
}


def render(result: dict[str, Any]) -> str:
    dataset = result["base"]["dataset"]
    where = dataset.get("id") or dataset.get("path") or dataset.get("source")
    label = f"{dataset.get('source')} {where} ({dataset.get('split')})"
    return render_template(
        "probe.html",
        r=result,
        base_label=label + (", coinflip's own generated set" if result["base"]["bundled"] else ""),
        resume=f"coinflip probe --use-cache {shlex.quote(str(result.get('directory')))}",  # to paste in a shell
        view_note=VIEW_NOTES.get(result.get("view", "strict"), ""),
        chart=variant_chart(result["variants"]),
        curve=length_curve(result["length"]["points"]),
        pts=lambda x: f"{x * 100:+.1f}",
        pval=lambda p: "< 0.001" if p < 0.001 else f"{p:.3f}",
    )


def variant_chart(variants: list[dict[str, Any]]) -> dict[str, Any]:
    """Rows of dots and interval bars on one accuracy axis from 0 to 1."""

    def x(value: float) -> float:
        return round(LEFT + (CHART_W - LEFT - RIGHT) * min(max(value, 0.0), 1.0), 1)

    rows = []
    for i, v in enumerate(variants):
        accuracy, (low, high) = v["metrics"]["accuracy"], _ends(v["intervals"]["accuracy"], v["metrics"]["accuracy"])
        drop = (v.get("paired") or {}).get("difference", 0.0)
        rows.append(
            {
                "name": v["name"],
                "title": v["title"],
                "y": 20 + i * ROW_H,
                "x": x(accuracy),
                "low": x(low),
                "high": x(high),
                "accuracy": f"{accuracy:.3f}",
                "interval": span(v["intervals"]["accuracy"]),
                "colour": "#b3261e" if drop < -0.05 else BLUE,
            }
        )
    return {
        "width": CHART_W,
        "height": 20 + len(variants) * ROW_H + 20,
        "left": LEFT,
        "right_label": RIGHT - 20,
        "rows": rows,
        "ticks": [{"x": x(t / 4), "label": f"{t / 4:.2f}"} for t in range(5)],
        "base_x": x(variants[0]["metrics"]["accuracy"] if variants else 0.0),
    }


def length_curve(points: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Accuracy over the number of people with its interval band and the always-yes line."""
    if not points:
        return None
    count = max(len(points) - 1, 1)

    def at(i: int, value: float) -> tuple[float, float]:
        x = PAD + (CURVE_W - PAD - 10) * i / count
        return round(x, 1), round(10 + (CURVE_H - PAD - 10) * (1 - min(max(value, 0.0), 1.0)), 1)

    def line(values: list[float], order: list[int] | None = None) -> str:
        return " ".join("{},{}".format(*at(i, values[i])) for i in order or range(len(values)))

    spans = [_ends(p["interval"], p["accuracy"]) for p in points]
    lows, highs = [low for low, _ in spans], [high for _, high in spans]
    return {
        "width": CURVE_W,
        "height": CURVE_H,
        "pad": PAD,
        "line": line([p["accuracy"] for p in points]),
        "band": line(highs) + " " + line(lows, list(reversed(range(len(points))))),
        "baseline": line([p["always_yes"] for p in points]),
        "points": [
            {"people": p["people"], "x": at(i, p["accuracy"])[0], "y": at(i, p["accuracy"])[1]}
            for i, p in enumerate(points)
        ],
        "ticks": [{"y": at(0, t / 4)[1], "label": f"{t / 4:.2f}"} for t in range(5)],
    }


def _ends(interval: list[float] | None, value: float) -> tuple[float, float]:
    """An interval's ends; none (nothing scored) is drawn as no bar at the value."""
    low, high = ends(interval)
    return (value, value) if low is None or high is None else (low, high)
