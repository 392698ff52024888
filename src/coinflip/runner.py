"""The runner: the one place that knows the order of the stages.

dataset -> prompts -> model -> (predictions on disk) -> extract -> score -> report
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .config import DEFAULT_BATCH, METRIC_COMPATS, TaskConfig, check_choice
from .data import prompts
from .data.load import Dataset, Record, load_dataset
from .errors import ConfigError, DataError, RunIncomplete
from .models import Reply, Request, open_model, serve_local
from .models.predict import run_requests
from .prewarm import PREWARM_AFTER_S, prewarm
from .progress import Progress
from .rundir import (
    PredictionWriter,
    RunDir,
    compact_predictions,
    compact_written,
    index_predictions,
    iter_predictions,
    load_saved_config,
)

if TYPE_CHECKING:
    from .scoring.report import Scorer

log = logging.getLogger("coinflip")
FINGERPRINT_KEYS = ("model", "few_shot_num", "few_shot_seed", "system_prompt", "generation_config", "api_mode")


def run_task(task_cfg: TaskConfig | dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    """Evaluate a model on CoinFlip and return the report (EvalScope's `run_task`, same call)."""
    config = as_config(task_cfg, kwargs)
    dataset = load_dataset(config.split, config.dataset_path, config.dataset_hub)
    selected = dataset.take(config.limit)
    builder = RequestBuilder(config, few_shot_pool(config))
    run, save_config = open_run(config, make_fingerprint(config, dataset), len(selected))
    handler = _attach_log(run.log)
    try:
        log.info("run %s: %d samples, model %s", run.root, len(selected), config.model)
        live = generate(config, run, selected, builder, save_config)
        return finish(run, config.metric_compat, show=not config.quiet, live=live)
    finally:
        log.removeHandler(handler)
        handler.close()


def as_config(task_cfg: TaskConfig | dict[str, Any] | None, kwargs: dict[str, Any]) -> TaskConfig:
    if isinstance(task_cfg, TaskConfig):
        return task_cfg
    values = {**(task_cfg or {}), **kwargs}
    unknown = sorted(set(values) - set(TaskConfig.field_names()))
    if unknown:
        raise ConfigError(f"unknown TaskConfig field(s) {unknown}; known: {', '.join(TaskConfig.field_names())}")
    if "model" not in values:
        raise ConfigError("TaskConfig needs model=...")
    return TaskConfig(**values)


def few_shot_pool(config: TaskConfig) -> list[Record]:
    if config.few_shot_num == 0:
        return []
    if config.dataset_path and not Path(config.dataset_path).is_dir():
        raise ConfigError(
            "few-shot examples come from a validation split: give --dataset-path a directory holding "
            "test.* and validation.*, or use --few-shot-num 0"
        )
    pool = load_dataset("validation", config.dataset_path, config.dataset_hub).records
    if len(pool) <= config.few_shot_num:
        raise ConfigError(f"few_shot_num {config.few_shot_num} needs more than {len(pool)} validation rows")
    return list(pool)


class RequestBuilder:
    """Turns records into prompts: few-shot candidates are drawn once, so every question sees the same ones."""

    def __init__(self, config: TaskConfig, pool: Sequence[Record]) -> None:
        self.count = config.few_shot_num
        self.system_prompt = config.system_prompt
        self.candidates = prompts.choose_examples(pool, config.few_shot_num, config.few_shot_seed)

    def __call__(self, record: Record) -> Request:
        examples = prompts.examples_for(record.question, self.candidates, self.count)
        prompt = prompts.build_prompt(record.question, examples)
        return Request(record.id, prompt, record.question, prompts.to_messages(prompt, self.system_prompt))


def make_fingerprint(config: TaskConfig, dataset: Dataset) -> dict[str, Any]:
    """What must match for saved predictions to be reused (the data, prompts, model, generation)."""
    settings = {k: getattr(config, k) for k in FINGERPRINT_KEYS}
    return {"dataset": dataset.source, **settings}


def open_run(config: TaskConfig, fingerprint: dict[str, Any], samples: int) -> tuple[RunDir, Callable[[], None]]:
    """The run directory, and how to write its config. A fresh run writes it just before its
    first prediction, off the path to the first request (PyYAML takes 25 ms to import); a
    resumed run has read it already and writes it back at once."""
    if not config.use_cache:
        run = RunDir.create(Path(config.work_dir).expanduser(), config.name)
        return run, _once(lambda: run.save_config(config.redacted(), fingerprint, samples))
    root = Path(config.use_cache).expanduser()
    previous = load_saved_config(root)
    saved = previous["fingerprint"]
    differences = [
        f"{key}: saved {saved.get(key)!r}, now {fingerprint.get(key)!r}"
        for key in fingerprint
        if _comparable(saved.get(key)) != _comparable(fingerprint.get(key))
    ]
    if differences:
        raise ConfigError(f"--use-cache {root} was a different run; " + "; ".join(differences))
    run = RunDir.open(root)
    run.save_config(previous["config"], saved, samples)
    return run, lambda: None


def _once(action: Callable[[], None]) -> Callable[[], None]:
    done = False

    def once() -> None:
        nonlocal done
        if not done:
            action()
            done = True

    return once


def _comparable(value: Any) -> Any:
    """Dataset sources compare by content and split, not by row count (a new --limit may differ)."""
    if isinstance(value, dict) and "sha256" in value:
        return (value.get("sha256"), value.get("split"))
    return value


@dataclass
class Live:
    """What a fresh run gathered as its replies landed: their scores, and where each line went."""

    scorer: Scorer  # its ids are in the order the lines were written
    offsets: array[int]


def generate(
    config: TaskConfig, run: RunDir, selected: Dataset, build: RequestBuilder, save_config: Callable[[], None]
) -> Live | None:
    """Send what has no reply yet; each reply is appended to the predictions file as it lands,
    after the run's config (`save_config` writes it once).

    A fresh run also scores each reply as it lands, so the report is ready with the last reply;
    a resumed one returns None and is scored from the file.
    """
    index = index_predictions(run.predictions, repair=True)
    todo = len(selected) - sum(1 for k in index.where if k < len(selected) and index.ok(k))
    log.info("%d of %d samples already done; sending %d", len(selected) - todo, len(selected), todo)
    if not todo:
        save_config()
        return None
    live = index.lines == 0
    scorer: Scorer | None = None
    work = ((record, build(record)) for record in selected if not index.ok(record.id))
    writer = PredictionWriter(run.predictions)
    progress = Progress(
        todo, f"coin_flip {config.name}", False if config.quiet and config.progress is None else config.progress
    )
    started = time.perf_counter()

    def on_replies(landed: list[tuple[Record, Request, Reply]]) -> None:
        nonlocal scorer
        save_config()
        if live and scorer is None:  # imported here, once the first requests are out
            from .scoring.report import Scorer

            scorer = Scorer()
        for record, request, reply in landed:
            row = prediction_row(request, record, reply)
            writer.write(row)
            if scorer is not None:
                scorer.add(row)
            if reply.error:
                log.warning("sample %d failed after %d attempts: %s", request.id, reply.attempts, reply.error)
        writer.flush()
        progress.advance(len(landed))

    try:
        with serve_local(config, run.server_log) as urls:
            asyncio.run(_send(config, urls, work, on_replies))
    except KeyboardInterrupt:
        raise RunIncomplete(
            f"interrupted: {progress.done} new predictions kept in {run.root}; resume with --use-cache {run.root}"
        ) from None
    finally:
        progress.close()
        writer.close()
        save_config()  # also when no reply ever landed
        log.info("sent %d requests in %.2f s", progress.done, time.perf_counter() - started)
    return Live(scorer, writer.offsets) if scorer is not None else None


async def _send(
    config: TaskConfig, urls: list[str] | None, pending: Iterable[tuple[Record, Request]], on_replies: Any
) -> None:
    async with open_model(config, urls) as model:
        # imports hold the GIL: start them once the first wave of requests is on the wire
        thread = threading.Thread(target=prewarm, daemon=True)
        asyncio.get_running_loop().call_later(PREWARM_AFTER_S, thread.start)
        await run_requests(model, pending, config.eval_batch_size or DEFAULT_BATCH, on_replies)


def prediction_row(request: Request, record: Record, reply: Reply) -> dict[str, Any]:
    return {
        "id": record.id,
        "target": record.answer,
        "people": record.people,
        "flips": record.flips,
        "question": record.question,
        "prompt": request.prompt,
        "reply": reply.text,
        "reasoning": reply.reasoning,
        "finish_reason": reply.finish_reason,
        "usage": reply.usage,
        "latency_s": round(reply.latency_s, 6),
        "attempts": reply.attempts,
        "error": reply.error,
    }


def finish(run: RunDir, compat: str, show: bool = True, live: Live | None = None) -> dict[str, Any]:
    """Compact predictions, then write reviews and reports (also used by rescore).

    Without `live` results from a fresh run, the saved predictions are read back and scored.
    """
    from .pages import index
    from .pages.run_page import write_html
    from .scoring.report import build_report, print_summary, write_report

    saved = load_saved_config(run.root)
    if live is not None:
        scorer = live.scorer
        compact_written(run.predictions, scorer.ids, live.offsets)
    else:
        scorer = _score_saved(run, int(saved.get("samples") or 0))
    run.reviews.parent.mkdir(parents=True, exist_ok=True)
    with run.reviews.open("w", encoding="utf-8") as reviews:
        scorer.write_reviews(reviews)
    report = build_report(saved, run.root.name, scorer, compat)
    write_report(run.report_json, report)
    if saved["config"].get("html_report", True):
        write_html(run.report_html, report, scorer.showcase.rows(), scorer.usage.latency, scorer.usage.completion)
    if show:
        print_summary(report, run.root)
    if saved["config"].get("html_report", True):  # the work directory's index; never raises, logs why not
        index.refresh(index.work_dir_of(run.root, saved["config"]))
    return report


def _score_saved(run: RunDir, expected: int) -> Scorer:
    from .scoring.report import Scorer

    if not compact_predictions(run.predictions).where:
        raise DataError(f"{run.predictions}: no predictions to score")
    scorer = Scorer()
    for p in iter_predictions(run.predictions):
        if not expected or p["id"] < expected:
            scorer.add(p)
    return scorer


def rescore(run_dir: str | Path, metric_compat: str | None = None, show: bool = True) -> dict[str, Any]:
    """Recompute reviews and reports from saved predictions, calling no model."""
    run = RunDir.open(run_dir)
    compat = metric_compat or load_saved_config(run.root)["config"].get("metric_compat", "coinflip")
    check_choice("metric_compat", compat, METRIC_COMPATS)
    return finish(run, compat, show)


def _attach_log(path: Path) -> logging.Handler:
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    return handler
