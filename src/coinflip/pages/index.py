"""The index of a work directory (`coinflip view`): every run in one self-contained page. The rows travel as JSON;
templates/index.js draws them, every value as text, the view's state in the URL fragment (so it can be bookmarked)."""

from __future__ import annotations

import json
import logging
from datetime import datetime
from itertools import combinations
from pathlib import Path
from typing import Any

from .._files import UnreadableFile, read_regular
from .._terminal import one_line
from ..errors import ConfigError
from ..scoring.metrics import METRICS
from ..scoring.paired import pair
from ..scoring.schema import altered
from .board import EXTRAS, ranked, row, write_whole
from .catalog import Found, read_answers, scan
from .html import relative, render_template, text

INDEX = "index.html"
REFRESH_LEFT = "the work directory's index.html was refreshed (`coinflip view` does it)"  # what a late stop says
PAIR_RUNS = 20  # per data set, the best runs (by F1) whose pairs are precomputed: 190 pairs at most
PAIR_ROWS = 100  # disagreeing questions listed per pair
ROW_BUDGET = 20_000  # disagreeing questions listed on the whole page
REPLY_TAIL = 240  # characters kept of a reply, from its end (where the answer is)
QUESTION_CHARS = 2000  # of a question (a real one is a few hundred): 20,000 listed rows stay a page, not gigabytes
log = logging.getLogger("coinflip")


def refresh(work_dir: Path) -> Path | None:
    """Rewrite the index after an eval or rescore; never raises (the run is done): None, logged, on failure."""
    try:
        return write(work_dir)
    except Exception as exc:  # noqa: BLE001 - whatever happened, the run itself is done and saved
        log.warning("could not refresh %s: %s", Path(work_dir) / INDEX, exc)
        return None


def work_dir_of(run_root: Path, config: dict[str, Any]) -> Path:
    """The work directory a run belongs to: its parent, or itself for a `--no-timestamp` run."""
    return run_root if config.get("no_timestamp") else run_root.parent


def view(work_dir: Path, open_page: bool = False) -> Path:
    """`coinflip view`: write the page, say what it holds and what needs attention, maybe open it."""
    import click

    folder = Path(work_dir).expanduser()
    if not folder.is_dir():
        raise ConfigError(f"{folder} is not a directory: give the work directory of your runs (coinflip view WORK_DIR)")
    data = build(folder)
    path = write(folder, data)  # a failed write is a StorageError (_files.replacing)
    click.echo(one_line(f"wrote {path}: {_summary(data)}"), err=True)
    for p in data["problems"][:20]:
        click.echo(one_line(f"  {p['kind']:<10} {p['id']}: {p['reason']}"), err=True)
    if len(data["problems"]) > 20:
        click.echo(f"  ... and {len(data['problems']) - 20} more (listed in the page)", err=True)
    if open_page:
        import webbrowser

        if not webbrowser.open(path.resolve().as_uri()):
            click.echo(f"no browser found; open {path.resolve().as_uri()}", err=True)
    return path


def write(work_dir: Path, data: dict[str, Any] | None = None) -> Path:
    work_dir = Path(work_dir).expanduser()
    write_whole(work_dir / INDEX, render(data or build(work_dir)))  # whole: no browser sees half a page
    return work_dir / INDEX


def build(work_dir: Path) -> dict[str, Any]:
    found = scan(work_dir)
    runs, rows = _rows(found)
    datasets = _datasets(rows)
    _rank(rows)
    present = {key for r in rows for key, value in r["extra"].items() if value is not None}
    pairs = _pairs(rows, runs)  # before the problems: a run whose answers cannot be read is one
    from .. import __version__

    return {
        "work_dir": str(work_dir.resolve()),
        "generated": datetime.now().strftime("%Y-%m-%d %H:%M:%S"),
        "version": __version__,
        "metrics": list(METRICS),
        "extras": [[key, label] for key, label, _ in EXTRAS if key in present],
        "runs": rows,
        "datasets": datasets,
        "problems": _problems(found, rows),
        **pairs,
        "pair_runs": PAIR_RUNS,
        "pair_rows": PAIR_ROWS,
        "probes": _probes(work_dir, found),
    }


