"""A self-contained HTML page per run: no CDN, no network, charts as inline SVG.

Everything a model or a user wrote is escaped: a reply holding <script> is shown as text and runs nothing.
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import storage_error
from ..scoring.metrics import METRICS
from .board import utf8
from .charts import bars, histogram, reliability
from .summary import value

if TYPE_CHECKING:
    from ..scoring.scorer import Scorer

STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
main{max-width:1180px;margin:0 auto;padding:20px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:26px 0 8px}
.meta{color:#5b6475;font-size:13px}.warn{background:#fde8e8;border:1px solid #f5b5b5;padding:8px 12px;border-radius:6px;margin:10px 0}
.note{background:#eef3fd;border:1px solid #c5d4f5;padding:8px 12px;border-radius:6px;margin:10px 0}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(160px,1fr));gap:10px;margin-top:14px}
.card{background:#fff;border:1px solid #dde1e8;border-radius:8px;padding:10px 12px}
.card b{display:block;font-size:24px}.card.primary{border:2px solid #3558d6}.card small{color:#5b6475}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(340px,1fr));gap:14px}
.panel{background:#fff;border:1px solid #dde1e8;border-radius:8px;padding:12px}
table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #e5e8ee;padding:5px 7px;text-align:left;vertical-align:top}
.cm td{text-align:center;font-size:16px}.samples td{font-size:12.5px}
pre{white-space:pre-wrap;word-break:break-word;margin:0;font:12px/1.4 ui-monospace,Menlo,Consolas,monospace;max-height:220px;overflow:auto}
.ok{color:#137333}.bad{color:#b3261e}.inv{color:#9a6700}
.filters button{margin:0 6px 6px 0;padding:4px 10px;border:1px solid #b9c0cc;border-radius:14px;background:#fff;cursor:pointer}
.filters button.on{background:#3558d6;color:#fff;border-color:#3558d6}
svg text{font-size:11px;fill:#444}
"""

SCRIPT = """
document.querySelectorAll('.filters button').forEach(function(b){b.addEventListener('click',function(){
 document.querySelectorAll('.filters button').forEach(function(x){x.classList.remove('on')});b.classList.add('on');
 var f=b.getAttribute('data-f');var n=0;
 document.querySelectorAll('tr.s').forEach(function(r){var show=f==='all'||r.classList.contains(f);r.style.display=show?'':'none';if(show)n++});
 document.getElementById('shown').textContent=n;});});
"""


def _cards(report: dict[str, Any], metrics: dict[str, Any], intervals: dict[str, Any], title: str = "") -> str:
    out = []
    for name in METRICS:
        pair = intervals.get(name)
        cls = "card primary" if name == report["primary"] else "card"
        shown = "95% -" if pair is None else f"95% {pair[0]:.3f} - {pair[1]:.3f}"
        out.append(
            f'<div class="{cls}"><small>{name}{" (primary)" if name == report["primary"] else ""}</small>'
            f"<b>{value(metrics[name])}</b><small>{shown}</small></div>"
        )
    head = f"<h2>{escape(title)}</h2>" if title else ""
    return head + '<div class="cards">' + "".join(out) + "</div>"


def _confusion(c: dict[str, Any]) -> str:
    return (
        '<table class="cm"><tr><th></th><th>pred YES</th><th>pred NO</th><th>invalid</th><th>error</th></tr>'
        f"<tr><th>target YES</th><td>{c['tp']}</td><td>{c['fn']}</td><td>{c['invalid_on_yes']}</td><td>{c['errors_on_yes']}</td></tr>"
        f"<tr><th>target NO</th><td>{c['fp']}</td><td>{c['tn']}</td><td>{c['invalid_on_no']}</td><td>{c['errors_on_no']}</td></tr></table>"
        f'<p class="meta">invalid answers {c["invalid"]} ({c["invalid_rate"]:.1%}), errors {c["errors"]}</p>'
    )


def _kind(r: dict[str, Any]) -> str:
    return "error" if r["error"] else "invalid" if r["invalid"] else "correct" if r["correct"] else "wrong"


