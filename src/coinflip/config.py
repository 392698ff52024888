"""TaskConfig: every setting of a run, declared once and validated once, at the edge.

Each field carries its declaration (help, CLI flag, which commands take it, EvalScope's name
for it) in its metadata; the CLI options and the README's tables are derived from these
declarations (`settings()`), so the command line, the Python API and the docs cannot drift.
EvalScope 1.14.1's spellings (its TaskConfig fields, `dataset_args`, `generation_config`
keys, `eval_type` values) are mapped here, once, by `_evalscope.py`.
"""

from __future__ import annotations

import functools
import math
import os
import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import quote_plus, unquote_plus, urlsplit

from . import _evalscope
from .errors import ConfigError, UnknownSettingError, short

BENCHMARK = "coin_flip"
HUBS = ("bundled", "huggingface", "modelscope", "local")
METRIC_COMPATS = ("coinflip", "evalscope")
SPLITS = ("test", "validation")
API_MODES = ("chat", "completions")
LIMIT_MODES = ("stratified", "first", "random")
PROMPT_TEMPLATES = ("default", "direct", "multiturn", "zh", "direct-zh")
DEFAULT_BATCH = 32
GENERATION_KEYS = (
    "temperature",
    "max_tokens",
    "max_completion_tokens",
    "top_p",
    "top_k",
    "seed",
    "stop",
    "n",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "logit_bias",
    "reasoning_effort",
    "logprobs",
    "top_logprobs",
    "chat_template_kwargs",
    "extra_body",
    "extra_headers",
    "extra_query",
)
API_KEY_ENV = ("COINFLIP_API_KEY", "OPENAI_API_KEY")
BASELINES = ("oracle", "random", "always-yes", "always-no")  # models answered in-process (models/baselines.py)
LOCAL_MODELS = ("smollm2",)  # names that start llama.cpp with a GGUF file a package ships (models/llama_local.py)
REDACTED = "***"
GATEWAY_KEYS = ("extra_headers", "extra_query", "extra_body")  # what a gateway may read a secret from
# Keys whose values are plainly settings, never secrets: kept in the run directory and shown
# (matched without case). Every other text in extra_headers, extra_query and extra_body is
# treated as a secret: masked when saved and shown, asked for again on a resume.
PLAIN_KEYS = frozenset(
    {
        "api-version",
        "api_version",
        "anthropic-version",
        "openai-beta",
        "accept",
        "content-type",
        "user-agent",
        "guided_choice",
        "guided_regex",
        "guided_json",
        "guided_grammar",
        "response_format",
        "reasoning_effort",
    }
)
OWN_BODY_KEYS = ("model", "messages", "prompt", "stream", "stream_options", "n")
MAX_NESTING = 64  # levels of objects and lists in a setting: deeper JSON or YAML is a mistake or an attack
MAX_PARTS = 100_000  # items in all of a setting's objects and lists together
MAX_WHOLE = 2**63  # whole numbers in settings stay within 64 bits (what servers and numpy take)
MAX_REPLY_MB = 1_000_000  # a terabyte: the cap on --max-reply-mb (beyond it the byte count overflows)
MAX_TIMEOUT = 1e7  # seconds (about 4 months): beyond it timers overflow
NAME_MAX = 255  # bytes in one path component on Linux, macOS and Windows
PATH_MAX = os.pathconf("/", "PC_PATH_MAX") if hasattr(os, "pathconf") else 260  # bytes in a whole path, its NUL too
PATH_SETTINGS = (
    "work_dir",
    "use_cache",
    "dataset_path",
    "dataset_dir",
    "model_path",
    "batch_write",
    "batch_results",
    "pricing_file",
)
REPEATS_BITS = 12  # a sample is (question, repeat), one int key: question << REPEATS_BITS | repeat
REPEATS_MAX = 1 << REPEATS_BITS


@dataclass(frozen=True)
class Setting:
    """How one TaskConfig field shows itself: on the command line, in --help and in the docs."""

    name: str
    help: str
    flag: str | None  # "--api-url"; a "--x/--no-x" pair for booleans; None: Python and config files only
    commands: tuple[str, ...]  # which commands take the flag: eval, sweep
    kind: str  # text, int, float, bool, choice, list
    choices: tuple[str, ...]
    metavar: str | None
    evalscope: str  # EvalScope's spelling ("" where it has none)
    unused: str  # for EvalScope settings accepted but not used by coin_flip: why
    default: Any


def _setting(
    default: Any,
    help: str,
    *,
    flag: str | None = "",
    commands: tuple[str, ...] = ("eval", "sweep"),
    kind: str = "",
    choices: tuple[str, ...] = (),
    metavar: str | None = None,
    evalscope: str = "=",
    unused: str = "",
    factory: Any = None,
    repr: bool = True,
) -> Any:
    meta = {
        "help": help,
        "flag": flag,
        "commands": commands,
        "kind": kind or ("choice" if choices else ""),
        "choices": choices,
        "metavar": metavar,
        "evalscope": evalscope,
        "unused": unused,
    }
    if factory is not None:
        return field(default_factory=factory, metadata=meta, repr=repr)
    return field(default=default, metadata=meta, repr=repr)


EVAL = ("eval",)
UNUSED = "accepted, not used by coin_flip"


