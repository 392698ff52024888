"""A run's report as one leaderboard row: every field read on its own, shown when present.

Reports grow new fields (repeats, forced answers, calibration, invalid reasons, templates,
provenance); a field this version does not know lands in the row's details, and a field that
is missing or of another type becomes None, never an exception.
"""

from __future__ import annotations

import os
import re
from typing import Any
from urllib.parse import quote

from ..config import BENCHMARK
from ..scoring.metrics import METRICS
from .catalog import Found, started
from .html import number

# optional columns: (key, label, where to look in a report, first match wins)
EXTRAS: tuple[tuple[str, str, tuple[tuple[str, ...], ...]], ...] = (
    ("forced_accuracy", "forced acc.", (("forced", "metrics", "accuracy"),)),
    ("majority_accuracy", "majority acc.", (("repeat_metrics", "majority_vote", "accuracy"),)),
    ("pass_at_k", "pass@k", (("repeat_metrics", "pass_at_k"),)),
    ("consistency", "consistency", (("repeat_metrics", "consistency"),)),
    ("auroc", "AUROC", (("calibration", "auroc"),)),
    ("ece", "ECE", (("calibration", "ece"),)),
    ("brier", "Brier", (("calibration", "brier"),)),
)
SHOWN = {"benchmark", "model", "run", "complete", "warnings", "metrics", "intervals", "by_people", "usage", "primary"}
MAX_DETAILS = 80


def dig(data: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def text(value: Any, limit: int = 300) -> str:
    out = value if isinstance(value, str) else "" if value is None else str(value)
    return out if len(out) <= limit else out[: limit - 1] + "…"


def mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


_SURROGATE = re.compile("[\ud800-\udfff]")


def utf8(page: str) -> bytes:
    """A page as UTF-8. A lone surrogate (a folder name that is not UTF-8, half a pair in a
    reply) becomes U+FFFD: it cannot be written as UTF-8, and browsers choke on it in the DOM."""
    return _SURROGATE.sub("\ufffd", page).encode("utf-8")


def data_of(report: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """The data a run used: a key that is the same for the same file and split, and a label."""
    data = mapping(report.get("dataset"))
    source = text(data.get("source") or config.get("dataset_hub") or "unknown", 60)
    where = data.get("path") or data.get("id") or config.get("dataset_path") or ""
    split = text(data.get("split") or config.get("split") or "test", 30)
    sha = data.get("sha256") if isinstance(data.get("sha256"), str) else ""
    name = os.path.basename(str(where).rstrip("/")) if source in ("file", "local") else str(where)
    label = f"{source} {split}" if source == "bundled" else f"{source} {text(name, 80)} ({split})"
    key = f"{sha[:12]}/{split}" if sha else f"{source}:{where}/{split}"
    return {"key": key, "label": label, "sha": sha, "rows": number(data.get("rows")), "where": text(where)}


def template_of(report: dict[str, Any], config: dict[str, Any]) -> tuple[str, str, str]:
    """(name, short hash, full text or name) of the prompt template."""
    found = report.get("template", report.get("prompt_template"))
    name, digest, full = "", "", ""
    if isinstance(found, dict):
        name = text(found.get("name"), 200)
        digest = text(found.get("sha256") or found.get("hash"), 64)
        full = text(found.get("text"), 2000)
    elif isinstance(found, str):
        name = found
    digest = digest or text(report.get("template_hash") or report.get("prompt_template_hash"), 64)
    name = name or text(config.get("prompt_template") or "default", 2000)
    if "{question}" in name:
        full, name = full or name, "custom"
    return text(name, 40), digest[:10], text(full or name, 2000)


def repeats_of(report: dict[str, Any], config: dict[str, Any]) -> int:
    for value in (
        report.get("repeats"),
        dig(report, "repeats", "k"),
        dig(report, "repeats", "count"),
        config.get("repeats"),
    ):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 1


def subset_of(report: dict[str, Any]) -> str:
    """Which questions of the data a run asked, as a key: "" for all of them. Runs on different
    subsets (another --seed) may share no question, so they are not ranked together."""
    subset = mapping(report.get("subset"))
    count, of = number(subset.get("count")), number(subset.get("of"))
    if count is None or of is None or count >= of:
        return ""
    seed = subset.get("seed")
    return text(
        f"{subset.get('mode', 'first')} {count:.0f} of {of:.0f}" + (f", seed {seed}" if seed is not None else ""), 80
    )


def _metric(report: dict[str, Any], name: str) -> list[float | None]:
    interval = dig(report, "intervals", name)
    if not (isinstance(interval, list) and len(interval) == 2):
        interval = [None, None]
    return [number(dig(report, "metrics", name)), number(interval[0]), number(interval[1])]


def _by_people(report: dict[str, Any]) -> dict[str, list[float | None]]:
    out = {}
    for key, cell in mapping(report.get("by_people")).items():
        if isinstance(cell, dict) and str(key).lstrip("-").isdigit():
            interval = cell.get("interval")
            lo, hi = (list(interval) + [None, None])[:2] if isinstance(interval, list) else (None, None)
            out[str(key)] = [number(cell.get("accuracy")), number(lo), number(hi), number(cell.get("samples"))]
    return out


def _quantiles(value: Any) -> dict[str, float | None]:
    return {k: number(dig(value, k)) for k in ("mean", "p50", "p90", "p99")}


def version_of(report: dict[str, Any], config: dict[str, Any]) -> str:
    for where in (report, report.get("provenance"), config, config.get("provenance")):
        value = dig(where, "coinflip_version")
        if isinstance(value, str):
            return text(value, 40)
    return ""


def details(report: dict[str, Any]) -> list[list[str]]:
    """Report fields the leaderboard has no column for, flattened to (key, value) lines."""
    out: list[list[str]] = []

    def walk(prefix: str, value: Any) -> None:
        if len(out) >= MAX_DETAILS:
            return
        if isinstance(value, dict) and value:
            for key, item in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), item)
        elif isinstance(value, list) and value and all(isinstance(v, (dict, list)) for v in value):
            out.append([prefix, f"{len(value)} entries"])
        else:
            out.append([prefix, _shown(value)])

    for key, value in report.items():
        if key not in SHOWN:
            walk(str(key), value)
    return out


