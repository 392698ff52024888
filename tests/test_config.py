"""TaskConfig: validated once, at the edge, with messages that say what to change."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from coinflip import TaskConfig
from coinflip.data.grammar import bundled_dir
from coinflip.errors import ConfigError
from coinflip.run.runner import run_task


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"datasets": ["gsm8k"]}, "only benchmark here is 'coin_flip'"),
        ({"api_url": "localhost:8000"}, "is not an http(s) URL"),
        ({"limit": -3}, "a count (10) or a fraction (0.1)"),
        ({"limit": 1.5}, "fractional limit must be in (0, 1]"),
        ({"limit": "ten"}, "a count (10) or a fraction (0.1)"),
        ({"eval_batch_size": 0}, "eval_batch_size must be a whole number >= 1"),
        ({"generation_config": "temperature=hot"}, "temperature must be a number"),
        ({"generation_config": {"temprature": 0}}, "unknown generation_config key(s) ['temprature']"),
        ({"generation_config": "{bad json"}, "generation_config is not valid JSON"),
        ({"dataset_hub": "kaggle"}, "dataset_hub must be one of bundled, huggingface, modelscope, local"),
        ({"metric_compat": "lm-eval"}, "metric_compat must be one of coinflip, evalscope"),
        ({"timeout": -1}, "timeout must be a positive number"),
        ({"dataset_args": {"coin_flip": {"subset": "x"}}}, "unknown dataset_args key(s) ['subset']"),
        ({"model": "  "}, "model is empty"),
    ],
)
def test_bad_settings_say_what_to_change(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        TaskConfig(**{"model": "m", **kwargs})
    assert message in str(info.value)


def test_generation_config_forms() -> None:
    assert TaskConfig(model="m", generation_config="temperature=0,max_tokens=64").generation_config == {
        "temperature": 0,
        "max_tokens": 64,
    }
    parsed = TaskConfig(model="m", generation_config='{"stop": ["\\n\\n"], "extra_body": {"top_k": 5}}')
    assert parsed.generation_config == {"stop": ["\n\n"], "extra_body": {"top_k": 5}}


def test_a_gateway_secret_is_never_in_repr() -> None:
    """repr hid the API key but showed an Authorization in extra_headers, which the saved settings mask:
    a notebook showing the config printed it."""
    gateway = {"extra_headers": {"Authorization": "Bearer sk-1234"}, "extra_query": {"code": "c-567"}}
    config = TaskConfig(model="m", generation_config={**gateway, "temperature": 0})
    assert not [secret for secret in ("sk-1234", "c-567") if secret in repr(config)]
    assert "temperature': 0" in repr(config) and repr(config).startswith("TaskConfig(model='m', ")


def test_limit_count_or_fraction() -> None:
    assert TaskConfig(model="m", limit="10").limit == 10
    assert TaskConfig(model="m", limit="0.25").limit == 0.25


def test_key_from_environment_and_never_in_repr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("COINFLIP_API_KEY", "sk-from-env-123")
    config = TaskConfig(model="m")
    assert config.api_key == "sk-from-env-123"
    assert "sk-from-env" not in repr(config)
    assert config.redacted()["api_key"] == "***"


def test_evalscope_dataset_args(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for split in ("test", "validation"):
        shutil.copy(bundled_dir() / f"{split}.jsonl", data / f"{split}.jsonl")
    monkeypatch.chdir(tmp_path)
    report = run_task(
        model="oracle", limit=4, quiet=True, dataset_args={"coin_flip": {"local_path": str(data), "few_shot_num": 2}}
    )
    assert report["dataset"]["source"] == "file" and report["dataset"]["path"] == str(data.resolve())
    assert report["few_shot_num"] == 2 and report["metrics"]["accuracy"] == 1.0


def test_unknown_run_task_field_is_named() -> None:
    with pytest.raises(ConfigError, match=r"unknown TaskConfig field\(s\) \['modle'\]"):
        run_task({"modle": "m"})


def test_a_typo_in_a_yaml_config_gets_a_suggestion(tmp_path: Path) -> None:
    path = tmp_path / "task.yaml"
    path.write_text("model: oracle\nlimt: 5\n")
    with pytest.raises(ConfigError) as caught:
        run_task(str(path))
    message = str(caught.value)
    assert "'limt'" in message and "did you mean 'limit'?" in message
    assert "known:" not in message  # not the list of every setting


def test_a_long_model_name_with_half_a_surrogate_pair_is_a_path_component() -> None:
    """Only the Python API can pass such a name; hashing it for a long name raised UnicodeEncodeError."""
    from coinflip.config import safe_name

    first, second = safe_name("m" * 120 + "\ud800"), safe_name("m" * 120 + "\udc00")
    assert len(first) <= 100 and first != second and first.encode("utf-8")
