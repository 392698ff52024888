"""TaskConfig: every setting of a run, validated once with messages that say what to change."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from .errors import ConfigError

BENCHMARK = "coin_flip"
HUBS = ("bundled", "huggingface", "modelscope")
METRIC_COMPATS = ("coinflip", "evalscope")
SPLITS = ("test", "validation")
API_MODES = ("chat", "completions")
GENERATION_KEYS = (
    "temperature",
    "max_tokens",
    "top_p",
    "seed",
    "stop",
    "extra_body",
    "presence_penalty",
    "frequency_penalty",
    "top_k",
    "n",
)
DATASET_ARGS = {"local_path": "dataset_path", "few_shot_num": "few_shot_num", "system_prompt": "system_prompt"}
API_KEY_ENV = ("COINFLIP_API_KEY", "OPENAI_API_KEY")
REDACTED = "***"


@dataclass
class TaskConfig:
    """One evaluation. Field names follow EvalScope's TaskConfig where they overlap."""

    model: str
    api_url: str | list[str] | None = None
    api_key: str | None = field(default=None, repr=False)
    datasets: list[str] = field(default_factory=lambda: [BENCHMARK])
    limit: int | float | None = None
    eval_batch_size: int = 32
    generation_config: dict[str, Any] = field(default_factory=dict)
    few_shot_num: int = 0
    few_shot_seed: int = 42
    dataset_hub: str = "bundled"
    dataset_path: str | None = None
    split: str = "test"
    work_dir: str = "./outputs"
    use_cache: str | None = None
    timeout: float = 120.0
    retries: int = 5
    system_prompt: str | None = None
    metric_compat: str = "coinflip"
    seed: int = 42
    model_path: str | None = None
    html_report: bool = True
    progress: bool | None = None
    quiet: bool = False
    api_mode: str = "chat"
    dataset_args: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        self.datasets = _check_datasets(self.datasets)
        self._apply_dataset_args()
        self.api_url = _check_urls(self.api_url)
        if self.api_key is None:
            self.api_key = next((os.environ[k] for k in API_KEY_ENV if os.environ.get(k)), None)
        self.limit = _check_limit(self.limit)
        self.generation_config = parse_generation_config(self.generation_config)
        _check_int("eval_batch_size", self.eval_batch_size, 1)
        _check_int("few_shot_num", self.few_shot_num, 0)
        _check_int("retries", self.retries, 0)
        check_choice("dataset_hub", self.dataset_hub, HUBS)
        check_choice("metric_compat", self.metric_compat, METRIC_COMPATS)
        check_choice("split", self.split, SPLITS)
        check_choice("api_mode", self.api_mode, API_MODES)
        if not isinstance(self.timeout, (int, float)) or self.timeout <= 0:
            raise ConfigError(f"timeout must be a positive number of seconds, got {self.timeout!r}")
        if not isinstance(self.model, str) or not self.model.strip():
            raise ConfigError("model is empty: pass a model name, e.g. --model oracle or --model smollm2")
        if self.dataset_path and self.dataset_hub != "bundled":
            raise ConfigError("give either dataset_path or dataset_hub, not both")

    def _apply_dataset_args(self) -> None:
        """EvalScope's per-benchmark settings, e.g. {"coin_flip": {"local_path": DIR, "few_shot_num": 3}}."""
        if self.dataset_args is None:
            return
        if isinstance(self.dataset_args, str):
            try:
                self.dataset_args = json.loads(self.dataset_args)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"dataset_args is not valid JSON: {exc.msg} at column {exc.colno}") from None
        args = self.dataset_args.get(BENCHMARK, {}) if isinstance(self.dataset_args, dict) else None
        if not isinstance(args, dict):
            raise ConfigError('dataset_args must look like {"coin_flip": {"local_path": "DIR", "few_shot_num": 3}}')
        unknown = sorted(set(args) - set(DATASET_ARGS))
        if unknown:
            raise ConfigError(f"unknown dataset_args key(s) {unknown}; known: {', '.join(DATASET_ARGS)}")
        for key, attribute in DATASET_ARGS.items():
            if key in args:
                setattr(self, attribute, args[key])

    def redacted(self) -> dict[str, Any]:
        """The config as saved to disk: the API key never leaves memory."""
        data = asdict(self)
        if data.get("api_key"):
            data["api_key"] = REDACTED
        return data

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]


def _check_datasets(value: Any) -> list[str]:
    names = [value] if isinstance(value, str) else list(value or [])
    unknown = [n for n in names if n != BENCHMARK]
    if not names or unknown:
        raise ConfigError(f"unknown dataset {unknown or names!r}: the only benchmark here is 'coin_flip'")
    return names


def _check_urls(value: Any) -> str | list[str] | None:
    if value is None or value == [] or value == "":
        return None
    urls = [value] if isinstance(value, str) else list(value)
    for url in urls:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ConfigError(f"api_url {url!r} is not an http(s) URL, e.g. http://127.0.0.1:8000/v1")
    return urls[0] if len(urls) == 1 else urls


def _check_limit(value: Any) -> int | float | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = float(value) if "." in value else int(value)
        except ValueError:
            raise ConfigError(f"limit must be a count (10) or a fraction (0.1), got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"limit must be a count (10) or a fraction (0.1), got {value!r}")
    if isinstance(value, float):
        if not 0 < value <= 1:
            raise ConfigError(f"a fractional limit must be in (0, 1], got {value}; use a whole number for a count")
        return value
    if value < 1:
        raise ConfigError(f"limit must be at least 1, got {value}")
    return value


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name} must be a whole number >= {minimum}, got {value!r}")


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(choices)}; got {value!r}")


def parse_generation_config(value: Any) -> dict[str, Any]:
    """Accept a dict, a JSON object, or `key=value,key=value` (values parsed as JSON when they can be)."""
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("{"):
            try:
                value = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"generation_config is not valid JSON: {exc.msg} at column {exc.colno}") from None
        else:
            value = dict(_parse_pair(part) for part in text.split(",") if part.strip())
    if not isinstance(value, dict):
        raise ConfigError("generation_config must be a JSON object or key=value pairs")
    unknown = sorted(set(value) - set(GENERATION_KEYS))
    if unknown:
        raise ConfigError(f"unknown generation_config key(s) {unknown}; known: {', '.join(GENERATION_KEYS)}")
    for key in ("temperature", "top_p"):
        if key in value and not isinstance(value[key], (int, float)):
            raise ConfigError(f"generation_config {key} must be a number, got {value[key]!r}")
    if "max_tokens" in value and (not isinstance(value["max_tokens"], int) or value["max_tokens"] < 1):
        raise ConfigError(f"generation_config max_tokens must be a positive integer, got {value['max_tokens']!r}")
    return dict(value)


def _parse_pair(part: str) -> tuple[str, Any]:
    key, sep, raw = part.partition("=")
    if not sep:
        raise ConfigError(f"generation_config item {part.strip()!r} is not key=value")
    try:
        return key.strip(), json.loads(raw)
    except json.JSONDecodeError:
        return key.strip(), raw.strip()


def safe_name(name: str) -> str:
    """A model name usable as one path component ("org/model:7b" -> "org_model_7b")."""
    cleaned = "".join(c if c.isalnum() or c in "-_." else "_" for c in name).strip("._")
    return cleaned or "model"