@dataclass
class TaskConfig:
    """One evaluation. Field names follow EvalScope's TaskConfig where they overlap."""

    # the model and how to reach it
    model: str | None = _setting(
        None,
        f"Model name sent to the server; or a baseline ({', '.join(BASELINES)}); or {', '.join(LOCAL_MODELS)} (local).",
        metavar="NAME",
    )
    model_id: str | None = _setting(None, "Name shown in reports and used in paths (default: the model name).")
    api_url: str | list[str] | None = _setting(
        None,
        "OpenAI-compatible base URL (…/v1), server root, or full endpoint; repeat for replicas of one model.",
        kind="list",
        metavar="URL",
    )
    api_key: str | None = _setting(
        None, "API key; default $COINFLIP_API_KEY or $OPENAI_API_KEY. Never written or printed.", repr=False
    )
    eval_type: str | None = _setting(
        None,
        "EvalScope's eval type: openai_api (or service, server) sends HTTP requests; mock_llm needs a baseline "
        "model; llm_ckpt is not supported (serve the checkpoint instead).",
        metavar="TYPE",
    )
    api_mode: str = _setting(
        "chat",
        "chat: /chat/completions with messages; completions: /completions with the same text as one prompt.",
        choices=API_MODES,
        evalscope="",
    )
    model_path: str | None = _setting(
        None, "Serve this local GGUF file with llama.cpp for the run.", metavar="FILE.gguf", evalscope=""
    )
    eval_batch_size: int | None = _setting(
        None,
        f"Requests in flight (default {DEFAULT_BATCH}; a local llama.cpp server: its parallel slots).",
        kind="int",
    )
    generation_config: dict[str, Any] = _setting(
        None,
        "JSON or key=value,... : temperature, max_tokens, max_completion_tokens, top_p, seed, stop, n, "
        "reasoning_effort, logprobs, top_logprobs, chat_template_kwargs, extra_body, extra_headers, extra_query, ...",
        factory=dict,
        kind="json",
        metavar="JSON|K=V,...",
    )
    timeout: float = _setting(120.0, "Seconds per request attempt (streaming: also the longest gap between events).")
    retries: int = _setting(
        5,
        "Retries per request on 5xx, timeouts and broken replies (a 429 waits instead: see --patience).",
        evalscope="generation_config.retries",
    )
    patience: float = _setting(
        300.0,
        "Seconds the run waits while the endpoint refuses (429, overloaded) or fails every request; then it "
        "stops, resumable. Refusals never use up --retries.",
        evalscope="",
        metavar="SECONDS",
    )
    stream: bool = _setting(False, "Stream replies (server-sent events); records time to first token.", kind="bool")
    ignore_errors: bool = _setting(
        False, "Exit 0 even when some samples got no reply (they are still counted and reported).", kind="bool"
    )
    system_prompt: str | None = _setting(
        None, "Optional system message.", metavar="TEXT", evalscope="dataset_args.coin_flip.system_prompt"
    )
    prompt_template: str = _setting(
        "default",
        "default (the specification's, byte for byte), direct (answer without reasoning), multiturn (few-shot "
        "examples as chat turns), zh or direct-zh (default or direct in Chinese), or your own text with {question}.",
        metavar="NAME|TEXT",
        evalscope="dataset_args.coin_flip.prompt_template",
    )
    force_answer: bool = _setting(
        False,
        "When a reply has no valid answer, ask once more for only 'ANSWER: YES' or 'ANSWER: NO'.",
        kind="bool",
        evalscope="",
    )
    max_reply_mb: float = _setting(
        16.0, "A reply larger than this (MB) is an error for its sample.", metavar="MB", evalscope=""
    )
    # batches and cost
    batch: bool = _setting(
        False,
        "Send the run through the OpenAI Batch API (about half the price; minutes to hours). Resumable: "
        "--use-cache RUN_DIR polls the same batch.",
        flag="--batch/--no-batch",
        commands=EVAL,
        kind="bool",
        evalscope="",
    )
    batch_poll_s: float = _setting(30.0, "Seconds between polls of a running batch.", commands=EVAL, evalscope="")
    batch_rest_online: bool = _setting(
        False,
        "Send what a batch left unanswered (expired, failed lines) online instead of in a new batch.",
        commands=EVAL,
        kind="bool",
        evalscope="",
    )
    batch_write: str | None = _setting(
        None,
        "Write the run's owed requests as a Batch API JSON Lines file (for vllm run-batch) and stop.",
        commands=EVAL,
        metavar="FILE",
        evalscope="",
    )
    batch_results: str | None = _setting(
        None,
        "Score a Batch API result file made elsewhere (vllm run-batch -o FILE) into the run (with --use-cache).",
        commands=EVAL,
        metavar="FILE",
        evalscope="",
    )
    price_input: float | None = _setting(
        None,
        "Price per million input (prompt) tokens, for the run's cost.",
        kind="float",
        metavar="PRICE",
        evalscope="",
    )
    price_output: float | None = _setting(
        None,
        "Price per million output tokens (completion, reasoning included).",
        kind="float",
        metavar="PRICE",
        evalscope="",
    )
    pricing_file: str | None = _setting(
        None,
        "YAML or JSON prices keyed by model: {MODEL: {input: X, output: Y, batch_discount: 0.5}}.",
        metavar="FILE",
        evalscope="",
    )
    batch_discount: float = _setting(
        0.5, "Share of the price a batch pays (OpenAI: 0.5).", metavar="SHARE", evalscope=""
    )
    max_cost: float | None = _setting(
        None,
        "Stop before the run would cost more than this (needs prices); what finished is kept.",
        kind="float",
        metavar="AMOUNT",
        evalscope="",
    )
    # the data
    datasets: list[str] = _setting(
        None, "Benchmark name (only coin_flip).", commands=EVAL, kind="list", factory=lambda: [BENCHMARK]
    )
    dataset_args: dict[str, Any] | None = _setting(
        None,
        'EvalScope\'s per-benchmark settings, e.g. \'{"coin_flip": {"local_path": "DIR", "few_shot_num": 3}}\'.',
        commands=EVAL,
        kind="json",
        metavar="JSON",
    )
    dataset_hub: str = _setting(
        "bundled",
        "Where the data comes from: the bundled set, a hub (cached after the first download), or local files.",
        commands=EVAL,
        choices=HUBS,
    )
    dataset_path: str | None = _setting(
        None,
        "A data file (JSON, JSONL, CSV, Parquet) or a directory with test.* and validation.*.",
        commands=EVAL,
        metavar="PATH",
        evalscope="dataset_args.coin_flip.local_path",
    )
    dataset_id: str = _setting(
        "extraordinarylab/coin-flip",
        "Dataset id on the hub.",
        commands=EVAL,
        metavar="ID",
        evalscope="dataset_args.coin_flip.dataset_id",
    )
    dataset_dir: str | None = _setting(
        None, "Hub cache folder (default $COINFLIP_CACHE or ~/.cache/coinflip).", commands=EVAL, metavar="DIR"
    )
    split: str = _setting("test", "Split to evaluate.", commands=EVAL, choices=SPLITS, evalscope="")
    limit: int | float | None = _setting(
        None,
        "N questions, or a fraction such as 0.1 (0 or unset: all).",
        commands=EVAL,
        kind="limit",
        metavar="N|FRACTION",
    )
    limit_mode: str = _setting(
        "stratified",
        "How --limit picks: stratified (seeded, in proportion to the number of people), first (the first N, as "
        "EvalScope), random (seeded).",
        commands=EVAL,
        choices=LIMIT_MODES,
        evalscope="dataset_args.coin_flip.shuffle",
    )
    repeats: int = _setting(1, "Ask each question K times (with a seed in generation_config, repeat k uses seed+k).")
    few_shot_num: int = _setting(
        0, "Worked examples from the validation split.", evalscope="dataset_args.coin_flip.few_shot_num"
    )
    few_shot_seed: int = _setting(42, "Seed that picks the few-shot examples.", evalscope="")
    few_shot_random: bool = _setting(
        True,
        "Pick few-shot examples at random (seeded); --no-few-shot-random takes the first N, as EvalScope does.",
        kind="bool",
        evalscope="dataset_args.coin_flip.few_shot_random",
    )
    seed: int = _setting(42, "Seed for the subset, the random baseline and the bootstrap.")
    # the run
    work_dir: str = _setting("./outputs", "Where run directories are created.", metavar="DIR")
    use_cache: str | None = _setting(
        None,
        "Resume RUN_DIR with its saved settings: reuse finished predictions, send only the rest.",
        commands=EVAL,
        metavar="RUN_DIR",
    )
    no_timestamp: bool = _setting(
        False, "Write the run into --work-dir itself instead of a timestamped folder.", commands=EVAL, kind="bool"
    )
    metric_compat: str = _setting(
        "coinflip",
        "coinflip: strict answers, invalid ones count as wrong; evalscope: EvalScope 1.14.1's extraction and "
        "arithmetic.",
        commands=EVAL,
        choices=METRIC_COMPATS,
        evalscope="",
    )
    html_report: bool = _setting(
        True, "Write the HTML report.", flag="--html/--no-html", commands=EVAL, kind="bool", evalscope=""
    )
    progress: bool | None = _setting(
        None, "Progress bar (default: on a terminal).", flag=None, kind="bool", evalscope=""
    )
    quiet: bool = _setting(False, "No terminal summary.", flag=None, evalscope="")
    # EvalScope settings that are accepted but change nothing here
    judge: dict[str, Any] | None = _setting(None, "LLM judge settings.", commands=EVAL, unused=UNUSED)
    judge_strategy: str | None = _setting(None, "LLM judge strategy.", commands=EVAL, unused=UNUSED)
    judge_worker_num: int | None = _setting(None, "LLM judge workers.", commands=EVAL, unused=UNUSED)
    judge_model_args: dict[str, Any] | None = _setting(None, "LLM judge model.", commands=EVAL, unused=UNUSED)
    analysis_report: bool = _setting(False, "LLM-written analysis.", commands=EVAL, kind="bool", unused=UNUSED)
    collect_perf: bool = _setting(
        True,
        "Per-request performance.",
        commands=EVAL,
        kind="bool",
        unused="always collected: latency, tokens and time to first token are in every report",
    )
    enable_progress_tracker: bool = _setting(False, "progress.json.", commands=EVAL, kind="bool", unused=UNUSED)
    debug: bool = _setting(False, "Debug logging.", commands=EVAL, kind="bool", unused="see logs/eval_log.log")
    eval_backend: str | None = _setting(None, "Evaluation backend (Native only).", commands=EVAL, unused=UNUSED)
    model_args: dict[str, Any] | None = _setting(None, "Checkpoint loading arguments.", commands=EVAL, unused=UNUSED)
    chat_template: str | None = _setting(
        None, "Checkpoint chat template.", commands=EVAL, unused="the server applies its own chat template"
    )
    # not a setting: the settings that were given (the rest are defaults), which a resume keeps
    # over the saved ones. `of` records the names it was given; a config made directly, the
    # settings that differ from their defaults.
    given: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    @classmethod
    def of(cls, **values: Any) -> TaskConfig:
        """A config from named settings (the CLI, a file, a dict): an unknown name ends in one line
        naming the known ones, and the names are recorded in `given`."""
        names = cls.field_names()
        unknown = sorted(set(values) - set(names))
        if unknown:
            raise UnknownSettingError(unknown_message(unknown, names))
        return cls(**values, given=frozenset(values))

    def __post_init__(self) -> None:
        check_values(self)  # first: nothing below walks a value that is too deep, shared or not UTF-8
        if not self.given:
            self.given = frozenset(s.name for s in settings() if getattr(self, s.name) != s.default)
        _evalscope.apply(self)
        _check_types(self)
        self.datasets = _check_datasets(self.datasets)
        self.api_url = _check_urls(self.api_url)
        if self.api_key is None or self.api_key == REDACTED:
            self.api_key = next((os.environ[k] for k in API_KEY_ENV if os.environ.get(k)), None)
        _check_header_value("api_key", self.api_key)
        self.limit = _check_limit(self.limit)
        self.generation_config = parse_generation_config(self.generation_config)
        check_values(self)  # again: JSON text was parsed into objects above
        for name in PATH_SETTINGS:
            _check_path(name, getattr(self, name))
        if self.eval_batch_size is not None:
            _check_int("eval_batch_size", self.eval_batch_size, 1)
        for name in ("few_shot_num", "few_shot_seed", "retries", "seed"):
            _check_int(name, getattr(self, name), 0 if name != "few_shot_seed" else -(2**63))
        _check_int("repeats", self.repeats, 1)
        if self.repeats > REPEATS_MAX or self.repeats * int(self.generation_config.get("n") or 1) > REPEATS_MAX:
            raise ConfigError(f"repeats times n (choices per request) must be at most {REPEATS_MAX}")
        for s in settings():  # a choice is checked against the choices its declaration names
            if s.choices:
                check_choice(s.name, getattr(self, s.name), s.choices)
        _check_positive("timeout", self.timeout, "seconds", MAX_TIMEOUT)
        _check_positive("patience", self.patience, "seconds", MAX_TIMEOUT)
        _check_positive("max_reply_mb", self.max_reply_mb, "megabytes", MAX_REPLY_MB)
        if self.model is not None and (not isinstance(self.model, str) or not self.model.strip()):
            raise ConfigError("model is empty: pass a model name, e.g. --model oracle or --model smollm2")
        if self.model is None and self.model_path:  # a GGUF file names its model
            self.model = Path(str(self.model_path)).stem or None
        if self.model is None and not self.use_cache:
            raise ConfigError("give --model (or --use-cache RUN_DIR to resume a run with its saved settings)")
        if self.dataset_path and self.dataset_hub not in ("bundled", "local"):
            raise ConfigError("give either dataset_path or dataset_hub, not both")
        if self.dataset_hub == "local" and not self.dataset_path:
            raise ConfigError("dataset_hub local needs dataset_path (or dataset_args.coin_flip.local_path)")
        _check_batch_and_cost(self)
        if not isinstance(self.prompt_template, str) or not self.prompt_template.strip():
            raise ConfigError(
                f"prompt_template must be one of {', '.join(PROMPT_TEMPLATES)} or a text with {{question}}"
            )

    @property
    def name(self) -> str:
        """The model's name in reports and paths."""
        return self.model_id or self.model or "model"

    def redacted(self) -> dict[str, Any]:
        """The config as saved to disk: the API key, and secret-looking headers, query and body
        parameters of a gateway (in --api-url too), never leave memory."""
        data = asdict(self)
        del data["given"]
        if data.get("api_key"):
            data["api_key"] = REDACTED
        data["generation_config"] = redacted_generation(data["generation_config"])
        urls = data["api_url"]
        data["api_url"] = [redacted_url(u) for u in urls] if isinstance(urls, list) else redacted_url(urls)
        return data

    def notes(self) -> list[str]:
        """One line per setting given that changes nothing here (EvalScope's, --api-url beside a baseline)."""
        out = list(getattr(self, "_notes", []))
        if self.model in BASELINES and self.api_url and not self.model_path:  # models.backend: in-process
            out.append(f"api_url: not used, --model {self.model} is a baseline coinflip answers itself")
        for s in settings():
            if s.unused and getattr(self, s.name) not in (None, False, s.default, {}, []):
                out.append(f"{s.name}: {s.unused}")
        return out

    @classmethod
    def field_names(cls) -> list[str]:
        """The settings' names (every field but `given`)."""
        return [f.name for f in fields(cls) if f.metadata]


