"""Settings a YAML file leaves empty (`split:`) or gives as a number (`api_key: 12345`): one line, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from coinflip import TaskConfig
from coinflip.errors import ConfigError

from .conftest import run_cli

CHOICES = ["api_mode", "dataset_hub", "split", "limit_mode", "metric_compat"]


@pytest.mark.parametrize("name", CHOICES)
def test_a_choice_given_as_null_is_refused(name: str) -> None:
    with pytest.raises(ConfigError, match=f"{name} must be one of"):
        TaskConfig.of(model="oracle", **{name: None})


def test_an_api_key_that_is_not_a_text_is_refused() -> None:
    with pytest.raises(ConfigError, match="api_key must be a text"):
        TaskConfig.of(model="oracle", api_key=12345)


def test_an_empty_split_in_a_config_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "task.yaml").write_text("model: oracle\nlimit: 3\nsplit:\n", encoding="utf-8")
    result = run_cli("eval", "--config", "task.yaml", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().count("\n") == 0 and "split must be one of" in result.stderr
    assert not (tmp_path / "outputs").exists()
