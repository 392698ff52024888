"""Compare runs on the same data: a leaderboard that tells runs apart, and paired McNemar tests
on the shared questions (the statistics live in scoring/paired.py).

Arguments may be run directories or work directories (every run below them); runs that cannot
be compared (no report yet, unreadable files) are skipped with a note, not a crash.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from itertools import combinations
from pathlib import Path
from typing import Any

from .._terminal import printable
from ..errors import ConfigError
from ..rundir import CONFIG_FILE
from ..scoring.metrics import METRICS
from ..scoring.paired import mcnemar, pair
from .board import label, row, utf8
from .catalog import Found, read_answers, read_run, scan
from .charts import page

__all__ = ["Run", "compare", "load_run", "mcnemar", "to_html", "to_markdown"]


@dataclass(frozen=True)
class Run:
    path: Path
    report: dict[str, Any]
    correct: dict[str, bool]  # by question text, so runs pair on the sample itself
    row: dict[str, Any]  # the run as the index shows it: run id, samples, data, template, few-shot

    @property
    def label(self) -> str:
        return f"{self.row['model']} [{self.row['run']}]"

    @property
    def name(self) -> str:
        return label(self.row)


def load_run(path: str | Path) -> Run:
    """One run directory, ready to compare; one line saying why when it is not."""
    folder = Path(path).expanduser()
    if not (folder / CONFIG_FILE).is_file():
        raise ConfigError(f"{folder} is not a coinflip run directory (no {CONFIG_FILE})")
    run, why = _usable(read_run(folder.parent, folder))
    if run is None:
        raise ConfigError(f"{folder}: {why}")
    return run


def _usable(found: Found) -> tuple[Run | None, str]:
    if found.kind != "run":
        return None, found.reason
    answers = read_answers(found)
    if answers is None or not answers.correct:
        return None, f"no readable reviews; run `coinflip rescore {found.path}`"
    return Run(found.path, found.report, answers.correct, row(found)), ""


def gather(paths: list[str | Path]) -> tuple[list[Run], list[str]]:
    """The runs named by `paths` (run or work directories), and a note for each folder skipped."""
    runs: list[Run] = []
    notes: list[str] = []
    for given in paths:
        folder = Path(given).expanduser()
        if not folder.is_dir():
            raise ConfigError(f"{folder} is not a directory")
        if (folder / CONFIG_FILE).is_file():
            found = [read_run(folder.parent, folder)]
        else:
            found = scan(folder)
            if not found:
                notes.append(f"skipped {folder}: no coinflip run inside")
        for f in found:
            run, why = _usable(f)
            if run is not None:
                runs.append(run)
            else:
                notes.append(f"skipped {f.path}: {why}")
    unique = {r.path.resolve(): r for r in runs}  # a run named twice counts once
    return list(unique.values()), notes


def compare(paths: list[str | Path], force: bool = False) -> dict[str, Any]:
    runs, skipped = gather(paths)
    if len(runs) < 2:
        detail = f" ({'; '.join(skipped)})" if skipped else ""
        raise ConfigError(f"compare needs at least two runs with reports, found {len(runs)}{detail}")
    _unique_names(runs)
    datasets = {r.row["data"]["key"] for r in runs}
    if len(datasets) > 1 and not force:
        raise ConfigError(
            f"runs were made on different data ({_by_data(runs)}); pass --force to compare on the samples they share"
        )
    leaderboard = sorted(runs, key=lambda r: -(r.row["m"]["f1_score"][0] or 0.0))
    rank = {id(r): n for n, r in enumerate(leaderboard, 1)}
    pairs = []
    for a, b in combinations(leaderboard, 2):
        names = {"a": a.label, "b": b.label, "a_rank": rank[id(a)], "b_rank": rank[id(b)]}
        pairs.append({**names, **pair(a.correct, b.correct).stats()})
    return {
        "same_data": len(datasets) == 1,
        "warnings": warnings(leaderboard),
        "skipped": skipped,
        "leaderboard": [_entry(i + 1, r) for i, r in enumerate(leaderboard)],
        "pairs": pairs,
    }


def _unique_names(runs: list[Run]) -> None:
    """Runs in different work directories may share a folder name: then their paths from the
    folder that holds them all name them."""
    names = [r.row["run"] for r in runs]
    if len(set(names)) == len(names):
        return
    import os

    common = Path(os.path.commonpath([str(r.path.resolve()) for r in runs]))
    for r in runs:
        if names.count(r.row["run"]) > 1:
            r.row["run"] = r.path.resolve().relative_to(common).as_posix() or r.row["run"]


def _by_data(runs: list[Run]) -> str:
    groups: dict[str, list[str]] = {}
    for r in runs:
        groups.setdefault(_data(r.row), []).append(r.label)
    parts = []
    for data, labels in groups.items():
        shown = ", ".join(labels[:3]) + (f" and {len(labels) - 3} more" if len(labels) > 3 else "")
        parts.append(f"{data}: {shown}")
    return "; ".join(parts)


def _data(row: dict[str, Any]) -> str:
    data = row["data"]
    return f"{data['label']} {data['sha'][:12]}".strip()


def _entry(rank: int, r: Run) -> dict[str, Any]:
    row = r.row
    return {
        "rank": rank,
        "model": row["model"],
        "run_id": row["run"],
        "run": str(r.path),
        "name": r.name,
        "samples": row["samples"],
        "data": _data(row),
        "dataset_sha256": row["data"]["sha"],
        "template": row["template"] + (f" {row['template_hash']}" if row["template_hash"] else ""),
        "few_shot": row["few_shot"],
        "repeats": row["repeats"],
        "complete": row["complete"],
        "invalid_rate": row["invalid_rate"],
        "metric_compat": row["compat"],
        **{m: row["m"][m][0] for m in METRICS},
    }


def warnings(runs: list[Run]) -> list[str]:
    """What makes a plain ranking of these runs misleading, one line each."""
    out = []
    sizes = sorted({r.row["samples"] for r in runs if r.row["samples"] is not None})
    if len(sizes) > 1:
        out.append(
            f"runs differ in size ({sizes[0]:.0f} to {sizes[-1]:.0f} samples): each is scored on its own questions, "
            "so their ranks are not like for like; McNemar pairs only the shared questions"
        )
    datasets = {_data(r.row) for r in runs}
    if len(datasets) > 1:
        out.append(f"runs used different data ({'; '.join(sorted(datasets))}): only shared questions were paired")
    for key, what in (("template", "prompt templates"), ("few_shot", "few-shot counts"), ("compat", "arithmetics")):
        values = {str(r.row[key]) for r in runs}
        if len(values) > 1:
            out.append(f"runs differ in {what} ({', '.join(sorted(values))})")
    repeated = [r.label for r in runs if (r.row["repeats"] or 1) > 1]
    if repeated:
        out.append(
            f"{', '.join(repeated)} asked each question several times: McNemar pairs one verdict per question, "
            "right when most of its repeats are right (majority vote)"
        )
    for r in runs:
        if not r.row["complete"]:
            out.append(f"{r.label} is incomplete: {'; '.join(r.row['warnings']) or 'see its report'}")
    return out


def _f(value: Any, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def _md(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def to_markdown(result: dict[str, Any]) -> str:
    head = "| rank | model | run | samples | data | template | few-shot | " + " | ".join(METRICS) + " | invalid |"
    lines = ["# CoinFlip comparison", "", head, "|" + "---|" * (len(METRICS) + 8)]
    for r in result["leaderboard"]:
        values = " | ".join(_f(r[m], ".4f") for m in METRICS)
        lines.append(
            f"| {r['rank']} | {_md(r['model'])} | {_md(r['run_id'])} | {_f(r['samples'], '.0f')} | {_md(r['data'])} "
            f"| {_md(r['template'])} | {_f(r['few_shot'], '.0f')} | {values} | {_f(r['invalid_rate'], '.1%')} |"
        )
    lines += [
        "",
        "## Paired McNemar tests (shared samples)",
        "",
        "| A | B | shared | only A right | only B right | chi2 | p | chi2 (corrected) | p (corrected) | p (exact) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p in result["pairs"]:
        lines.append(
            f"| {_md(p['a'])} | {_md(p['b'])} | {p['shared']} | {p['only_a']} | {p['only_b']} | {p['chi2']:.4f} "
            f"| {p['p_value']:.4g} | {p['chi2_corrected']:.4f} | {p['p_corrected']:.4g} | {p['p_exact']:.4g} |"
        )
    notes = [f"- **Warning:** {_md(w)}" for w in result["warnings"]] + [f"- {_md(s)}" for s in result["skipped"]]
    return "\n".join(lines + ([""] + notes if notes else [])) + "\n"


def to_html(result: dict[str, Any]) -> str:
    rows = "".join(
        f"<tr><td>{r['rank']}</td><td>{escape(r['model'])}</td><td>{escape(r['run_id'])}</td><td>{_f(r['samples'], '.0f')}</td>"
        f"<td>{escape(r['data'])}</td><td>{escape(r['template'])}</td><td>{_f(r['few_shot'], '.0f')}</td>"
        + "".join(f"<td>{_f(r[m], '.4f')}</td>" for m in METRICS)
        + f"<td>{_f(r['invalid_rate'], '.1%')}</td></tr>"
        for r in result["leaderboard"]
    )
    pairs = "".join(
        f"<tr><td>{escape(p['a'])}</td><td>{escape(p['b'])}</td><td>{p['shared']}</td><td>{p['only_a']}</td><td>{p['only_b']}</td>"
        f"<td>{p['chi2']:.4f}</td><td>{p['p_value']:.4g}</td><td>{p['chi2_corrected']:.4f}</td>"
        f"<td>{p['p_corrected']:.4g}</td><td>{p['p_exact']:.4g}</td></tr>"
        for p in result["pairs"]
    )
    notes = "".join(f"<p><b>Warning:</b> {escape(w)}</p>" for w in result["warnings"])
    notes += "".join(f"<p>{escape(s)}</p>" for s in result["skipped"])
    head = "".join(f"<th>{m}</th>" for m in METRICS)
    return page(
        "CoinFlip comparison",
        f"<h1>CoinFlip comparison</h1>{notes}<table><tr><th>rank</th><th>model</th><th>run</th><th>samples</th><th>data</th>"
        f"<th>template</th><th>few-shot</th>{head}<th>invalid</th></tr>{rows}</table>"
        "<h2>Paired McNemar tests</h2><table><tr><th>A</th><th>B</th><th>shared</th><th>only A right</th><th>only B right</th>"
        f"<th>chi2</th><th>p</th><th>chi2 corrected</th><th>p corrected</th><th>p exact</th></tr>{pairs}</table>",
    )


def write_files(result: dict[str, Any], out: Path) -> list[Path]:
    import json

    from ..errors import StorageError

    files = {"compare.md": to_markdown(result), "compare.html": to_html(result)}
    files["compare.json"] = json.dumps(result, indent=2, ensure_ascii=False) + "\n"
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, content in files.items():
            (out / name).write_bytes(utf8(content))
    except OSError as exc:
        raise StorageError(f"cannot write the comparison to {out}: {exc.strerror or exc}") from None
    return [out / name for name in files]


def default_out(result: dict[str, Any]) -> Path:
    """compare/ beside the runs: in the work directory they share (their runs' parent), so one
    comparison does not overwrite another of other runs."""
    import os

    parents = {str(Path(r["run"]).resolve().parent) for r in result["leaderboard"]}
    shared = os.path.commonpath(sorted(parents)) if parents else ""
    return Path(shared) / "compare" if shared and shared != "/" else Path("outputs") / "compare"


def print_result(result: dict[str, Any], written: list[Path], console: Any = None) -> None:
    """The terminal view; every user string goes in as plain text, never as rich markup."""
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = console or Console()
    board = Table(title="CoinFlip leaderboard", title_justify="left", box=box.SIMPLE_HEAD)
    board.add_column("#")
    board.add_column("run: model, id, samples, data, template, few-shot", overflow="fold", min_width=20, ratio=1)
    for column in ("f1", "acc", "prec", "recall", "yes", "invalid"):  # f1_score, accuracy, precision, recall, yes_ratio
        board.add_column(column, justify="right")
    for r in result["leaderboard"]:
        name = Text(printable(r["model"]), style="bold")
        name.append(printable(f"\n{r['run_id']} · {_f(r['samples'], '.0f')} q · {r['data']} · {r['template']} · "))
        name.append(f"{_f(r['few_shot'], '.0f')}-shot" + ("" if r["complete"] else " · INCOMPLETE"))
        scores = [_f(r[m], ".3f") for m in METRICS]
        board.add_row(Text(str(r["rank"])), name, *(Text(c) for c in [*scores, _f(r["invalid_rate"], ".1%")]))
    console.print(board)
    tests = Table(
        title="Paired McNemar tests (shared samples; A and B by rank; cc: with continuity correction)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    for column in ("A", "B", "shared", "only A", "only B", "chi2", "p", "chi2 cc", "p cc", "p exact"):
        tests.add_column(column, overflow="fold")
    for p in result["pairs"]:
        cells = [f"#{p['a_rank']}", f"#{p['b_rank']}", str(p["shared"]), str(p["only_a"]), str(p["only_b"])]
        cells += [f"{p['chi2']:.4f}", f"{p['p_value']:.4g}", f"{p['chi2_corrected']:.4f}", f"{p['p_corrected']:.4g}"]
        cells.append(f"{p['p_exact']:.4g}")
        tests.add_row(*(Text(c) for c in cells))
    console.print(tests)
    for warning in result["warnings"]:
        console.print(Text.assemble(("warning: ", "yellow"), printable(warning)))
    for note in result["skipped"]:
        console.print(Text.assemble(("note: ", "cyan"), printable(note)))
    console.print(Text(printable("wrote " + ", ".join(str(p) for p in written))))
