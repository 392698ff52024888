"""Question generator: deterministic, correct answers, names from the shipped list, bundled files reproducible."""

from __future__ import annotations

import json
import re
import statistics
from collections import Counter
from pathlib import Path

import pytest

from coinflip.data.generate import BUNDLED_SEED, PeopleRange, build_bundled, iter_questions, names
from coinflip.data.grammar import bundled_dir
from coinflip.data.load import load_file
from coinflip.errors import ConfigError

from .conftest import SKRISHNA, read_jsonl, run_cli, shared

SHAPE = re.compile(
    r"^Q: A coin is heads up\.(?: (\S+) (?:flips|does not flip) the coin\.)+  Is the coin still heads up\?$"
)


def _people(question: str) -> list[str]:
    return re.findall(r" (\S+) (?:flips|does not flip) the coin\.", question)


def test_questions_have_the_exact_shape_and_parity_answer() -> None:
    for question, answer in iter_questions(PeopleRange(2, 12), 2000, seed=3):
        assert SHAPE.match(question), question
        who = _people(question)
        assert 2 <= len(who) <= 12 and len(set(who)) == len(who)
        flips = question.count(" flips the coin.")
        assert answer == ("YES" if flips % 2 == 0 else "NO")


def test_same_seed_same_questions_other_seed_different() -> None:
    a = list(iter_questions(PeopleRange(6, 6), 300, seed=7))
    assert a == list(iter_questions(PeopleRange(6, 6), 300, seed=7))
    assert a != list(iter_questions(PeopleRange(6, 6), 300, seed=8))


def test_flip_probability_is_one_half_and_range_is_covered() -> None:
    rows = list(iter_questions(PeopleRange(2, 5), 4000, seed=1))
    counts = [len(_people(q)) for q, _ in rows]
    assert set(counts) == {2, 3, 4, 5}
    flips = sum(q.count(" flips the coin.") for q, _ in rows)
    assert abs(flips / sum(counts) - 0.5) < 0.02


def test_names_are_lowercase_varied_and_not_from_the_shared_file() -> None:
    pool = names()
    assert len(pool) > 5000
    assert all(n == n.lower() and '"' not in n and "\\" not in n for n in pool)
    assert any("-" in n for n in pool) and any(not n.isascii() for n in pool)
    assert 6.5 <= statistics.fmean(len(n) for n in pool) <= 7.3
    theirs = {w for r in load_file(shared(SKRISHNA)) for w in _people(r.question)}
    assert len(theirs & set(pool)) < len(theirs)  # overlap only where common names coincide


def test_shipped_bundled_files_are_what_the_generator_makes() -> None:
    built = build_bundled(BUNDLED_SEED)
    for split in ("test", "validation"):
        shipped = read_jsonl(bundled_dir() / f"{split}.jsonl")
        assert [(r["question"], r["answer"]) for r in shipped] == built[split]


def test_generate_command_streams_a_file(tmp_path: Path) -> None:
    out = tmp_path / "set.jsonl"
    result = run_cli("generate", "--people", "3-9", "--count", "500", "--seed", "11", "--out", str(out))
    assert result.returncode == 0, result.stderr
    rows = read_jsonl(out)
    assert len(rows) == 500
    assert {len(_people(r["question"])) for r in rows} <= set(range(3, 10))
    again = tmp_path / "again.jsonl"
    run_cli("generate", "--people", "3-9", "--count", "500", "--seed", "11", "--out", str(again))
    assert again.read_bytes() == out.read_bytes()
    assert len(load_file(out)) == 500  # the loader accepts what the generator writes
    json.loads(out.read_text().splitlines()[0])


def test_more_people_than_names_in_other_scripts_is_one_line_exit_2(tmp_path: Path) -> None:
    out = tmp_path / "set.jsonl"
    result = run_cli("generate", "--people", "60-200", "--names", "scripts", "--count", "5", "--out", str(out))
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "fewer than 200 people" in result.stderr
    assert not out.exists() or not out.read_text()
    ok = run_cli("generate", "--people", "2-9", "--names", "scripts", "--count", "5", "--out", str(out))
    assert ok.returncode == 0, ok.stderr


@pytest.mark.parametrize("bad", ["0", "5-2", "x", "2-", "-3"])
def test_bad_people_range_is_a_config_error(bad: str) -> None:
    with pytest.raises(ConfigError):
        PeopleRange.parse(bad)