def _shown(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list):
        return text(", ".join(_shown(v) for v in value), 200)
    return text(value if value is not None else "—", 200)


def href(found: Found) -> str:
    """A relative link to the run's own page ("./" first, so no folder name reads as a scheme)."""
    page = found.path / "reports" / found.model_dir / f"{BENCHMARK}.html"
    if not page.is_file():
        return ""
    rel = "" if found.rel == "." else found.rel + "/"
    return "./" + quote(f"{rel}reports/{found.model_dir}/{BENCHMARK}.html")


def row(found: Found) -> dict[str, Any]:
    """The leaderboard row of a run that has a report."""
    report, config = found.report, found.config
    counts = mapping(report.get("counts"))
    name, digest, full = template_of(report, config)
    usage = report.get("usage")
    warnings = report.get("warnings")
    warnings = warnings if isinstance(warnings, list) else []
    complete = report.get("complete")
    samples = number(counts.get("samples"))
    return {
        "id": found.rel,
        "run": text(found.path.name if found.rel != "." else found.path.resolve().name, 120),
        "model": text(report.get("model") or config.get("model_id") or config.get("model") or "?", 200),
        "date": started(found),
        "data": data_of(report, config),
        "template": name,
        "template_hash": digest,
        "template_text": full,
        "few_shot": number(report.get("few_shot_num", config.get("few_shot_num"))),
        "repeats": repeats_of(report, config),
        "samples": samples,
        "subset": subset_of(report),
        "m": {m: _metric(report, m) for m in METRICS},
        "invalid_rate": number(counts.get("invalid_rate")),
        "invalid": number(counts.get("invalid")),
        "invalid_reasons": _reasons(report, counts),
        "errors": number(counts.get("errors")),
        "complete": complete is not False,
        "warnings": [text(w) for w in warnings[:6]],
        "compat": text(report.get("metric_compat"), 20),
        "href": href(found),
        "people": _by_people(report),
        "lat": _quantiles(dig(usage, "latency_s")),
        "tok": _quantiles(dig(usage, "completion_tokens")),
        "ptok": number(dig(usage, "prompt_tokens_total")),
        "ctok": number(dig(usage, "completion_tokens_total")),
        "version": version_of(report, config),
        "extra": {key: _first(report, paths) for key, _, paths in EXTRAS},
        "details": details(report),
    }


def _first(report: dict[str, Any], paths: tuple[tuple[str, ...], ...]) -> float | None:
    for path in paths:
        value = number(dig(report, *path))
        if value is not None:
            return value
    return None


def _reasons(report: dict[str, Any], counts: dict[str, Any]) -> str:
    reasons = report.get("invalid_reasons", counts.get("invalid_reasons"))
    if not isinstance(reasons, dict):
        return ""
    return text(", ".join(f"{k}: {_shown(v)}" for k, v in reasons.items()), 300)


def label(row: dict[str, Any]) -> str:
    """How compare names a run: model, run id, samples, data, template, few-shot."""
    samples = "?" if row["samples"] is None else f"{row['samples']:.0f}"
    template = row["template"] + (f" {row['template_hash']}" if row["template_hash"] else "")
    shots = "?" if row["few_shot"] is None else f"{row['few_shot']:.0f}"
    return f"{row['model']} [{row['run']}] {samples} q, {row['data']['label']}, {template}, {shots}-shot"