def _rows(samples: list[tuple[dict[str, Any], dict[str, Any]]]) -> str:
    out = []
    for p, r in sorted(samples, key=lambda pr: (pr[1]["correct"], pr[1]["id"], pr[1]["repeat"])):
        kind = _kind(r)
        classes = f"s {kind}" + ("" if r["correct"] else " notok") + (f" r-{r['reason']}" if r.get("reason") else "")
        mark = {"correct": "ok", "wrong": "bad", "invalid": "inv", "error": "bad"}[kind]
        reply = p.get("reply") if p.get("error") is None else f"[error] {p.get('error')}"
        forced = p.get("forced") if isinstance(p.get("forced"), dict) else None
        forced_cell = "" if forced is None else escape(str(forced.get("reply") or forced.get("error") or ""))
        p_yes = "" if r.get("p_yes") is None else f"{r['p_yes']:.3f}"
        sample = f"{r['id']}" + (f".{r['repeat']}" if r["repeat"] else "")
        out.append(
            f'<tr class="{classes}"><td>{sample}</td><td>{r["people"]}</td>'
            f"<td><details><summary>{escape(str(p.get('question', '')))}</summary><pre>{escape(str(p.get('prompt', '')))}</pre></details></td>"
            f"<td><pre>{escape(str(reply or ''))}</pre></td><td>{escape(r['extracted'] or '—')}</td><td>{r['target']}</td>"
            f'<td class="{mark}">{kind}{"<br><small>" + escape(r["reason"]) + "</small>" if r.get("reason") else ""}</td>'
            f"<td><pre>{forced_cell}</pre>{escape(r['forced']) if r.get('forced') else ''}</td><td>{p_yes}</td></tr>"
        )
    return "".join(out)


def _filters(report: dict[str, Any], shown: int) -> str:
    buttons = [
        ("all", "all"),
        ("notok", "not correct"),
        ("wrong", "wrong"),
        ("invalid", "invalid"),
        ("error", "errored"),
    ]
    buttons += [(f"r-{reason}", f"invalid: {reason} ({n})") for reason, n in report.get("invalid_reasons", {}).items()]
    html = "".join(
        f'<button{" class=on" if key == "all" else ""} data-f="{escape(key)}">{escape(label)}</button>'
        for key, label in buttons
    )
    return f'<div class="filters">{html}<span class="meta">showing <span id="shown">{shown}</span> of {report["counts"]["samples"]}</span></div>'


def _reasons(report: dict[str, Any]) -> str:
    reasons = report.get("invalid_reasons", {})
    finish = report.get("usage", {}).get("finish_reasons", {})
    rows = (
        "".join(f"<tr><td>{escape(k)}</td><td>{v}</td></tr>" for k, v in reasons.items())
        or "<tr><td>none</td><td>0</td></tr>"
    )
    finish_rows = "".join(f"<tr><td>{escape(str(k))}</td><td>{v}</td></tr>" for k, v in finish.items())
    errors = "".join(
        f"<tr><td>{e['count']}</td><td>{escape(e['message'])}</td></tr>" for e in report.get("errors_top", [])
    )
    out = f'<div class="panel" id="reasons"><h2>Why answers were invalid</h2><table>{rows}</table>'
    out += f"<h2>finish_reason</h2><table>{finish_rows}</table>"
    if errors:
        out += f"<h2>Most common errors</h2><table>{errors}</table>"
    return out + "</div>"


def _repeats(report: dict[str, Any]) -> str:
    r = report.get("repeat_metrics")
    if not r:
        return ""
    rows = "".join(
        f"<tr><td>{name}</td><td>{value(s['mean'])}</td><td>{value(s['std'])}</td>"
        f"<td>{' '.join(value(v) for v in s['values'])}</td><td>{value(r['majority_vote'][name])}</td></tr>"
        for name, s in r["per_repeat"].items()
    )
    return (
        f'<div class="panel" id="repeats"><h2>{r["k"]} repeats per question</h2>'
        "<table><tr><th>metric</th><th>mean per repeat</th><th>std</th><th>each repeat</th><th>majority vote</th></tr>"
        f"{rows}</table><p class='meta'>pass@{r['k']} {value(r['pass_at_k'])}, consistency {value(r['consistency'])}; "
        "intervals above resample questions with all their repeats</p></div>"
    )


def _forced(report: dict[str, Any]) -> str:
    f = report.get("forced")
    if not f:
        return ""
    return (
        '<div class="panel" id="forced"><h2>Forced answers</h2>'
        f"<p>{f['asked']} of {f['invalid_strict']} invalid answers were asked again for only the answer line: "
        f"{f['recovered_correct']} recovered correct, {f['recovered_wrong']} recovered wrong, {f['still_invalid']} still invalid.</p>"
        "<p class='meta'>Strict: the specification's score. Forced: each strict answer where valid, the forced one where not; "
        "the gap between them is format, the forced score is state tracking.</p></div>"
    )