def redacted_generation(generation: dict[str, Any]) -> dict[str, Any]:
    """Generation settings fit for a file: every text in extra_headers, extra_query and
    extra_body (nested too) is masked, as a gateway may read a secret from any of them, except
    under the keys of PLAIN_KEYS; numbers, booleans and null stay (they are settings)."""
    out = dict(generation)
    for key in GATEWAY_KEYS:
        if key in out:
            out[key] = _masked(out[key])
    return out


def _masked(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: v if str(k).lower() in PLAIN_KEYS else _masked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v) for v in value]
    if isinstance(value, str) and value:
        return REDACTED
    return value


def secrets_in(generation: dict[str, Any]) -> list[str]:
    """The values `redacted_generation` masks, and what a Basic credential among them decodes to
    (`basic_secrets`): also masked wherever a server echoes them."""
    texts = [t for key in GATEWAY_KEYS for t in _texts(generation.get(key), True) if t and t != REDACTED]
    return texts + [s for t in texts for s in basic_secrets(t)]


def basic_secrets(authorization: str) -> list[str]:
    """What a `Basic TOKEN` credential (an Authorization header, a proxy's user:password) may be
    echoed as besides itself: the token, the `user:password` it decodes to, and the password."""
    import base64
    import binascii

    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "basic" or not token:
        return []
    try:
        pair = base64.b64decode(token.strip(), validate=True).decode("utf-8", "replace")
    except (binascii.Error, ValueError):
        return [token.strip()]
    return [token.strip(), pair, pair.partition(":")[2]]


