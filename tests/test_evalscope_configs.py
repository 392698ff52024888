"""Real EvalScope-style configs (Python dicts, a YAML file, CLI lines) run here as they are."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from coinflip import EvalType, TaskConfig, run_task
from coinflip.errors import ConfigError
from coinflip.testing.server import FakeOpenAIServer

from .conftest import only_run_dir, run_cli


@pytest.fixture
def srv() -> Any:
    with FakeOpenAIServer("correct") as server:
        yield server


def test_python_configs_as_evalscope_users_write_them(srv: FakeOpenAIServer, tmp_path: Path) -> None:
    configs = [
        TaskConfig(
            model="qwen",
            eval_type=EvalType.SERVICE,
            api_url=srv.url,
            api_key="EMPTY",
            datasets=["coin_flip"],
            stream=True,
            timeout=600,
            limit=5,
            work_dir=str(tmp_path / "a"),
        ),
        {
            "model": "qwen",
            "eval_type": "openai_api",
            "api_url": srv.url,
            "datasets": ["coin_flip"],
            "generation_config": {
                "max_completion_tokens": 2048,
                "reasoning_effort": "low",
                "timeout": 300,
                "retries": 2,
                "stream": True,
                "stop_seqs": ["\n\nQ:"],
            },
            "dataset_args": {"coin_flip": {"few_shot_num": 2, "few_shot_random": False, "shuffle": True}},
            "limit": 6,
            "eval_batch_size": 4,
            "judge_strategy": "auto",
            "analysis_report": True,
            "work_dir": str(tmp_path / "b"),
        },
        {
            "model": "oracle",
            "eval_type": "mock_llm",
            "datasets": ["coin_flip"],
            "limit": 0,
            "dataset_args": {"coin_flip": {"local_path": str(tmp_path / "data")}},
            "dataset_hub": "local",
            "work_dir": str(tmp_path / "c"),
        },
    ]
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "test.jsonl").write_text(
        "".join(
            json.dumps(
                {
                    "question": f"Q: A coin is heads up. a{i} flips the coin.  Is the coin still heads up?",
                    "answer": "NO",
                }
            )
            + "\n"
            for i in range(7)
        )
    )
    reports = run_task(configs)
    assert [r["counts"]["samples"] for r in reports] == [5, 6, 7]  # limit 0 is all seven
    assert all(r["complete"] for r in reports)
    first, second, third = reports
    assert first["generation_config"].get("stream") is None  # a setting of its own, not a body key
    assert second["generation_config"]["max_completion_tokens"] == 2048
    assert second["generation_config"]["reasoning_effort"] == "low" and second["generation_config"]["stop"] == [
        "\n\nQ:"
    ]
    assert second["few_shot_num"] == 2 and second["subset"]["mode"] == "random"
    assert third["dataset"]["source"] == "file" and third["metrics"]["accuracy"] == 1.0
    saved = (only_run_dir(tmp_path / "b") / "configs/task_config.yaml").read_text()
    assert "timeout: 300" in saved and "retries: 2" in saved and "stream: true" in saved


def test_a_yaml_file_in_evalscopes_layout(srv: FakeOpenAIServer, tmp_path: Path) -> None:
    (tmp_path / "eval.yaml").write_text(
        f"""model: served
eval_type: service
api_url: {srv.url}
api_key: EMPTY
datasets:
  - coin_flip
eval_batch_size: 8
generation_config:
  temperature: 0.0
  max_tokens: 512
  timeout: 60