def _calibration(report: dict[str, Any]) -> str:
    c = report.get("calibration") or {}
    if not c.get("available"):
        return f'<div class="panel" id="calibration"><h2>Answer probabilities</h2><p class="meta">{escape(c.get("reason", "not available"))}</p></div>'
    return (
        '<div class="panel" id="calibration"><h2>Answer probabilities: P(YES)</h2>'
        f"<p>AUROC {value(c.get('auroc'))}, Brier {value(c.get('brier'))}, ECE {value(c.get('ece'))} "
        f"on {c['samples']} samples ({c['coverage']:.0%})</p>"
        "<p class='meta'>reliability: the share of YES targets in each P(YES) bin; a calibrated model follows "
        f"the dashed diagonal</p>{reliability(c['bins'])}</div>"
    )


def render(
    report: dict[str, Any], samples: list[tuple[dict[str, Any], dict[str, Any]]], latency: Any, tokens: Any
) -> str:
    """`samples`: (prediction, review) pairs to list; `latency` and `tokens`: values for the histograms."""
    data = report["dataset"]
    c = report["counts"]
    label = "INCOMPLETE" if not report["complete"] else "WARNING"
    warnings = "".join(f'<div class="warn"><b>{label}:</b> {escape(w)}</div>' for w in report["warnings"])
    notes = "".join(f'<div class="note">{escape(n)}</div>' for n in report.get("notes", []))
    people = [(f"{k}p", v["accuracy"], *v["interval"]) for k, v in report["by_people"].items()]
    true_yes = c["target_yes"] / c["samples"] if c["samples"] else 0.0
    pair = report["intervals"]["yes_ratio"] or [0.0, 0.0]
    yes_chart = bars(
        [("yes_ratio", report["metrics"]["yes_ratio"] or 0.0, *pair), ("true YES", true_yes, true_yes, true_yes)],
        color="#8a63d2",
    )
    rows, shown = _rows(samples), len(samples)
    source = escape(str(data.get("id") or data.get("path") or data.get("source")))
    template = report.get("template", {})
    subset = report.get("subset", {})
    prov = report.get("provenance", {})
    forced = report.get("forced")
    cards = _cards(
        report, report["metrics"], report["intervals"], "Strict (the specification's score)" if forced else ""
    )
    if forced:
        cards += _cards(report, forced["metrics"], forced["intervals"], "Forced (invalid answers asked again)")
    return f"""<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>coin_flip - {escape(report["model"])}</title><style>{STYLE}</style></head><body><main>
<h1>CoinFlip - {escape(report["model"])}</h1>
<div class="meta">run {escape(report["run"])} | data {escape(data["source"])}: {source} ({escape(data["split"])}, {data["rows"]} rows, sha256 {escape(data["sha256"][:16])}) |
subset {escape(str(subset.get("mode", "all")))} {subset.get("count", c["samples"])} of {subset.get("of", c["samples"])} | template {escape(str(template.get("name", "default")))} ({escape(str(template.get("sha256", ""))[:12])}) |
few-shot {report["few_shot_num"]} | repeats {report.get("repeats", 1)} | arithmetic {escape(report["metric_compat"])} | extraction {escape(report["extraction"])} |
coinflip {escape(str(prov.get("coinflip_version", "")))}, Python {escape(str(prov.get("python", "")))}</div>
{warnings}{notes}{cards}
<div class="grid">
<div class="panel"><h2>Confusion matrix</h2>{_confusion(c)}</div>
<div class="panel" id="by-people"><h2>Accuracy by number of people</h2>{bars(people)}</div>
<div class="panel"><h2>yes_ratio against the true YES share</h2>{yes_chart}</div>
{_reasons(report)}{_repeats(report)}{_forced(report)}{_calibration(report)}
<div class="panel"><h2>Latency (s)</h2>{histogram(list(latency), "s")}</div>
<div class="panel"><h2>Completion tokens</h2>{histogram(list(tokens), "tokens")}</div>
</div>
<h2>Samples</h2>
{_filters(report, shown)}
<table class="samples"><thead><tr><th>id</th><th>people</th><th>question / prompt</th><th>reply</th><th>extracted</th><th>target</th><th>result</th><th>forced</th><th>P(YES)</th></tr></thead>
<tbody>{rows}</tbody></table>
</main><script>{SCRIPT}</script></body></html>
"""


def write_html(path: Path, report: dict[str, Any], scorer: Scorer) -> None:
    page = render(report, scorer.showcase.rows(), scorer.usage.latency, scorer.usage.completion)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(utf8(page))  # a lone surrogate in a reply must not fail the run
    except OSError as exc:
        raise storage_error(path, exc) from None
