"""A run's report as one leaderboard row. Fields come through scoring/schema.py `read_report`: each
has its declared type or is missing (None); a field this version does not know lands in the details."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .._files import replacing
from ..config import BENCHMARK
from ..scoring.metrics import METRICS
from ..scoring.schema import Counts, Dataset, Report, Subset, Template, UsageSummary
from .catalog import Found, started
from .html import ends, number, relative, text

# optional columns: (key, label, where it is in a report)
EXTRAS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("forced_accuracy", "forced acc.", ("forced", "metrics", "accuracy")),
    ("majority_accuracy", "majority acc.", ("repeat_metrics", "majority_vote", "accuracy")),
    ("forced_majority_accuracy", "forced majority acc.", ("forced", "repeat_metrics", "majority_vote", "accuracy")),
    ("pass_at_k", "pass@k", ("repeat_metrics", "pass_at_k")),
    ("consistency", "consistency", ("repeat_metrics", "consistency")),
    ("auroc", "AUROC", ("calibration", "auroc")),
    ("ece", "ECE", ("calibration", "ece")),
    ("brier", "Brier", ("calibration", "brier")),
)
SHOWN = {"benchmark", "model", "run", "complete", "warnings", "metrics", "intervals", "by_people", "usage", "primary"}
MAX_DETAILS = 80


def dig(data: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


_SURROGATE = re.compile("[\ud800-\udfff]")
# a number of people: "²" and "٣" are digits to str.isdigit, not to the page's Number()
_PEOPLE = re.compile("[0-9]{1,6}")


def utf8(page: str) -> bytes:
    """A lone surrogate (a folder name not in UTF-8, half a pair in a reply) becomes U+FFFD: UTF-8 cannot hold it."""
    return _SURROGATE.sub("\ufffd", page).encode("utf-8")


def write_whole(path: Path, page: str | Iterable[str], hint: str = "the runs it shows are unchanged") -> None:
    """Whole (`_files.replacing`): no reader sees half a page, and no link makes us write outside the folder."""
    with replacing(path, hint) as out:
        for piece in [page] if isinstance(page, str) else page:
            out.write(utf8(piece))


def data_of(report: Report, config: dict[str, Any]) -> dict[str, Any]:
    """The data a run used: a key, the same for the same file and split, and a label."""
    data = report.get("dataset", Dataset())
    source = text(data.get("source") or config.get("dataset_hub") or "unknown", 60)
    where = data.get("path") or data.get("id") or config.get("dataset_path") or ""
    split = text(data.get("split") or config.get("split") or "test", 30)
    sha = data.get("sha256", "")
    name = os.path.basename(str(where).rstrip("/")) if source in ("file", "local") else str(where)
    label = f"{source} {split}" if source == "bundled" else f"{source} {text(name, 80)} ({split})"
    key = f"{sha[:12]}/{split}" if sha else f"{source}:{where}/{split}"
    return {"key": key, "label": label, "sha": sha, "rows": number(data.get("rows")), "where": text(where)}


def template_of(report: Report, config: dict[str, Any]) -> tuple[str, str, str]:
    """(name, short hash, full text or name) of the prompt template."""
    found = report.get("template", Template())
    digest, full = text(found.get("sha256"), 64), text(found.get("text"), 2000)
    name = text(found.get("name") or config.get("prompt_template") or "default", 2000)
    if "{question}" in name:
        full, name = full or name, "custom"
    system = " + system prompt" if config.get("system_prompt") else ""  # asked otherwise, as another template is
    return text(name, 40) + system, digest[:10], text(full or name, 2000)


def repeats_of(report: Report, config: dict[str, Any]) -> int:
    given = (report.get("repeats"), config.get("repeats"))
    return next((v for v in given if isinstance(v, int) and not isinstance(v, bool) and v > 0), 1)


def subset_of(report: Report) -> str:
    """Which questions a run asked, "" for all: runs on different subsets are not ranked together."""
    subset = report.get("subset", Subset())
    count, of = subset.get("count"), subset.get("of")
    if count is None or of is None:  # left out as unreadable (a hand edit): not "all"
        return "an unknown subset" if subset else ""
    if count >= of:
        return ""
    seed = subset.get("seed")
    return text(f"{subset.get('mode', 'first')} {count} of {of}" + (f", seed {seed}" if seed is not None else ""), 80)


def _metric(report: Report, name: str) -> list[float | None]:
    return [number(report.get("metrics", {}).get(name)), *ends(report.get("intervals", {}).get(name))]


def _by_people(report: Report) -> dict[str, list[float | None]]:
    out = {}
    for key, cell in report.get("by_people", {}).items():
        if _PEOPLE.fullmatch(key):
            out[key] = [number(cell.get("accuracy")), *ends(cell.get("interval")), number(cell.get("samples"))]
    return out


def _quantiles(value: Any) -> dict[str, float | None]:
    return {k: number(dig(value, k)) for k in ("mean", "p50", "p90", "p99")}


def version_of(report: Report, config: dict[str, Any]) -> str:
    found = (dig(where, "coinflip_version") for where in (report.get("provenance"), config.get("provenance")))
    return next((text(v, 40) for v in found if isinstance(v, str)), "")


def details(report: Mapping[str, Any]) -> list[list[str]]:
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
    """A link to the run's own page ("./" first, so no folder name reads as a scheme)."""
    page = found.path / "reports" / found.model_dir / f"{BENCHMARK}.html"
    if not page.is_file():
        return ""
    rel = "" if found.rel == "." else found.rel + "/"
    return relative(f"{rel}reports/{found.model_dir}/{BENCHMARK}.html")


