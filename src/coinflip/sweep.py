"""Difficulty sweep: a fresh generated set per number of people, evaluated in turn, to find where
a model's state tracking breaks."""

from __future__ import annotations

import json
from datetime import datetime
from html import escape
from pathlib import Path
from typing import Any

from .config import TaskConfig
from .data.generate import PeopleRange, generate_file
from .pages.charts import line_chart, page
from .runner import run_task


def sweep(config: dict[str, Any], people: PeopleRange, count: int, seed: int, work_dir: Path) -> dict[str, Any]:
    root = work_dir / f"sweep_{datetime.now():%Y%m%d_%H%M%S}"
    points = []
    for k in range(people.low, people.high + 1):
        data = root / "data" / f"people_{k:02d}.jsonl"
        generate_file(data, PeopleRange(k, k), count, seed + k)
        report = run_task(
            TaskConfig(**{**config, "dataset_path": str(data), "work_dir": str(root / "runs"), "quiet": True})
        )
        points.append(
            {
                "people": k,
                "samples": report["counts"]["samples"],
                "accuracy": report["metrics"]["accuracy"],
                "interval": report["intervals"]["accuracy"],
                "f1_score": report["metrics"]["f1_score"],
                "invalid_rate": report["counts"]["invalid_rate"],
                "complete": report["complete"],
                "run": report["run"],
            }
        )
    result = {"model": config["model"], "count": count, "seed": seed, "directory": str(root), "points": points}
    (root / "sweep.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    (root / "sweep.md").write_text(to_markdown(result), encoding="utf-8")
    (root / "sweep.html").write_text(to_html(result), encoding="utf-8")
    return result


def to_markdown(result: dict[str, Any]) -> str:
    lines = [
        f"# CoinFlip sweep - {result['model']}",
        "",
        "| people | accuracy | 95% interval | f1_score | invalid | samples |",
        "|---|---|---|---|---|---|",
    ]
    for p in result["points"]:
        lo, hi = p["interval"]
        lines.append(
            f"| {p['people']} | {p['accuracy']:.4f} | {lo:.3f} - {hi:.3f} | {p['f1_score']:.4f} | {p['invalid_rate']:.1%} | {p['samples']} |"
        )
    return "\n".join(lines) + "\n"


def to_html(result: dict[str, Any]) -> str:
    chart = line_chart(
        [(p["people"], p["accuracy"], *p["interval"]) for p in result["points"]], "number of people", "accuracy"
    )
    rows = "".join(
        f"<tr><td>{p['people']}</td><td>{p['accuracy']:.4f}</td><td>{p['interval'][0]:.3f} - {p['interval'][1]:.3f}</td>"
        f"<td>{p['invalid_rate']:.1%}</td><td>{p['samples']}</td></tr>"
        for p in result["points"]
    )
    return page(
        f"CoinFlip sweep - {result['model']}",
        f"<h1>Accuracy by number of people - {escape(result['model'])}</h1>{chart}"
        f"<table><tr><th>people</th><th>accuracy</th><th>95% interval</th><th>invalid</th><th>samples</th></tr>{rows}</table>",
    )
