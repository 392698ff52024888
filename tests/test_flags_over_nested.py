"""With --config, a flag given wins over the file's value under EvalScope's nested names too
(dataset_args.coin_flip.few_shot_num, .prompt_template, .shuffle; generation_config.timeout)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from coinflip import TaskConfig
from coinflip.config.files import as_config
from coinflip.errors import ConfigError

from .conftest import run_cli

FILE = {
    "model": "oracle",
    "limit": 2,
    "dataset_args": {"coin_flip": {"few_shot_num": 1, "prompt_template": "direct", "shuffle": False}},
    "generation_config": {"timeout": 30, "temperature": 0},
}


def test_flags_beat_the_files_nested_settings(tmp_path: Path) -> None:
    (tmp_path / "task.yaml").write_text(yaml.safe_dump(FILE), encoding="utf-8")
    flags = ["--few-shot-num", "3", "--prompt-template", "zh", "--limit-mode", "random", "--timeout", "60"]
    result = run_cli("eval", "--config", "task.yaml", *flags, "--no-timestamp", "--no-html", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "outputs/reports/oracle/coin_flip.json").read_text(encoding="utf-8"))
    assert (report["few_shot_num"], report["template"]["name"], report["subset"]["mode"]) == (3, "zh", "random")
    saved = yaml.safe_load((tmp_path / "outputs/configs/task_config.yaml").read_text(encoding="utf-8"))["config"]
    assert saved["timeout"] == 60 and saved["generation_config"] == {"temperature": 0}


def test_the_files_nested_settings_hold_where_no_flag_is_given(tmp_path: Path) -> None:
    config = as_config(FILE, {"limit": 3})
    got = (config.few_shot_num, config.prompt_template, config.limit_mode, config.timeout)
    assert got == (1, "direct", "first", 30)


def test_flags_beat_the_files_nested_settings_given_as_text() -> None:
    text = {**FILE, "dataset_args": json.dumps(FILE["dataset_args"]), "generation_config": "timeout=30,temperature=0"}
    config = as_config(text, {"few_shot_num": 3, "timeout": 60.0})
    assert (config.few_shot_num, config.timeout, config.prompt_template) == (3, 60.0, "direct")


@pytest.mark.parametrize(
    ("field", "nested"),
    [
        ("few_shot_num", {"few_shot_num": 1}),
        ("limit_mode", {"shuffle": False}),
        ("prompt_template", {"prompt_template": "zh"}),
    ],
)
def test_a_setting_given_beside_its_dataset_args_spelling_with_another_value_is_refused(
    field: str, nested: dict[str, Any]
) -> None:
    values = {"few_shot_num": 3, "limit_mode": "random", "prompt_template": "direct"}
    with pytest.raises(ConfigError, match=f"{field} is given twice"):
        TaskConfig.of(model="oracle", **{field: values[field]}, dataset_args={"coin_flip": nested})
    with pytest.raises(ConfigError, match=f"{field} is given twice"):
        TaskConfig(model="oracle", **{field: values[field]}, dataset_args={"coin_flip": nested})


def test_the_same_value_in_both_places_is_one_setting() -> None:
    config = TaskConfig.of(model="oracle", few_shot_num=2, dataset_args={"coin_flip": {"few_shot_num": 2}})
    assert config.few_shot_num == 2 and config.checked().few_shot_num == 2


def test_a_setting_given_beside_its_generation_config_spelling_with_another_value_is_refused() -> None:
    with pytest.raises(ConfigError, match="timeout is given twice"):
        TaskConfig.of(model="oracle", timeout=60, generation_config={"timeout": 30})
    assert TaskConfig.of(model="oracle", timeout=30, generation_config={"timeout": 30}).timeout == 30