def secret_keys(value: Any) -> list[str]:
    """The keys of a gateway setting (extra_body, say) whose values hold a text that
    `redacted_generation` masks: what a file written outside the run directory would give away."""
    if not isinstance(value, dict):
        return []
    return [str(k) for k, v in value.items() if str(k).lower() not in PLAIN_KEYS and any(_texts(v, True))]


def masked_somewhere(generation: dict[str, Any] | None) -> bool:
    """Whether saved generation settings had a secret masked (a resume must be given it again).
    None (a hand edit left `generation_config: null`, which the settings take) has none."""
    if not isinstance(generation, dict):
        return False
    return any(REDACTED in _texts(generation.get(key), False) for key in GATEWAY_KEYS)


def _texts(value: Any, skip_plain: bool) -> list[str]:
    """Every text in `value`, nested too; with `skip_plain`, none under the keys of PLAIN_KEYS."""
    if isinstance(value, dict):
        kept = [v for k, v in value.items() if not (skip_plain and str(k).lower() in PLAIN_KEYS)]
        return [t for v in kept for t in _texts(v, skip_plain)]
    if isinstance(value, list):
        return [t for v in value for t in _texts(v, skip_plain)]
    return [value] if isinstance(value, str) else []


def redacted_url(url: Any) -> Any:
    """A URL fit for a file: every query value masked (a SAS token hides in `sv` and `sig`, a
    function key in `code`), and every bare item (`?TOKEN`, no `=`) whole, except under the keys of
    PLAIN_KEYS (api-version); a fragment (never sent) whole."""
    if not isinstance(url, str) or ("?" not in url and "#" not in url):
        return url
    url, hashed, fragment = url.partition("#")
    tail = f"#{REDACTED}" if hashed and fragment else hashed
    if "?" not in url:
        return url + tail
    head, _, query = url.partition("?")
    shown = []
    for key, value in _query(query):
        if value is None:  # a bare item is a secret whole
            shown.append(REDACTED)
        else:
            shown.append(f"{quote_plus(key, '*')}={REDACTED if _secret_query(key, value) else quote_plus(value, '*')}")
    return f"{head}?{'&'.join(shown)}{tail}"


