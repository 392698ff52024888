"""A self-contained HTML page per run: no CDN, no network, charts as inline SVG.

Everything a model wrote is escaped: a reply holding <script> is shown as text and runs nothing.
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

from ..scoring.metrics import METRICS
from .charts import bars, histogram
from .board import utf8

STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
main{max-width:1180px;margin:0 auto;padding:20px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:26px 0 8px}
.meta{color:#5b6475;font-size:13px}.warn{background:#fde8e8;border:1px solid #f5b5b5;padding:8px 12px;border-radius:6px;margin:10px 0}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(160px,1fr));gap:10px;margin-top:14px}
.card{background:#fff;border:1px solid #dde1e8;border-radius:8px;padding:10px 12px}
.card b{display:block;font-size:24px}.card.primary{border:2px solid #3558d6}.card small{color:#5b6475}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(340px,1fr));gap:14px}
.panel{background:#fff;border:1px solid #dde1e8;border-radius:8px;padding:12px}
table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #e5e8ee;padding:5px 7px;text-align:left;vertical-align:top}
.cm td{text-align:center;font-size:16px}.samples td{font-size:12.5px}
pre{white-space:pre-wrap;word-break:break-word;margin:0;font:12px/1.4 ui-monospace,Menlo,Consolas,monospace;max-height:220px;overflow:auto}
.ok{color:#137333}.bad{color:#b3261e}.inv{color:#9a6700}
.filters button{margin-right:6px;padding:4px 10px;border:1px solid #b9c0cc;border-radius:14px;background:#fff;cursor:pointer}
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


def _pct(x: float) -> str:
    return f"{x:.3f}"


def _cards(report: dict[str, Any]) -> str:
    out = []
    for name in METRICS:
        lo, hi = report["intervals"][name]
        cls = "card primary" if name == report["primary"] else "card"
        out.append(
            f'<div class="{cls}"><small>{name}{" (primary)" if name == report["primary"] else ""}</small>'
            f"<b>{_pct(report['metrics'][name])}</b><small>95% {lo:.3f} - {hi:.3f}</small></div>"
        )
    return '<div class="cards">' + "".join(out) + "</div>"


def _confusion(c: dict[str, Any]) -> str:
    return (
        '<table class="cm"><tr><th></th><th>pred YES</th><th>pred NO</th><th>invalid</th><th>error</th></tr>'
        f"<tr><th>target YES</th><td>{c['tp']}</td><td>{c['fn']}</td><td>{c['invalid_on_yes']}</td><td>{c['errors_on_yes']}</td></tr>"
        f"<tr><th>target NO</th><td>{c['fp']}</td><td>{c['tn']}</td><td>{c['invalid_on_no']}</td><td>{c['errors_on_no']}</td></tr></table>"
        f'<p class="meta">invalid answers {c["invalid"]} ({c["invalid_rate"]:.1%}), errors {c["errors"]}</p>'
    )


def _rows(samples: list[tuple[dict[str, Any], dict[str, Any]]]) -> str:
    out = []
    for p, r in sorted(samples, key=lambda pr: (pr[1]["correct"], pr[1]["id"])):
        kind = "error" if r["error"] else "invalid" if r["invalid"] else "correct" if r["correct"] else "wrong"
        classes = f"s {kind}" + ("" if r["correct"] else " notok")
        mark = {"correct": "ok", "wrong": "bad", "invalid": "inv", "error": "bad"}[kind]
        reply = p.get("reply") if p.get("error") is None else f"[error] {p.get('error')}"
        out.append(
            f'<tr class="{classes}"><td>{r["id"]}</td><td>{r["people"]}</td>'
            f"<td><details><summary>{escape(p.get('question', ''))}</summary><pre>{escape(p.get('prompt', ''))}</pre></details></td>"
            f"<td><pre>{escape(reply or '')}</pre></td><td>{escape(r['extracted'] or '—')}</td><td>{r['target']}</td>"
            f'<td class="{mark}">{kind}</td></tr>'
        )
    return "".join(out)


def render(
    report: dict[str, Any], samples: list[tuple[dict[str, Any], dict[str, Any]]], latency: Any, tokens: Any
) -> str:
    """`samples`: (prediction, review) pairs to list; `latency` and `tokens`: values for the histograms."""
    data = report["dataset"]
    c = report["counts"]
    warnings = "".join(f'<div class="warn"><b>INCOMPLETE:</b> {escape(w)}</div>' for w in report["warnings"])
    people = [(f"{k}p", v["accuracy"], *v["interval"]) for k, v in report["by_people"].items()]
    true_yes = c["target_yes"] / c["samples"] if c["samples"] else 0.0
    lo, hi = report["intervals"]["yes_ratio"]
    yes_chart = bars(
        [("yes_ratio", report["metrics"]["yes_ratio"], lo, hi), ("true YES", true_yes, true_yes, true_yes)],
        color="#8a63d2",
    )
    rows, shown = _rows(samples), len(samples)
    source = escape(str(data.get("id") or data.get("path") or data.get("source")))
    return f"""<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>coin_flip - {escape(report["model"])}</title><style>{STYLE}</style></head><body><main>
<h1>CoinFlip - {escape(report["model"])}</h1>
<div class="meta">run {escape(report["run"])} | data {escape(data["source"])}: {source} ({escape(data["split"])}, {data["rows"]} rows, sha256 {escape(data["sha256"][:16])}) |
arithmetic {escape(report["metric_compat"])} | extraction {escape(report["extraction"])} | few-shot {report["few_shot_num"]}</div>
{warnings}{_cards(report)}
<div class="grid">
<div class="panel"><h2>Confusion matrix</h2>{_confusion(c)}</div>
<div class="panel" id="by-people"><h2>Accuracy by number of people</h2>{bars(people)}</div>
<div class="panel"><h2>yes_ratio against the true YES share</h2>{yes_chart}</div>
<div class="panel"><h2>Latency (s)</h2>{histogram(list(latency), "s")}</div>
<div class="panel"><h2>Completion tokens</h2>{histogram(list(tokens), "tokens")}</div>
</div>
<h2>Samples</h2>
<div class="filters"><button class="on" data-f="all">all</button><button data-f="notok">not correct</button><button data-f="wrong">wrong</button><button data-f="invalid">invalid</button><button data-f="error">errored</button>
<span class="meta">showing <span id="shown">{shown}</span> of {c["samples"]}</span></div>
<table class="samples"><thead><tr><th>id</th><th>people</th><th>question / prompt</th><th>reply</th><th>extracted</th><th>target</th><th>result</th></tr></thead>
<tbody>{rows}</tbody></table>
</main><script>{SCRIPT}</script></body></html>
"""


def write_html(
    path: Path, report: dict[str, Any], samples: list[tuple[dict[str, Any], dict[str, Any]]], latency: Any, tokens: Any
) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(
        utf8(render(report, samples, latency, tokens))
    )  # a lone surrogate in a reply must not fail the run
