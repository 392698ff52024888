"""One `Setting` per TaskConfig field (help, flag, type, bounds, EvalScope name): the CLI options,
the docs' tables and the checks of a value's type and range are derived from it, so they cannot drift."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..errors import ConfigError, short
from ..records import REPEATS_MAX
from .values import check_choice, check_path

BENCHMARK = "coin_flip"
EVAL_ONLY = ("batch", "batch_write", "batch_results", "batch_rest_online", "dry_run")  # a probe runs its variants
# Never taken from a saved run. A pricing file's prices are saved: a resume started in another folder read another
# file of its name again (or none) and repriced every answer
NOT_CARRIED = ("api_key", "use_cache", "progress", "quiet", "batch_write", "batch_results", "pricing_file")
PROMPT_TEMPLATES = ("default", "direct", "multiturn", "zh", "direct-zh")
KEY_AGAIN = "give the API key with --api-key, $COINFLIP_API_KEY or $OPENAI_API_KEY (never saved: a resume needs it)"
BASELINES = ("oracle", "random", "always-yes", "always-no")  # models answered in-process (models/baselines.py)
MAX_TIMEOUT = 1e7  # seconds (about 4 months): beyond it timers overflow
ANNOTATED = {"bool": "bool", "int": "int", "float": "float", "list[str]": "list", "dict[str, Any]": "json"}
ENDPOINTS = {"chat": "/chat/completions", "completions": "/completions"}  # each api_mode's path (the longer first)
PRICE_MAX = 1e9  # per million tokens; a run's cost stays a finite number (1e308 made it Infinity)


@dataclass(frozen=True)
class Setting:
    """How one TaskConfig field shows itself (command line, --help, docs) and what it holds."""

    name: str
    help: str
    flag: str | None  # "--api-url"; a "--x/--no-x" pair for booleans; None: Python and config files only
    kind: str  # text, int, float, bool, choice, list, json, limit
    evalscope: str  # EvalScope's spelling ("" where it has none)
    default: Any
    choices: tuple[str, ...] = ()
    metavar: str | None = None
    unused: str = ""  # for EvalScope settings accepted but not used by coin_flip: why
    least: float | None = None  # the smallest value allowed
    unit: str = ""  # a positive number of these, at most `most`
    most: float = MAX_TIMEOUT
    path: str = ""  # a file or folder (one the file system can take), shown as this metavar


def in_process(model: Any, eval_type: Any) -> bool:
    """Whether coinflip answers the model itself (a baseline, or EvalScope's mock_llm), spending no tokens."""
    return model in BASELINES or eval_type == "mock_llm"


def setting(default: Any, help: str, *, repr: bool = True, **declared: Any) -> Any:
    declared = {"help": help, "flag": "", "evalscope": "=", **declared}
    if isinstance(default, (list, dict)):  # each config gets a copy of its own
        return field(default_factory=default.copy, metadata=declared, repr=repr)
    return field(default=default, metadata=declared, repr=repr)


def declarations(cls: Any) -> tuple[Setting, ...]:
    out = []
    for f in fields(cls):
        m = dict(f.metadata)
        if not m:  # `given`
            continue
        default = f.default_factory() if callable(f.default_factory) else f.default
        kind = m.pop("kind", "") or ("choice" if m.get("choices") else "")
        kind = kind or ANNOTATED.get(str(f.type).removesuffix(" | None"), "text")
        if m["flag"] == "":
            m["flag"] = "--" + f.name.replace("_", "-")
            if kind == "bool" and default is True:  # a default of False needs only the flag that turns it on
                m["flag"] += f"/--no-{f.name.replace('_', '-')}"
        m["evalscope"] = f.name if m["evalscope"] == "=" else m["evalscope"]
        m["metavar"] = m.get("metavar") or m.get("path") or None
        out.append(Setting(name=f.name, default=default, kind=kind, **m))
    return tuple(out)


_TYPES: dict[str, tuple[type, ...]] = {"text": (str,), "int": (int,), "float": (int, float), "bool": (bool,)}
_WHAT = {"text": "a text", "int": "a whole number", "float": "a number", "bool": "true or false"}


def check_declared(config: Any, declared: tuple[Setting, ...]) -> None:
    """Each setting holds what its declaration says (a YAML file or a dict can hold anything)."""
    for s in declared:
        value = getattr(config, s.name)
        if s.unused or (value is None and (s.default is None or s.kind not in _TYPES) and not s.choices):
            continue
        types = _TYPES.get(s.kind)
        if types and (not isinstance(value, types) or (isinstance(value, bool) and s.kind != "bool")):
            got = f"{type(value).__name__}" + ("" if s.name == "api_key" else f" {short(value)}")  # a key misplaced
            got = f"null: leave {s.name} out for its default ({s.default!r})" if value is None else got
            raise ConfigError(f"{s.name} must be {_WHAT[s.kind]}, got {got}")
        if s.choices:
            check_choice(s.name, value, s.choices)
        if s.path:
            check_path(s.name, value)
        finite = not isinstance(value, float) or math.isfinite(value)
        if s.unit and (not finite or value <= 0):
            raise ConfigError(f"{s.name} must be a positive number of {s.unit}, got {short(value)}")
        if s.unit and value > s.most:
            raise ConfigError(f"{s.name} must be at most {s.most:,.0f} {s.unit}, got {short(value)}")
        if s.least is not None and (not finite or value < s.least):
            raise ConfigError(f"{s.name} must be {_WHAT[s.kind]} >= {s.least}, got {value!r}")


def saved_settings(saved: dict[str, Any]) -> dict[str, Any]:
    """Settings saved by any version, as this one reads them. Version 1 had no `version` and saved
    --api-url as a list (replicas of one model): its first URL is the endpoint now."""
    data = dict(saved)
    if data.pop("version", 1) == 1 and isinstance(data.get("api_url"), list):
        data["api_url"] = data["api_url"][0] if data["api_url"] else None
    return data


def dataset_names(value: Any) -> list[str]:
    if value is not None and not isinstance(value, (str, list, tuple)):
        raise ConfigError(f"datasets must be a name or a list of names, got {short(value)}")
    names = [value] if isinstance(value, str) else list(value or [])
    unknown = [n for n in names if n != BENCHMARK]
    if not names or unknown:
        raise ConfigError(f"unknown dataset {unknown or names!r}: the only benchmark here is 'coin_flip'")
    return names


def check_across(config: Any) -> None:
    """What ties settings together: the model, the data's source, batch mode and cost (a pricing
    file is read where the run is planned, scoring.cost.check_costs: settings do no file I/O)."""
    if config.repeats > REPEATS_MAX or config.repeats * int(config.generation_config.get("n") or 1) > REPEATS_MAX:
        raise ConfigError(f"repeats times n (choices per request) must be at most {REPEATS_MAX}")
    if config.model is not None and not config.model.strip():
        raise ConfigError("model is empty: pass a model name, e.g. --model oracle or --model smollm2")
    if config.model is None and config.model_path:  # a GGUF file names its model
        config.model = Path(config.model_path).stem or None
    if config.model is None and not config.use_cache:
        raise ConfigError("give --model (or --use-cache RUN_DIR to resume a run with its saved settings)")
    if config.dataset_path and config.dataset_hub not in ("bundled", "local"):
        raise ConfigError("give either --dataset-path (dataset_path) or --dataset-hub (dataset_hub), not both")
    if config.dataset_hub == "bundled" and not config.dataset_path and config.dataset_id != type(config).dataset_id:
        raise ConfigError(f"dataset_id {config.dataset_id!r} is a hub's: add --dataset-hub huggingface (or modelscope)")
    if config.dataset_hub == "local" and not config.dataset_path:
        raise ConfigError("dataset_hub local needs dataset_path (or dataset_args.coin_flip.local_path)")
    if not config.prompt_template.strip():
        raise ConfigError(f"prompt_template must be one of {', '.join(PROMPT_TEMPLATES)} or a text with {{question}}")
    check_prices(config)
    if config.model is None:  # a resume: checked again with the run's saved settings
        return
    named = named_mode(config.api_url)
    if named not in (None, config.api_mode):  # sent elsewhere, a model would be asked another way than the URL says
        raise ConfigError(
            f"--api-url is a {named} endpoint, but --api-mode is {config.api_mode}: pass --api-mode {named}, "
            "or give the base URL (…/v1)"
        )
    if config.batch and not config.api_url:
        raise ConfigError("--batch needs --api-url: a server that serves /v1/files and /v1/batches")
    if config.batch and config.stream:
        raise ConfigError("--batch and --stream exclude each other: a batch has no stream")
    if config.batch_write and config.batch_results:
        raise ConfigError("give --batch-write or --batch-results, not both")


def named_mode(url: str | None) -> str | None:
    """The api_mode whose endpoint `url` names in full (…/v1/chat/completions), if it names one."""
    path = urlsplit(url or "").path.rstrip("/")
    return next((mode for mode, tail in ENDPOINTS.items() if path.endswith(tail)), None)


def check_prices(config: Any) -> None:
    """Prices and the batch's share, a pricing file's too (their types are checked with the others)."""
    for name in ("price_input", "price_output"):
        value = getattr(config, name)
        if value is not None and not 0 <= value <= PRICE_MAX:  # NaN too
            raise ConfigError(f"{name} must be a number from 0 to 1e9, got {value!r}")
    if not 0 < config.batch_discount <= 1:
        raise ConfigError(f"batch_discount must be in (0, 1], got {config.batch_discount!r}")
