"""EvalScope 1.14.1's spellings of coinflip's settings, folded in where a TaskConfig is made: what
cannot matter to coin_flip is accepted with a note, what coinflip cannot do refused with what to do."""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from .declare import BASELINES, Setting
from .values import check_values, parse_json, parse_pairs


class EvalType:
    OPENAI_API = "openai_api"
    SERVICE = "service"  # EvalScope's older name for openai_api
    SERVER = "server"  # likewise
    MOCK_LLM = "mock_llm"
    CHECKPOINT = "llm_ckpt"


HTTP_TYPES = ("openai_api", "service", "server")
CHECKPOINT_TYPES = ("llm_ckpt", "checkpoint")
SPLIT_ARGS = ("subset_list", "train_split")  # EvalScope's keys for what coin_flip has one of, checked below
DATASET_ARGS = "dataset_args.coin_flip."  # the prefix of the settings' EvalScope names there
# generation_config keys EvalScope keeps there that are TaskConfig settings here
GENERATION_TO_TASK = {"timeout": "timeout", "retries": "retries", "stream": "stream", "batch_size": "eval_batch_size"}
GENERATION_DROPPED = {
    "retry_interval": "retries back off exponentially with jitter and honour Retry-After",
    "do_sample": "servers sample unless temperature is 0",
}


def fold_evalscope(config: Any, declared: tuple[Setting, ...]) -> list[str]:
    """Fold EvalScope's forms into coinflip's fields; the notes on what changes nothing."""
    for s in declared:  # EvalScope's None for these (in every config it saves): not given, the value below
        if s.name in ("timeout", "stream") and getattr(config, s.name) is None:
            setattr(config, s.name, s.default)
            config.given -= {s.name}
    kind = config.eval_type
    if kind == "mock_llm" and config.model not in (*BASELINES, None):
        raise ConfigError(f"eval_type mock_llm needs a baseline model: {', '.join(BASELINES)}")
    if kind in CHECKPOINT_TYPES:
        raise ConfigError(
            f"eval_type {kind} (a local checkpoint) is not supported yet: serve it with an OpenAI-compatible "
            "server (e.g. `vllm serve PATH`) and pass --api-url, or give a GGUF file with --model-path"
        )
    if kind not in (None, "mock_llm", *HTTP_TYPES):
        raise ConfigError(
            f"eval_type {kind!r} is not supported: coinflip speaks the OpenAI chat and completions protocol "
            f"({', '.join(HTTP_TYPES)}), or runs a baseline (mock_llm)"
        )
    return [*_dataset_args(config, declared), *_generation(config)]


def _dataset_args(config: Any, declared: tuple[Setting, ...]) -> list[str]:
    """EvalScope's per-benchmark settings, e.g. {"coin_flip": {"local_path": DIR, "few_shot_num": 3}}."""
    value: Any = config.dataset_args
    if not value:
        return []
    if isinstance(value, str):
        config.dataset_args = value = parse_json("dataset_args", value)
        check_values(config)
    args = value.get("coin_flip", {}) if isinstance(value, dict) else None
    if not isinstance(args, dict) or not isinstance(value, dict):
        raise ConfigError('dataset_args must look like {"coin_flip": {"local_path": "DIR", "few_shot_num": 3}}')
    others = sorted(k for k in value if k != "coin_flip")
    fields = {s.evalscope.removeprefix(DATASET_ARGS): s.name for s in declared if s.evalscope.startswith(DATASET_ARGS)}
    unknown = sorted(set(args) - set(fields) - set(SPLIT_ARGS))
    if unknown:
        raise ConfigError(f"unknown dataset_args key(s) {unknown}; known: {', '.join([*fields, *SPLIT_ARGS])}")
    if args.get("train_split") not in (None, "validation"):  # EvalScope's few-shot pool: the validation split here
        raise ConfigError(f"coin_flip's few-shot pool is 'validation'; got train_split {args['train_split']!r}")
    for key, item in args.items():
        if key == "shuffle":  # EvalScope's true or false: how --limit picks
            if not isinstance(item, bool):
                raise ConfigError(f"dataset_args shuffle must be true or false, got {item!r}")
            item = "random" if item else "first"
        if key in fields:
            _fold(config, fields[key], item, key)
    if args.get("subset_list") not in (None, ["default"], "default"):
        raise ConfigError(f"coin_flip has one subset, 'default'; got subset_list {args['subset_list']!r}")
    return [f"dataset_args for {others}: only coin_flip is evaluated here"] if others else []


def _fold(config: Any, name: str, item: Any, key: str, where: str = "dataset_args.coin_flip") -> None:
    """WHERE.KEY into its field; the field given beside it with another value is refused."""
    if name in config.given and getattr(config, name) != item:
        raise ConfigError(f"{name} is given twice: {getattr(config, name)!r}, and {where}.{key} {item!r}; give one")
    setattr(config, name, item)


def _generation(config: Any) -> list[str]:
    value = parse_pairs(config.generation_config)
    for key, attribute in GENERATION_TO_TASK.items():
        if (item := value.pop(key, None)) is not None:
            _fold(config, attribute, item, key, "generation_config")
    notes = [f"generation_config {key}: {why}" for key, why in GENERATION_DROPPED.items() if key in value]
    if value.get("do_sample") is False:
        value.setdefault("temperature", 0)
    value = {k: v for k, v in value.items() if k not in GENERATION_DROPPED}
    for old, new in (("stop_seqs", "stop"), ("num_choices", "n")):
        if old in value and new in value:
            raise ConfigError(f"generation_config gives both {old} (EvalScope's) and {new}: give one of them")
        if old in value:
            value[new] = value.pop(old)
    config.generation_config = value
    return notes