limit: 0.002
seed: 7
work_dir: {tmp_path / "runs"}
no_timestamp: true
"""
    )
    report = run_task(str(tmp_path / "eval.yaml"))
    assert report["counts"]["samples"] == 6 and report["complete"]  # int(3,333 x 0.002), as EvalScope counts
    assert (tmp_path / "runs/configs/task_config.yaml").is_file()  # no_timestamp: the work dir itself


@pytest.mark.parametrize(
    "flags",
    [
        ["--eval-type", "openai_api", "--stream", "--timeout", "600", "--limit", "4"],
        [
            "--eval-type",
            "service",
            "--generation-config",
            '{"max_completion_tokens": 1024, "reasoning_effort": "high"}',
            "--limit",
            "3",
        ],
        [
            "--generation-config",
            'max_tokens=64,temperature=0,stop_seqs=["\\n\\nQ:"]',
            "--limit",
            "10.0",
            "--repeats",
            "2",
            "--seed",
            "3",
        ],
        [
            "--dataset-args",
            '{"coin_flip": {"few_shot_num": 1, "shuffle": false}}',
            "--limit",
            "3",
            "--ignore-errors",
            "--no-timestamp",
        ],
    ],
)
def test_evalscope_cli_lines(srv: FakeOpenAIServer, tmp_path: Path, flags: list[str]) -> None:
    result = run_cli(
        "eval",
        "--model",
        "served",
        "--api-url",
        srv.url,
        "--api-key",
        "EMPTY",
        "--datasets",
        "coin_flip",
        *flags,
        "--work-dir",
        str(tmp_path / "w"),
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr


def test_what_coinflip_cannot_do_is_one_line_that_says_what_to_do() -> None:
    with pytest.raises(ConfigError, match="not supported yet: serve it"):
        TaskConfig(model="Qwen/Qwen2.5-0.5B", eval_type="llm_ckpt")
    with pytest.raises(ConfigError, match="needs a baseline model"):
        TaskConfig(model="real-model", eval_type="mock_llm")
    with pytest.raises(TypeError, match=r"field\(s\) \['judge_modle'\]: did you mean 'judge_model_args'\?$"):
        TaskConfig.of(model="m", judge_modle="x")
    with pytest.raises(TypeError, match=r"unknown TaskConfig field\(s\) \['xyzzy'\]; docs/settings.md lists them"):
        TaskConfig.of(model="m", xyzzy="x")  # not all 80 names in one line
    with pytest.raises(TypeError, match=r"\['limt', 'xyzzy'\] \(did you mean 'limit' for 'limt'\?\); docs/"):
        TaskConfig.of(model="m", limt=3, xyzzy="x")
    notes = TaskConfig(model="m", judge_strategy="llm", analysis_report=True).notes()
    assert notes == [
        "judge_strategy: accepted, not used by coin_flip",
        "analysis_report: accepted, not used by coin_flip",
    ]


def test_eval_config_runs_an_evalscope_file_and_the_flags_given_override_it(
    srv: FakeOpenAIServer, tmp_path: Path
) -> None:
    """`coinflip eval --config FILE` takes what run_task takes: `--limit 5` beside it wins over the
    file's limit, and a flag not given leaves the file's value (its seed, its few-shot) alone."""
    config = tmp_path / "evalscope.yaml"
    config.write_text(
        f"""# EvalScope 1.14.1: evalscope eval --config evalscope.yaml
model: served
eval_type: openai_api
api_url: {srv.url}
api_key: EMPTY
datasets: [coin_flip]
dataset_args:
  coin_flip:
    few_shot_num: 2
    shuffle: false
eval_batch_size: 4
generation_config:
  max_tokens: 256
  temperature: 0.0
  timeout: 60
  retries: 2