def _query(query: str) -> list[tuple[str, str | None]]:
    """A query's items, decoded (`+` is a space); a bare item (no `=`) is a key with value None."""
    items: list[tuple[str, str | None]] = []
    for item in query.split("&"):
        if item:
            key, sep, value = item.partition("=")
            items.append((unquote_plus(key), unquote_plus(value) if sep else None))
    return items


def _secret_query(key: str, value: str | None) -> bool:
    """A query value is a secret unless it is empty or under a key of PLAIN_KEYS; a bare item is
    one whole (a gateway may take its token as `?TOKEN`)."""
    return value is None or (bool(value) and key.lower() not in PLAIN_KEYS)


def url_secrets(urls: Any) -> list[str]:
    """The query values (and bare items) `redacted_url` masks."""
    found = []
    for url in [urls] if isinstance(urls, str) else list(urls or []):
        query = url.partition("#")[0].partition("?")[2]  # the fragment is never sent
        found += [k if v is None else v for k, v in _query(query) if _secret_query(k, v)]
    return found


def shown_url(url: str) -> str:
    """A URL fit to print or save, the one form every message, page and file shows: its
    credentials removed, whatever they hold, and its query and fragment masked as `redacted_url`
    masks them.

    The credentials are what stands before the last `@` ahead of the query (a password may hold
    `/`; an `@` in the path makes the URL shown shorter, never with a secret). Where no `@` comes
    before the query but the part before the first `/`, `?` or `#` is no host and port (a raw
    password that holds `?` or `#`), they end at the first `@` that a host and port follow. An `@`
    in the query (an e-mail) is no credential: the host stays the host, and no tail of a query
    value is shown in its place."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    query_at = min((i for i in (rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    if "@" in rest[:query_at]:
        rest = rest[:query_at].rpartition("@")[2] + rest[query_at:]
    elif "@" in rest and not _host_and_port(_authority(rest)):
        after = [rest[i + 1 :] for i, c in enumerate(rest) if c == "@"]
        rest = next((a for a in after if "@" not in _authority(a) and _host_and_port(_authority(a))), after[-1])
    return str(redacted_url(f"{scheme}{sep}{rest}"))


def _authority(rest: str) -> str:
    return re.split("[/?#]", rest, maxsplit=1)[0]


def _host_and_port(authority: str) -> bool:
    try:
        parts = urlsplit(f"//{authority}")
        return bool(parts.hostname) and (parts.port is None or parts.port >= 0)
    except ValueError:
        return False


def run_secrets(api_key: str | None, generation: dict[str, Any], urls: Any) -> list[str | None]:
    """Every secret a run holds: the API key, the gateway settings' values and the URL's query
    values; what the redactor masks wherever a server echoes them."""
    return [api_key, *secrets_in(generation), *url_secrets(urls)]


def url_masked(urls: Any) -> bool:
    """Whether a saved --api-url had query values masked (a resume must be given it again)."""
    return any(REDACTED in url.partition("?")[2] for url in ([urls] if isinstance(urls, str) else urls or []))


_KIND_TYPES: dict[str, tuple[type, ...]] = {"text": (str,), "int": (int,), "float": (int, float), "bool": (bool,)}


def _check_types(config: TaskConfig) -> None:
    """Each setting holds the type it is declared with (a YAML file or dict can hold anything)."""
    for s in settings():
        value = getattr(config, s.name)
        if s.unused or value is None or s.kind not in _KIND_TYPES:
            continue
        wanted = _KIND_TYPES[s.kind]
        if not isinstance(value, wanted) or (s.kind in ("int", "float") and isinstance(value, bool)):
            what = {"text": "a text", "int": "a whole number", "float": "a number", "bool": "true or false"}[s.kind]
            raise ConfigError(f"{s.name} must be {what}, got {type(value).__name__} {short(value)}")


def _check_header_value(name: str, value: str | None) -> None:
    """What goes into an HTTP header must be one line of Latin-1 (a key copied with a zero-width
    space or a line break would break the request, or be refused by the server)."""
    if value is None:
        return
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        raise ConfigError(
            f"{name} holds a character that cannot be sent in an HTTP header (a zero-width space, a typographic "
            "dash or quote?): copy it again"
        ) from None
    if any(c in value for c in "\r\n\0"):
        raise ConfigError(f"{name} holds a line break: copy it again")


def unknown_message(unknown: list[str], names: list[str]) -> str:
    """'did you mean' for each typo (as the CLI does for options); the full list only without one."""
    import difflib

    guesses = {name: difflib.get_close_matches(name, names, n=1) for name in unknown}
    if all(guesses.values()):
        meant = ", ".join(repr(v[0]) for v in guesses.values())
        return f"unknown TaskConfig field(s) {unknown}: did you mean {meant}?"
    return f"unknown TaskConfig field(s) {unknown}; known: {', '.join(names)}"


@functools.cache
def settings() -> tuple[Setting, ...]:
    """Every setting's declaration, in the order of TaskConfig's fields."""
    out = []
    for f in fields(TaskConfig):
        m = f.metadata
        if not m:  # `given`
            continue
        default = f.default_factory() if callable(f.default_factory) else f.default
        flag = m["flag"]
        if flag == "":
            flag = "--" + f.name.replace("_", "-")
            if m["kind"] == "bool" and default is True:  # a default of False needs only the flag that turns it on
                flag = f"{flag}/--no-{f.name.replace('_', '-')}"
        evalscope = f.name if m["evalscope"] == "=" else m["evalscope"]
        kind = m["kind"] or {bool: "bool", int: "int", float: "float"}.get(type(default), "text")
        settled = {"flag": flag, "kind": kind, "evalscope": evalscope}  # the metadata holds the rest of Setting
        out.append(Setting(name=f.name, default=default, **{**m, **settled}))
    return tuple(out)


def _check_batch_and_cost(config: TaskConfig) -> None:
    """Batch mode needs a server that takes batches; a cost limit needs prices. A pricing file is
    read here, once: its prices for the model become the run's (and are saved with it)."""
    for name in ("price_input", "price_output", "max_cost"):
        value = getattr(config, name)
        if value is not None and (not math.isfinite(value) or value < 0):
            raise ConfigError(f"{name} must be a number >= 0, got {value!r}")
    discount = config.batch_discount  # None from a hand-edited task_config.yaml: not a number either
    if isinstance(discount, bool) or not isinstance(discount, int | float) or not 0 < discount <= 1:
        raise ConfigError(f"batch_discount must be in (0, 1], got {config.batch_discount!r}")
    _check_positive("batch_poll_s", config.batch_poll_s, "seconds")
    if config.pricing_file:
        from .scoring.cost import apply_pricing_file

        apply_pricing_file(config)
    if config.model is None:  # a resume: checked again with the run's saved settings
        return
    if config.max_cost is not None and (config.price_input is None or config.price_output is None):
        raise ConfigError("max_cost needs prices: give --price-input and --price-output, or --pricing-file")
    if config.batch and config.model is not None and not config.api_url:
        raise ConfigError("--batch needs --api-url: a server that serves /v1/files and /v1/batches")
    if config.batch and config.stream:
        raise ConfigError("--batch and --stream exclude each other: a batch has no stream")
    if config.batch_write and config.batch_results:
        raise ConfigError("give --batch-write or --batch-results, not both")


