"""The runner, the one place that knows the order of the stages: config -> plan -> run directory (resumable
once it exists) -> model -> predictions -> scores -> report -> pages. A stop keeps what finished; exit 1."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import shutil
import sys
from collections.abc import Callable
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._files import ROWS_LIMIT, inside
from .._terminal import printable
from ..config import METRIC_COMPATS, NOT_CARRIED, TaskConfig, check_choice
from ..config.task import RELATIVE_TO_START
from ..errors import CoinflipError, ConfigError, EndpointBroken, FatalAPIError, RunIncomplete, StorageError
from ..jsonl import index_predictions
from ..models import backend, check_resume, handed_off, offline_rest, open_model, serve_local
from ..rundir import SUBSET_FILE, RunDir, load_saved_config, run_holding
from ..scoring.cost import budget_for
from ..secrets import masked_somewhere, unsaved, url_masked
from .finish import Truth, finish
from .plan import Plan, prepare, provenance
from .session import Session, concurrency_for, left, requests_left, room_for
from .stop import Interrupted, StopRequest, stopped_by, stopping

if TYPE_CHECKING:
    from ..scoring.schema import Report

log = logging.getLogger("coinflip")
RUN_LOG: ContextVar[logging.Handler | None] = ContextVar("coinflip_run_log", default=None)


def run_task(task_cfg: Any = None, **kwargs: Any) -> Any:
    """EvalScope's `run_task`: a TaskConfig, a dict, a YAML or JSON file, or a list of those (a list of reports)."""
    from ..config.files import as_configs

    configs = as_configs(task_cfg, kwargs)
    reports = [run_one(config) for config in configs]
    return reports if isinstance(task_cfg, list) else reports[0]


def run_one(config: TaskConfig) -> Report | dict[str, Any]:
    with stopping() as stop:
        stop.hint = ""  # a probe's runs share one StopRequest: no hint of the run before
        run: RunDir | None = None
        handler: logging.Handler = logging.NullHandler()
        wider = ""  # a resume's wider subset: told unless the resume is taken back
        try:
            config = resume_settings(config)
            for note in config.notes():
                print(f"note: {note}", file=sys.stderr)
            plan = prepare(config)
            if config.dry_run:  # EvalScope's: the settings and the data checked (a resume's run too), nothing sent
                if config.use_cache:
                    resumable(plan)
                data = plan.dataset.source
                where = f"{data.get('path') or data.get('id')} {data['split']}, sha256 {data['sha256'][:12]}"
                print(f"dry run: {plan.samples} samples ({where}) for {config.name}; nothing sent", file=sys.stderr)
                return {}
            with stop.held():  # a run directory exists only with its settings in it, and then resumes
                run, fresh, undo, wider = open_run(plan)
                again = handed_off(config)  # the flags that hand its requests elsewhere again, or the key
                hint = run.resume_hint(bool(config.api_key) and not again, again, unsaved(config.redacted()))
                stop.hint = f"; {hint}"
                handler = _attach_log(run)
            with run.locked():
                log.info("run %s: %d samples, model %s", run.root, plan.samples, config.model)
                session = ask(plan, run, fresh, stop, hint)
                if session is not None and session.outcome is not None:  # its requests went elsewhere: no report
                    return {**session.outcome, "run": str(run.root)}
                with stop.held(then=False):  # the report is written whole; a signal during it stops what follows
                    truth = lambda: Truth(plan.dataset)  # noqa: E731 (built only if saved rows are scored)
                    return finish(run, config.metric_compat, show=not config.quiet, session=session, truth=truth)
        except Interrupted as exc:  # outside the requests: nothing was lost, the run (if it began) resumes
            raise RunIncomplete(f"{stopped_by(exc)}{stop.hint or ' before the run started'}") from None
        except CoinflipError as exc:
            if run is None:  # no run directory, no log of it
                raise
            log.error("%s", exc)
            if exc.exit_code == 2 and undo():
                wider = ""
            raise
        finally:
            if wider:
                print(wider, file=sys.stderr)
            log.removeHandler(handler)
            handler.close()


