"""Inline SVG charts: values become geometry here, templates/charts.html draws it. A value that is
not a finite number (a hand-edited report) is drawn as missing."""

from __future__ import annotations

from typing import Any

from .html import number

Point = tuple[str, Any, Any, Any]  # label, value, interval low, interval high; values in [0, 1]
BLUE, ORANGE = "#3558d6", "#e08a00"


def _unit(value: Any) -> float:
    v = number(value)
    return 0.0 if v is None else min(1.0, max(0.0, v))


def bars(series: list[tuple[str, str, list[Point]]], height: int = 180, title: str = "") -> dict[str, Any]:
    """Bars with interval whiskers; `series`: (name, colour, points), all with the same labels in order."""
    labels = [p[0] for p in series[0][2]] if series else []
    per = max(1, len(series))
    width = max(320, (30 * per + 16) * len(labels) + 50)
    inner = height - 40
    slot = (width - 50) / max(1, len(labels))
    bar = slot * 0.7 / per

    def top(value: Any) -> float:
        return round(10 + inner * (1 - _unit(value)), 1)

    drawn = []
    for s, (name, color, points) in enumerate(series):
        for i, (label, value, lo, hi) in enumerate(points):
            v, x = number(value), 45 + i * slot + s * bar
            whisker = (top(hi), top(lo)) if number(lo) is not None and number(hi) is not None else None
            tip = f"{label}{' ' + name if len(series) > 1 else ''}: " + ("—" if v is None else f"{v:.3f}")
            drawn.append(
                {
                    "series": f"s{s}",
                    "x": round(x, 1),
                    "y": top(v),
                    "w": round(bar * 0.9, 1),
                    "h": round(inner * _unit(v), 1),
                    "color": color,
                    "tip": tip,
                    "cx": round(x + bar * 0.45, 1),
                    "whisker": whisker,
                }
            )
    return {
        "title": title,
        "width": width,
        "height": height,
        "ticks": [{"y": top(t), "label": f"{t:.1f}"} for t in (0, 0.5, 1)],
        "bars": drawn,
        "labels": [{"x": round(45 + i * slot, 1), "text": label} for i, label in enumerate(labels)],
        "legend": [(name, color) for name, color, _ in series] if len(series) > 1 else [],
    }


def histogram(values: list[float], unit: str, bins: int = 20) -> dict[str, Any]:
    finite = [v for v in (number(x) for x in values) if v is not None]
    width, height = 340, 150
    if not finite:
        return {"bars": [], "unit": unit, "width": width, "height": height}
    lo, hi = min(finite), max(finite)
    step = (hi - lo) / bins or 1.0
    counts = [0] * bins
    for v in finite:
        counts[min(bins - 1, int((v - lo) / step))] += 1
    top = max(counts)
    bar = (width - 20) / bins
    drawn = []
    for i, c in enumerate(counts):
        h = (height - 35) * c / top
        drawn.append(
            {
                "x": round(10 + i * bar, 1),
                "y": round(height - 25 - h, 1),
                "w": round(bar - 1, 1),
                "h": round(h, 1),
                "count": c,
            }
        )
    return {"bars": drawn, "unit": unit, "width": width, "height": height, "lo": f"{lo:.3g}", "hi": f"{hi:.3g}"}


def reliability(bins: Any, width: int = 340, height: int = 230) -> dict[str, Any]:
    """Share of YES targets per P(YES) bin, against the diagonal a calibrated model follows."""
    left, bottom, top, right = 36, 28, 18, 10
    w, h = width - left - right, height - top - bottom

    def sx(x: float) -> float:
        return round(left + w * x, 1)

    def sy(y: float) -> float:
        return round(top + h * (1 - y), 1)

    drawn = []
    for b in bins if isinstance(bins, list) else []:
        if not isinstance(b, dict):
            continue
        samples, share, lo, hi = (number(b.get(k)) for k in ("samples", "yes_share", "lo", "hi"))
        if not samples or share is None or lo is None or hi is None:
            continue
        share = _unit(share)
        x0, x1 = sx(_unit(lo)) + 1, sx(_unit(hi)) - 1
        drawn.append(
            {
                "x": x0,
                "y": sy(share),
                "w": round(max(0.0, x1 - x0), 1),
                "h": round(h * share, 1),
                "cx": round((x0 + x1) / 2, 1),
                "label_y": round(sy(share) - 3, 1),
                "samples": f"{samples:.0f}",
                "tip": f"P(YES) {lo:.1f}-{hi:.1f}: {samples:.0f} samples, {share:.0%} YES",
            }
        )
    return {
        "width": width,
        "height": height,
        "left": left,
        "right": right,
        "ticks": [{"y": sy(t), "x": sx(t), "label": f"{t:.1f}"} for t in (0, 0.5, 1)],
        "bins": drawn,
        "x0": sx(0),
        "y0": sy(0),
        "x1": sx(1),
        "y1": sy(1),
    }
