"""Configs as EvalScope's `run_task` takes them: a TaskConfig, a dict, a YAML or JSON file, or a list."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .._files import read_settings
from ..errors import ConfigError, short
from .declare import BENCHMARK
from .evalscope import DATASET_ARGS, GENERATION_TO_TASK
from .task import TaskConfig, settings
from .values import parse_json, parse_pairs

SNAPSHOT_ONLY = ("resolved_benchmarks", "evaluation_identity")  # what EvalScope 1.14.1 writes in a saved config
SUFFIXES = (".yaml", ".yml", ".json")


def as_configs(task_cfg: Any, kwargs: dict[str, Any]) -> list[TaskConfig]:
    items = task_cfg if isinstance(task_cfg, list) else [task_cfg]
    if not items:
        raise ConfigError("run_task got an empty list of configs")
    return [as_config(item, kwargs) for item in items]


def as_config(item: Any, kwargs: dict[str, Any]) -> TaskConfig:
    if isinstance(item, TaskConfig):
        if kwargs:
            raise ConfigError("give either a TaskConfig or keyword settings, not both")
        return item.checked()
    if isinstance(item, str) and not item.strip():
        raise ConfigError("the task config is an empty path: give a .yaml, .yml or .json file")
    if isinstance(item, str) and (any(c in item for c in "\r\n") or not _named(item)):
        raise ConfigError(  # the text is not shown: YAML pasted here may hold an api_key
            "run_task got a text that is no path of a .yaml, .yml or .json file: give such a path, a dict or "
            "a TaskConfig"
        )
    if isinstance(item, (str, Path)):
        item = read_file(Path(item))
    if item is not None and not isinstance(item, dict):
        raise ConfigError(f"a task config is a TaskConfig, a dict or a YAML/JSON file, got {type(item).__name__}")
    bad = [key for key in item or {} if not isinstance(key, str)]
    if bad:  # YAML's `1: 2`, `~: x`, `yes: x`: Python's TypeError otherwise
        raise ConfigError(f"a setting's name must be a text, got {short(bad[0])} (quote it, or check the indentation)")
    item = {k: v for k, v in (item or {}).items() if k not in SNAPSHOT_ONLY}  # as EvalScope reads its snapshots
    return TaskConfig.of(**{**without_flagged(item, kwargs), **kwargs})


def without_flagged(item: dict[str, Any], flags: dict[str, Any]) -> dict[str, Any]:
    """The file's settings less those the flags give again under EvalScope's nested names: --few-shot-num
    beats the file's dataset_args.coin_flip.few_shot_num, --timeout its generation_config.timeout."""
    out = dict(item)
    if "dataset_args" not in flags and isinstance(out.get("dataset_args"), str):  # JSON text in the file
        out["dataset_args"] = parse_json("dataset_args", out["dataset_args"])
    if "generation_config" not in flags and isinstance(out.get("generation_config"), str):
        out["generation_config"] = parse_pairs(out["generation_config"])
    args = out.get("dataset_args")
    if "dataset_args" not in flags and isinstance(args, dict) and isinstance(args.get(BENCHMARK), dict):
        nested = {
            s.evalscope.removeprefix(DATASET_ARGS): s.name for s in settings() if s.evalscope.startswith(DATASET_ARGS)
        }
        out["dataset_args"] = {
            **args,
            BENCHMARK: {k: v for k, v in args[BENCHMARK].items() if nested.get(k) not in flags},
        }
    generation = out.get("generation_config")
    if "generation_config" not in flags and isinstance(generation, dict):
        out["generation_config"] = {k: v for k, v in generation.items() if GENERATION_TO_TASK.get(k) not in flags}
    return out


def _named(text: str) -> bool:
    """A text that reads as a config file's path: named so, or something on disk."""
    return text.lower().endswith(SUFFIXES) or os.path.lexists(text)


def read_file(path: Path) -> dict[str, Any]:
    if path.suffix.lower() not in SUFFIXES:
        raise ConfigError(f"{path}: a task config file ends in .yaml, .yml or .json")
    try:
        data = read_settings(path)
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected the settings as a mapping (model: ..., api_url: ...)")
    return data
