"""Prompt variants, completions stop sequences, and a length curve that takes eval's settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coinflip.config import TaskConfig
from coinflip.data.grammar import bundled_dir
from coinflip.data.load import load_split
from coinflip.data.prompts import DIRECT_TEMPLATE, ZERO_SHOT_TEMPLATE
from coinflip.run.plan import RequestBuilder, effective_generation, few_shot_pool
from coinflip.testing.server import FakeOpenAIServer

from .conftest import only_run_dir, read_jsonl, run_cli

QUESTION = load_split(bundled_dir(), "test")[0]


def _build(**settings: object) -> RequestBuilder:
    config = TaskConfig(model="oracle", **settings)  # type: ignore[arg-type]
    return RequestBuilder(config, few_shot_pool(config), effective_generation(config))


def test_default_is_the_specifications_and_direct_asks_for_the_line_alone() -> None:
    assert _build()(QUESTION).messages == [
        {"role": "user", "content": ZERO_SHOT_TEMPLATE.format(question=QUESTION.question)}
    ]
    direct = _build(prompt_template="direct", few_shot_num=2)(QUESTION).messages[0]["content"]
    assert direct.endswith(DIRECT_TEMPLATE.format(question=QUESTION.question))
    assert "Reasoning:" not in direct and direct.count("\nANSWER: ") == 2  # two examples, answer lines only


def test_multiturn_few_shot_is_one_user_assistant_pair_per_example() -> None:
    messages = _build(prompt_template="multiturn", few_shot_num=3, system_prompt="Be careful.")(QUESTION).messages
    assert [m["role"] for m in messages] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    assert messages[-1]["content"] == ZERO_SHOT_TEMPLATE.format(question=QUESTION.question)
    assert all(m["content"].splitlines()[-1].startswith("ANSWER: ") for m in messages if m["role"] == "assistant")


def test_a_custom_template_is_checked_and_recorded_by_name_and_hash(tmp_path: Path) -> None:
    template = "Track the coin.\n{question}\nEnd with ANSWER: YES or ANSWER: NO."
    with FakeOpenAIServer("correct") as srv:
        result = run_cli(
            "eval", "--model", "m", "--api-url", srv.url, "--limit", "4", "--prompt-template", template,
            "--work-dir", str(tmp_path),
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    run = only_run_dir(tmp_path)
    rows = read_jsonl(run / "predictions/m/coin_flip.jsonl")
    assert all(r["prompt"] == template.format(question=r["question"]) for r in rows)
    report = json.loads((run / "reports/m/coin_flip.json").read_text())
    assert report["template"]["name"] == "custom" and len(report["template"]["sha256"]) == 16
    default = run_cli("eval", "--model", "oracle", "--limit", "4", "--work-dir", str(tmp_path / "d"))
    other = json.loads(next((tmp_path / "d").glob("*/reports/oracle/coin_flip.json")).read_text())
    assert default.returncode == 0 and other["template"]["name"] == "default"
    assert other["template"]["sha256"] != report["template"]["sha256"]


def test_completions_get_a_default_stop_that_settings_replace() -> None:
    assert effective_generation(TaskConfig(model="m", api_mode="completions"))["stop"] == ["\nQ:"]
    assert "stop" not in effective_generation(TaskConfig(model="m"))
    given = TaskConfig(model="m", api_mode="completions", generation_config="stop=\\n\\nQ:,max_tokens=8")
    assert effective_generation(given)["stop"] == ["\n\nQ:"]  # a \n escape is a newline
    assert (
        effective_generation(TaskConfig(model="m", api_mode="completions", generation_config={"stop": []}))["stop"]
        == []
    )


def test_completion_requests_carry_the_stop_sequence(tmp_path: Path) -> None:
    with FakeOpenAIServer("correct", record=True) as srv:
        result = run_cli(
            "eval", "--model", "m", "--api-url", srv.url, "--api-mode", "completions", "--limit", "3",
            "--work-dir", str(tmp_path),
        )  # fmt: skip
        bodies = [body for _, _, body in srv.state.seen]
    assert result.returncode == 0, result.stderr
    assert bodies and all(b["stop"] == ["\nQ:"] and "prompt" in b for b in bodies)
    report = json.loads((only_run_dir(tmp_path) / "reports/m/coin_flip.json").read_text())
    assert report["generation_config"]["stop"] == ["\nQ:"]


def test_the_probes_length_curve_takes_evals_settings_and_shows_progress(tmp_path: Path) -> None:
    result = run_cli(
        "probe", "--model", "oracle", "--limit", "5", "--variants", "", "--lengths", "3-4", "--length-count", "20",
        "--few-shot-num", "2", "--prompt-template", "multiturn", "--repeats", "2", "--work-dir", str(tmp_path),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "probe oracle: 3 people (2 of 3)" in result.stderr and "4 people (3 of 3)" in result.stderr
    folder = only_run_dir(tmp_path)
    points = json.loads((folder / "probe.json").read_text())["length"]["points"]
    assert [p["people"] for p in points] == [3, 4] and all(p["samples"] == 40 for p in points)
    report = json.loads((folder / "runs/people_03/reports/oracle/coin_flip.json").read_text())
    assert report["few_shot_num"] == 2 and report["template"]["name"] == "multiturn" and report["repeats"] == 2


@pytest.mark.parametrize("bad", ["{question} and {other}", "no placeholder", "{question} {"])
def test_bad_templates_are_refused_before_anything_runs(bad: str) -> None:
    from coinflip.data.prompts import template
    from coinflip.errors import ConfigError

    with pytest.raises(ConfigError, match="prompt_template"):
        template(bad)


@pytest.mark.parametrize(
    ("mode", "given", "sent"),
    [
        ("chat", {"logprobs": 5}, {"logprobs": True, "top_logprobs": 5}),
        ("chat", {"logprobs": True, "top_logprobs": 3}, {"logprobs": True, "top_logprobs": 3}),
        ("completions", {"logprobs": True, "top_logprobs": 3}, {"logprobs": 3}),
        ("completions", {"logprobs": 4}, {"logprobs": 4}),
        ("chat", {"logprobs": False}, {"logprobs": False}),
    ],
)
def test_logprobs_mean_the_same_in_both_modes(mode: str, given: dict, sent: dict) -> None:
    generation = effective_generation(TaskConfig(model="m", api_mode=mode, generation_config=given))
    assert {k: generation.get(k) for k in sent} == sent and (mode == "chat" or "top_logprobs" not in generation)


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("{}", "['']"),
        ("Q: {question} {0}", "['0']"),
        ("{question.x}", "['question.x']"),
        ("{question[0]}", "['question[0]']"),
    ],
)
def test_a_placeholder_that_is_not_question_or_fewshot_is_named(text: str, named: str) -> None:
    """Filled in before its placeholders were checked, a template with {} or {0} said 'Replacement index 0 out
    of range', and {question.x} said only ('question'), instead of naming the unknown placeholder."""
    from coinflip.data.prompts import template
    from coinflip.errors import ConfigError

    with pytest.raises(ConfigError) as caught:
        template(text)
    assert f"unknown placeholder(s) {named}; write a literal brace as {{{{ or }}}}" in str(caught.value)
