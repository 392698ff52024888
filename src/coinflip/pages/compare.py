"""`coinflip compare`: a leaderboard per group of runs that share questions, with paired McNemar
tests (scoring/paired.py), printed and written as compare.md and compare.json."""

from __future__ import annotations

import html
import json
import os
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

from .._terminal import one_line
from ..errors import ConfigError
from ..scoring.metrics import METRICS
from ..scoring.paired import pair
from ..scoring.schema import altered
from .board import label, ranked, row, setup, size, write_whole
from .catalog import Found, holds_settings, read_answers, read_run, scan
from .html import fmt, shown, text


@dataclass(frozen=True)
class Run:
    path: Path
    correct: dict[str, bool]  # by question text and target, so runs pair on the sample itself
    row: dict[str, Any]  # the run as the index shows it: run id, samples, data, template, few-shot

    @property
    def label(self) -> str:
        return f"{self.row['model']} [{self.row['run']}]"


def _usable(found: Found) -> tuple[Run | None, str]:
    if found.kind != "run":
        return None, found.reason
    answers = read_answers(found)
    if answers is None or not answers.correct:
        return None, found.reason or f"no readable reviews; run `coinflip rescore {found.path}`"
    keyed = {f"{q}\0{answers.first[q][2]}": right for q, right in answers.correct.items()}  # a target flipped: other
    return Run(found.path, keyed, row(found) | setup(found.config, found.report)), ""


def gather(paths: list[str | Path]) -> tuple[list[Run], list[str]]:
    runs: list[Run] = []
    notes: list[tuple[Path, str]] = []
    for given in paths:
        folder = Path(given).expanduser()
        if not folder.is_dir():
            raise ConfigError(f"{folder} is not a directory")
        if holds_settings(folder):
            found = [read_run(folder.parent, folder)]
        else:
            found = scan(folder)
            if not found:
                notes.append((folder, f"skipped {folder}: no coinflip run inside"))
        for f in found:
            run, why = _usable(f)
            if run is not None:
                runs.append(run)
            else:
                notes.append((f.path, f"skipped {f.path}: {why}"))
    unique = {r.path.resolve(): r for r in runs}  # a run named twice counts once; skipped once (a link), not at all
    return list(unique.values()), [note for path, note in notes if path.resolve() not in unique]


def compare(paths: list[str | Path], force: bool = False) -> dict[str, Any]:
    """Runs linked by shared questions on the same data (with `force`, any data) form a group, ranked
    and tested on its own; runs that share no question get no test or rank against each other."""
    runs, skipped = gather(paths)
    if len(runs) < 2:
        detail = f" ({_few(skipped, 2)})" if skipped else ""
        raise ConfigError(f"compare needs at least two runs with reports, found {len(runs)}{detail}")
    _unique_names(runs)
    links = [
        (a, b)
        for a, b in combinations(range(len(runs)), 2)
        if (force or runs[a].row["data"]["key"] == runs[b].row["data"]["key"])
        and not runs[a].correct.keys().isdisjoint(runs[b].correct)
    ]
    members = _components(len(runs), links)
    groups = [m for m in members if len(m) > 1]
    if not groups:
        raise ConfigError(_nothing_to_compare(runs, force))
    groups.sort(key=lambda m: (-len(m), min(m)))
    out: dict[str, Any] = {"same_data": len({r.row["data"]["key"] for r in runs}) == 1, "warnings": []}
    out |= {"skipped": skipped, "leaderboard": [], "pairs": [], "untested": [], "groups": []}
    for n, group in enumerate(groups, 1):
        board = sorted((runs[i] for i in group), key=_f1, reverse=True)
        places = ranked([_f1(r) for r in board])  # equal F1, equal rank: 1, =2, =2, 4
        rank = {id(r): k for r, (k, _) in zip(board, places, strict=True)}
        tied = {id(r) for r, (_, shared) in zip(board, places, strict=True) if shared}
        title = _group_title(board, n, len(groups))
        out["groups"].append({"group": n, "title": title, "runs": [r.row["run"] for r in board]})
        prefix = f"{title}: " if len(groups) > 1 else ""
        out["warnings"] += [prefix + w for w in warnings(board)]
        out["leaderboard"] += [{**_entry(rank[id(r)], r), "tied": id(r) in tied, "group": n} for r in board]
        for a, b in combinations(board, 2):  # a group is on one data set (with --force, any): each pair counts
            st = pair(a.correct, b.correct).stats()
            names = {"group": n, "a": a.label, "b": b.label, "a_rank": rank[id(a)], "b_rank": rank[id(b)]}
            names |= {"a_short": _short(rank[id(a)], a, tied), "b_short": _short(rank[id(b)], b, tied)}
            if st["shared"]:
                out["pairs"].append({**names, **st})
            else:
                out["untested"].append({**names, "reason": "no shared question"})
    out["left_out"] = _left_out(runs, [m[0] for m in members if len(m) == 1], force)
    return out