def _check_datasets(value: Any) -> list[str]:
    if value is not None and not isinstance(value, (str, list, tuple)):
        raise ConfigError(f"datasets must be a name or a list of names, got {short(value)}")
    names = [value] if isinstance(value, str) else list(value or [])
    unknown = [n for n in names if n != BENCHMARK]
    if not names or unknown:
        raise ConfigError(f"unknown dataset {unknown or names!r}: the only benchmark here is 'coin_flip'")
    return names


def _check_urls(value: Any) -> str | list[str] | None:
    if value is None or value == [] or value == "":
        return None
    if not isinstance(value, (str, list, tuple)):
        raise ConfigError(f"api_url must be a URL or a list of URLs, got {short(value)}")
    urls = [value] if isinstance(value, str) else list(value)
    for url in urls:
        check_url(url)
    return urls[0] if len(urls) == 1 else urls


def check_url(url: Any) -> None:
    """An http(s) URL with a host and a valid port, and no credentials (they would be saved and printed)."""
    example = "e.g. http://127.0.0.1:8000/v1"
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ConfigError(f"api_url {_shown(url)!r} is not an http(s) URL, {example}")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        reason = "its host or port is malformed" if "@" in url else str(exc)  # the text would quote a password
        raise ConfigError(f"api_url {_shown(url)!r} is not a valid URL ({reason}), {example}") from None
    if parts.username is not None or parts.password is not None:
        raise ConfigError(
            f"api_url {_shown(url)!r} carries credentials; pass the key with --api-key or $COINFLIP_API_KEY "
            "(or a header with generation_config extra_headers)"
        )
    host = parts.hostname or ""
    if not host or any(c.isspace() for c in url) or (port is not None and not 0 < port < 65536):
        raise ConfigError(f"api_url {_shown(url)!r} has no valid host and port, {example}")
    if not url.isascii() or any(ord(c) < 32 or ord(c) == 127 for c in url):
        raise ConfigError(f"api_url {_shown(url)!r} holds characters a URL cannot carry: percent-encode them")


