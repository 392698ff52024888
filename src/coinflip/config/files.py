"""Configs as EvalScope's `run_task` takes them: a TaskConfig, a dict, a YAML or JSON file, or a list."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .._files import read_settings
from ..errors import ConfigError
from .task import TaskConfig


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
    if isinstance(item, (str, Path)):
        item = read_file(Path(item))
    if item is not None and not isinstance(item, dict):
        raise ConfigError(f"a task config is a TaskConfig, a dict or a YAML/JSON file, got {type(item).__name__}")
    return TaskConfig.of(**{**(item or {}), **kwargs})


def read_file(path: Path) -> dict[str, Any]:
    if path.suffix.lower() not in (".yaml", ".yml", ".json"):
        raise ConfigError(f"{path}: a task config file ends in .yaml, .yml or .json")
    try:
        data = read_settings(path)
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected the settings as a mapping (model: ..., api_url: ...)")
    return data
