"""TaskConfig: validated once, at the edge, with messages that say what to change."""

from __future__ import annotations

import datetime
import enum
import shutil
from pathlib import Path

import pytest

from coinflip import TaskConfig
from coinflip._files import read_settings
from coinflip.data.grammar import bundled_dir
from coinflip.errors import ConfigError
from coinflip.run.runner import run_task

from .conftest import run_cli


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"datasets": ["gsm8k"]}, "only benchmark here is 'coin_flip'"),
        ({"api_url": "localhost:8000"}, "is not an http(s) URL"),
        ({"limit": -3}, "a count (10) or a fraction (0.1)"),
        ({"limit": 1.5}, "fractional limit must be in (0, 1]"),
        ({"limit": "ten"}, "a count (10) or a fraction (0.1)"),
        ({"limit": "1e-400"}, "too small a fraction for a float"),  # read as 0: every question
        ({"limit": "\uff11e-400"}, "too small a fraction for a float"),  # a full-width 1, which float() reads
        ({"limit": "\u0661.0e-400"}, "too small a fraction for a float"),  # an Arabic-Indic 1
        ({"generation_config": '{"temperature": 1e-400}'}, "too small a number for a float"),
        ({"generation_config": "top_p=1e-400"}, "too small a number for a float"),
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


@pytest.mark.parametrize(
    "odd", [datetime.date(2026, 1, 2), b"\x00bytes", {"a", "b"}, 1j, Ellipsis, Path("/x"), object()]
)
def test_a_value_json_cannot_hold_is_refused_before_anything_is_sent(tmp_path: Path, odd: object) -> None:
    """A YAML date or a Python set inside generation_config passed every check and crashed as the first request
    was encoded, after the run folder was made; the value itself is never echoed (it may be a secret)."""
    for config in ({"generation_config": {"stop": [odd]}}, {"model_args": {"x": odd}}):
        with pytest.raises(ConfigError, match="settings are texts, numbers") as raised:
            TaskConfig(model="oracle", work_dir=str(tmp_path), **config)
        assert "bytes'" not in str(raised.value) and "/x" not in str(raised.value)
    assert not any(tmp_path.iterdir())


def test_a_yaml_date_in_a_config_file_is_one_line_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "task.yaml"
    config.write_text("model: oracle\nlimit: 2\ngeneration_config:\n  stop: [2026-01-02]\n")
    result = run_cli("eval", "--config", str(config), "--work-dir", str(tmp_path / "w"))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "generation_config holds a date" in result.stderr and not (tmp_path / "w").exists()


class Name(enum.StrEnum):
    ORACLE = "oracle"


class Seconds(float):
    pass


def test_subclasses_of_texts_and_numbers_are_saved_as_plain_values(tmp_path: Path) -> None:
    """A StrEnum model name (or numpy's str_) could not be written to the run's YAML settings (a traceback
    after the run); a tuple of datasets is a list."""
    config = TaskConfig(model=Name.ORACLE, timeout=Seconds(30), datasets=("coin_flip",), limit=2, work_dir=tmp_path)
    assert type(config.model) is str and type(config.timeout) is float and config.datasets == ["coin_flip"]
    assert config.work_dir == str(tmp_path)  # a Path is its text
    run_task(config)
    settings = next(tmp_path.glob("*/configs/task_config.yaml")).read_text()
    assert "model: oracle" in settings and "!!python" not in settings


@pytest.mark.parametrize(
    ("name", "text"),
    [("t.json", '{"model": "oracle", "limit": 1e-400}'), ("t.yaml", "model: oracle\nlimit: 1.0e-400\n")],
)
def test_a_number_no_float_holds_in_a_config_file_is_refused(tmp_path: Path, name: str, text: str) -> None:
    """Read as 0.0 before any check saw it: a limit of 0, every question."""
    (tmp_path / name).write_text(text)
    with pytest.raises(ConfigError, match="too small a number for a float"):
        run_task(str(tmp_path / name))
    (tmp_path / name).write_text(text.replace("1e-400", "0.0").replace("1.0e-400", "0.0"))
    assert TaskConfig.of(**read_settings(tmp_path / name)).limit is None  # a zero written as one is fine
    (tmp_path / "zeros.yaml").write_text("a: 0_.0\nb: 0:0.0\nc: -0.0e-400\nd: .0\n")  # YAML 1.1 spells zero so too
    assert read_settings(tmp_path / "zeros.yaml") == {"a": 0.0, "b": 0.0, "c": 0.0, "d": 0.0}