def _f1(r: Run) -> float:
    """F1 as the index ranks it: to 12 places, so equal scores tie; undefined (no YES answer or target)
    ranks after every defined one, 0 included."""
    f1 = r.row["m"]["f1_score"][0]
    return -1.0 if f1 is None else round(f1, 12)


def _short(rank: int, r: Run, tied: set[int]) -> str:
    """How the terminal's paired tests name a run: its rank, with its run id where the rank is shared."""
    return f"#={rank} {r.row['run']}" if id(r) in tied else f"#{rank}"


def _components(n: int, links: list[tuple[int, int]]) -> list[list[int]]:
    """Runs linked by shared questions, directly or through others, in order of their first run."""
    groups = [{i} for i in range(n)]
    for a, b in links:
        ga, gb = (next(g for g in groups if i in g) for i in (a, b))
        if ga is not gb:
            ga |= gb
            groups.remove(gb)
    return sorted(sorted(g) for g in groups)


def _group_title(board: list[Run], n: int, total: int) -> str:
    data = sorted({_data(r.row) for r in board})
    return (f"G{n} " if total > 1 else "") + (data[0] if len(data) == 1 else f"{len(data)} data sets")


def _few(items: list[str], keep: int = 3) -> str:
    listed = "; ".join(items[:keep])
    return listed + (f"; and {len(items) - keep} more" if len(items) > keep else "")


def _left_out(runs: list[Run], alone: list[int], force: bool) -> list[str]:
    by_data = Counter(r.row["data"]["key"] for r in runs)
    only = [i for i in alone if by_data[runs[i].row["data"]["key"]] == 1 and not force]
    apart = [i for i in alone if i not in only]
    out = []
    if only:
        names = [f"{runs[i].row['model']} [{runs[i].row['run']}] on {_data(runs[i].row)}" for i in only]
        out.append(
            f"{len(only)} run{'s' * (len(only) != 1)} left out, each the only run on its data: {_few(names)}"
            + ("" if force else " (--force pairs runs on different data where they share questions)")
        )
    if apart:
        names = [runs[i].label for i in apart]
        out.append(
            f"{len(apart)} run{'s' * (len(apart) != 1)} left out, sharing no question with any other run "
            f"(no test is possible without shared questions): {_few(names)}"
        )
    return out


def _nothing_to_compare(runs: list[Run], force: bool) -> str:
    sets = Counter(_data(r.row) for r in runs)
    if force:
        return f"nothing to compare: no two of the {len(runs)} runs share a question, and a paired test needs shared questions"
    if all(n == 1 for n in sets.values()):
        listed = _few([f"{d}: 1 run" for d in sets])
        return (
            f"nothing to compare: {len(runs)} runs on {len(sets)} data sets ({listed}); "
            "pass --force to pair runs on different data on the questions they share"
        )
    return (
        f"nothing to compare: no two of the {len(runs)} runs share a question (a paired test needs them); "
        "runs with the same --limit and --seed ask the same questions"
    )


