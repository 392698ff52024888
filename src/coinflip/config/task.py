"""TaskConfig: every setting of a run, declared once (declare.py) and validated once, at the edge.
Saved with a `version`; declare.saved_settings reads older ones, so old run directories still resume."""

from __future__ import annotations

import functools
import os
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from ..errors import UnknownSettingError
from ..secrets import REDACTED, masked, redacted_generation, redacted_url
from .declare import BASELINES, BENCHMARK, Setting, check_across, check_declared, dataset_names, declarations, setting
from .evalscope import fold_evalscope
from .values import check_header, check_limit, check_values, one_url, parse_generation_config, unknown_message

DEFAULT_BATCH = 32
LOCAL_MODELS = ("smollm2",)  # names that start llama.cpp with a GGUF file a package ships (models/llama_local.py)
METRIC_COMPATS = ("coinflip", "evalscope")
SPLITS = ("test", "validation")
API_KEY_ENV = ("COINFLIP_API_KEY", "OPENAI_API_KEY")
MAX_REPLY_MB = 1_000_000  # a terabyte: the cap on --max-reply-mb (beyond it the byte count overflows)
SETTINGS_VERSION = 2  # 1: no version field (before coinflip 1.0); 2: `version`, one --api-url
UNUSED = "accepted, not used by coin_flip"
RELATIVE_TO_START = ("model_path", "dataset_path", "dataset_dir")  # carried to a resume, read from disk