def row(found: Found) -> dict[str, Any]:
    report, config = found.report, found.config
    counts = report.get("counts", Counts())
    name, digest, full = template_of(report, config)
    usage = report.get("usage", UsageSummary())
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
        "invalid_reasons": _reasons(report),
        "errors": number(counts.get("errors")),
        "complete": report.get("complete") is not False,
        "warnings": [text(w) for w in report.get("warnings", [])[:6]],
        "compat": text(report.get("metric_compat"), 20),
        "href": href(found),
        "people": _by_people(report),
        "lat": _quantiles(usage.get("latency_s")),
        "tok": _quantiles(usage.get("completion_tokens")),
        "ptok": _total(report, "prompt", usage.get("prompt_tokens_total")),
        "ctok": _total(report, "completion", usage.get("completion_tokens_total")),
        "version": version_of(report, config),
        "extra": {key: number(dig(report, *path)) for key, _, path in EXTRAS},
        "details": details(report),
    }


def setup(config: dict[str, Any], report: Report) -> dict[str, Any]:
    """What else makes two runs' prompts or replies unlike (for `compare`): which few-shot examples were drawn
    (the validation rows a seed picks, or the first ones; the hash of those shown, where the report has it: the same
    seed on other validation data), and the generation settings."""
    shots = None
    if number(config.get("few_shot_num")):
        random = config.get("few_shot_random") is not False
        shots = f"seed {text(config.get('few_shot_seed'), 30)}" if random else "the first rows"
        if isinstance(shown := dig(report, "few_shot", "examples_sha256"), str):
            shots += f" [{text(shown[:12], 12)}]"
    generation = config.get("generation_config")
    return {"shots": shots, "generation": generation if isinstance(generation, dict) else {}}


def _total(report: Report, kind: str, older: Any) -> float | None:
    """Tokens over every request (forced answers too), as the run page and the terminal count them;
    a report without a tokens section has only the first replies' usage."""
    total = number(dig(report, "tokens", kind))
    return number(older) if total is None else total


def _reasons(report: Report) -> str:
    reasons = report.get("invalid_reasons", {})
    return text(", ".join(f"{k}: {_shown(v)}" for k, v in reasons.items()), 300)


def label(row: dict[str, Any]) -> str:
    """How compare names a run: model, run id, size, data, template, few-shot."""
    template = row["template"] + (f" {row['template_hash']}" if row["template_hash"] else "")
    shots = "?" if row["few_shot"] is None else f"{row['few_shot']:.0f}"
    return f"{row['model']} [{row['run']}] {size(row)}, {row['data']['label']}, {template}, {shots}-shot"


def size(row: dict[str, Any]) -> str:
    """ "30 q", or "30 q x 2" for 30 questions asked twice; samples that fill no whole questions as samples."""
    samples, repeats = row["samples"], row["repeats"]
    if samples is None:
        return "? q"
    if repeats == 1:
        return f"{samples:.0f} q"
    whole, rest = divmod(samples, repeats)
    return f"{whole:.0f} q x {repeats}" if not rest else f"{samples:.0f} samples"


def ranked(scores: list[float]) -> list[tuple[int, bool]]:
    """Each score's rank, highest first, and whether it shares it: scores equal to 12 places share a rank
    (1, =2, =2, 4), in the index and in compare alike."""
    rounded = [round(s, 12) for s in scores]
    ranks = [1 + sum(o > s for o in rounded) for s in rounded]
    return [(k, ranks.count(k) > 1) for k in ranks]
