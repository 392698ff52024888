"""`coinflip probe`: each variant and length an ordinary run (runs/<name>/ on data/<name>/) in one probe directory,
then probe.json, probe.html and the index; `--use-cache PROBE_DIR` resumes them all (the data is seeded)."""

from __future__ import annotations

import json
import shlex
import shutil
import sys
import tempfile
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from .. import __version__
from .._terminal import one_line
from ..config import TaskConfig, safe_name
from ..data.generate import PeopleRange, generate_file, write_rows
from ..data.load import Record, load_dataset
from ..data.prompts import IN_CHINESE
from ..errors import KEPT, CoinflipError, ConfigError, RunIncomplete, short
from ..jsonl import iter_reviews
from ..pages.board import write_whole
from ..pages.html import relative
from ..pages.index import PAGE_FILE, PROBE_FILE, read_probe, refresh
from ..rundir import CONFIG_FILE, RunDir, busy, held, in_use
from ..scoring.cost import money
from . import variants
from .page import render
from .variants import BASE, FRESH, VARIANTS, Variant, choose, fresh_twins, name_pool, restyled

DEFAULT_LENGTHS = "2-8"
LENGTH_COUNT_MAX = 200  # questions per length by default: the base set's size, at most this


@dataclass(frozen=True)
class ProbeOptions:
    """What a probe runs besides the base set; None: not given (a resume keeps the saved value)."""

    variants: tuple[str, ...] | None = None  # default: every variant
    lengths: str | None = None  # "2-8"; "0" or "none": no length curve
    length_count: int | None = None


@dataclass(frozen=True)
class Settings:
    variants: tuple[Variant, ...]
    lengths: PeopleRange | None
    length_count: int | None
    in_work_dir: bool  # written into the work directory itself (--no-timestamp), not a folder of it

    def saved(self) -> dict[str, Any]:
        names, lengths = [v.name for v in self.variants], str(self.lengths) if self.lengths else None
        return dict(variants=names, lengths=lengths, length_count=self.length_count, in_work_dir=self.in_work_dir)


def settle(options: ProbeOptions, saved: dict[str, Any] | None = None, in_work_dir: bool = False) -> Settings:
    """The options given, else the saved ones (on a resume), else the defaults; checked once."""
    saved = saved or {}
    names = options.variants if options.variants is not None else saved.get("variants")
    if names is None:
        names = [v.name for v in VARIANTS]
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        raise ConfigError("probe variants must be a list of names")
    lengths = options.lengths if options.lengths is not None else saved.get("lengths", DEFAULT_LENGTHS)
    try:
        people = None if lengths in (None, "", "0", "none") else PeopleRange.parse(str(lengths))
    except ConfigError:
        raise ConfigError(
            f"--lengths must be a number of people or a range like 2-8 (0: none), got {short(lengths)}"
        ) from None
    count = options.length_count if options.length_count is not None else saved.get("length_count")
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
        raise ConfigError(f"--length-count must be a whole number >= 1, got {short(count)}")
    return Settings(choose(names), people, count, bool(saved.get("in_work_dir", in_work_dir)))


def probe(config: TaskConfig, options: ProbeOptions = ProbeOptions()) -> dict[str, Any]:
    """Run every variant and the length curve; write probe.json, probe.html and the index."""
    from ..run.stop import Interrupted, stopped_by

    new = not (config.use_cache or config.no_timestamp)  # a folder of its own, made here
    config, root, settings = _open(config, options)
    try:
        with held(root):  # one process per probe, as per run
            try:
                return _probe(config, root, settings)
            finally:  # a new probe whose base run never started cannot be resumed (_open): it leaves nothing
                if new and not (root / "runs" / BASE.name / CONFIG_FILE).is_file():
                    shutil.rmtree(root, ignore_errors=True)
    except Interrupted as exc:  # a stop between its runs (one in a run is that run's RunIncomplete)
        raise RunIncomplete(f"{stopped_by(exc)}{_resume(root, 'resume with') or ' before the probe started'}") from None


