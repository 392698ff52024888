"""Prompt stage: the specification's templates byte for byte, and correct worked examples."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coinflip.config import TaskConfig
from coinflip.data.grammar import bundled_dir
from coinflip.data.load import load_split
from coinflip.data.prompts import (
    BUILT_IN,
    FEW_SHOT_TEMPLATE,
    ZERO_SHOT_TEMPLATE,
    build_messages,
    build_prompt,
    reasoning,
)
from coinflip.run.plan import RequestBuilder, few_shot_pool
from coinflip.scoring.extract import extract_answer

from .conftest import SEED_EN, read_jsonl, run_cli, shared


def _seed_section(start: str, end: str) -> str:
    text = shared(SEED_EN).read_text(encoding="utf-8")
    i = text.index(start) + len(start)
    return text[i : text.index(end, i)]


def test_templates_are_the_specifications() -> None:
    # The rendered page drops the 0-shot template's leading newline, which the sample example shows.
    assert "\n" + _seed_section("Prompt Template:\n\n", "Few-shot Template") == ZERO_SHOT_TEMPLATE
    assert _seed_section("Few-shot Template\n", "\nUsage#") == FEW_SHOT_TEMPLATE


def test_bundled_test_prompt_is_the_template_with_the_question() -> None:
    record = load_split(bundled_dir(), "test")[0]
    spec = "\n" + _seed_section("Prompt Template:\n\n", "Few-shot Template")
    assert build_prompt(record.question) == spec.replace("{question}", record.question)
    assert build_prompt(record.question).startswith("\nSolve the following coin flip problem")


def test_three_shot_prompt_holds_three_correct_worked_examples() -> None:
    config = TaskConfig(model="oracle", few_shot_num=3)
    test = load_split(bundled_dir(), "test")[:5]
    build = RequestBuilder(config, few_shot_pool(config), {})
    requests = [build(r) for r in test]
    prompt = requests[0].prompt
    assert prompt.startswith("Here are some examples of how to solve similar problems:\n\n")
    examples = prompt.split("\n\n\nSolve the following")[0].split("Q: A coin")[1:]
    assert len(examples) == 3
    validation = {r.question: r.answer for r in load_split(bundled_dir(), "validation")}
    for block in examples:
        question = "Q: A coin" + block.split("\n\nReasoning:\n")[0]
        worked = block.split("\n\nReasoning:\n")[1].strip()
        assert worked.splitlines()[-1] == f"ANSWER: {validation[question]}"
        assert extract_answer(worked) == validation[question]
        assert len(worked.splitlines()) == question.count("the coin.") + 3  # start, one per person, verdict, answer
    assert all(r.prompt.split("\n\n\nSolve")[0] == requests[0].prompt.split("\n\n\nSolve")[0] for r in requests)


def test_reasoning_tracks_state_person_by_person() -> None:
    q = (
        "Q: A coin is heads up. ana flips the coin. bo does not flip the coin. cy flips the coin."
        "  Is the coin still heads up?"
    )
    lines = reasoning(q).splitlines()
    assert lines[1] == "ana flips the coin, so it is now tails up."
    assert lines[2] == "bo does not flip the coin, so it stays tails up."
    assert lines[3] == "cy flips the coin, so it is now heads up."
    assert lines[-1] == "ANSWER: YES"


def test_a_question_is_never_among_its_own_examples() -> None:
    config = TaskConfig(model="oracle", few_shot_num=4, split="validation")
    pool = few_shot_pool(config)
    build = RequestBuilder(config, pool, {})
    requests = [build(r) for r in pool]
    for request in requests:
        head = request.prompt.split("\n\n\nSolve the following")[0]
        assert head.count("Q: A coin") == 4
        assert request.question not in head


@pytest.mark.parametrize("system", [None, "You are careful."])
def test_messages_carry_the_same_text(system: str | None) -> None:
    question = "Q: A coin is heads up.  Is the coin still heads up?"
    prompt = build_prompt(question)
    messages = build_messages(question, (), BUILT_IN["default"], system)
    assert messages[-1] == {"role": "user", "content": prompt}
    assert len(messages) == (2 if system else 1)


def test_a_worked_example_that_contradicts_its_answer_is_refused(tmp_path: Path) -> None:
    """A user's set with its spacing normalised (' '.join(q.split())) from `generate --start tails --ask heads`:
    no question parses, the worked reasoning read them as heads-up questions and taught the opposite answer."""
    made = tmp_path / "made.jsonl"
    assert run_cli("generate", "--people", "2", "--count", "12", "--start", "tails", "--ask", "heads",
                   "--out", str(made)).returncode == 0  # fmt: skip
    rows = [{"question": " ".join(r["question"].split()), "answer": r["answer"]} for r in read_jsonl(made)]
    data = tmp_path / "data"
    data.mkdir()
    for name, part in (("test", rows[:4]), ("validation", rows[4:])):
        (data / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part))
    out = tmp_path / "out"
    common = ("eval", "--model", "oracle", "--dataset-path", str(data), "--few-shot-num", "3", "--work-dir", str(out))
    result = run_cli(*common)
    assert result.returncode == 2, result.stdout
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "validation row" in result.stderr and "--prompt-template direct" in result.stderr
    assert not out.exists() or not any(out.iterdir())
    direct = run_cli(*common, "--prompt-template", "direct")  # its examples show the rows' own answers
    assert direct.returncode == 0, direct.stderr