def resume_settings(config: TaskConfig) -> TaskConfig:
    """`--use-cache RUN_DIR` alone resumes with the saved settings; what is given is kept (fingerprint permitting)."""
    if not config.use_cache:
        return config
    saved = load_saved_config(Path(config.use_cache).expanduser())["config"]
    mine = {*NOT_CARRIED, *config.given}
    merged = {n: saved[n] if n in saved and n not in mine else getattr(config, n) for n in TaskConfig.field_names()}
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
    unread = {"dataset_dir"} if merged["dataset_hub"] in (None, "bundled") or merged["dataset_path"] else set()
    for name in RELATIVE_TO_START:  # saved as the run saw them: a folder moved since leaves them behind
        path = merged[name]
        if name not in mine | unread and isinstance(path, str) and path and not os.path.lexists(path):
            flag = "--" + name.replace("_", "-")
            raise ConfigError(f"the run's {flag} {path} is not there (moved?): give {flag} again to resume")
    return TaskConfig(**merged, given=config.given)


def open_run(plan: Plan) -> tuple[RunDir, bool, Callable[[], bool], str]:
    """The run directory, its settings on disk from the first moment; whether it is new; what undoes the opening
    when the run stops on a setting or an endpoint before a reply lands (exit 2; True: undone); and a note."""
    config = plan.config
    own = Path(config.use_cache or config.work_dir).expanduser() if config.use_cache or config.no_timestamp else None
    if config.batch_write:
        _check_request_file(Path(config.batch_write).expanduser(), own)
    if config.batch_results and not os.path.lexists(results := Path(config.batch_results).expanduser()):
        raise ConfigError(f"--batch-results {results}: no such file (the file vllm run-batch wrote, its -o)")
    content: dict[str, Any] = {
        "config": config.redacted(),
        "fingerprint": plan.fingerprint,
        "samples": plan.samples,
        "subset": plan.dataset.subset,
        "provenance": provenance(),
    }
    if not config.use_cache:
        run = RunDir.create(Path(config.work_dir).expanduser(), config.name, config.no_timestamp)
        try:
            run.save_config(content)
            run.save_subset(plan.dataset.ids)
            run = run.publish()  # under its timestamp only once its settings are there
            return run, True, lambda: _discard(run, config), ""
        except BaseException:
            run.discard(folder=True)
            raise
    run, saved = resumable(plan)
    undo = _put_back(run)
    found = saved.get("provenance")  # a hand edit may have left anything there
    first = found.get("created") if isinstance(found, dict) else None
    if isinstance(first, str):  # a run started when it was created; a resume adds when it went on
        now = content["provenance"]
        content["provenance"] = {**now, "created": first, "resumed": now["created"]}
    run.save_config(content)
    run.save_subset(plan.dataset.ids)
    before = (saved.get("subset") or {}).get("count")
    if before is None or before == plan.dataset.count:
        return run, False, undo, ""
    return run, False, undo, f"note: the run now covers {plan.dataset.count} questions (it covered {before})"


def _put_back(run: RunDir) -> Callable[[], bool]:
    """What puts a resumed run's settings back as they are now, if no reply lands before it stops: a server gone
    leaves neither a resumed date nor a larger --limit's subset, which its old report does not cover."""
    files = (run.config_file, run.root / SUBSET_FILE)
    kept, rows = {path: path.read_bytes() if path.is_file() else None for path in files}, _size(run.predictions)

    def undo() -> bool:
        if _size(run.predictions) != rows:
            return False
        for path, data in kept.items():
            with contextlib.suppress(StorageError):  # the error that stopped the run is the one to tell
                run.put(path, data)
        return True

    return undo


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def resumable(plan: Plan) -> tuple[RunDir, dict[str, Any]]:
    """The run --use-cache names and its saved settings, checked before anything is saved (a dry run stops here):
    the same run, and nothing in the way of what it owes."""
    root = Path(str(plan.config.use_cache)).expanduser()
    saved = same_run(plan, root)
    run = RunDir(root, plan.config.name)  # the fingerprint matched: the same model and model_id
    run.refuse_links_out()
    check_resume(
        plan.config, root, lambda: (r for _, r in requests_left(plan, run, index_predictions(run.predictions)))
    )
    return run, saved


