"""A config whose top-level key is not a text (YAML `1: 2`, `~: x`, `yes: x`) is one line, never a TypeError."""

from __future__ import annotations

from pathlib import Path

import pytest

from coinflip import run_task
from coinflip.errors import ConfigError

from .conftest import run_cli


@pytest.mark.parametrize("line", ["1: 2", "~: 2", "yes: 2"])
def test_a_key_that_is_not_a_text_in_a_file_is_one_line(tmp_path: Path, line: str) -> None:
    (tmp_path / "task.yaml").write_text(f"model: oracle\nlimit: 2\n{line}\n", encoding="utf-8")
    result = run_cli("eval", "--config", "task.yaml", cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "must be a text" in result.stderr and result.stderr.strip().count("\n") == 0


def test_a_key_that_is_not_a_text_in_a_dict_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="must be a text"):
        run_task({"model": "oracle", 1: 2})
