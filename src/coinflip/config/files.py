"""Configs from files and lists, as EvalScope's `run_task` takes them: a TaskConfig, a dict, a path
to a YAML or JSON file holding one, or a list of any of these."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .task import TaskConfig
from .values import parse_json


def as_configs(task_cfg: Any, kwargs: dict[str, Any]) -> list[TaskConfig]:
    items = task_cfg if isinstance(task_cfg, list) else [task_cfg]
    if not items:
        raise ConfigError("run_task got an empty list of configs")
    return [as_config(item, kwargs) for item in items]


def as_config(item: Any, kwargs: dict[str, Any]) -> TaskConfig:
    if isinstance(item, TaskConfig):
        if kwargs:
            raise ConfigError("give either a TaskConfig or keyword settings, not both")
        return item
    if isinstance(item, (str, Path)):
        item = read_file(Path(item))
    if item is not None and not isinstance(item, dict):
        raise ConfigError(f"a task config is a TaskConfig, a dict or a YAML/JSON file, got {type(item).__name__}")
    return TaskConfig.of(**{**(item or {}), **kwargs})


FILE_LIMIT = 16 << 20  # bytes: a task config is a few hundred; a prompt template a few thousand
_BOMS = ((b"\xff\xfe\x00\x00", "utf-32-le"), (b"\x00\x00\xfe\xff", "utf-32-be"), (b"\xff\xfe", "utf-16-le"),
         (b"\xfe\xff", "utf-16-be"), (b"\xef\xbb\xbf", "utf-8-sig"))  # fmt: skip


def read_file(path: Path) -> dict[str, Any]:
    """A YAML or JSON file holding one config (EvalScope's format: the TaskConfig fields at the top).

    UTF-8, or UTF-16/32 with a byte order mark (what some Windows editors save); no YAML aliases."""
    from .._files import UnreadableFile, read_regular

    if path.suffix.lower() not in (".yaml", ".yml", ".json"):
        raise ConfigError(f"{path}: a task config file ends in .yaml, .yml or .json")
    try:
        raw = read_regular(path, FILE_LIMIT)
    except UnreadableFile as exc:
        raise ConfigError(str(exc)) from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None
    encoding = next((name for bom, name in _BOMS if raw.startswith(bom)), "utf-8")
    try:
        text = raw.decode(encoding).lstrip("\ufeff")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not {encoding.upper()} text; save it as UTF-8") from None
    if "\0" in text:  # UTF-16 or UTF-32 without a byte order mark
        raise ConfigError(f"{path}: holds NUL characters (UTF-16 without a byte order mark?); save it as UTF-8")
    try:
        if path.suffix.lower() == ".json":
            data = parse_json(str(path), text)
        else:
            from ..rundir import parse_yaml

            data = parse_yaml(text)
    except ConfigError:
        raise
    except Exception as exc:  # yaml raises several types; the message names the line
        first = (str(exc) or type(exc).__name__).splitlines()[0]
        raise ConfigError(f"{path}: not valid {path.suffix.lstrip('.').upper()} ({first})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected the settings as a mapping (model: ..., api_url: ...)")
    return data