def _probes(work_dir: Path, found: list[Found]) -> list[dict[str, Any]]:
    """Each probe in the work directory (a folder whose runs/base is a run), with its headline."""
    out, root = [], work_dir.expanduser()
    for f in found:
        folder = f.path.parent.parent
        if f.kind == "run" and f.path.name == "base" and f.path.parent.name == "runs" and folder.is_relative_to(root):
            entry = probe_summary(folder)
            if entry is not None:
                page = (folder / PAGE_FILE).relative_to(root).as_posix()
                out.append({**entry, "page": relative(page)})
    return out


def _rows(found: list[Found]) -> tuple[list[Found], list[dict[str, Any]]]:
    """The leaderboard rows; a report that still defeats the summary makes its run broken."""
    runs, rows = [], []
    for f in found:
        if f.kind != "run":
            continue
        try:
            rows.append(row(f))
            runs.append(f)
        except Exception as exc:  # noqa: BLE001 - one odd report must not hide every other run
            f.kind, f.reason = "broken", f"report not understood ({type(exc).__name__}: {exc})"
    return runs, rows


def _datasets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One tag per data set (D1 holds the most runs); each row gets its tag."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r["data"]["key"], []).append(r)
    ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    out = []
    for n, (key, members) in enumerate(ordered, 1):
        for r in members:
            r["tag"] = f"D{n}"
        first = members[0]["data"]
        out.append(
            {"tag": f"D{n}", "key": key, "label": first["label"], "sha": first["sha"][:12], "runs": len(members)}
        )
    return out


def _rank(rows: list[dict[str, Any]]) -> None:
    """F1 ranks among complete runs on the same questions, size and arithmetic; equal F1, equal rank (1, =2, =2, 4)."""
    groups: dict[tuple[str, str, Any, Any], list[dict[str, Any]]] = {}
    for r in rows:
        r["rank"] = None
        if r["complete"] and r["m"]["f1_score"][0] is not None:
            groups.setdefault((r["data"]["key"], r["subset"], r["samples"], r.get("compat")), []).append(r)
    for members in groups.values():
        members.sort(key=lambda r: -r["m"]["f1_score"][0])
        for r, (rank, tied) in zip(members, ranked([r["m"]["f1_score"][0] for r in members]), strict=True):
            r["rank"], r["tied"], r["rank_of"] = rank, tied, len(members)  # the page shows a tie as "=1"


def _problems(found: list[Found], rows: list[dict[str, Any]]) -> list[dict[str, str]]:
    out = [{"id": f.rel, "kind": f.kind, "reason": f.reason} for f in found if f.kind != "run"]
    out += [{"id": f.rel, "kind": "broken", "reason": f.reason} for f in found if f.kind == "run" and f.reason]
    live = {f.rel for f in found if f.kind == "run" and f.live}
    for r in rows:
        if not r["complete"]:
            why = "; ".join(r["warnings"]) or "the report says it is not complete"
            why = f"running: being resumed now (its last report: {why})" if r["id"] in live else why
            out.append({"id": r["id"], "kind": "incomplete", "reason": why})
        elif said := altered(r):
            out.append({"id": r["id"], "kind": "altered", "reason": said})
    return sorted(out, key=lambda p: (p["kind"], p["id"]))