@dataclass
class TaskConfig:
    """One evaluation. Field names follow EvalScope's TaskConfig where they overlap."""

    # the model and how to reach it
    model: str | None = setting(
        None,
        f"Model name sent to the server; or a baseline ({', '.join(BASELINES)}); or {', '.join(LOCAL_MODELS)} (local).",
        metavar="NAME",
    )
    model_id: str | None = setting(None, "Name shown in reports and used in paths (default: the model name).")
    api_url: str | None = setting(
        None,
        "OpenAI-compatible base URL (…/v1), server root, or full endpoint (one; replicas go behind a load balancer).",
        kind="list",
        metavar="URL",
    )
    api_key: str | None = setting(
        None, "API key; default $COINFLIP_API_KEY or $OPENAI_API_KEY. Never written or printed.", repr=False
    )
    eval_type: str | None = setting(
        None,
        "EvalScope's eval type: openai_api (or service, server) sends HTTP requests; mock_llm needs a baseline "
        "model; llm_ckpt is not supported (serve the checkpoint instead).",
        metavar="TYPE",
    )
    api_mode: str = setting(
        "chat",
        "chat: /chat/completions with messages; completions: /completions with the same text as one prompt.",
        choices=("chat", "completions"),
        evalscope="",
    )
    model_path: str | None = setting(
        None, "Serve this local GGUF file with llama.cpp for the run.", evalscope="", path="FILE.gguf"
    )
    eval_batch_size: int | None = setting(
        None,
        f"Requests in flight (default {DEFAULT_BATCH}; a local llama.cpp server: its parallel slots).",
        least=1,
    )
    generation_config: dict[str, Any] = setting(
        {},
        "JSON or key=value,... : temperature, max_tokens, max_completion_tokens, top_p, seed, stop, n, "
        "reasoning_effort, logprobs, top_logprobs, chat_template_kwargs, extra_body, extra_headers, extra_query, ...",
        metavar="JSON|K=V,...",
    )
    timeout: float = setting(
        120.0, "Seconds per request attempt (streaming: also the longest gap between events).", unit="seconds"
    )
    retries: int = setting(
        5,
        "Retries per request on 5xx, timeouts and broken replies (a 429 waits instead: see --patience).",
        evalscope="generation_config.retries",
        least=0,
    )
    patience: float = setting(
        300.0,
        "Seconds the run waits while the endpoint refuses (429, overloaded) or fails every request; then it "
        "stops, resumable. Refusals never use up --retries.",
        evalscope="",
        metavar="SECONDS",
        unit="seconds",
    )
    stream: bool = setting(False, "Stream replies (server-sent events); records time to first token.")
    ignore_errors: bool = setting(
        False, "Exit 0 even when some samples got no reply (they are still counted and reported)."
    )
    system_prompt: str | None = setting(
        None, "Optional system message.", metavar="TEXT", evalscope="dataset_args.coin_flip.system_prompt"
    )
    prompt_template: str = setting(
        "default",
        "default (the specification's, byte for byte), direct (answer without reasoning), multiturn (few-shot "
        "examples as chat turns), zh or direct-zh (default or direct in Chinese), or your own text with {question}.",
        metavar="NAME|TEXT",
        evalscope="dataset_args.coin_flip.prompt_template",
    )
    force_answer: bool = setting(
        False, "When a reply has no valid answer, ask once more for only 'ANSWER: YES' or 'ANSWER: NO'.", evalscope=""
    )
    max_reply_mb: float = setting(
        16.0,
        "A reply larger than this (MB) is an error for its sample.",
        metavar="MB",
        evalscope="",
        unit="megabytes",
        most=MAX_REPLY_MB,
    )
    # batches and cost
    batch: bool = setting(
        False,
        "Send the run through the OpenAI Batch API (about half the price; minutes to hours). Resumable: "
        "--use-cache RUN_DIR polls the same batch.",
        flag="--batch/--no-batch",
        evalscope="",
    )
    batch_poll_s: float = setting(30.0, "Seconds between polls of a running batch.", evalscope="", unit="seconds")
    batch_rest_online: bool = setting(
        False,
        "Send what a batch left unanswered (expired, failed lines) online instead of in a new batch.",
        evalscope="",
    )
    batch_write: str | None = setting(
        None,
        "Write the run's owed requests as a Batch API JSON Lines file (for vllm run-batch) and stop.",
        evalscope="",
        path="FILE",
    )
    batch_results: str | None = setting(
        None,
        "Score a Batch API result file made elsewhere (vllm run-batch -o FILE) into the run (with --use-cache).",
        evalscope="",
        path="FILE",
    )
    price_input: float | None = setting(
        None,
        "Price per million input (prompt) tokens, for the run's cost.",
        metavar="PRICE",
        evalscope="",
    )
    price_output: float | None = setting(
        None,
        "Price per million output tokens (completion, reasoning included).",
        metavar="PRICE",
        evalscope="",
    )
    pricing_file: str | None = setting(
        None,
        "YAML or JSON prices keyed by model: {MODEL: {input: X, output: Y, batch_discount: 0.5}}.",
        evalscope="",
        path="FILE",
    )
    batch_discount: float = setting(
        0.5, "Share of the price a batch pays (OpenAI: 0.5).", metavar="SHARE", evalscope=""
    )
    max_cost: float | None = setting(
        None,
        "Stop before the run would cost more than this (needs prices); what finished is kept.",
        metavar="AMOUNT",
        evalscope="",
        least=0,
    )
    # the data
    datasets: list[str] = setting([BENCHMARK], "Benchmark name (only coin_flip).")
    dataset_args: dict[str, Any] | None = setting(
        None,
        'EvalScope\'s per-benchmark settings, e.g. \'{"coin_flip": {"local_path": "DIR", "few_shot_num": 3}}\'.',
        metavar="JSON",
    )
    dataset_hub: str = setting(
        "bundled",
        "Where the data comes from: the bundled set, a hub (cached after the first download), or local files.",
        choices=("bundled", "huggingface", "modelscope", "local"),
    )
    dataset_path: str | None = setting(
        None,
        "A data file (JSON, JSONL, CSV, Parquet) or a directory with test.* and validation.*.",
        evalscope="dataset_args.coin_flip.local_path",
        path="PATH",
    )
    dataset_id: str = setting(
        "extraordinarylab/coin-flip",
        "Dataset id on the hub.",
        metavar="ID",
        evalscope="dataset_args.coin_flip.dataset_id",
    )
    dataset_dir: str | None = setting(
        None,
        "Hub cache folder (default $COINFLIP_CACHE or ~/.cache/coinflip).",
        path="DIR",
    )
    split: str = setting("test", "Split to evaluate.", choices=SPLITS, evalscope="dataset_args.coin_flip.eval_split")
    limit: int | float | None = setting(
        None,
        "N questions, or a fraction such as 0.1 (0 or unset: all).",
        kind="limit",
        metavar="N|FRACTION",
    )
    limit_mode: str = setting(
        "stratified",
        "How --limit picks: stratified (seeded, in proportion to the number of people), first (the first N, as "
        "EvalScope), random (seeded).",
        choices=("stratified", "first", "random"),
        evalscope="dataset_args.coin_flip.shuffle",
    )
    repeats: int = setting(
        1, "Ask each question K times (with a seed in generation_config, repeat k uses seed+k).", least=1
    )
    few_shot_num: int = setting(
        0, "Worked examples from the validation split.", evalscope="dataset_args.coin_flip.few_shot_num", least=0
    )
    few_shot_seed: int = setting(42, "Seed that picks the few-shot examples.", evalscope="", least=-(2**63))
    few_shot_random: bool = setting(
        True,
        "Pick few-shot examples at random (seeded); --no-few-shot-random takes the first N, as EvalScope does.",
        evalscope="dataset_args.coin_flip.few_shot_random",
    )
    seed: int = setting(42, "Seed for the subset, the random baseline and the bootstrap.", least=0)
    # the run
    work_dir: str = setting("./outputs", "Where run directories are created.", path="DIR")
    use_cache: str | None = setting(
        None,
        "Resume RUN_DIR with its saved settings: reuse finished predictions, send only the rest.",
        path="RUN_DIR",
    )
    no_timestamp: bool = setting(False, "Write the run into --work-dir itself instead of a timestamped folder.")
    metric_compat: str = setting(
        "coinflip",
        "coinflip: strict answers, invalid ones count as wrong; evalscope: EvalScope 1.14.1's extraction and "
        "arithmetic.",
        choices=METRIC_COMPATS,
        evalscope="",
    )
    html_report: bool = setting(True, "Write the HTML report.", flag="--html/--no-html", evalscope="")
    progress: bool | None = setting(None, "Progress bar (default: on a terminal).", flag=None, evalscope="")
    quiet: bool = setting(False, "No terminal summary.", flag=None, evalscope="")
    # EvalScope settings that are accepted but change nothing here
    judge: dict[str, Any] | None = setting(None, "LLM judge settings.", unused=UNUSED)
    judge_strategy: str | None = setting(None, "LLM judge strategy.", unused=UNUSED)
    judge_worker_num: int | None = setting(None, "LLM judge workers.", unused=UNUSED, kind="text")  # as given
    judge_model_args: dict[str, Any] | None = setting(None, "LLM judge model.", unused=UNUSED)
    analysis_report: bool = setting(False, "LLM-written analysis.", unused=UNUSED)
    collect_perf: bool = setting(
        True,
        "Per-request performance.",
        unused="always collected: latency, tokens and time to first token are in every report",
    )
    enable_progress_tracker: bool = setting(False, "progress.json.", unused=UNUSED)
    debug: bool = setting(False, "Debug logging.", unused="see logs/eval_log.log")
    eval_backend: str | None = setting(None, "Evaluation backend (Native only).", unused=UNUSED)
    model_args: dict[str, Any] | None = setting(None, "Checkpoint loading arguments.", unused=UNUSED)
    chat_template: str | None = setting(
        None, "Checkpoint chat template.", unused="the server applies its own chat template"
    )
    model_task: str = setting("text_generation", "Model task.", unused="coin_flip is text generation")
    eval_config: Any = setting(None, "Another backend's settings.", unused=UNUSED, kind="text")
    rerun_review: bool = setting(False, "Score cached predictions again.", unused="coinflip rescore RUN_DIR does")
    sandbox: dict[str, Any] | None = setting(None, "Code sandbox.", unused=UNUSED)
    use_sandbox: bool = setting(False, "Code sandbox.", unused=UNUSED)
    sandbox_type: str | None = setting("docker", "Code sandbox engine.", unused=UNUSED)
    sandbox_manager_config: dict[str, Any] | None = setting(None, "Code sandbox manager.", unused=UNUSED)
    agent_config: dict[str, Any] | None = setting(None, "Agent loop.", unused=UNUSED)
    evalscope_version: str | None = setting(None, "EvalScope's version.", unused="reports name coinflip's version")
    dry_run: bool = setting(False, "Check the settings and the data, print what would run, and send nothing.")
    # not a setting: those given (`of`'s names, else those off their defaults), kept over the saved ones on a resume
    given: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    @classmethod
    def of(cls, **values: Any) -> TaskConfig:
        """A config from named settings (the CLI, a file, a dict), recorded in `given`."""
        names = cls.field_names()
        unknown = sorted(set(values) - set(names))
        if unknown:
            raise UnknownSettingError(unknown_message(unknown, names))
        return cls(**values, given=frozenset(values))

    def __post_init__(self) -> None:
        check_values(self)  # first: nothing below walks a value that is too deep, shared or not UTF-8
        if not self.given:
            self.given = frozenset(s.name for s in settings() if getattr(self, s.name) != s.default)
        self._notes = fold_evalscope(self, settings())
        self.datasets = dataset_names(self.datasets)
        self.api_url = one_url(self.api_url)
        if self.api_key is None or self.api_key == REDACTED:
            self.api_key = next((os.environ[k] for k in API_KEY_ENV if os.environ.get(k)), None)
        if self.model not in BASELINES and not (self.batch_write or self.batch_results):  # else never sent
            check_header("api_key", self.api_key)
        self.limit = check_limit(self.limit)
        self.generation_config = parse_generation_config(self.generation_config)
        check_values(self)  # again: JSON text was parsed into objects above
        check_declared(self, settings())
        for name in RELATIVE_TO_START:  # as the run saw them: a resume or a rescore may start in another folder
            if isinstance(value := getattr(self, name), str) and value:
                setattr(self, name, os.path.abspath(os.path.expanduser(value)))
        check_across(self)

    def checked(self) -> TaskConfig:
        """A copy checked again, as run_task takes a TaskConfig: a field set after it was made
        (EvalScope's `task_cfg.dataset_args = {...}`, `task_cfg.split = None`) counts, or is refused."""
        fresh = replace(self)  # `given` as it was: a field another part set (a probe's model_id) is not the user's
        fresh._notes = list(dict.fromkeys([*self._notes, *fresh._notes]))  # the notes on what was folded away
        return fresh

    @property
    def name(self) -> str:
        return self.model_id or self.model or "model"

    def redacted(self) -> dict[str, Any]:
        """The config as saved, with its version: the API key, a gateway's secrets and the texts of EvalScope's
        settings unused here (its judge_model_args hold a key) never leave memory."""
        data = {k: v for k, v in asdict(self).items() if k != "given"}
        data["api_key"] = REDACTED if self.api_key else self.api_key
        data["generation_config"] = redacted_generation(data["generation_config"])
        data["api_url"] = redacted_url(data["api_url"])
        unused = [s for s in settings() if s.unused and isinstance(data[s.name], (dict, list, str))]
        data.update({s.name: masked(data[s.name]) for s in unused if data[s.name] != s.default})  # JSON text too
        return {"version": SETTINGS_VERSION, **data}

    def __repr__(self) -> str:  # as saved: a notebook, a traceback's locals or a log shows no secret
        return f"TaskConfig({', '.join(f'{k}={v!r}' for k, v in self.redacted().items() if k != 'version')})"

    def notes(self) -> list[str]:
        """One line per setting given that changes nothing here (EvalScope's, --api-url beside a baseline)."""
        out = list(self._notes)
        if self.api_url and self.model_path:  # models.backend: llama.cpp here
            out.append("api_url: not used, the --model-path file is served by llama.cpp here")
        elif self.model in BASELINES and self.api_url:  # models.backend: in-process
            out.append(f"api_url: not used, --model {self.model} is a baseline coinflip answers itself")
        prices = {"price_input": self.price_input, "price_output": self.price_output}
        if len(given := [k for k, v in prices.items() if v is not None]) == 1 and not self.pricing_file:
            other = "--" + ({*prices} - {*given}).pop().replace("_", "-")
            out.append(f"{given[0]}: not used without {other}: a cost needs both prices, so none is reported")
        for s in settings():
            if s.unused and getattr(self, s.name) not in (None, False, s.default, {}, []):
                out.append(f"{s.name}: {s.unused}")
        return out

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls) if f.metadata]


@functools.cache
def settings() -> tuple[Setting, ...]:
    return declarations(TaskConfig)