def _unique_names(runs: list[Run]) -> None:
    """Runs of different work directories may share a folder name: then their common path names them."""
    names = [r.row["run"] for r in runs]
    if len(set(names)) == len(names):
        return
    common = Path(os.path.commonpath([str(r.path.resolve()) for r in runs]))
    for r in runs:
        if names.count(r.row["run"]) > 1:
            r.row["run"] = r.path.resolve().relative_to(common).as_posix() or r.row["run"]


def _data(row: dict[str, Any]) -> str:
    data = row["data"]
    return f"{data['label']} {data['sha'][:12]}".strip()


def _entry(rank: int, r: Run) -> dict[str, Any]:
    row = r.row
    return {
        "rank": rank, "model": row["model"], "run_id": row["run"], "run": str(r.path), "name": label(row),
        "samples": row["samples"], "data": _data(row), "dataset_sha256": row["data"]["sha"],
        "template": row["template"] + (f" {row['template_hash']}" if row["template_hash"] else ""),
        "few_shot": row["few_shot"], "repeats": row["repeats"], "complete": row["complete"],
        "invalid_rate": row["invalid_rate"], "metric_compat": row["compat"], **{m: row["m"][m][0] for m in METRICS},
    }  # fmt: skip


def warnings(runs: list[Run]) -> list[str]:
    """What makes a plain ranking of these runs misleading, one line each."""
    out = []
    sizes = sorted({r.row["samples"] for r in runs if r.row["samples"] is not None})
    asked = "; ".join(sorted({r.row["subset"] or "all questions" for r in runs}))  # one size on other questions
    unlike = f"differ in size ({sizes[0]:.0f} to {sizes[-1]:.0f} samples)" if len(sizes) > 1 else f"asked {asked}"
    if len(sizes) > 1 or len({frozenset(r.correct) for r in runs}) > 1:  # each scored on its own questions
        out.append(f"runs {unlike}: their ranks are not like for like; McNemar pairs only the shared questions")
    datasets = {_data(r.row) for r in runs}
    if len(datasets) > 1:
        out.append(f"runs used different data ({'; '.join(sorted(datasets))}): only shared questions were paired")
    keys = {k for r in runs for k in r.correct}  # question and target: a question twice here has two targets
    if flipped := len(keys) - len({k.rpartition("\0")[0] for k in keys}):
        out.append(f"{flipped} question(s) have another target in another run's data: not paired there")
    for key, what in (("template", "prompt templates"), ("few_shot", "few-shot counts"), ("compat", "arithmetics")):
        values = {fmt(r.row[key], "d", "?") for r in runs}
        if len(values) > 1:
            out.append(f"runs differ in {what} ({', '.join(sorted(values))})")
    shots = {r.row["shots"] for r in runs if r.row["shots"]}
    if len(shots) > 1:
        out.append(f"runs drew different few-shot examples ({', '.join(sorted(shots))}): their prompts differ")
    settings = [r.row["generation"] for r in runs]
    if changed := sorted({str(k) for g in settings for k in g if any(h.get(k) != g.get(k) for h in settings)}):
        out.append(f"runs differ in generation settings ({text(', '.join(changed))})")  # names only: values may be keys
    repeated = [r.label for r in runs if (r.row["repeats"] or 1) > 1]
    if repeated:
        out.append(
            f"{', '.join(repeated)} asked each question several times: McNemar pairs one verdict per question, "
            "right when its majority vote is (the more frequent valid YES/NO answer; a tie is no answer), as in the report"
        )
    for r in runs:
        if not r.row["complete"]:
            out.append(f"{r.label} is incomplete: {'; '.join(r.row['warnings']) or 'see its report'}")
        elif said := altered(r.row):
            out.append(f"{r.label}: {said}")
    return out


def _f(value: Any, spec: str) -> str:
    return fmt(value, spec, "—")


PAIR_HEAD = (
    "A", "B", "shared", "only A right", "only B right", "chi2", "p", "chi2 (corrected)", "p (corrected)", "p (exact)",
)  # fmt: skip


