"""Compare runs on the same data: a leaderboard and paired McNemar tests on the shared samples."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from html import escape
from itertools import combinations
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..rundir import RunDir, read_predictions, row_key
from ..scoring.metrics import METRICS
from .charts import page


@dataclass(frozen=True)
class Run:
    path: Path
    report: dict[str, Any]
    correct: dict[str, bool]  # by question text, so runs pair on the sample itself

    @property
    def label(self) -> str:
        return f"{self.report['model']} ({self.path.name})"


def load_run(path: str | Path) -> Run:
    run = RunDir.open(path)
    if not run.report_json.is_file():
        raise ConfigError(f"{run.root} has no report yet; run `coinflip rescore {run.root}` first")
    report = json.loads(run.report_json.read_text(encoding="utf-8"))
    reviews = {}
    for line in run.reviews.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        reviews[row_key(row)] = row["correct"]
    predictions = read_predictions(run.predictions)
    correct = {p["question"]: reviews[k] for k, p in predictions.items() if k in reviews}
    return Run(run.root, report, correct)


def mcnemar(b: int, c: int) -> dict[str, float]:
    """b: only A right; c: only B right. Chi-square (1 df) with and without continuity correction, and exact."""
    n = b + c
    if n == 0:
        return {
            "only_a": 0,
            "only_b": 0,
            "chi2": 0.0,
            "p_value": 1.0,
            "chi2_corrected": 0.0,
            "p_corrected": 1.0,
            "p_exact": 1.0,
        }
    chi2 = (b - c) ** 2 / n
    corrected = max(abs(b - c) - 1, 0) ** 2 / n
    tail = sum(math.comb(n, k) for k in range(0, min(b, c) + 1)) / 2**n
    return {
        "only_a": b,
        "only_b": c,
        "chi2": chi2,
        "p_value": math.erfc(math.sqrt(chi2 / 2)),
        "chi2_corrected": corrected,
        "p_corrected": math.erfc(math.sqrt(corrected / 2)),
        "p_exact": min(1.0, 2 * tail),
    }


def compare(paths: list[str | Path], force: bool = False) -> dict[str, Any]:
    if len(paths) < 2:
        raise ConfigError("compare needs at least two run directories")
    runs = [load_run(p) for p in paths]
    datasets = {r.report["dataset"]["sha256"] for r in runs}
    if len(datasets) > 1 and not force:
        detail = ", ".join(
            f"{r.path.name}: {r.report['dataset']['sha256'][:12]} ({r.report['counts']['samples']} samples)"
            for r in runs
        )
        raise ConfigError(
            f"runs were made on different data ({detail}); pass --force to compare on the samples they share"
        )
    leaderboard = sorted(runs, key=lambda r: -r.report["metrics"]["f1_score"])
    pairs = []
    for a, b in combinations(leaderboard, 2):
        shared = sorted(set(a.correct) & set(b.correct))
        only_a = sum(a.correct[q] and not b.correct[q] for q in shared)
        only_b = sum(b.correct[q] and not a.correct[q] for q in shared)
        pairs.append({"a": a.label, "b": b.label, "shared": len(shared), **mcnemar(only_a, only_b)})
    return {
        "same_data": len(datasets) == 1,
        "leaderboard": [
            {
                "rank": i + 1,
                "model": r.report["model"],
                "run": str(r.path),
                "samples": r.report["counts"]["samples"],
                "invalid_rate": r.report["counts"]["invalid_rate"],
                "metric_compat": r.report["metric_compat"],
                **{m: r.report["metrics"][m] for m in METRICS},
            }
            for i, r in enumerate(leaderboard)
        ],
        "pairs": pairs,
    }


def to_markdown(result: dict[str, Any]) -> str:
    head = "| rank | model | " + " | ".join(METRICS) + " | invalid | samples |"
    lines = ["# CoinFlip comparison", "", head, "|" + "---|" * (len(METRICS) + 4)]
    for row in result["leaderboard"]:
        values = " | ".join(f"{row[m]:.4f}" for m in METRICS)
        lines.append(f"| {row['rank']} | {row['model']} | {values} | {row['invalid_rate']:.1%} | {row['samples']} |")
    lines += [
        "",
        "## Paired McNemar tests (shared samples)",
        "",
        "| A | B | shared | only A right | only B right | chi2 | p | p (exact) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p in result["pairs"]:
        lines.append(
            f"| {p['a']} | {p['b']} | {p['shared']} | {p['only_a']} | {p['only_b']} | {p['chi2']:.4f} "
            f"| {p['p_value']:.4g} | {p['p_exact']:.4g} |"
        )
    if not result["same_data"]:
        lines += ["", "**Warning:** these runs used different data; only shared samples were paired."]
    return "\n".join(lines) + "\n"


def to_html(result: dict[str, Any]) -> str:
    rows = "".join(
        f"<tr><td>{r['rank']}</td><td>{escape(r['model'])}</td>"
        + "".join(f"<td>{r[m]:.4f}</td>" for m in METRICS)
        + f"<td>{r['invalid_rate']:.1%}</td><td>{r['samples']}</td></tr>"
        for r in result["leaderboard"]
    )
    pairs = "".join(
        f"<tr><td>{escape(p['a'])}</td><td>{escape(p['b'])}</td><td>{p['shared']}</td><td>{p['only_a']}</td><td>{p['only_b']}</td>"
        f"<td>{p['chi2']:.4f}</td><td>{p['p_value']:.4g}</td><td>{p['p_exact']:.4g}</td></tr>"
        for p in result["pairs"]
    )
    head = "".join(f"<th>{m}</th>" for m in METRICS)
    return page(
        "CoinFlip comparison",
        f"<h1>CoinFlip comparison</h1><table><tr><th>rank</th><th>model</th>{head}<th>invalid</th><th>samples</th></tr>{rows}</table>"
        "<h2>Paired McNemar tests</h2><table><tr><th>A</th><th>B</th><th>shared</th><th>only A right</th><th>only B right</th>"
        f"<th>chi2</th><th>p</th><th>p exact</th></tr>{pairs}</table>",
    )