def test_generate_help_reads_well() -> None:
    result = run_cli("generate", "--help")
    assert result.returncode == 0
    for word in ("--people", "--count", "--seed", "--out", "2-12"):
        assert word in result.stdout


@pytest.mark.parametrize("people", ["1", "4", "2-9"])
def test_file_writer_matches_the_question_iterator(tmp_path: Path, people: str) -> None:
    import io

    from coinflip.data.generate import generate_file, write_jsonl

    expected = io.StringIO()
    write_jsonl(iter_questions(PeopleRange.parse(people), 2500, 5), expected)
    generate_file(tmp_path / "g.jsonl", PeopleRange.parse(people), 2500, 5)
    assert (tmp_path / "g.jsonl").read_text(encoding="utf-8") == expected.getvalue()


def test_manifest_describes_the_shipped_files() -> None:
    from coinflip.data.load import MANIFEST, load_dataset, open_split

    manifest = json.loads((bundled_dir() / MANIFEST).read_text())
    for split in ("test", "validation"):
        dataset, sha = open_split(bundled_dir(), split)  # a full validation pass over the shipped file
        assert manifest[split] == {"rows": len(dataset), "sha256": sha}
        assert load_dataset(split).source["sha256"] == sha


def test_as_many_people_as_there_are_names_ends(tmp_path: Path) -> None:
    """--people up to the names' count is accepted; a row of hundreds hardly ever comes without a repeated name,
    and redrawing whole rows until one did never ended (2-1000 spun for minutes, writing nothing)."""
    out, most = tmp_path / "set.jsonl", len(names())
    result = run_cli("generate", "--people", f"999-{most}", "--count", "3", "--seed", "1", "--out", str(out))
    assert result.returncode == 0, result.stderr
    counts = [Counter(_people(r["question"])) for r in read_jsonl(out)]
    assert len(counts) == 3 and all(999 <= len(c) <= most and set(c.values()) == {1} for c in counts)


def test_questions_of_many_people_are_drawn_in_flat_memory() -> None:
    """A chunk of 50,000 rows whatever their length: --people 15000 --count 60000 asked numpy for 5.6 GB
    at once and ended in a MemoryError traceback."""
    import tracemalloc

    tracemalloc.start()
    try:
        assert sum(1 for _ in iter_questions(PeopleRange(15000, 15000), 300, 1)) == 300
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 100 * 2**20, peak


@pytest.mark.parametrize("name", ["set.json", "set.csv", "set.PARQUET"])
def test_generate_refuses_an_out_named_as_another_format(tmp_path: Path, name: str) -> None:
    """It writes JSON Lines: a set.json of JSON lines is a file --dataset-path reads as JSON and refuses."""
    out = tmp_path / name
    result = run_cli("generate", "--count", "5", "--out", str(out))
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and ".jsonl" in result.stderr, result.stderr
    assert not out.exists()


@pytest.mark.parametrize("count", ["0", "-5", "9223372036854775808", "99999999999999999999999"])
def test_a_count_past_what_an_id_holds_is_refused_before_a_line_is_written(tmp_path: Path, count: str) -> None:
    """--count 99999999999999999999999 was taken, and wrote 1.3 GB in 30 s before it was killed: every other count
    refuses a number that does not fit in 64 bits."""
    out = tmp_path / "set.jsonl"
    result = run_cli("generate", "--count", count, "--out", str(out))
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "--count must be a whole number from 1" in result.stderr and not out.exists()


def test_what_generate_says_reads_as_a_sentence_and_names_the_flags(tmp_path: Path) -> None:
    """It said "wrote 1 questions (1 people, seed 0)"; two data sources were refused by their Python names."""
    done = run_cli("generate", "--count", "1", "--people", "1", "--out", str(tmp_path / "one.jsonl"))
    assert done.returncode == 0 and done.stderr.startswith("wrote 1 question (people 1, seed 0) to "), done.stderr
    both = run_cli(
        "eval", "--model", "oracle", "--dataset-path", str(tmp_path / "one.jsonl"), "--dataset-hub", "huggingface"
    )
    assert both.returncode == 2 and "either --dataset-path (dataset_path) or --dataset-hub" in both.stderr, both.stderr
