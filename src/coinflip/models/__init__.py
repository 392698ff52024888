"""Model backends. `open_model` picks one from the config; all share the `Model` protocol."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._files import inside, open_regular
from ..config import BASELINES, LOCAL_MODELS, TaskConfig, in_process
from ..errors import KEPT, ConfigError
from ..rundir import RunDir
from ..secrets import run_secrets, unsaved
from .base import Model, Reply, Request

__all__ = ["BASELINES", "Endpoint", "backend", "Model", "Reply", "Request", "check_model", "open_model", "serve_local"]


@dataclass(frozen=True)
class Endpoint:
    """Where requests go (None: in-process), and the slots of a server coinflip started (None: unknown)."""

    urls: list[str] | None
    slots: int | None = None


def backend(config: TaskConfig) -> str:
    """Who answers a run, decided once: "local" (llama.cpp here), "baseline" (in-process), "server", "elsewhere"."""
    if config.batch_write:
        return "elsewhere"
    if config.model_path or (config.model in LOCAL_MODELS and not config.api_url):
        return "local"
    if in_process(config.model, config.eval_type):
        return "baseline"
    return "server"


def _gguf(config: TaskConfig) -> Path:
    """--model-path, or the GGUF a package ships for --model."""
    from .llama_local import bundled_gguf

    return Path(config.model_path).expanduser() if config.model_path else bundled_gguf(str(config.model))


def weights(config: TaskConfig) -> dict[str, Any] | None:
    """The local GGUF file a run is answered by, as its fingerprint names it (the name alone may stay the same)."""
    if backend(config) != "local" or config.batch_results:
        return None
    path = _gguf(config)
    return {"file": path.name, "bytes": path.stat().st_size}


def check_model(config: TaskConfig) -> None:
    """What can be checked about the model before a run directory exists."""
    if config.batch_results:  # offline: the requests were answered elsewhere
        return
    answered_by = backend(config)
    if answered_by == "local":
        if importlib.util.find_spec("llama_cpp") is None:
            raise ConfigError(
                "a local GGUF model needs llama.cpp: pip install 'llama-cpp-python[server]' (the local extra)"
            )
        from .llama_local import llama_threads

        llama_threads()  # $COINFLIP_LLAMA_THREADS checked before any run directory exists
        path = _gguf(config)
        if not path.is_file():
            raise ConfigError(f"--model-path {path}: no such file" if not path.exists() else f"{path}: not a file")
        return
    if answered_by == "server" and not config.api_url and not config.use_cache:  # a resume may owe no request
        raise ConfigError(
            f"--model {config.model} needs --api-url (an OpenAI-compatible server), "
            f"or use a baseline ({', '.join(BASELINES)}) or {', '.join(LOCAL_MODELS)}"
        )


def handed_off(config: TaskConfig) -> tuple[str, ...]:
    """The flags that hand a run's requests to another tool or read its answers (nothing is sent), to give again on
    a resume (without --batch-results, a resume would send what its file answers)."""
    if config.batch_results:
        return ("--batch-results", str(config.batch_results))
    return ("--batch-write", str(config.batch_write)) if config.batch_write else ()


def offline_rest(saved: dict[str, Any], root: Path) -> tuple[str, ...]:
    """Where a run's last session wrote its requests for another tool or read its answers, how the rest is written
    (a request file apart from the results read and from the run at `root`); else nothing: it resumes as it ran."""
    written = saved.get("batch_results") or saved.get("batch_write")
    name = "owed-more.jsonl" if Path(str(written)).name == "owed.jsonl" else "owed.jsonl"  # never over the file read
    name = str(root.resolve().parent / name) if inside(Path(name), root) else name  # printed from inside the run
    return ("--batch-write", name) if written else ()


def check_result_file(path: Path, model: str, cap: int) -> None:
    """A result file whose answers name a model, none the run's (or a provider's dated snapshot of it, as OpenAI's
    gpt-4o-mini-2024-07-18), is another run's (`vllm run-batch` echoes the model its request file named), and one
    whose lines hold no response or error a request file: refused before any answer is recorded. One whose answers
    name no model is read; an unreadable one is ResultsFile's to refuse."""
    from .batch_api import capped_lines

    named: set[str] = set()
    lines = results = 0
    with contextlib.suppress(OSError, ValueError), open_regular(path) as handle:
        for raw in capped_lines(handle, cap):
            found = _model_of(raw)  # every line: one naming the run's model vouches for no other
            if isinstance(found, str) and found != model and not re.fullmatch(rf"{re.escape(model)}-[\d-]+", found):
                named |= {found[:80]} if len(named) < 3 else set()  # three are shown
            lines, results = lines + bool(raw.strip()), results + (b'"response"' in raw or b'"error"' in raw)
    if lines and not results:
        raise ConfigError(
            f"--batch-results {path}: no result line (custom_id, response, error) in its {lines} lines: "
            "a request file? Give the file vllm run-batch wrote (its -o); nothing was recorded"
        )
    if named:
        raise ConfigError(f"--batch-results {path}: its answers name {', '.join(map(repr, sorted(named)))}, not "
                          f"the run's model {model}: another run's results? Nothing was recorded (a server that names "
                          f"it otherwise, as an Azure deployment: set each line's model to {model})")  # fmt: skip


def _model_of(raw: bytes) -> Any:
    """The model a result line's body names (None: none; a line without the word is not parsed)."""
    try:
        return json.loads(raw)["response"]["body"]["model"] if b'"model"' in raw else None
    except (ValueError, LookupError, TypeError, RecursionError):
        return None


