"""The settings of a run: declare.py how a setting is declared and checked; task.py TaskConfig; values.py what
a declaration cannot say; evalscope.py EvalScope's spellings; files.py YAML/JSON config files for run_task."""

from .declare import BASELINES, BENCHMARK, KEY_AGAIN, NOT_CARRIED, Setting, check_prices, in_process, saved_settings
from .evalscope import EvalType
from .task import DEFAULT_BATCH, LOCAL_MODELS, METRIC_COMPATS, SETTINGS_VERSION, SPLITS, TaskConfig, settings
from .values import GENERATION_KEYS, check_choice, parse_generation_config, parse_pairs, safe_name

__all__ = [
    "BASELINES", "BENCHMARK", "DEFAULT_BATCH", "GENERATION_KEYS", "KEY_AGAIN", "LOCAL_MODELS", "METRIC_COMPATS",
    "SETTINGS_VERSION", "SPLITS", "EvalType", "Setting", "TaskConfig", "check_choice", "check_prices",
    "NOT_CARRIED", "in_process", "parse_generation_config", "parse_pairs", "safe_name", "saved_settings", "settings",
]  # fmt: skip