limit: 40
seed: 7
work_dir: {tmp_path / "from-file"}
"""
    )
    result = run_cli("eval", "--config", str(config), "--limit", "5", "--work-dir", str(tmp_path / "w"))
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "from-file").exists()  # --work-dir given: the file's is not used
    run = only_run_dir(tmp_path / "w")
    report = json.loads(next(run.glob("reports/*/coin_flip.json")).read_text())
    assert report["counts"]["samples"] == 5 and report["complete"]
    assert "seed: 7" in (run / "configs/task_config.yaml").read_text()
    assert report["served_model"] == "served" and report["few_shot_num"] == 2 and report["subset"]["mode"] == "first"
    assert report["generation_config"]["max_tokens"] == 256
    bad = run_cli("eval", "--config", str(tmp_path / "missing.yaml"))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "missing.yaml" in bad.stderr


def test_a_config_evalscope_1_14_1_saved_runs_as_it_is(srv: FakeOpenAIServer, tmp_path: Path) -> None:
    """EvalScope's own task_config.yaml of a run holds its 1.14.1 fields (sandbox, agent, version) and the
    output-only metadata it strips when it reads a snapshot back: coinflip takes the file as EvalScope does."""
    saved = tmp_path / "task_config_0a1b2c.yaml"
    saved.write_text(
        f"model: qwen\napi_url: {srv.url}\ndatasets: [coin_flip]\nlimit: 4\nmodel_task: text_generation\n"
        "eval_config: null\nrerun_review: false\ndry_run: false\nsandbox: null\nuse_sandbox: false\n"
        "sandbox_type: docker\nsandbox_manager_config: {}\nagent_config: null\nevalscope_version: 1.14.1\n"
        "resolved_benchmarks: {coin_flip: {version: 1}}\nevaluation_identity: {digest: abc}\n"
        f"work_dir: {tmp_path / 'out'}\n",
        encoding="utf-8",
    )
    result = run_cli("eval", "--config", str(saved))
    assert result.returncode == 0, result.stderr
    assert "note: evalscope_version: reports name coinflip's version" in result.stderr
    assert json.loads((only_run_dir(tmp_path / "out") / "reports/qwen/coin_flip.json").read_text())["counts"]


def test_evalscopes_null_timeout_and_stream_are_its_defaults(srv: FakeOpenAIServer, tmp_path: Path) -> None:
    """EvalScope's TaskConfig holds timeout and stream as None unless given (its saved task_config.yaml says
    `timeout: null`, `stream: null`, the values in generation_config): the config runs, with those values."""
    saved = tmp_path / "task_config.yaml"
    saved.write_text(
        f"model: qwen\napi_url: {srv.url}\nlimit: 2\ntimeout: null\nstream: null\nwork_dir: {tmp_path / 'out'}\n"
        "generation_config: {timeout: 30, stream: true}\n",
        encoding="utf-8",
    )
    result = run_cli("eval", "--config", str(saved))
    assert result.returncode == 0, result.stderr
    kept = (only_run_dir(tmp_path / "out") / "configs/task_config.yaml").read_text()
    assert "timeout: 30" in kept and "stream: true" in kept
    assert TaskConfig(model="oracle", timeout=None, stream=None).timeout == TaskConfig(model="oracle").timeout


def test_dry_run_checks_the_settings_and_the_data_and_sends_nothing(srv: FakeOpenAIServer, tmp_path: Path) -> None:
    """EvalScope's dry_run: the config parsed and shown, run_task returns {} without a request or a file."""
    out = tmp_path / "out"
    assert run_task(model="qwen", api_url=srv.url, limit=6, repeats=2, dry_run=True, work_dir=str(out)) == {}
    result = run_cli(
        "eval", "--model", "qwen", "--api-url", srv.url, "--limit", "6", "--dry-run", "--work-dir", str(out)
    )
    assert result.returncode == 0 and "dry run: 6 samples" in result.stderr, result.stderr
    assert not out.exists() and sum(srv.state.requests.values()) == 0
    missing = run_cli("eval", "--model", "oracle", "--dataset-path", str(tmp_path / "nope.jsonl"), "--dry-run")
    assert missing.returncode == 2 and "no such file" in missing.stderr, missing.stderr


def test_evalscopes_eval_split_and_train_split_in_dataset_args(tmp_path: Path) -> None:
    """EvalScope's benchmark settings name the split evaluated (eval_split) and the few-shot pool (train_split)."""
    args = {"coin_flip": {"eval_split": "validation", "train_split": "validation"}}
    report = run_task(model="oracle", limit=3, dataset_args=args, work_dir=str(tmp_path))
    assert report["dataset"]["split"] == "validation" and report["counts"]["samples"] == 3
    with pytest.raises(ConfigError, match="few-shot pool is 'validation'; got train_split 'train'"):
        TaskConfig(model="oracle", dataset_args={"coin_flip": {"train_split": "train"}})