def _check_request_file(path: Path, own: Path | None) -> None:
    """--batch-write's file, refused before a run directory is made or changed: in a run, or with nowhere to go."""
    if holder := _in_run(path, own):
        raise ConfigError(f"--batch-write {path}: in the run directory {holder} (or a link to a file there), "
                          "whose files hold its answers, settings and reports: write it elsewhere")  # fmt: skip
    try:
        real = path.resolve()  # through a link: where the file would be written
    except (RuntimeError, OSError):  # a loop of links (Python 3.11 says RuntimeError)
        raise ConfigError(f"--batch-write {path}: a loop of links; name a file in a folder that exists") from None
    if real.is_dir() or not real.parent.is_dir():
        where = "a folder, not a file" if real.is_dir() else f"no folder {real.parent}"
        raise ConfigError(f"--batch-write {path}: {where}; name a file in a folder that exists")


def _in_run(path: Path, root: Path | None) -> Path | None:
    """The run whose files `path` would overwrite: this one at `root` (known before it is made with --use-cache or
    --no-timestamp) if `path` resolves into it or is one of its files under another name (a hard link); another
    run if `path` is a file of it."""
    if root is not None and inside(path, root):
        return root
    with contextlib.suppress(OSError):
        found = path.stat()
        if root is not None and found.st_nlink > 1 and any(os.path.samestat(found, p.lstat()) for p in root.rglob("*")):
            return root
        return run_holding(path)
    return None


def same_run(plan: Plan, root: Path) -> dict[str, Any]:
    """The saved settings of the run at `root`, which `plan` resumes; a ConfigError when it was a different run."""
    saved = load_saved_config(root)
    was, now = saved["fingerprint"], plan.fingerprint
    differ = [key for key in now if key in was and _comparable(was[key]) != _comparable(now[key])]
    if {"few_shot_num", "few_shot_seed", "few_shot_random"} & {*differ}:  # the rows drawn follow: said already
        differ = [key for key in differ if key != "few_shot_examples"]
    if differ:
        said = (f"{_named(key)}: saved {_shown(was[key])}, now {_shown(now[key])}" for key in differ)
        raise ConfigError(f"--use-cache {root} was a different run; " + "; ".join(said))
    return saved


def _named(key: str) -> str:
    return "few_shot_examples (the validation rows shown)" if key == "few_shot_examples" else key


def _shown(value: Any) -> str:
    """A hash as its first 12 digits: a resume's refusal stays a line a person reads."""
    return repr(f"{value[:12]}...") if isinstance(value, str) and re.fullmatch("[0-9a-f]{64}", value) else repr(value)


def _comparable(value: Any) -> Any:
    """Dataset sources compare by content and split, not row count (a new --limit may differ)."""
    return (value.get("sha256"), value.get("split")) if isinstance(value, dict) and "sha256" in value else value


def _discard(run: RunDir, config: TaskConfig) -> bool:
    """A run that never got going (a wrong endpoint, a bad setting found late) leaves nothing behind."""
    if run.predictions.exists() and run.predictions.stat().st_size:
        return False
    if not config.no_timestamp:
        shutil.rmtree(run.root, ignore_errors=True)
        with contextlib.suppress(OSError):  # and the work directory, if this run made it
            if run.root.parent.exists() and not any(run.root.parent.iterdir()) and run.made_work_dir:
                run.root.parent.rmdir()
        return True
    configs, predictions = run.root / "configs", run.predictions  # the lock and an empty file: not a foreign run
    for path in (run.config_file, configs / "subset.json", configs / "run.lock", run.log, run.server_log, predictions):
        with contextlib.suppress(OSError):
            path.unlink()
    for folder in ("configs", "logs", "predictions"):
        with contextlib.suppress(OSError):
            for empty in sorted((run.root / folder).glob("**/"), reverse=True):
                empty.rmdir()
    return True


