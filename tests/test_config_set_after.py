"""A TaskConfig changed after it was made (EvalScope users set task_cfg.dataset_args = {...}) is checked
again by run_task: the change counts, and a bad one is one ConfigError, not a traceback mid-run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from coinflip import TaskConfig, run_task
from coinflip.errors import ConfigError


def _config(tmp_path: Path) -> TaskConfig:
    return TaskConfig(model="oracle", limit=3, work_dir=str(tmp_path), quiet=True, html_report=False)


@pytest.mark.parametrize(
    ("name", "value"),
    [("split", None), ("repeats", "2"), ("eval_batch_size", 0), ("api_key", 5), ("generation_config", [1])],
)
def test_a_bad_field_set_after_is_refused_before_anything_is_written(tmp_path: Path, name: str, value: Any) -> None:
    config = _config(tmp_path)
    setattr(config, name, value)
    with pytest.raises(ConfigError, match=name):
        run_task(config)
    assert not any(tmp_path.iterdir())


def test_dataset_args_and_generation_text_set_after_count(tmp_path: Path) -> None:
    config = _config(tmp_path)
    config.dataset_args = {"coin_flip": {"few_shot_num": 2}}
    config.generation_config = "temperature=0"  # type: ignore[assignment]
    report = run_task(config)
    assert report["few_shot_num"] == 2 and report["generation_config"] == {"temperature": 0}
    assert config.generation_config == "temperature=0"  # the caller's object is left as it was


def test_notes_and_given_survive_the_second_check() -> None:
    config = TaskConfig.of(model="oracle", seed=42, generation_config={"do_sample": False})
    again = config.checked()
    assert again.notes() == config.notes() and "do_sample" in " ".join(again.notes())
    assert {"seed", "generation_config"} <= again.given


def test_a_model_path_with_an_api_url_says_the_url_is_not_used() -> None:
    """--model-path is served by llama.cpp here (models.backend): --api-url beside it was silently ignored."""
    config = TaskConfig.of(model_path="m.gguf", api_url="http://127.0.0.1:9/v1").checked()
    assert "api_url: not used, the --model-path file is served by llama.cpp here" in config.notes()


@pytest.mark.parametrize(("name", "default"), [("seed", "42"), ("few_shot_num", "0"), ("repeats", "1")])
def test_a_null_setting_says_to_leave_it_out_for_its_default(name: str, default: str) -> None:
    """An EvalScope YAML's `seed: null`: "must be a whole number, got NoneType None" said what, not what to do."""
    with pytest.raises(ConfigError) as caught:
        TaskConfig(model="oracle", **{name: None})
    assert str(caught.value).endswith(f"got null: leave {name} out for its default ({default})")