PAIR_KEYS = ("chi2", "p_value", "chi2_corrected", "p_corrected", "p_exact")
BOARD_HEAD = ("rank", "model", "run", "samples", "data", "template", "few-shot", *METRICS, "invalid")


def _board_cells(r: dict[str, Any]) -> list[str]:
    return [
        shown_rank(r),
        str(r["model"]),
        str(r["run_id"]),
        _f(r["samples"], "d"),
        str(r["data"]),
        str(r["template"]),
        _f(r["few_shot"], "d"),
        *(_f(r[m], ".4f") for m in METRICS),
        _f(r["invalid_rate"], ".1%"),
    ]


def shown_rank(r: dict[str, Any]) -> str:
    """A rank as the index shows it: "=1" where equal F1 shares it."""
    return ("=" if r.get("tied") else "") + str(r["rank"])


def _pair_cells(p: dict[str, Any], names: bool = True) -> list[str]:
    a, b = (str(p["a"]), str(p["b"])) if names else (one_line(p["a_short"]), one_line(p["b_short"]))
    counts = [str(p[k]) for k in ("shared", "only_a", "only_b")]
    tests = [f"{p[k]:.4f}" if k.startswith("chi2") else f"{p[k]:.4g}" for k in PAIR_KEYS]
    return [a, b, *counts, *tests]


def _notes(result: dict[str, Any]) -> list[str]:
    untested = [f"{u['a']} and {u['b']}: {u['reason']}, no test" for u in result.get("untested", [])]
    return [*untested, *result.get("left_out", []), *result["skipped"]]


def _in_group(result: dict[str, Any], key: str, n: int) -> list[dict[str, Any]]:
    return [x for x in result[key] if x.get("group", 1) == n]


# a backslash, a `|` (ends the cell), brackets (`[x](javascript:...)` is a link), backticks (code),
# `*` and `~` (emphasis, strikethrough) are escaped; a line break (ends the row) becomes a space
_INLINE = str.maketrans(
    {"\\": "\\\\", "|": "\\|", "[": "\\[", "]": "\\]", "`": "\\`", "*": "\\*", "~": "\\~", "\n": " ", "\r": " "}
)
_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")  # at a word's edge; inside one (f1_score) it is text
# what makes a heading, a list item or a rule where a block begins (after "- " in a list): "# ", "- ",
# "+ ", "---", "1. ", "1) "
_BLOCK = re.compile(r"#{1,6}(?=\s|$)|[+-](?=\s|$)|-{3,}|\d{1,9}(?=[.)](\s|$))")


def _md(value: Any) -> str:
    """One line, `shown`, with HTML as entities and markdown syntax escaped wherever it stands."""
    out = _UNDERSCORE.sub(r"\\_", html.escape(shown(value), quote=False).translate(_INLINE).strip())
    marker = _BLOCK.match(out)
    if marker is None:
        return out
    at = marker.end() if out[0].isdigit() else 0  # the dot of "1. ", else the first character
    return f"{out[:at]}\\{out[at:]}"


def _md_table(head: Sequence[Any], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(_md(c) for c in cells) + " |" for cells in [head, *rows]]
    return [lines[0], "|" + "---|" * len(head), *lines[1:]]


def to_markdown(result: dict[str, Any]) -> str:
    lines = ["# CoinFlip comparison"]
    for g in result["groups"]:
        n = g["group"]
        lines += ["", f"## {_md(g['title'])}" if len(result["groups"]) > 1 else "## Leaderboard", ""]
        lines += _md_table(BOARD_HEAD, [_board_cells(r) for r in _in_group(result, "leaderboard", n)])
        pairs = _in_group(result, "pairs", n)
        if pairs:
            lines += ["", "### Paired McNemar tests (shared questions)", ""]
            lines += _md_table(PAIR_HEAD, [_pair_cells(p) for p in pairs])
    notes = [f"- **Warning:** {_md(w)}" for w in result["warnings"]]
    notes += [f"- {_md(s)}" for s in _notes(result)]
    return "\n".join(lines + ([""] + notes if notes else [])) + "\n"


