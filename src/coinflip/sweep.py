"""Difficulty sweep: a fresh generated set per number of people, evaluated in turn, to find where
a model's state tracking breaks."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from . import __version__
from ._terminal import one_line
from .config import TaskConfig, safe_name
from .data.generate import PeopleRange, generate_file
from .run.runner import run_task


def sweep(config: TaskConfig, people: PeopleRange, count: int) -> dict[str, Any]:
    """One generated set per number of people (seeded by config.seed plus the length), each
    evaluated with the same settings; few-shot examples come from a set of the same length."""
    root = Path(config.work_dir).expanduser() / f"sweep_{datetime.now():%Y%m%d_%H%M%S}"
    lengths = range(people.low, people.high + 1)
    progress = sys.stderr.isatty() if config.progress is None else config.progress
    points = []
    for i, k in enumerate(lengths, 1):
        data = length_data(config, root / "data", k, count)
        print(one_line(f"sweep {config.name}: {k} people ({i} of {len(lengths)})"), file=sys.stderr, flush=True)
        run = replace(
            config,
            dataset_path=str(data),
            dataset_hub="bundled",
            work_dir=str(root / "runs"),
            quiet=True,
            progress=progress,
        )
        points.append(length_point(k, run_task(run)))
    result = {"model": config.name, "count": count, "seed": config.seed, "directory": str(root), "points": points}
    from .pages.board import write_whole

    files = {
        "sweep.json": json.dumps(result, indent=2) + "\n",
        "sweep.md": to_markdown(result),
        "sweep.html": to_html(result),
    }
    for name, content in files.items():
        write_whole(root / name, content, "the sweep's runs are kept")
    return result


def length_data(config: TaskConfig, folder: Path, people: int, count: int) -> Path:
    """`folder`/people_KK: a fresh set of `count` questions with `people` people (seeded by
    config.seed plus the length), and few-shot examples of the same length when asked for."""
    data = folder / f"people_{people:02d}"
    generate_file(data / "test.jsonl", PeopleRange(people, people), count, config.seed + people, whole=True)
    if config.few_shot_num:
        generate_file(
            data / "validation.jsonl",
            PeopleRange(people, people),
            max(50, config.few_shot_num + 1),
            config.seed + 100_000 + people,
            whole=True,
        )
    return data


def length_point(people: int, report: dict[str, Any]) -> dict[str, Any]:
    """One point of the curve: a run's report at one number of people."""
    return {
        "people": people,
        "samples": report["counts"]["samples"],
        "accuracy": report["metrics"]["accuracy"],
        "interval": report["intervals"]["accuracy"],
        "f1_score": report["metrics"]["f1_score"],
        "invalid_rate": report["counts"]["invalid_rate"],
        "complete": report["complete"],
        "run": report["run"],
    }


def to_markdown(result: dict[str, Any]) -> str:
    """sweep.md: every value through pages/markdown.py, so a model name stays text in its heading."""
    from .pages import markdown
    from .pages.html import fmt, span

    head = ("people", "accuracy", "95% interval", "f1_score", "invalid", "samples")
    rows = [
        (p["people"], fmt(p["accuracy"]), span(p["interval"]), _f1(p), fmt(p["invalid_rate"], ".1%"), p["samples"])
        for p in result["points"]
    ]
    return "\n".join([f"# CoinFlip sweep - {markdown.text(result['model'])}", "", *markdown.table(head, rows)]) + "\n"


def to_html(result: dict[str, Any]) -> str:
    from .pages import charts
    from .pages.html import fmt, render_template

    points = [
        {
            "people": p["people"],
            "accuracy": fmt(p["accuracy"]),
            "interval": f"{fmt(p['interval'][0], '.3f')} - {fmt(p['interval'][1], '.3f')}",
            "f1": _f1(p),
            "invalid": fmt(p["invalid_rate"], ".1%"),
            "samples": p["samples"],
            "run": p["run"],
            "href": _page_of(result, p),
        }
        for p in result["points"]
    ]
    chart = charts.line(
        [(p["people"], p["accuracy"], *p["interval"]) for p in result["points"]], "number of people", "accuracy"
    )
    return render_template(
        "sweep.html", model=result["model"], count=result["count"], seed=result["seed"], version=__version__,
        chart=chart, points=points,
    )  # fmt: skip


def _f1(point: dict[str, Any]) -> str:
    return "undefined" if point["f1_score"] is None else f"{point['f1_score']:.4f}"


def _page_of(result: dict[str, Any], point: dict[str, Any]) -> str:
    """The run's own page, relative to the sweep folder."""
    from .pages.html import relative

    return relative(f"runs/{point['run']}/reports/{safe_name(result['model'])}/coin_flip.html")