def _pairs(rows: list[dict[str, Any]], runs: list[Found]) -> dict[str, list[Any]]:
    """McNemar for every pair among the best PAIR_RUNS runs of each data set, with the questions where
    exactly one of the two was right; question texts and replies are stored once each, rows hold their numbers."""
    by_data: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        by_data.setdefault(r["data"]["key"], []).append(i)
    records: list[dict[str, Any]] = []
    questions: list[list[Any]] = []
    numbers: dict[str, int] = {}  # question -> its place in `questions`
    replies: dict[str, int] = {}  # reply -> its place, in insertion order
    budget = ROW_BUDGET
    for members in by_data.values():
        best = sorted(members, key=lambda i: (not rows[i]["complete"], -(rows[i]["m"]["f1_score"][0] or 0.0)))
        answers = {i: a for i in best[:PAIR_RUNS] if (a := read_answers(runs[i])) is not None}
        listed: list[tuple[dict[str, Any], list[str]]] = []
        wanted: dict[int, set[str]] = {i: set() for i in answers}
        for i, j in combinations(answers, 2):
            p = pair(answers[i].correct, answers[j].correct)
            differ = sorted(p.only_a + p.only_b, key=lambda q: answers[i].first[q][0])
            shown = differ[: max(0, min(PAIR_ROWS, budget))]
            budget -= len(shown)
            wanted[i].update(shown)
            wanted[j].update(shown)
            listed.append(({"a": i, "b": j, **p.stats(), "total": len(differ)}, shown))
        texts = {i: answers[i].replies(asked) for i, asked in wanted.items() if asked}
        for record, shown in listed:
            a, b = answers[record["a"]], answers[record["b"]]
            for q in shown:
                if q not in numbers:
                    numbers[q] = len(questions)
                    questions.append([text(q, QUESTION_CHARS), text(a.first[q][2], 20), a.first[q][3]])
            ta, tb = texts.get(record["a"], {}), texts.get(record["b"], {})
            record["rows"] = [
                [numbers[q], a.first[q][1], b.first[q][1], *(_stored(replies, t.get(q, "")) for t in (ta, tb))]
                for q in shown
            ]
            records.append(record)
    return {"pairs": records, "questions": questions, "replies": list(replies)}


def _stored(replies: dict[str, int], reply: str) -> int:
    """The number of a reply's tail (where the answer is), stored once."""
    return replies.setdefault(reply if len(reply) <= REPLY_TAIL else "…" + reply[-REPLY_TAIL:], len(replies))


def _summary(data: dict[str, Any]) -> str:
    runs, sets = len(data["runs"]), len(data["datasets"])
    counts = {k: sum(1 for p in data["problems"] if p["kind"] == k) for k in ("incomplete", "broken", "foreign")}
    listed = sum(not r["complete"] for r in data["runs"])  # an incomplete run with a report is one of the runs
    return (
        f"{runs} run{'s' * (runs != 1)} on {sets} data set{'s' * (sets != 1)} ({listed} incomplete); also "
        f"{counts['incomplete'] - listed} incomplete without a report, {counts['broken']} broken, "
        f"{counts['foreign']} foreign"
    )


def render(data: dict[str, Any]) -> str:
    folder = Path(data["work_dir"]).name or data["work_dir"]
    return render_template("index.html", data=data, folder=folder, summary=_summary(data), problems=data["problems"])


PROBE_FILE, PAGE_FILE = "probe.json", "probe.html"  # a probe's saved record and its page
PROBE_LIMIT = 64 << 20  # bytes read of a probe.json (a real one is tens of kilobytes)


def read_probe(root: Path) -> Any:
    """probe.json, untrusted: a plain file inside the probe folder (a FIFO must not hang the index); else None."""
    try:
        return json.loads(read_regular(root / PROBE_FILE, PROBE_LIMIT, within=root))
    except (OSError, ValueError, RecursionError, UnreadableFile):
        return None


def probe_summary(root: Path) -> dict[str, Any] | None:
    """A probe's model, headline and completeness; None when it is not a finished probe report."""
    saved = read_probe(root)
    if not isinstance(saved, dict) or not isinstance(saved.get("headline"), str) or not (root / PAGE_FILE).is_file():
        return None
    return {"model": str(saved.get("model")), "headline": saved["headline"], "complete": saved.get("complete") is True}