def _shown(url: Any) -> Any:
    return shown_url(url) if isinstance(url, str) else url


def _check_limit(value: Any) -> int | float | None:
    """None or 0: everything (EvalScope's `limit: 0`); a whole number: a count; below 1: a fraction."""
    message = f"limit must be a count (10) or a fraction (0.1), got {value!r}"
    if isinstance(value, str):
        try:
            value = float(value) if any(c in value for c in ".eE") else int(value)
        except ValueError:
            raise ConfigError(message) from None
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ConfigError(message)
    if isinstance(value, float):
        if value.is_integer():
            value = int(value)
        elif value > 1:
            raise ConfigError(f"a fractional limit must be in (0, 1], got {value}; use a whole number for a count")
        else:
            return value
    return value or None


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name} must be a whole number >= {minimum}, got {value!r}")


def _check_positive(name: str, value: Any, unit: str, most: float = MAX_TIMEOUT) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{name} must be a positive number of {unit}, got {short(value)}")
    if value > most:
        raise ConfigError(f"{name} must be at most {most:,.0f} {unit}, got {short(value)}")


def check_values(config: TaskConfig) -> None:
    """Every value of every setting can be sent, saved and read back: text is Unicode (no bytes
    that were not UTF-8), objects and lists are not too deep or large and share no part (a YAML
    alias bomb), keys are texts, numbers are finite and whole numbers fit in 64 bits."""
    for f in fields(TaskConfig):
        problem = odd_value(getattr(config, f.name))
        if problem:
            raise ConfigError(f"{f.name} {problem}")


_SURROGATE = re.compile("[\ud800-\udfff]")


