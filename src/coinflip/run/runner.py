"""The runner: the one place that knows the order of the stages.

config -> plan (data, subset, prompts; nothing on disk yet) -> run directory -> model ->
(predictions on disk) -> extract -> score -> report -> pages

A run directory is resumable from the moment it exists: its settings are written when it is
made. SIGINT, SIGTERM and SIGHUP ask the run to stop (stop.py): the requests in flight are
cancelled, what finished is kept, a local server is stopped, and the exit code is 1.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import shlex
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import forced
from .._files import read_regular, replacing
from .._terminal import one_line, printable
from ..config import DEFAULT_BATCH, METRIC_COMPATS, TaskConfig, check_choice, masked_somewhere, url_masked
from ..errors import CoinflipError, ConfigError, DataError, EndpointBroken, RunIncomplete, StorageError
from ..models import Reply, Request, is_local, limits, open_model, serve_local
from ..models.predict import run_requests
from .plan import Plan, prepare, provenance
from .progress import Progress
from ..records import Prediction, sample_key, split_key
from ..rundir import (
    PredictionIndex,
    PredictionWriter,
    RunDir,
    compact_predictions,
    index_predictions,
    iter_predictions,
    load_saved_config,
)
from ..scoring.calibration import answer_window
from .stop import Interrupted, StopRequest, run_until_stopped, stopped_by, stopping

if TYPE_CHECKING:
    from ..scoring.schema import Report
    from ..scoring.scorer import Scorer

log = logging.getLogger("coinflip")
NOT_CARRIED = ("api_key", "use_cache", "progress", "quiet", "batch_write", "batch_results")  # never from a saved run


def run_task(task_cfg: Any = None, **kwargs: Any) -> Any:
    """Evaluate a model on CoinFlip and return the report (EvalScope's `run_task`, same call).

    `task_cfg` is a TaskConfig, a dict, a path to a YAML or JSON file of one, or a list of
    those; a list returns a list of reports.
    """
    from ..configfile import as_configs

    configs = as_configs(task_cfg, kwargs)
    reports = [run_one(config) for config in configs]
    return reports if isinstance(task_cfg, list) else reports[0]


def run_one(config: TaskConfig) -> Report | dict[str, Any]:
    with stopping() as stop:
        try:
            config = resume_settings(config)
            for note in config.notes():
                print(f"note: {note}", file=sys.stderr)
            plan = prepare(config)
            with stop.held():  # a run directory exists only with its settings in it
                run, fresh = open_run(plan)
        except Interrupted as exc:
            raise RunIncomplete(f"{stopped_by(exc)} before the run started") from None
        stop.hint = f"; {resume_hint(run)}"
        handler = _attach_log(run)
        try:
            with run.locked():
                log.info("run %s: %d samples, model %s", run.root, plan.samples, config.model)
                if config.batch_write:  # offline: the requests as a file for `vllm run-batch`, nothing sent
                    from .batch import write_requests

                    index = index_predictions(run.predictions, repair=True)
                    return write_requests(plan, run, requests_left(plan, run, index))
                session = ask(plan, run, fresh, stop)
                with stop.held():  # the report is written whole; a signal during it ends the run after
                    return finish(run, config.metric_compat, show=not config.quiet, session=session)
        except Interrupted as exc:  # outside the requests: nothing was lost, the run resumes
            raise RunIncomplete(f"{stopped_by(exc)}; {resume_hint(run)}") from None
        except CoinflipError as exc:
            log.error("%s", exc)
            if fresh and exc.exit_code == 2:
                _discard(run, config)
            raise
        finally:
            log.removeHandler(handler)
            handler.close()


def resume_hint(run: RunDir) -> str:
    """The command that resumes `run`, quoted for a shell; printed, so a folder name's escape
    sequences are shown as U+FFFD (shlex.quote keeps them inside its quotes)."""
    return one_line(f"resume with: coinflip eval --use-cache {shlex.quote(str(run.root))}")


def resume_settings(config: TaskConfig) -> TaskConfig:
    """`--use-cache RUN_DIR` alone resumes with the run's saved settings; what is given is kept
    (and must still match the run's fingerprint)."""
    if not config.use_cache:
        return config
    saved = load_saved_config(Path(config.use_cache).expanduser())["config"]
    merged = {}
    for name in TaskConfig.field_names():
        take = name in saved and name not in NOT_CARRIED and name not in config.given
        merged[name] = saved[name] if take else getattr(config, name)
    merged["dataset_args"] = None  # already folded into the saved fields
    if masked_somewhere(merged["generation_config"]):
        raise ConfigError(
            "the run's extra_headers, extra_query or extra_body held texts, which are not saved (any may be a "
            "gateway's secret): give --generation-config with them again to resume"
        )
    if url_masked(merged["api_url"]):
        raise ConfigError(
            "the run's --api-url held query values, which are not saved (any may be a secret): "
            "give --api-url again to resume"
        )
    return TaskConfig(**merged, given=config.given)


def open_run(plan: Plan) -> tuple[RunDir, bool]:
    """The run directory, with its settings on disk from the first moment; and whether it is new."""
    config = plan.config
    content = {
        "config": config.redacted(),
        "fingerprint": plan.fingerprint,
        "samples": plan.samples,
        "subset": plan.subset.describe(),
        "provenance": provenance(),
    }
    if not config.use_cache:
        run = RunDir.create(Path(config.work_dir).expanduser(), config.name, config.no_timestamp)
        try:
            run.save_config(content)
            run.save_subset(plan.subset.ids)
            run = run.publish()  # under its timestamp only once its settings are there
        except BaseException:
            run.discard(folder=True)
            raise
        return run, True
    root = Path(config.use_cache).expanduser()
    saved = load_saved_config(root)
    differences = [
        f"{key}: saved {saved['fingerprint'].get(key)!r}, now {plan.fingerprint.get(key)!r}"
        for key in plan.fingerprint
        if key in saved["fingerprint"] and _comparable(saved["fingerprint"][key]) != _comparable(plan.fingerprint[key])
    ]
    if differences:
        raise ConfigError(f"--use-cache {root} was a different run; " + "; ".join(differences))
    run = RunDir(root, config.name)  # the fingerprint matched: the same model and model_id
    run.refuse_links_out()
    found = saved.get("provenance")  # a hand edit may have left anything there
    first = found.get("created") if isinstance(found, dict) else None
    if isinstance(first, str):  # a run started when it was created; a resume adds when it went on
        now = provenance()
        content["provenance"] = {**now, "created": first, "resumed": now["created"]}
    run.save_config(content)
    run.save_subset(plan.subset.ids)
    before = (saved.get("subset") or {}).get("count")
    if before is not None and before != plan.subset.count:
        print(f"note: the run now covers {plan.subset.count} questions (it covered {before})", file=sys.stderr)
    return run, False


def _comparable(value: Any) -> Any:
    """Dataset sources compare by content and split, not by row count (a new --limit may differ)."""
    if isinstance(value, dict) and "sha256" in value:
        return (value.get("sha256"), value.get("split"))
    return value


def _discard(run: RunDir, config: TaskConfig) -> None:
    """A run that never got going (a wrong endpoint, a bad setting found late) leaves nothing behind."""
    if run.predictions.exists() and run.predictions.stat().st_size:
        return
    if not config.no_timestamp:
        shutil.rmtree(run.root, ignore_errors=True)
        with contextlib.suppress(OSError):  # and the work directory, if this run made it
            if run.root.parent.exists() and not any(run.root.parent.iterdir()) and run.made_work_dir:
                run.root.parent.rmdir()
        return
    for path in (run.config_file, run.root / "configs" / "subset.json", run.log, run.server_log):
        with contextlib.suppress(OSError):
            path.unlink()
    for folder in ("configs", "logs", "predictions"):
        with contextlib.suppress(OSError):
            for empty in sorted((run.root / folder).glob("**/"), reverse=True):
                empty.rmdir()


@dataclass(frozen=True)
class Job:
    """One request's worth of work: a first request (`saved` None) or a forced follow-up."""

    record: Any
    saved: Prediction | None = None


@dataclass
class Session:
    """What a session leaves for its report: what went to the endpoints; for a fresh run, also
    the scores of its replies as they landed (`scorer`), and whether its writer wrote every
    sample once and in key order (then the file needs no compaction)."""

    traffic: dict[str, Any] | None = None
    scorer: Scorer | None = None
    in_order: bool = False


def _unfinished(plan: Plan, index: PredictionIndex) -> Iterator[tuple[Any, int, list[int]]]:
    """(record, draw, keys) for each request still to send, in question order: `keys` empty for a
    whole request (a choice missing or failed), else the samples whose forced answer is pending."""
    n = plan.build.choices
    fresh = not index.where and not index.pending  # nothing saved: every request, no key to look up
    for record in plan.dataset:
        for draw in range(plan.config.repeats):
            if fresh:
                yield record, draw, []
                continue
            keys = [sample_key(record.id, draw * n + i) for i in range(n)]
            if not all(index.replied(k) for k in keys):
                yield record, draw, []
            elif index.pending:
                pending = [k for k in keys if k in index.pending]
                if pending:
                    yield record, draw, pending


def requests_left(plan: Plan, run: RunDir, index: PredictionIndex) -> Iterator[tuple[Job, Request]]:
    """The requests still to send: first requests, and forced follow-ups whose first reply is kept."""
    build = plan.build
    with run.predictions.open("rb") if index.pending else contextlib.nullcontext() as handle:
        for record, draw, pending in _unfinished(plan, index):
            if not pending:
                yield Job(record), build(record, draw)
            for key in pending:
                assert handle is not None  # opened whenever a forced answer is pending
                row = index.row(handle, key)
                request = build.forced(build(record, draw), row.get("reply") or "", split_key(key)[1])
                yield Job(record, row), request


def samples_left(plan: Plan, index: PredictionIndex) -> int:
    """Samples still to finish: a reply or a forced answer to get (what the progress bar counts).
    Nothing saved yet: all of them, without a pass over the data (it was validated when opened;
    a pass costs as much as 8 ms per thousand questions, before the first request goes)."""
    if not index.where and not index.pending:
        return plan.samples
    return sum(len(pending) or plan.build.choices for _, _, pending in _unfinished(plan, index))


def ask(plan: Plan, run: RunDir, fresh: bool, stop: StopRequest | None = None) -> Session | None:
    """Send what has no reply yet; each reply is appended to the predictions file as it lands.

    A fresh run also scores each reply as it lands, so the report is ready with the last reply;
    a resumed one is scored from the file.
    """
    config = plan.config
    index = index_predictions(run.predictions, repair=True)
    if index.unreadable:
        log.warning("%d saved line(s) hold no prediction and were skipped; asked again", index.unreadable)
    todo = samples_left(plan, index)
    log.info("%d of %d samples already done; %d to go", plan.samples - todo, plan.samples, todo)
    if not todo:
        return None
    live = fresh and index.lines == 0 and not config.batch  # a batch's resent lines would count twice
    scorer: Scorer | None = None
    writer = PredictionWriter(run.predictions)
    shown = False if config.quiet and config.progress is None else config.progress
    progress = Progress(todo, f"coin_flip {config.name}", False if config.batch else shown)  # a batch has its own
    started = time.perf_counter()
    pending = 0  # samples written with their forced answer pending (forced.py)

    def on_replies(landed: list[tuple[Job, Request, Reply]]) -> None:
        nonlocal scorer, pending
        if live and scorer is None:  # imported here, once the first requests are out
            from ..scoring.scorer import Scorer

            scorer = Scorer(compat=config.metric_compat)
        finished = 0  # samples done: one whose forced answer is pending finishes later
        for job, request, reply in landed:
            if job.saved is None:
                rows = first_rows(job.record, request, reply, plan.build.choices, config.force_answer)
            else:
                rows = [forced.answered(job.saved, reply)]
            for row in rows:
                writer.write(row)
                if forced.scored(row):
                    finished += 1
                    if scorer is not None:
                        scorer.add(row)
                else:
                    pending += 1
            pending -= job.saved is not None  # a forced answer: one pending sample fewer
            if reply.error:
                log.warning("sample %d failed after %d attempts: %s", request.id, reply.attempts, reply.error)
        writer.flush()
        progress.advance(finished)

    def follow_up(job: Job, request: Request, reply: Reply) -> list[tuple[Job, Request]]:
        if not config.force_answer or job.saved is not None or reply.error:
            return []
        out = []
        for i, choice in enumerate([reply, *reply.more][: plan.build.choices]):  # a server may send more
            if forced.needed(choice.text):
                row = prediction_row(job.record, request.repeat + i, request, choice)
                out.append((Job(job.record, row), plan.build.forced(request, choice.text or "", request.repeat + i)))
        return out

    endpoint_concurrency = _concurrency(config)
    budget = None
    if config.max_cost is not None:
        from ..scoring.cost import budget_for

        budget = budget_for(config, plan.generation, run.predictions, batch=bool(config.batch))
    traffic: dict[str, Any] = {}
    try:
        if config.batch_results:  # offline: answers from a result file made elsewhere
            from .batch import read_results

            read_results(plan, requests_left(plan, run, index), on_replies)
            return None
        with serve_local(config, run.server_log) as endpoint:
            concurrency = min(endpoint_concurrency, endpoint.slots or endpoint_concurrency)
            progress.restart()
            _room_for(concurrency)
            work = requests_left(plan, run, index)
            batches = None  # the budget the batches spent from, when there were batches
            if config.batch:  # through the Batch API; what it leaves may go online
                from .batch import send_batches

                url = endpoint.urls[0] if endpoint.urls else None
                work = iter(send_batches(plan, run, url, work, on_replies, follow_up, budget))
                batches = budget
                budget = budget.online() if budget is not None else None  # what it left goes at full price
            if budget is not None:
                work, on_replies = budget.gate(work), budget.watch(on_replies)
            follow = budget.follow(follow_up) if budget is not None else follow_up  # forced answers: held too
            if not config.batch or config.batch_rest_online:
                sending = _send(plan, endpoint.urls, concurrency, work, on_replies, follow, todo, traffic)
                run_until_stopped(sending, stop)
            stopped = [b for b in (batches, budget) if b is not None and b.stopped]
            if stopped:  # one line, from the last budget: it counts what the batches spent too
                print(f"note: {stopped[-1].note()}", file=sys.stderr)
    except EndpointBroken as exc:
        raise EndpointBroken(f"{exc}; once the server is fixed, {resume_hint(run)}") from None
    except Interrupted as exc:
        raise RunIncomplete(f"{stopped_by(exc)}: {progress.done} new samples kept; {resume_hint(run)}") from None
    finally:
        progress.close()
        writer.close()
        log.info("finished %d samples in %.2f s", progress.done, time.perf_counter() - started)
        if traffic:
            log.info("%s", limits.line(traffic))
            for hint in traffic["hints"]:
                log.warning("%s", hint)
    # a forced answer still pending (a stop): score from the file, which counts what that sample spent
    return Session(traffic or None, None if pending else scorer, writer.in_order)


def _concurrency(config: TaskConfig) -> int:
    """Requests in flight: the user's number, or 32; a local llama.cpp server gets its slots."""
    if config.eval_batch_size is not None:
        if is_local(config) and config.eval_batch_size > 1:
            print("note: llama.cpp serves one request at a time; sending them one by one", file=sys.stderr)
        return config.eval_batch_size
    return DEFAULT_BATCH


def _room_for(connections: int) -> None:
    """Thousands of requests in flight need as many sockets: raise the soft limit on open files
    toward the hard one (a common soft limit is 1,024)."""
    try:
        import resource
    except ImportError:  # Windows
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = connections + 256
    if soft != resource.RLIM_INFINITY and soft < wanted:
        ceiling = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (ceiling, hard))


async def _send(
    plan: Plan,
    urls: list[str] | None,
    concurrency: int,
    work: Iterator[tuple[Job, Request]],
    on_replies: Any,
    follow_up: Any,
    todo: int,
    traffic: dict[str, Any],
) -> None:
    """Send `work`; never more workers than samples to finish (a forced answer follows its first
    reply in the same worker), whatever --eval-batch-size says. `traffic` gets what went to the
    endpoints (also when the run stops early)."""
    async with open_model(plan.config, urls, plan.generation, concurrency) as model:
        try:
            await run_requests(model, work, min(concurrency, todo), on_replies, follow_up)
        finally:
            sent = getattr(model, "traffic", None)  # a server's client has it; a baseline sends nothing
            if sent is not None:
                traffic.update(limits.describe(sent(), concurrency))


def first_rows(record: Any, request: Request, reply: Reply, choices: int, force: bool) -> list[Prediction]:
    """One row per choice; a choice the server did not return is an error row (resumed later)."""
    got = [reply, *reply.more][:choices] if reply.error is None else [reply] * choices
    rows = []
    for i in range(choices):
        if i < len(got):
            choice = got[i]
        else:
            choice = Reply(None, error=f"the server returned {len(got)} of n={choices} choices; use --repeats")
        row = prediction_row(record, request.repeat + i, request, choice)
        if force and row["error"] is None and forced.needed(row["reply"]):
            row["forced"] = forced.PENDING.copy()
        rows.append(row)
    return rows


def prediction_row(record: Any, repeat: int, request: Request, reply: Reply) -> Prediction:
    row: Prediction = {
        "id": record.id,
        "repeat": repeat,
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
    if reply.ttft_s is not None:
        row["ttft_s"] = round(reply.ttft_s, 6)
    window = answer_window(reply.logprobs)
    if window is not None:
        row["answer_logprobs"] = window
    if reply.status is not None and reply.error is not None:
        row["status"] = reply.status
    if reply.batch:
        row["batch"] = True
    return row


def finish(run: RunDir, compat: str, show: bool = True, session: Session | None = None) -> Report:
    """Compact predictions, then write reviews and reports (also used by rescore).

    Without a `session` that scored its replies as they landed, the saved predictions are read
    back and scored.
    """
    from ..pages import index
    from ..pages.run_page import write_html
    from ..pages.summary import print_summary
    from ..scoring.report import build_report, write_report
    from ..scoring.schema import checked

    saved = load_saved_config(run.root)
    traffic = session.traffic if session is not None else None
    if session is not None and session.scorer is not None:
        scorer = session.scorer
        if not session.in_order:
            compact_predictions(run.predictions)
    else:
        scorer = _score_saved(run, saved, compat)
    run.own_folders(run.reviews, run.report_json)  # never written through a linked folder either
    with replacing(run.reviews) as reviews:  # under a temporary name, then renamed
        scorer.write_reviews(reviews)
    report = checked(build_report(saved, run.root.name, scorer, compat))  # as read back: each field its type
    traffic = _requests_record(run, traffic)
    if traffic is not None:  # the last session's requests, kept for a rescore
        report["requests"] = traffic
    write_report(run.report_json, report)
    if saved["config"].get("html_report", True):
        write_html(run.report_html, report, scorer)
    if show:
        print_summary(report, run.root, page=run.report_html)
        if not report["complete"] and not report.get("errors_ignored"):
            print(resume_hint(run), file=sys.stderr)
    if saved["config"].get("html_report", True):  # the work directory's index; never raises, logs why not
        index.refresh(index.work_dir_of(run.root, saved["config"]))
    return report


def _requests_record(run: RunDir, traffic: dict[str, Any] | None) -> dict[str, Any] | None:
    """Save this session's record of requests; without one (a rescore), read the last one back:
    a plain file of a few KiB inside the run that reads as the record, else none."""
    path = run.requests
    if traffic is not None:
        run.own_folders(path)  # never written through a linked folder
        with replacing(path) as out:
            out.write((json.dumps(traffic, indent=2) + "\n").encode("utf-8"))
        return traffic
    try:
        return limits.checked(json.loads(read_regular(path, 64 * 1024, within=run.root)))
    except (OSError, ValueError, RecursionError):  # UnreadableFile is a ValueError
        return None


def _score_saved(run: RunDir, saved: dict[str, Any], compat: str) -> Scorer:
    from ..scoring.scorer import Scorer

    index = compact_predictions(run.predictions)
    if not index.where:
        raise DataError(f"{run.predictions}: no predictions to score")
    subset = run.subset()
    questions = int((saved.get("subset") or {}).get("count") or 0)
    scorer = Scorer(compat=compat)
    scorer.unreadable += index.unreadable  # lines that hold no prediction: counted, and asked again on resume
    for p in iter_predictions(run.predictions):
        scored = forced.scored(p)
        if subset is not None and p["id"] not in subset:
            continue
        if subset is None and questions and p["id"] >= questions:
            continue
        if scored:
            scorer.add(p)
        else:  # its forced answer is pending: not scored yet, but its reply was paid for
            scorer.usage.add(p)
    return scorer


def rescore(run_dir: str | Path, metric_compat: str | None = None, show: bool = True) -> Report:
    """Recompute reviews and reports from saved predictions, calling no model. In an arithmetic
    other than the run's own, they are written beside the run's (coin_flip.evalscope.json)."""
    run = RunDir.open(run_dir)
    own = load_saved_config(run.root)["config"].get("metric_compat", "coinflip")
    compat = metric_compat or own
    check_choice("metric_compat", compat, METRIC_COMPATS)
    if compat != own:
        run = dataclasses.replace(run, arithmetic=compat)
    with run.locked():
        return finish(run, compat, show)


class _LogFile(logging.FileHandler):
    """The run's log, its lines with control characters shown as U+FFFD (a server's message may
    hold escape sequences, which `cat eval_log.log` would otherwise act on). A log that cannot be
    written (a full disk) says nothing: the run's own error says it once."""

    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record))

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 (logging's name)
        return None


def _attach_log(run: RunDir) -> logging.Handler:
    try:
        run.own_folders(run.log)  # appended to each session: never through a linked folder or file
        handler: logging.Handler = _LogFile(run.log, encoding="utf-8")
    except (OSError, StorageError):
        handler = logging.NullHandler()  # a read-only run dir: rescore still reports what it can
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    return handler