def _probe(config: TaskConfig, root: Path, settings: Settings) -> dict[str, Any]:
    from ..run.plan import few_shot_pool, prepare

    base = prepare(_run_config(config, root, BASE.name, None))
    records, pool = list(base.dataset), few_shot_pool(config)
    if resumed := (root / "runs" / BASE.name / CONFIG_FILE).is_file():  # checked aside before any is replaced
        with tempfile.TemporaryDirectory() as aside:
            _questions(config, root, settings, records, pool, Path(aside), check=True)
    plans, curve, runs = _questions(config, root, settings, records, pool, root / "data", check=not resumed)
    if any(v.name == "zh" for v in settings.variants) and config.prompt_template not in IN_CHINESE:
        print("note: the Chinese variant needs the default or direct template; skipped", file=sys.stderr)
    _save(root, {"settings": settings.saved(), "complete": False})
    reports, total, spent = {}, len(plans) + len(curve), list[float]()
    for i, ((variant, _, _), run) in enumerate(zip(plans, runs, strict=True), 1):
        print(one_line(f"probe {config.name}: {variant.title} ({i} of {total})"), file=sys.stderr, flush=True)
        reports[variant.name] = _run(run, spent)
    points = []
    for i, (people, data) in enumerate(curve, len(plans) + 1):
        print(one_line(f"probe {config.name}: {people} people ({i} of {total})"), file=sys.stderr, flush=True)
        points.append(_length(config, root, data, people, spent))
    result = _result(config, root, settings, base.dataset.source, records, plans, reports, points)
    _save(root, result)
    write_whole(root / PAGE_FILE, render(result))  # a resumed probe's folder may hold a link there
    refresh(root if settings.in_work_dir else root.parent)
    return result


def _questions(
    config: TaskConfig, root: Path, settings: Settings, records: list[Record], pool: list[Record], folder: Path,
    check: bool,
) -> tuple[list[Planned], list[tuple[int, Path]], list[TaskConfig]]:  # fmt: skip
    """Each variant's and length's questions in `folder`, and their runs, with `check` each checked before any goes
    on: settings given that one run resumed takes and a later one refuses would leave the probe unresumable as saved."""
    from ..run.plan import prepare
    from ..run.runner import resume_settings, same_run

    plans = _write_data(config, folder, settings, records, pool)
    lengths = range(settings.lengths.low, settings.lengths.high + 1) if settings.lengths else range(0)
    count = settings.length_count or min(len(records), LENGTH_COUNT_MAX)
    curve = [(people, _length_data(config, folder, people, count)) for people in lengths]
    runs = [_run_config(config, root, variant.name, data, template) for variant, data, template in plans]
    for run in [*runs, *(_run_config(config, root, data.name, data) for _, data in curve)] if check else ():
        if run.use_cache and in_use(Path(run.use_cache)):  # resumed alone: its questions are not rewritten under it
            raise busy(Path(run.use_cache))
        try:
            if run.use_cache:
                same_run(prepare(resume_settings(run)), Path(run.use_cache))
        except ConfigError as exc:
            raise ConfigError(f"the probe cannot resume with the settings given: {exc}") from None
    return plans, curve, runs


def _open(config: TaskConfig, options: ProbeOptions) -> tuple[TaskConfig, Path, Settings]:
    """A new probe directory, or the one --use-cache names with its saved settings."""
    if not config.use_cache:
        work, settings = Path(config.work_dir).expanduser(), settle(options, in_work_dir=config.no_timestamp)
        root = work if config.no_timestamp else _new_folder(work / f"probe_{datetime.now():%Y%m%d_%H%M%S}")
        if (root / "runs" / BASE.name / CONFIG_FILE).is_file():  # one whose base run never started goes again
            raise ConfigError(f"{root} already holds a probe; resume it with --use-cache {root}")
        return config, root, settings
    root = Path(config.use_cache).expanduser()
    saved = read_probe(root)
    if not isinstance(saved, dict) or not isinstance(saved.get("settings"), dict):
        raise ConfigError(f"{root} is not a probe directory (no readable {PROBE_FILE} with its settings)")
    base_run = root / "runs" / BASE.name
    if not (base_run / CONFIG_FILE).is_file():
        raise ConfigError(f"{root}: its base run never started, so nothing is saved to resume; start a new probe")
    from ..run.runner import resume_settings

    given = {name: getattr(config, name) for name in config.given if name != "use_cache"}
    resumed = resume_settings(TaskConfig.of(**given, use_cache=str(base_run)))
    return replace(resumed, use_cache=None, dataset_args=None), root, settle(options, saved.get("settings"))


def _new_folder(root: Path) -> Path:
    """`root`, or root_1, root_2, ... when a probe started in the same second took it (two never share one)."""
    for n in range(1000):
        path = root if n == 0 else root.with_name(f"{root.name}_{n}")
        try:
            path.mkdir(parents=True)
        except FileExistsError:
            continue
        except OSError as exc:
            raise ConfigError(f"cannot make {path}: {exc.strerror}") from None
        return path
    raise ConfigError(f"cannot find a free folder name beside {root}")


def _save(root: Path, content: dict[str, Any]) -> None:
    write_whole(root / PROBE_FILE, json.dumps(content, indent=2, ensure_ascii=False) + "\n", KEPT)


Planned = tuple[Variant, Path | None, str | None]  # variant, its data (the base: none), its template


