"""EvalScope 1.14.1's spellings of coinflip's settings, mapped once, where a TaskConfig is made.

`TaskConfig(eval_type=EvalType.SERVICE, stream=True, timeout=600, dataset_args={...})` and an
EvalScope YAML file mean here what they mean there; what cannot matter to coin_flip is accepted
with a note, and what coinflip cannot do is refused with what to do instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import ConfigError

if TYPE_CHECKING:
    from .config import TaskConfig


class EvalType:
    """EvalScope's `eval_type` values that mean something to coin_flip."""

    OPENAI_API = "openai_api"
    SERVICE = "service"  # EvalScope's older name for openai_api
    SERVER = "server"  # likewise
    MOCK_LLM = "mock_llm"
    CHECKPOINT = "llm_ckpt"


HTTP_TYPES = ("openai_api", "service", "server")
CHECKPOINT_TYPES = ("llm_ckpt", "checkpoint")
# dataset_args.coin_flip key -> what it sets
DATASET_ARGS = (
    "local_path",
    "dataset_id",
    "few_shot_num",
    "few_shot_random",
    "system_prompt",
    "prompt_template",
    "shuffle",
    "subset_list",
)
# generation_config keys EvalScope keeps there that are TaskConfig settings here
GENERATION_TO_TASK = {"timeout": "timeout", "retries": "retries", "stream": "stream", "batch_size": "eval_batch_size"}
GENERATION_DROPPED = {
    "retry_interval": "retries back off exponentially with jitter and honour Retry-After",
    "do_sample": "servers sample unless temperature is 0",
}


def apply(config: TaskConfig) -> None:
    """Fold EvalScope's forms into coinflip's fields; called first in TaskConfig.__post_init__."""
    config._notes = []  # type: ignore[attr-defined]
    _eval_type(config)
    _dataset_args(config)
    _generation(config)


def _eval_type(config: TaskConfig) -> None:
    kind = config.eval_type
    if kind is None or kind in HTTP_TYPES:
        return
    if kind == "mock_llm":
        from .config import BASELINES

        if config.model not in BASELINES and config.model is not None:
            raise ConfigError(f"eval_type mock_llm needs a baseline model: {', '.join(BASELINES)}")
        return
    if kind in CHECKPOINT_TYPES:
        raise ConfigError(
            f"eval_type {kind} (a local checkpoint) is not supported yet: serve it with an OpenAI-compatible "
            "server (e.g. `vllm serve PATH`) and pass --api-url, or give a GGUF file with --model-path"
        )
    raise ConfigError(
        f"eval_type {kind!r} is not supported: coinflip speaks the OpenAI chat and completions protocol "
        f"({', '.join(HTTP_TYPES)}), or runs a baseline (mock_llm)"
    )


def _dataset_args(config: TaskConfig) -> None:
    """EvalScope's per-benchmark settings, e.g. {"coin_flip": {"local_path": DIR, "few_shot_num": 3}}."""
    value: Any = config.dataset_args
    if not value:
        return
    if isinstance(value, str):
        from .config import check_values, parse_json

        value = parse_json("dataset_args", value)
        config.dataset_args = value
        check_values(config)
    args = value.get("coin_flip", {}) if isinstance(value, dict) else None
    if not isinstance(args, dict) or not isinstance(value, dict):
        raise ConfigError('dataset_args must look like {"coin_flip": {"local_path": "DIR", "few_shot_num": 3}}')
    others = sorted(k for k in value if k != "coin_flip")
    if others:
        config._notes.append(f"dataset_args for {others}: only coin_flip is evaluated here")  # type: ignore[attr-defined]
    unknown = sorted(set(args) - set(DATASET_ARGS))
    if unknown:
        raise ConfigError(f"unknown dataset_args key(s) {unknown}; known: {', '.join(DATASET_ARGS)}")
    if "local_path" in args:
        config.dataset_path = args["local_path"]
    for key in ("dataset_id", "few_shot_num", "few_shot_random", "system_prompt", "prompt_template"):
        if key in args:
            setattr(config, key, args[key])
    if "shuffle" in args:
        if not isinstance(args["shuffle"], bool):
            raise ConfigError(f"dataset_args shuffle must be true or false, got {args['shuffle']!r}")
        config.limit_mode = "random" if args["shuffle"] else "first"
    if args.get("subset_list") not in (None, ["default"], "default"):
        raise ConfigError(f"coin_flip has one subset, 'default'; got subset_list {args['subset_list']!r}")


def _generation(config: TaskConfig) -> None:
    from .config import parse_pairs

    value = parse_pairs(config.generation_config)
    for key, attribute in GENERATION_TO_TASK.items():
        if key in value:
            item = value.pop(key)
            if item is not None:
                setattr(config, attribute, item)
    for key, why in GENERATION_DROPPED.items():
        if key in value:
            item = value.pop(key)
            if key == "do_sample" and item is False:
                value.setdefault("temperature", 0)
            config._notes.append(f"generation_config {key}: {why}")  # type: ignore[attr-defined]
    if "stop_seqs" in value:
        value["stop"] = value.pop("stop_seqs")
    if "num_choices" in value:
        value["n"] = value.pop("num_choices")
    config.generation_config = value