def ask(plan: Plan, run: RunDir, fresh: bool, stop: StopRequest | None = None, hint: str = "") -> Session | None:
    """Send what has no reply yet; each reply is written (and in a fresh run scored) as it lands; `hint`: to resume."""
    config = plan.config
    hint = hint or run.resume_hint(bool(config.api_key))
    index, todo = left(plan, run)
    handed = backend(config) == "elsewhere"  # its requests go to another tool: nothing lands, is spent or shown here
    if not (todo or handed):
        return None
    session = Session(plan, run, todo, live=fresh and index.lines == 0, lands=not handed)
    wanted = concurrency_for(config)
    budget = budget_for(config, plan.generation, run.predictions)
    try:
        with serve_local(config, run.server_log) as endpoint:
            concurrency = room_for(min(wanted, endpoint.slots or wanted))
            session.progress.restart()
            model = open_model(config, endpoint.urls, plan.generation, concurrency, run,
                               *((budget.admit_online, budget.again) if budget is not None else ()),
                               answered=index.any_replied())  # fmt: skip
            (stop or StopRequest()).run(session.send, model, concurrency, requests_left(plan, run, index), budget)
            note = budget.note() if budget is not None else None
            if not (handed or index.lines or session.progress.done or session.pending):  # nothing to report
                if rest := offline_rest({"batch_results": config.batch_results}, run.root):  # a file answered none
                    hint = run.resume_hint(False, rest)
                raise RunIncomplete(f"{note or 'no answer came back, so there is nothing to report yet'}; {hint}")
            if note:
                print(f"note: {note}", file=sys.stderr)
    except EndpointBroken as exc:
        raise EndpointBroken(f"{exc}; once the server is fixed, {hint}") from None
    except FatalAPIError as exc:  # mid-run (a key revoked): what was kept, and the way on once it is fixed
        if not (index.lines or session.progress.done):
            raise
        raise type(exc)(f"{exc}; {session.progress.done} new samples kept; once that is fixed, {hint}") from None
    except Interrupted as exc:
        kept = "" if handed else f": {session.progress.done} new samples kept"
        raise RunIncomplete(f"{stopped_by(exc)}{kept}; {hint}") from None
    finally:
        session.close()
    return session


def rescore(run_dir: str | Path, metric_compat: str | None = None, show: bool = True) -> Report:
    """Reviews and reports from saved predictions; another arithmetic's beside the run's (coin_flip.evalscope.json)."""
    run = RunDir.open(run_dir)
    own = load_saved_config(run.root)["config"].get("metric_compat", "coinflip")
    compat = metric_compat or own
    check_choice("metric_compat", compat, METRIC_COMPATS)
    if compat != own:
        run = dataclasses.replace(run, arithmetic=compat)
    with run.locked(), stopping() as stop, stop.held(then=False):  # reviews and report whole, as a run's
        return finish(run, compat, show, limit=ROWS_LIMIT, rescoring=True)  # ROWS_LIMIT: what a rescore reads


class _LogFile(logging.FileHandler):
    """Control characters as U+FFFD (`cat` would act on a server's escapes); a full disk: the run's error says it."""

    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record))

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 (logging's name)
        return None


def _attach_log(run: RunDir) -> logging.Handler:
    try:
        run.own_folders(run.log, run.server_log)  # appended to each session: never through a linked folder or file
        handler: logging.Handler = _LogFile(run.log, encoding="utf-8")
    except (OSError, StorageError):
        handler = logging.NullHandler()  # a read-only run dir: rescore still reports what it can
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    RUN_LOG.set(handler)  # runs in threads of one process: each run's log holds its own lines only
    handler.addFilter(lambda _: RUN_LOG.get() is handler)
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    return handler