def _write_data(
    config: TaskConfig, folder: Path, settings: Settings, records: list[Record], pool: list[Record]
) -> list[Planned]:
    """Each variant's questions in `folder`, the k-th written from the k-th base question."""
    planned: list[Planned] = []
    files: list[tuple[Path, list[tuple[str, str]], list[tuple[str, str]]]] = []
    for variant in settings.variants:
        if variant is BASE:
            planned.append((BASE, None, None))
            continue
        template = IN_CHINESE.get(config.prompt_template) if variant.name == "zh" else None
        if variant.name == "zh" and template is None:  # skipped (_probe says so)
            continue
        if variant is FRESH:
            where = (config.split, config.dataset_path, config.dataset_hub, config.dataset_id, config.dataset_dir)
            full = list(load_dataset(*where))
            rows = fresh_twins(records, name_pool(full), {r.question for r in full}, config.seed)
            examples = [(r.question, r.answer) for r in pool]
        else:
            assert variant.style is not None
            rows = restyled(records, variant.style, config.seed, variant.name)
            examples = restyled(pool, variant.style, config.seed, variant.name)
        data = folder / variant.name
        planned.append((variant, data, template))
        files.append((data, rows, examples))
    for data, rows, examples in files:  # each written once every variant's questions are made
        write_rows(data / "test.jsonl", rows, whole=True)  # a resumed probe's folder may hold a link there
        if examples:
            write_rows(data / "validation.jsonl", examples, whole=True)
    return planned


def _run_config(config: TaskConfig, root: Path, name: str, data: Path | None, prompt: str | None = None) -> TaskConfig:
    """One variant's run: the user's settings in runs/<name> (resumed when it exists), on its questions."""
    folder = root / "runs" / name
    changes: dict[str, Any] = {
        "work_dir": str(folder),
        "no_timestamp": True,
        "use_cache": str(folder) if (folder / CONFIG_FILE).is_file() else None,
        "quiet": True,
        "progress": sys.stderr.isatty() if config.progress is None else config.progress,
        "dataset_args": None,
    }
    if data is not None:
        changes |= {"dataset_path": str(data), "dataset_hub": "local", "limit": None, "limit_mode": "first"}
        changes["split"] = "test"
    if prompt is not None:
        changes["prompt_template"] = prompt
    return replace(config, **changes, given=config.given | changes.keys())  # over the saved: a resume from elsewhere


def _run(config: TaskConfig, spent: list[float]) -> dict[str, Any]:
    """One variant's run, capped at what --max-cost leaves after the probe's runs before it (`spent`: what each
    cost, then this one's); a run that stops says how to resume the whole probe."""
    from ..run.runner import run_task

    cap = config.max_cost
    if cap is not None:  # the probe's cap, not each run's
        config = replace(config, max_cost=max(cap - sum(spent), 0.0), given=config.given | {"max_cost"})
    try:
        report: dict[str, Any] = run_task(config)
    except CoinflipError as exc:
        if exc.exit_code != 1 and "resume with:" not in str(exc):  # a refusal mid-run (a key revoked) says it too
            raise
        before = f"its runs before cost {sum(spent):.4f}"
        left = f" (--max-cost {money(cap)} is the probe's: {before})" if cap and spent else ""
        raise type(exc)(f"{exc}{left}{_resume(Path(config.work_dir).parent.parent, 'or the whole probe')}") from None
    spent.append((report.get("cost") or {}).get("total") or 0.0)
    return report


def unfinished(result: dict[str, Any]) -> str | None:
    """Why a finished probe exits 1, and how to resume it; None when it is done (or its errors ignored)."""
    if result["complete"] or result["errors_ignored"]:
        return None
    runs = [v["name"] for v in result["variants"] if not v["complete"]]
    runs += [p["run"].removeprefix("runs/") for p in result["length"]["points"] if not p["complete"]]
    where = _resume(Path(result["directory"]), "resume with")
    return f"the probe is incomplete: samples without a reply in {', '.join(runs)}{where}"


def _resume(root: Path, words: str) -> str:
    """How to resume the whole probe; nothing until its base run is saved (`_open` could not resume it)."""
    if not (root / "runs" / BASE.name / CONFIG_FILE).is_file():
        return ""
    return f"; {words}: coinflip probe --use-cache {shlex.quote(str(root))}"


def _length_data(config: TaskConfig, folder: Path, people: int, count: int) -> Path:
    """The questions of one point of the length curve in `folder`: `count` fresh ones with `people` people."""
    data, size = folder / f"people_{people:02d}", PeopleRange(people, people)
    generate_file(data / "test.jsonl", size, count, config.seed + people, whole=True)
    if config.few_shot_num:
        examples = max(50, config.few_shot_num + 1)
        generate_file(data / "validation.jsonl", size, examples, config.seed + 100_000 + people, whole=True)
    return data


