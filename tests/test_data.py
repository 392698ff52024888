"""Dataset stage: loaders for every format and field naming, bundled splits, malformed input."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from coinflip.data.grammar import bundled_dir
from coinflip.data.load import dataset_stats, digest, load_dataset, load_file, load_split
from coinflip.data.prompts import ZERO_SHOT_TEMPLATE, build_prompt
from coinflip.errors import DataError

from .conftest import SKRISHNA, run_cli, shared

Q2 = "Q: A coin is heads up. ana flips the coin. bo does not flip the coin.  Is the coin still heads up?"


def test_every_shared_validation_row_loads_and_prompts_from_the_stripped_question() -> None:
    raw = json.loads(shared(SKRISHNA).read_text(encoding="utf-8"))
    records = load_file(SKRISHNA)
    assert len(records) == len(raw) == 1333
    for row, record in zip(raw, records, strict=True):
        assert record.question == row["inputs"].strip()
        assert record.answer == row["targets"].strip().upper()
        assert build_prompt(record.question) == ZERO_SHOT_TEMPLATE.replace("{question}", row["inputs"].strip())
        assert record.people == 2
        assert (record.flips % 2 == 0) == (record.answer == "YES")


def test_bundled_test_split_matches_the_official_statistics() -> None:
    stats = dataset_stats(load_split(bundled_dir(), "test"), ZERO_SHOT_TEMPLATE)
    assert stats["rows"] == 3333
    assert stats["people"] == {2: 1333, 4: 2000}
    lengths = stats["prompt_length"]
    assert abs(lengths["mean"] - 500.15) <= 2
    assert abs(lengths["min"] - 453) <= 3
    assert abs(lengths["max"] - 551) <= 6
    assert 20 <= lengths["std"] <= 36
    assert 0.45 <= stats["yes_share"] <= 0.55


def test_bundled_splits_are_shaped_like_the_official_set() -> None:
    test = load_split(bundled_dir(), "test")
    validation = load_split(bundled_dir(), "validation")
    assert [r.people for r in test[:2000]] == [4] * 2000
    assert [r.people for r in test[2000:]] == [2] * 1333
    assert len(validation) == 1333 and {r.people for r in validation} == {2}
    questions = [r.question for r in test] + [r.question for r in validation]
    assert len(set(questions)) == len(questions)


def test_stats_command_prints_bundled_and_file_statistics(tmp_path: Path) -> None:
    result = run_cli("stats", "--json")
    assert result.returncode == 0, result.stderr
    stats = json.loads(result.stdout)
    assert stats["test"]["rows"] == 3333 and stats["validation"]["rows"] == 1333
    assert abs(stats["test"]["prompt_length"]["mean"] - 500.15) <= 2


def test_stats_of_the_shared_validation_file() -> None:
    text = run_cli("stats", str(shared(SKRISHNA)))
    assert text.returncode == 0 and "1333 rows" in text.stdout and "prompt length" in text.stdout


def _write_all_formats(tmp_path: Path) -> dict[str, Path]:
    rows = [
        {"question": Q2, "answer": "no"},
        {"question": " " + Q2.replace("ana flips", "ana does not flip") + " ", "answer": "Yes"},
    ]
    paths = {}
    paths["json"] = tmp_path / "a.json"
    paths["json"].write_text(json.dumps(rows))
    paths["examples"] = tmp_path / "b.json"
    paths["examples"].write_text(
        json.dumps({"examples": [{"inputs": r["question"], "targets": r["answer"]} for r in rows]})
    )
    paths["jsonl"] = tmp_path / "c.jsonl"
    paths["jsonl"].write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    paths["csv"] = tmp_path / "d.csv"
    with paths["csv"].open("w", newline="") as handle:
        writer = csv.DictWriter(handle, ["question", "answer"])
        writer.writeheader()
        writer.writerows(rows)
    import pyarrow as pa
    import pyarrow.parquet as pq

    paths["parquet"] = tmp_path / "e.parquet"
    pq.write_table(pa.Table.from_pylist(rows), paths["parquet"])
    return paths


def test_every_format_and_field_naming_loads_the_same_rows(tmp_path: Path) -> None:
    loaded = {name: load_file(path) for name, path in _write_all_formats(tmp_path).items()}
    reference = loaded["json"]
    assert [r.answer for r in reference] == ["NO", "YES"]
    assert reference[1].question.startswith("Q:") and reference[1].question.endswith("?")
    for name, records in loaded.items():
        assert records == reference, name


def test_directory_with_test_and_validation(tmp_path: Path) -> None:
    (tmp_path / "test.jsonl").write_text(json.dumps({"question": Q2, "answer": "NO"}) + "\n")
    (tmp_path / "validation.json").write_text(json.dumps([{"inputs": Q2, "targets": "no"}] * 3))
    data = load_dataset("test", tmp_path)
    assert len(data) == 1 and data.source["source"] == "file"
    assert data.source["sha256"] == digest(data)[0]
    assert len(load_dataset("validation", tmp_path)) == 3


MALFORMED = [
    ("bad.json", '[{"question": "Q: x?", "answer": "YES"},', "invalid JSON"),
    ("bad.jsonl", '{"question": "Q: x?", "answer": "YES"}\n\n{"question": \n', "line 3: invalid JSON"),
    ("missing.jsonl", '{"question": "Q: x?"}\n', "missing field 'answer' or 'targets'"),
    ("noq.jsonl", '{"answer": "YES"}\n', "missing field 'question' or 'inputs'"),
    ("maybe.jsonl", '{"question": "Q: x?", "answer": "maybe"}\n', "answer must be yes or no"),
    ("empty_q.jsonl", '{"question": "   ", "answer": "YES"}\n', "empty or missing question"),
    ("null_q.json", '[{"question": null, "answer": "NO"}]', "empty or missing question"),
    ("scalar.json", '{"foo": 1}', "expected a JSON list"),
    ("notobj.json", '["just a string"]', "expected an object"),
    ("rows.txt", "hello", "unknown format .txt"),
    ("empty.jsonl", "", "no rows"),
    ("empty.csv", "", "empty CSV file"),
    ("badcsv.csv", "question,label\nQ: x?,YES\n", "missing field 'answer' or 'targets'"),
    ("notparquet.parquet", "this is not parquet", "not a readable Parquet file"),
    ("latin1.jsonl", b'{"question": "Q: \xe9?", "answer": "YES"}\n', "not UTF-8"),
    ("number.jsonl", '{"question": "Q: x?", "answer": 1}\n', "answer must be yes or no"),
    ("surrogate.jsonl", '{"question": "Q: x\\ud800?", "answer": "NO"}\n', "half a surrogate pair"),
    ("surrogate.json", '[{"question": "Q: \\udfff x?", "answer": "NO"}]', "half a surrogate pair"),
]


@pytest.mark.parametrize(("name", "content", "message"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_input_gives_one_line_and_exit_2(
    tmp_path: Path, name: str, content: str | bytes, message: str
) -> None:
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    result = run_cli("eval", "--model", "oracle", "--dataset-path", str(path), "--work-dir", str(tmp_path / "out"))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert message in lines[0] and name in lines[0]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize("path", ["/nonexistent/file.jsonl", "/"])
def test_unreadable_paths_give_one_line(tmp_path: Path, path: str) -> None:
    result = run_cli("stats", path if path != "/" else str(tmp_path))
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_a_folder_that_is_not_there_is_named_missing(tmp_path: Path) -> None:
    """A mistyped folder was 'unknown format (none); use one of .json, ...', as if it were a file to rename."""
    with pytest.raises(DataError, match=r"my-data: no such file$"):
        load_dataset("test", tmp_path / "my-data")


def test_a_broken_link_or_a_fifo_named_test_in_a_folder_is_named(tmp_path: Path) -> None:
    """Both were passed over, so the folder 'held no test.* file' beside the test.jsonl the user sees there."""
    import os

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "test.jsonl").symlink_to(tmp_path / "moved.jsonl")
    with pytest.raises(DataError, match=r"a/test.jsonl: no such file$"):
        load_dataset("test", tmp_path / "a")
    os.mkfifo(tmp_path / "validation.jsonl")
    with pytest.raises(DataError, match=r"validation.jsonl: not a file$"):
        load_dataset("validation", tmp_path)


def test_load_file_raises_data_error_with_row_number(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text(
        json.dumps({"question": Q2, "answer": "YES"}) + "\n" + json.dumps({"question": Q2, "answer": "heads"}) + "\n"
    )
    with pytest.raises(DataError, match=r"x.jsonl: row 2: answer must be yes or no"):
        load_file(path)


def test_files_saved_with_a_byte_order_mark_load(tmp_path: Path) -> None:
    csv_path = tmp_path / "excel.csv"
    csv_path.write_text(f'question,answer\n"{Q2}",no\n', encoding="utf-8-sig")
    jsonl_path = tmp_path / "bom.jsonl"
    jsonl_path.write_text(json.dumps({"question": Q2, "answer": "NO"}) + "\n", encoding="utf-8-sig")
    assert load_file(csv_path) == load_file(jsonl_path)


def test_a_resume_after_the_validation_split_changed_is_refused(tmp_path: Path) -> None:
    """Few-shot examples are part of every prompt: a resume on a changed validation file sent its new examples to
    the questions left while the saved ones kept the old, one run of two prompt sets, with nothing said."""
    from coinflip import run_task
    from coinflip.data.generate import PeopleRange, generate_file
    from coinflip.errors import ConfigError

    data, run = tmp_path / "data", tmp_path / "run"
    generate_file(data / "test.jsonl", PeopleRange(4, 4), 6, 1)
    generate_file(data / "validation.jsonl", PeopleRange(2, 2), 5, 2)
    settings = {"model": "oracle", "dataset_path": str(data), "few_shot_num": 2, "work_dir": str(run)}
    run_task({**settings, "no_timestamp": True, "quiet": True})
    generate_file(data / "validation.jsonl", PeopleRange(2, 2), 5, 3)
    with pytest.raises(ConfigError, match=r"was a different run; few_shot_examples \(the validation rows shown\): "
                       r"saved '[0-9a-f]{12}\.\.\.', now '[0-9a-f]{12}\.\.\.'$"):  # fmt: skip
        run_task({"use_cache": str(run), "quiet": True})
    with pytest.raises(ConfigError, match=r"few_shot_num: saved 2, now 3$"):  # its examples differ: said by that
        run_task({"use_cache": str(run), "quiet": True, "few_shot_num": 3})


def test_a_file_rewritten_in_place_during_the_run_stops_it(tmp_path: Path) -> None:
    """A streamed file is read again for the run after its hash: one regenerated in place mid-run went on
    being read at the old offset in the new text, and the run ended 0 with a report naming the old sha256
    over questions from neither version."""
    import threading

    from coinflip import run_task
    from coinflip.data.generate import PeopleRange, generate_file

    from .answer_server import AnswerServer, Seen, answer, chat
    from .conftest import only_run_dir, read_jsonl

    data = tmp_path / "set.jsonl"
    generate_file(data, PeopleRange(4, 4), 400, 1)
    before, once = data.read_text(), threading.Lock()

    def respond(seen: Seen) -> bytes:
        if once.acquire(blocking=False):  # the first request: the file is made again, in place
            generate_file(data, PeopleRange(4, 4), 400, 2)
        return answer(chat(f"ANSWER: {seen.right_answer}"))

    with AnswerServer(respond) as srv, pytest.raises(DataError, match="set.jsonl: changed while being read"):
        run_task({"model": "m", "api_url": srv.url, "dataset_path": str(data), "eval_batch_size": 1,
                  "limit_mode": "first", "work_dir": str(tmp_path / "out"), "quiet": True})  # fmt: skip
    run = only_run_dir(tmp_path / "out")
    asked = {row["question"] for row in read_jsonl(run / "predictions" / "m" / "coin_flip.jsonl")}
    assert asked and asked <= {json.loads(line)["question"] for line in before.splitlines()}
    assert not (run / "reports").exists()


@pytest.mark.parametrize("held", [True, False], ids=["held", "larger"])
def test_a_drawn_subset_is_read_once_so_a_rewrite_mid_run_changes_no_question(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, held: bool
) -> None:
    """A stratified subset of a file of up to HELD_BYTES keeps the rows it drew: the requests ask the questions the
    run hashed and drew, whatever the file holds by then; a larger file is read again, and a rewrite stops the run."""
    import threading

    from coinflip import run_task
    from coinflip.data import load
    from coinflip.data.generate import PeopleRange, generate_file

    from .answer_server import AnswerServer, Seen, answer, chat
    from .conftest import only_run_dir, read_jsonl

    data = tmp_path / "set.jsonl"
    generate_file(data, PeopleRange(3, 5), 400, 1)
    before, once = data.read_text(), threading.Lock()

    def respond(seen: Seen) -> bytes:
        if once.acquire(blocking=False):
            generate_file(data, PeopleRange(3, 5), 400, 2)
        return answer(chat(f"ANSWER: {seen.right_answer}"))

    if not held:
        monkeypatch.setattr(load, "HELD_BYTES", len(before.encode()) - 1)
    settings = {"model": "m", "dataset_path": str(data), "eval_batch_size": 1, "limit": 30, "quiet": True}
    with AnswerServer(respond) as srv:
        try:
            report = run_task({**settings, "api_url": srv.url, "work_dir": str(tmp_path / "out")})
        except DataError as exc:
            assert not held and "set.jsonl: changed while being read" in str(exc)
        else:
            assert held and report["complete"]
    run = only_run_dir(tmp_path / "out")
    asked = [row["question"] for row in read_jsonl(run / "predictions" / "m" / "coin_flip.jsonl")]
    assert set(asked) <= {json.loads(line)["question"] for line in before.splitlines()}
    assert len(asked) == 30 if held else len(asked) < 30
    assert data.read_text() != before


def test_a_csv_holding_a_question_longer_than_csvs_default_field_limit_loads(tmp_path: Path) -> None:
    """A long-sequence set (`generate --people 6000`: 160 KiB a question) saved as CSV is a valid CSV; Python's csv
    refused any field over 128 KiB ('field larger than field limit'), where the same rows as JSONL load."""
    steps = "".join(f" p{i} {'flips' if i % 2 else 'does not flip'} the coin." for i in range(6000))
    question = f"Q: A coin is heads up.{steps}  Is the coin still heads up?"
    path = tmp_path / "long.csv"
    with path.open("w", encoding="utf-8", newline="") as handle:
        csv.writer(handle).writerows([["question", "answer"], [question, "YES"]])
    before = csv.field_size_limit()
    [record] = load_file(path)
    assert record.question == question and record.people == 6000 and record.flips == 3000
    assert csv.field_size_limit() == before  # the process's own limit, given back


@pytest.mark.parametrize(
    ("hidden", "args", "hint"),
    [
        ("pyarrow", ("--dataset-path", "{tmp}/rows.parquet"), "pip install pyarrow (the parquet extra)"),
        (
            "huggingface_hub",
            ("--dataset-hub", "huggingface", "--dataset-dir", "{tmp}/cache"),
            "pip install huggingface_hub",
        ),
    ],
)
def test_a_missing_optional_package_is_named_as_pip_knows_it(tmp_path: Path, hidden: str, args: tuple[str, ...],
                                                             hint: str) -> None:  # fmt: skip
    """The hints said pip install 'coinflip[parquet]': on PyPI `coinflip` is another project, which that installs."""
    (tmp_path / "rows.parquet").write_bytes(b"PAR1")
    script = f"import sys; sys.modules[{hidden!r}] = None; from coinflip.cli import main; main()"
    given = [a.format(tmp=tmp_path) for a in args]
    done = subprocess.run([sys.executable, "-c", script, "eval", "--model", "oracle", *given], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2 and hint in done.stderr and "coinflip[" not in done.stderr, done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
