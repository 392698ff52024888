"""Inline SVG charts: no JavaScript library, no network, readable in any browser."""

from __future__ import annotations

from html import escape
from typing import Any


def bars(points: list[tuple[str, float, float, float]], height: int = 180, color: str = "#3558d6") -> str:
    """Vertical bars with interval whiskers; values in [0, 1]."""
    width = max(320, 46 * len(points) + 50)
    inner = height - 40
    slot = (width - 50) / max(1, len(points))
    parts = [f'<svg width="{width}" height="{height}" role="img">']
    for tick in (0, 0.5, 1):
        y = 10 + inner * (1 - tick)
        parts.append(
            f'<line x1="40" x2="{width}" y1="{y}" y2="{y}" stroke="#e2e5ea"/><text x="8" y="{y + 4}">{tick:.1f}</text>'
        )
    for i, (label, value, lo, hi) in enumerate(points):
        x = 45 + i * slot
        y = 10 + inner * (1 - value)
        parts.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{slot * 0.6:.1f}" height="{inner * value:.1f}" fill="{color}"><title>{escape(label)}: {value:.3f}</title></rect>'
        )
        cx = x + slot * 0.3
        parts.append(
            f'<line x1="{cx:.1f}" x2="{cx:.1f}" y1="{10 + inner * (1 - hi):.1f}" y2="{10 + inner * (1 - lo):.1f}" stroke="#222"/>'
        )
        parts.append(f'<text x="{x:.1f}" y="{height - 12}">{escape(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def histogram(values: list[float], label: str, bins: int = 20) -> str:
    if not values:
        return f"<p class='meta'>no {escape(label)} recorded</p>"
    lo, hi = min(values), max(values)
    step = (hi - lo) / bins or 1.0
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, int((v - lo) / step))] += 1
    top = max(counts)
    width, height = 340, 150
    bar = (width - 20) / bins
    parts = [f'<svg width="{width}" height="{height}" role="img">']
    for i, c in enumerate(counts):
        h = (height - 35) * c / top
        parts.append(
            f'<rect x="{10 + i * bar:.1f}" y="{height - 25 - h:.1f}" width="{bar - 1:.1f}" height="{h:.1f}" fill="#6b8afd"><title>{c}</title></rect>'
        )
    parts.append(
        f'<text x="10" y="{height - 8}">{lo:.3g}</text><text x="{width - 60}" y="{height - 8}">{hi:.3g} {escape(label)}</text></svg>'
    )
    return "".join(parts)


PAGE_STYLE = (
    "body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;padding:20px;"
    "max-width:1180px;color:#1d2330;background:#f6f7f9}h1{font-size:22px}h2{font-size:17px;margin-top:26px}"
    "table{border-collapse:collapse;background:#fff;border:1px solid #dde1e8}"
    "td,th{border-bottom:1px solid #e5e8ee;padding:5px 9px;text-align:left}td{font-variant-numeric:tabular-nums}"
    "svg{background:#fff;border:1px solid #dde1e8;border-radius:8px}svg text{font-size:11px;fill:#444}"
    ".meta{color:#5b6475;font-size:13px}a{color:#3558d6}"
)


def page(title: str, body: str) -> str:
    """A plain self-contained page for the smaller reports (compare, sweep); `title` is escaped here."""
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{escape(title)}</title>"
        f"<style>{PAGE_STYLE}</style></head><body>{body}</body></html>\n"
    )


def line_chart(
    points: list[tuple[float, float, float, float]], x_label: str, y_label: str, width: int = 640, height: int = 300
) -> str:
    """Values in [0, 1] against x, with interval whiskers; one marker per point."""
    if not points:
        return "<p>no points</p>"
    left, right, top, bottom = 50, 20, 15, 45
    xs = [p[0] for p in points]
    x_lo, x_hi = min(xs), max(xs)
    span = (x_hi - x_lo) or 1.0

    def sx(x: float) -> float:
        return left + (width - left - right) * (x - x_lo) / span

    def sy(y: float) -> float:
        return top + (height - top - bottom) * (1 - y)

    parts = [f'<svg width="{width}" height="{height}" role="img" aria-label="{escape(y_label)} by {escape(x_label)}">']
    for tick in (0, 0.25, 0.5, 0.75, 1):
        parts.append(
            f'<line x1="{left}" x2="{width - right}" y1="{sy(tick):.1f}" y2="{sy(tick):.1f}" stroke="#e2e5ea"/>'
            f'<text x="8" y="{sy(tick) + 4:.1f}">{tick:.2f}</text>'
        )
    path = " ".join(f"{'M' if i == 0 else 'L'}{sx(x):.1f},{sy(y):.1f}" for i, (x, y, _, _) in enumerate(points))
    parts.append(f'<path d="{path}" fill="none" stroke="#3558d6" stroke-width="2"/>')
    for x, y, lo, hi in points:
        parts.append(f'<line x1="{sx(x):.1f}" x2="{sx(x):.1f}" y1="{sy(hi):.1f}" y2="{sy(lo):.1f}" stroke="#222"/>')
        parts.append(
            f'<circle class="point" cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="4" fill="#3558d6"><title>{x:g}: {y:.3f}</title></circle>'
        )
        parts.append(f'<text x="{sx(x) - 4:.1f}" y="{height - 25}">{x:g}</text>')
    parts.append(f'<text x="{width / 2 - 40:.0f}" y="{height - 6}">{escape(x_label)}</text></svg>')
    return "".join(parts)


def reliability(bins: list[dict[str, Any]], width: int = 320, height: int = 220) -> str:
    """Share of YES targets in each P(YES) bin, against the diagonal a calibrated model follows."""
    left, bottom, top, right = 36, 28, 10, 10
    w, h = width - left - right, height - top - bottom

    def sx(x: float) -> float:
        return left + w * x

    def sy(y: float) -> float:
        return top + h * (1 - y)

    parts = [f'<svg width="{width}" height="{height}" role="img" aria-label="reliability diagram">']
    for tick in (0, 0.5, 1):
        parts.append(
            f'<line x1="{left}" x2="{width - right}" y1="{sy(tick):.1f}" y2="{sy(tick):.1f}" stroke="#e2e5ea"/>'
            f'<text x="4" y="{sy(tick) + 4:.1f}">{tick:.1f}</text><text x="{sx(tick) - 8:.1f}" y="{height - 8}">{tick:.1f}</text>'
        )
    for b in bins:
        if not b.get("samples") or b.get("yes_share") is None:
            continue
        x0, x1, share = sx(b["lo"]) + 1, sx(b["hi"]) - 1, b["yes_share"]
        parts.append(
            f'<rect class="bin" x="{x0:.1f}" y="{sy(share):.1f}" width="{x1 - x0:.1f}" height="{h * share:.1f}" fill="#3558d6" opacity="0.8">'
            f"<title>P(YES) {b['lo']:.1f}-{b['hi']:.1f}: {b['samples']} samples, {share:.0%} YES</title></rect>"
        )
    parts.append(
        f'<line x1="{sx(0):.1f}" y1="{sy(0):.1f}" x2="{sx(1):.1f}" y2="{sy(1):.1f}" stroke="#b3261e" stroke-dasharray="4 3"/>'
    )
    parts.append("</svg>")
    return "".join(parts)