def _length(config: TaskConfig, root: Path, data: Path, people: int, spent: list[float]) -> dict[str, Any]:
    """One point of the length curve: the run on its questions, and always-yes on them."""
    report = _run(_run_config(config, root, data.name, data), spent)
    shown = {**report, **report["forced"]} if config.force_answer else report
    return {
        "people": people,
        "samples": shown["counts"]["samples"],
        "accuracy": shown["metrics"]["accuracy"],
        "interval": shown["intervals"]["accuracy"],
        "f1_score": shown["metrics"]["f1_score"],
        "invalid_rate": shown["counts"]["invalid_rate"],
        "complete": report["complete"],
        "errors_ignored": report["errors_ignored"],
        "run": f"runs/{data.name}",
        "always_yes": report["baselines"]["always-yes"]["accuracy"],
    }


def _by_base(run: Path, model: str, base_of: dict[int, str], forced: bool, compat: str) -> dict[str, bool]:
    """Right or not per question (by majority vote, as the report counts), keyed by the base question it was
    written from (`base_of`: id to key), so every variant pairs with the base; `forced`: the forced view."""
    from ..scoring.reducers import Votes

    votes = Votes(compat, forced)
    try:
        for review in iter_reviews(RunDir(run, model).reviews):
            question = base_of.get(review["id"])
            if question is not None:
                votes.add(question, review)
    except OSError:
        return {}  # unreadable reviews pair nothing; the verdict says so
    return votes.right()


def _result(
    config: TaskConfig,
    root: Path,
    settings: Settings,
    source: dict[str, Any],
    records: list[Record],
    plans: list[Planned],
    reports: dict[str, dict[str, Any]],
    points: list[dict[str, Any]],
) -> dict[str, Any]:
    bundled = source.get("source") == "bundled"
    forced = config.force_answer
    answers = {}
    for variant, _, _ in plans:
        ids = [r.id for r in records] if variant is BASE else range(len(records))
        base_of = {i: str(k) for k, i in enumerate(ids)}  # the k-th base question (a text may come twice)
        run = root / "runs" / variant.name
        answers[variant.name] = _by_base(run, config.name, base_of, forced, config.metric_compat)
    base = answers[BASE.name]
    stats = {v.name: variants.paired(base, answers[v.name]) for v, _, _ in plans if v is not BASE}
    memorised = {}
    if FRESH.name in stats and variants.drops(stats[FRESH.name]):  # contamination: hold variants to the twin
        fresh = answers[FRESH.name]
        memorised = {name: variants.paired(fresh, answers[name]) for name in stats if name != FRESH.name}
    rows, lines = [], {}
    for variant, data, _ in plans:
        row = _row(variant, reports[variant.name], data, config)
        if variant is BASE:
            floor = variants.at_floor(row, reports[BASE.name]["baselines"])
        else:
            lines[variant.name] = variants.verdict(
                variant, stats[variant.name], bundled, memorised.get(variant.name), floor
            )
            row |= {"paired": stats[variant.name], "verdict": lines[variant.name]}
            if variant.name in memorised:
                row["paired_to_fresh"] = memorised[variant.name]
        rows.append(row)
    falls_at, length_line = variants.length_verdict(points)
    runs = [*reports.values(), *points]
    complete = all(r["complete"] for r in runs)
    return {
        "kind": "coinflip-probe",
        "version": 1,
        "coinflip_version": __version__,
        "model": config.name,
        "created": datetime.now().isoformat(timespec="seconds"),
        "directory": str(root),
        "settings": settings.saved(),
        "base": {"dataset": source, "bundled": bundled, "questions": len(records), "seed": config.seed},
        "view": "forced" if forced else "strict",
        "complete": complete,
        "errors_ignored": not complete and all(r["complete"] or r["errors_ignored"] for r in runs),  # exit 0, as eval
        "headline": variants.headline(lines, [p[0] for p in plans], stats, memorised, floor) or length_line,
        "variants": rows,
        "length": {"points": points, "falls_at": falls_at, "verdict": length_line},
    }


def _row(variant: Variant, report: dict[str, Any], data: Path | None, config: TaskConfig) -> dict[str, Any]:
    """A variant's numbers as the probe shows them (the forced view when answers were forced); its page if written."""
    shown = report.get("forced") or report if config.force_answer else report
    model = safe_name(str(report.get("model") or "model"))
    return {
        "name": variant.name,
        "title": variant.title,
        "run": f"runs/{variant.name}",
        "page": relative(f"runs/{variant.name}/reports/{model}/coin_flip.html") if config.html_report else None,
        "data": f"data/{data.name}" if data is not None else None,
        "samples": report["counts"]["samples"],
        "metrics": shown["metrics"],
        "intervals": shown["intervals"],
        "invalid_rate": shown["counts"]["invalid_rate"],
        "strict_metrics": report["metrics"],
        "errors": report["counts"]["errors"],
        "complete": report["complete"],
    }