def write_files(result: dict[str, Any], out: Path) -> list[Path]:
    files = {"compare.md": to_markdown(result), "compare.json": json.dumps(result, indent=2, ensure_ascii=False) + "\n"}
    for name, content in files.items():  # compare/ may lie in a work directory someone else wrote
        write_whole(out / name, content, "choose another folder with --out")
    return [out / name for name in files]


def default_out(result: dict[str, Any]) -> Path:
    """compare/ in the work directory the runs share: one comparison does not overwrite another's."""
    parents = {str(Path(r["run"]).resolve().parent) for r in result["leaderboard"]}
    shared = os.path.commonpath(sorted(parents)) if parents else ""
    out = Path(shared) / "compare" if shared and shared != "/" else Path("outputs") / "compare"
    if out.is_symlink():  # left in a work directory someone else wrote: a folder of our own, never written through
        out.unlink()
    return out


def print_result(result: dict[str, Any], written: list[Path], console: Any = None) -> None:
    """Every user string goes in as plain text, never markup. No number or id breaks across lines: a
    terminal's tables are as wide as their longest word, elsewhere (a pipe, a CI log) as they need."""
    from rich import box
    from rich.console import Console
    from rich.measure import Measurement
    from rich.table import Table
    from rich.text import Text

    console = console or Console()
    several, tables, wide = len(result["groups"]) > 1, [], console.options.update_width(10_000)
    for g in result["groups"]:
        title = "CoinFlip leaderboard" + (f" - {g['title']}" if several else "")
        board = Table(title=Text(one_line(title)), title_justify="left", box=box.SIMPLE_HEAD)
        board.add_column("#", no_wrap=True)
        board.add_column("run: model, id, size, data, template, few-shot", min_width=20, ratio=1)
        for column in ("f1", "acc", "prec", "recall", "yes", "invalid"):  # METRICS, then the invalid rate
            board.add_column(column, justify="right", no_wrap=True)
        for r in _in_group(result, "leaderboard", g["group"]):
            name = Text(one_line(r["model"]), style="bold")
            name.append("\n" + one_line(f"{r['run_id']} · {size(r)} · {r['data']} · {r['template']} · "))
            name.append(one_line(f"{_f(r['few_shot'], 'd')}-shot") + ("" if r["complete"] else " · INCOMPLETE"))
            scores = [_f(r[m], ".3f") for m in METRICS]
            board.add_row(Text(shown_rank(r)), name, *(Text(c) for c in [*scores, _f(r["invalid_rate"], ".1%")]))
        tables.append(board)
        pairs = _in_group(result, "pairs", g["group"])
        if pairs:
            title = "Paired McNemar tests (shared questions; A and B by rank; cc: with continuity correction)"
            tests = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, padding=0)
            for column in ("A", "B", "shared", "only A", "only B", "chi2", "p", "chi2 cc", "p cc", "p exact"):
                tests.add_column(column, no_wrap=True)
            for p in pairs:
                tests.add_row(*(Text(c) for c in _pair_cells(p, names=False)))
            tests.min_width = Measurement.get(console, wide, tests).maximum  # headers too: no column wraps
            tables.append(tests)
    need = [Measurement.get(console, wide, t) for t in tables]
    if need:  # a terminal wraps the run column at spaces; elsewhere nothing wraps
        widest = max(m.maximum for m in need)
        console.width = max(console.width, *(m.minimum for m in need)) if console.is_terminal else widest
    for table in tables:
        console.print(table)
    for warning in result["warnings"]:
        console.print(Text.assemble(("warning: ", "yellow"), one_line(warning)), soft_wrap=True)
    for note in _notes(result):
        console.print(Text.assemble(("note: ", "cyan"), one_line(note)), soft_wrap=True)
    console.print(Text(one_line("wrote " + ", ".join(str(p) for p in written))), soft_wrap=True)