def odd_value(value: Any) -> str | None:
    """Why `value` cannot be a setting's value, or None; a walk with its own stack, so any depth is safe."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    seen: set[int] = set()
    parts = 0
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return "holds bytes that are not UTF-8 text: give it as UTF-8"
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int):
            if not -MAX_WHOLE <= item < MAX_WHOLE:
                return f"holds {short(item)}: whole numbers must fit in 64 bits"
        elif isinstance(item, float):
            if depth and not math.isfinite(item):  # a setting that is a number says so in its own words
                return f"holds {item}: not a finite number (NaN and Infinity are not JSON)"
        elif isinstance(item, (dict, list, tuple)):
            if depth >= MAX_NESTING:
                return f"is nested more than {MAX_NESTING} levels deep"
            if id(item) in seen:
                return "uses a part twice (YAML anchors and aliases are not supported in settings)"
            seen.add(id(item))
            parts += len(item)
            if parts > MAX_PARTS:
                return f"holds more than {MAX_PARTS} items"
            if isinstance(item, dict):
                bad = next((k for k in item if not isinstance(k, str)), None)
                if bad is not None:
                    return f"has a key {short(bad)} that is not a text: quote it"
                stack += [(k, depth + 1) for k in item] + [(v, depth + 1) for v in item.values()]
            else:
                stack += [(v, depth + 1) for v in item]
    return None


def _check_path(name: str, value: Any) -> None:
    """A path the file system can take: no NUL, no component longer than it allows, not longer as a whole."""
    if not isinstance(value, str):
        return
    if "\0" in value:
        raise ConfigError(f"{name} holds a NUL character")
    longest = max((len(part.encode("utf-8")) for part in re.split(r"[/\\]", value)), default=0)
    if longest > NAME_MAX:
        raise ConfigError(f"{name} has a folder or file name of {longest} bytes; the file system takes {NAME_MAX}")
    whole = len(os.path.abspath(value).encode("utf-8", "surrogateescape"))
    if whole >= PATH_MAX:
        raise ConfigError(f"{name} is a path of {whole} bytes; the system takes {PATH_MAX - 1}: choose a shorter one")


def parse_json(name: str, text: str) -> Any:
    """JSON text of a setting; every way it can fail is one line."""
    import json

    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{name} is not valid JSON: {exc.msg} at column {exc.colno}") from None
    except RecursionError:
        raise ConfigError(f"{name} is nested more than {MAX_NESTING} levels deep") from None
    except ValueError as exc:  # a whole number of more than 4,300 digits
        raise ConfigError(f"{name} is not usable JSON: {short(str(exc))}") from None


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(choices)}; got {value!r}")


def parse_pairs(value: Any) -> dict[str, Any]:
    """A dict, a JSON object, or `key=value,key=value` (values parsed as JSON when they can be)."""
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("{"):
            value = parse_json("generation_config", text)
        else:
            value = dict(_parse_pair(part) for part in _split_pairs(text))
    if not isinstance(value, dict):
        raise ConfigError("generation_config must be a JSON object or key=value pairs")
    return dict(value)


def parse_generation_config(raw: Any) -> dict[str, Any]:
    """The generation settings sent with every request, checked key by key."""
    value = parse_pairs(raw)
    unknown = sorted(set(value) - set(GENERATION_KEYS))
    if unknown:
        raise ConfigError(f"unknown generation_config key(s) {unknown}; known: {', '.join(GENERATION_KEYS)}")
    _check_generation_values(value)
    return value


_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # RFC 9110's token


def _check_generation_values(value: dict[str, Any]) -> None:
    for key in ("temperature", "top_p", "presence_penalty", "frequency_penalty", "repetition_penalty"):
        if key in value and (isinstance(value[key], bool) or not isinstance(value[key], (int, float))):
            raise ConfigError(f"generation_config {key} must be a number, got {value[key]!r}")
    for key in ("max_tokens", "max_completion_tokens", "n", "top_logprobs", "top_k", "seed"):
        if key in value and (isinstance(value[key], bool) or not isinstance(value[key], int)):
            raise ConfigError(f"generation_config {key} must be a whole number, got {value[key]!r}")
    for key in ("max_tokens", "max_completion_tokens", "n"):
        if key in value and value[key] < 1:
            raise ConfigError(f"generation_config {key} must be at least 1, got {value[key]!r}")
    if "stop" in value:
        stop = value["stop"]
        if isinstance(stop, str):
            value["stop"] = [stop]
        elif not (isinstance(stop, list) and all(isinstance(s, str) and s for s in stop)):
            raise ConfigError(f"generation_config stop must be a text or a list of texts, got {stop!r}")
    for key in ("extra_body", "extra_query", "extra_headers", "chat_template_kwargs", "logit_bias"):
        if key in value and not isinstance(value[key], dict):
            raise ConfigError(f"generation_config {key} must be an object, got {value[key]!r}")
    taken = sorted(set(value.get("extra_body", {})) & set(OWN_BODY_KEYS))
    if taken:
        raise ConfigError(
            f"generation_config extra_body {taken}: coinflip sets these itself "
            "(use --stream, n in --generation-config, --model, --api-mode)"
        )
    for key, item in value.get("extra_headers", {}).items():
        if not isinstance(item, str) or any(c in f"{key}{item}" for c in "\r\n\0") or not key.strip():
            raise ConfigError(f"generation_config extra_headers {key!r}: a header is a name and a one-line text")
        if not _HEADER_NAME.fullmatch(str(key)):  # a ':' or a space would forge or break the request's head
            raise ConfigError(f"generation_config extra_headers {key!r}: a header name is letters, digits and "
                              "!#$%&'*+-.^_`|~ (no ':' or space)")  # fmt: skip
        _check_header_value(f"generation_config extra_headers {key!r}", f"{key}{item}")
    bad = _non_finite(value)
    if bad:
        raise ConfigError(f"generation_config {bad} is not a finite number (NaN and Infinity are not JSON)")


def _non_finite(value: Any, path: str = "") -> str | None:
    if isinstance(value, float) and not math.isfinite(value):
        return path or "value"
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _non_finite(item, f"{path}.{key}" if path else str(key))
        if found:
            return found
    return None


def _split_pairs(text: str) -> list[str]:
    """`a=1,stop=["x","y"],b=2`: a value that opens with a quote, bracket or brace runs to its
    close (commas inside do not split); any other value runs to the next comma."""
    parts: list[str] = []
    i, n = 0, len(text)
    while i < n:
        eq, comma = text.find("=", i), text.find(",", i)
        if eq < 0 or 0 <= comma < eq:  # an item without "=": _parse_pair says so
            end = n if comma < 0 else comma
        else:
            start = eq + 1
            while start < n and text[start].isspace():
                start += 1
            after = _closing(text, start) if start < n and text[start] in "[{\"'" else start
            comma = text.find(",", after)
            end = n if comma < 0 else comma
        parts.append(text[i:end])
        i = end + 1
    return [p for p in parts if p.strip()]


def _closing(text: str, start: int) -> int:
    """Where the quoted, bracketed or braced value opened at `start` ends (or the text's end)."""
    opener, k, depth, in_string = text[start], start, 0, False
    while k < len(text):
        c = text[k]
        if c == "\\":
            k += 2
            continue
        if opener in "'\"":
            if c == opener and k > start:
                return k + 1
        elif in_string:
            in_string = c != '"'
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
            if depth == 0:
                return k + 1
        k += 1
    return len(text)


def _parse_pair(part: str) -> tuple[str, Any]:
    """`stop=\\nQ:` means a newline: backslash escapes are read as in JSON strings; a value in
    single quotes is a text."""
    import json

    key, sep, raw = part.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"generation_config item {part.strip()!r} is not key=value")
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == raw[-1] == "'":
        raw = raw[1:-1]
    else:
        try:
            return key.strip(), json.loads(raw)
        except json.JSONDecodeError:
            pass
        except (RecursionError, ValueError):  # nested too deep, or a whole number of thousands of digits
            raise ConfigError(f"generation_config {key.strip()!r}: {short(raw)} is too deep or too long") from None
    try:
        return key.strip(), json.loads('"' + raw.replace('"', '\\"') + '"')
    except json.JSONDecodeError:
        return key.strip(), raw


def safe_name(name: str) -> str:
    """A model name usable as one path component ("org/model:7b" -> "org_model_7b"), at most 100 characters."""
    cleaned = "".join(c if c.isalnum() or c in "-_." else "_" for c in name).strip("._")
    if len(cleaned) > 100:
        import hashlib

        cleaned = cleaned[:88] + "_" + hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:11]
    return cleaned or "model"