def check_resume(config: TaskConfig, root: Path, owed: Callable[[], Iterable[Request]]) -> None:
    """Before a resume saves its settings: one that reads no batch is refused while a batch of the run holds what it
    was billed for and no row holds: one still open, or one collected before a stop cut its rows off. One owing
    requests needs a server (a complete one, answered offline, is reported again without)."""
    if not (config.api_url or config.batch_results) and backend(config) == "server" and next(iter(owed()), None):
        raise ConfigError(f"{root} still owes requests and names no server: give --api-url to send them, or "
                          "--batch-write FILE to write them for another tool (vllm run-batch)")  # fmt: skip
    if config.batch and not (config.batch_write or config.batch_results):
        return
    from ._redact import Redactor
    from .batch import covering, downloaded, saved_batches, unread
    from .batch_api import read_answers
    from .predict import custom_id

    folder, again = root / "batch", "(--no-batch or --batch-write would ask their requests again, --batch-results "
    batches = saved_batches(folder)
    if held := [str(b.batch_id or b.file_id) for b in batches if b.file_id and not b.collected]:
        raise ConfigError(f"{root}: the run's batches {', '.join(held)} are not collected yet: resume with --batch to "
                          f"collect them {again}would leave them)")  # fmt: skip
    covered = covering(folder, [b for b in batches if b.file_id and b.key])  # before keys, rows name no batch
    wanted: dict[int, set[str]] = {}
    for request in owed() if covered else ():
        for batch in unread(covered.get(custom_id(request), []), request):
            wanted.setdefault(id(batch), set()).add(custom_id(request))
    cap = int(config.max_reply_mb * 1024 * 1024)
    for batch in (b for b in batches if id(b) in wanted):
        replies, _ = read_answers(downloaded(folder, batch), wanted[id(batch)], config.api_mode, cap, Redactor([]))
        if any(reply.error is None or reply.usage for reply in replies.values()):  # an answer, or a billed failure
            raise ConfigError(f"{root}: batch {batch.batch_id} holds billed lines (answers or failures) that no row "
                              f"holds yet (the run stopped before writing them): resume with --batch to read them "
                              f"{again}would leave them; to ask them again without their cost, move {folder} "
                              "away)")  # fmt: skip


@contextlib.contextmanager
def serve_local(config: TaskConfig, log_path: Path) -> Iterator[Endpoint]:
    """Start llama.cpp for a local model; else use --api-url (a result file answers offline)."""
    answered_by = "server" if config.batch_results else backend(config)  # elsewhere: the URL, unused
    if answered_by == "local":
        from .llama_local import SLOTS, llama_server

        with llama_server(_gguf(config), str(config.model), log_path) as url:
            yield Endpoint([url], SLOTS)
    elif answered_by == "baseline":
        yield Endpoint(None)
    else:
        yield Endpoint([config.api_url] if config.api_url else [])


@contextlib.asynccontextmanager
async def open_model(
    config: TaskConfig, urls: list[str] | None, generation: dict[str, Any], concurrency: int,
    run: RunDir, admit: Callable[[Request, dict[str, int] | None], Awaitable[bool]] | None = None,
    again: Callable[[Request, dict[str, int] | None], bool] | None = None, *, answered: bool = False,
) -> AsyncIterator[Model]:  # fmt: skip
    """The model for a run, its endpoint checked first; `end` runs once every request is in (no stop, no error).
    `run`: it keeps a batch's resume state; `admit`: whether a request a batch left may go online at the full
    price, `again` whether a failed one may be sent again (--max-cost); `answered`: the run holds replies."""
    model: Any
    cap, secrets = int(config.max_reply_mb * 1024 * 1024), run_secrets(config.api_key, generation, config.api_url)
    if config.batch_write:
        from .offline import RequestFile

        kept = KEPT if answered else "the run holds no answers yet"  # a request file sends nothing: none were made
        scored = ("--batch-results", "results.jsonl")  # the file `vllm run-batch -o` is told to write
        hint = run.resume_hint(False, scored, unsaved(config.redacted())).replace("resume with: ", "")
        model = RequestFile(config, generation, hint, kept)
    elif config.batch_results:
        from ._redact import Redactor
        from .offline import Bodies, ResultsFile

        check_result_file(path := Path(config.batch_results).expanduser(), str(config.model), cap)
        model = ResultsFile(path, Bodies(config, generation), cap, Redactor(secrets, keys=[config.api_key]))
    elif urls is None:
        if config.batch:
            raise ConfigError(f"--batch needs a server: {config.model} answers in-process")
        from .baselines import Baseline

        model = Baseline(str(config.model), config.seed, int(generation.get("n") or 1))
    else:
        from .openai_api import OpenAIClient

        online: OpenAIClient | None = None
        if config.batch_rest_online or not config.batch:
            online = OpenAIClient(str(config.model), urls[0], config.api_key, generation, config.timeout,
                config.retries, concurrency, mode=config.api_mode, stream=bool(config.stream), max_reply_bytes=cap,
                patience=config.patience, probe=config.eval_batch_size is None)  # fmt: skip
            online.again, online.answered_before = again, answered
        model = online
        if config.batch:
            from .batch import BatchModel
            from .batch_api import BatchAPI

            api = BatchAPI(urls[0], config.api_key, generation, config.timeout, secrets, cap)
            model = BatchModel(api, run.root / "batch", config, generation, online, admit)
    try:
        if hasattr(model, "start"):  # a server's: a wrong endpoint fails here, in seconds, before any sample is sent
            await model.start()
        yield model
        if hasattr(model, "end"):
            await model.end()
    finally:
        await model.aclose()
