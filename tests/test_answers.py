"""`coinflip answers RUN_DIR`: every sample's question, reply, verdict, target and result on one line."""

from __future__ import annotations

import csv
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from coinflip.scoring.extract import extract_answer
from coinflip.testing.policy import Policy
from coinflip.testing.server import FakeOpenAIServer

from .answer_server import AnswerServer, answer
from .conftest import on_terminal, only_run_dir, read_jsonl, run_cli


def test_answers_join_replies_and_verdicts(tmp_path: Path) -> None:
    with FakeOpenAIServer("mixed") as srv:
        done = run_cli(
            "eval", "--model", "m", "--api-url", srv.url, "--limit", "40", "--force-answer", "--work-dir", str(tmp_path)
        )
    assert done.returncode == 0, done.stderr
    run = only_run_dir(tmp_path)
    assert f"coinflip answers {run}" in done.stdout  # the summary points to it
    result = run_cli("answers", str(run))
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == f"wrote 40 answers to {run / 'answers.csv'}"
    with (run / "answers.csv").open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    predictions = {p["id"]: p for p in read_jsonl(run / "predictions/m/coin_flip.jsonl")}
    policy = Policy("mixed")
    assert len(rows) == 40 and {int(r["id"]) for r in rows} == set(predictions)
    kinds = set()
    for row in rows:
        p = predictions[int(row["id"])]
        answer = extract_answer(p["reply"])
        assert row["question"] == p["question"] and row["reply"] == p["reply"] and row["target"] == p["target"]
        assert row["extracted"] == (answer or "")
        expected = "invalid" if answer is None else "right" if answer == p["target"] else "wrong"
        assert row["result"] == expected
        kinds.add(policy.kind(p["question"]))
        if answer is None:  # the forced follow-up, and what it said
            assert row["forced_reply"] == p["forced"]["reply"]
            assert row["forced_answer"] == (extract_answer(p["forced"]["reply"]) or "invalid")
    assert {"right", "wrong", "invalid"} <= {r["result"] for r in rows}
    lines = run_cli("answers", str(run), "--format", "jsonl", "--out", "-")
    assert lines.returncode == 0
    as_json = [json.loads(line) for line in lines.stdout.splitlines()]
    assert [(r["id"], r["result"]) for r in as_json] == [(int(r["id"]), r["result"]) for r in rows]


def test_a_reply_that_looks_like_a_formula_stays_text_in_the_csv(tmp_path: Path) -> None:
    with FakeOpenAIServer("correct") as srv:
        assert (
            run_cli(
                "eval", "--model", "m", "--api-url", srv.url, "--limit", "3", "--work-dir", str(tmp_path)
            ).returncode
            == 0
        )
    run = only_run_dir(tmp_path)
    predictions = run / "predictions/m/coin_flip.jsonl"
    rows = read_jsonl(predictions)
    rows[0]["reply"] = '=HYPERLINK("http://x","y")\nANSWER: ' + rows[0]["target"]
    predictions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert run_cli("rescore", str(run)).returncode == 0
    out = run_cli("answers", str(run), "--out", str(tmp_path / "a.csv"))
    assert out.returncode == 0, out.stderr
    with (tmp_path / "a.csv").open(newline="", encoding="utf-8") as handle:
        replies = [r["reply"] for r in csv.DictReader(handle)]
    assert replies[0].startswith("'=HYPERLINK") and not any(r.startswith("=") for r in replies)


def test_answers_of_a_run_saved_without_repeats_give_repeat_0(tmp_path: Path) -> None:
    """Rows and reviews of versions before repeats have no repeat: it reads as 0, and answers left it blank."""
    done = run_cli("eval", "--model", "oracle", "--limit", "3", "--work-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    run = only_run_dir(tmp_path)
    for path in (run / "predictions/oracle/coin_flip.jsonl", run / "reviews/oracle/coin_flip.jsonl"):
        rows = [{k: v for k, v in row.items() if k != "repeat"} for row in read_jsonl(path)]
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    result = run_cli("answers", str(run), "--format", "jsonl", "--out", "-")
    assert result.returncode == 0, result.stderr
    assert [json.loads(line)["repeat"] for line in result.stdout.splitlines()] == [0, 0, 0]


def test_answers_of_a_folder_that_is_not_a_run_is_one_line(tmp_path: Path) -> None:
    result = run_cli("answers", str(tmp_path))
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1


def test_half_a_surrogate_pair_in_a_reply_is_written_as_its_escape(tmp_path: Path) -> None:
    """A server may send an escaped lone surrogate; the predictions file keeps it as JSON's escape,
    and `coinflip answers` crashed with UnicodeEncodeError writing it (file and stdout alike)."""
    body = b'{"choices": [{"index": 0, "message": {"content": "no verdict \\ud800 here"}}]}'
    with AnswerServer(lambda seen: answer(None, raw=body)) as srv:
        done = run_cli("eval", "--model", "m", "--api-url", srv.url, "--limit", "2", "--work-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    run = only_run_dir(tmp_path)
    for form in ("csv", "jsonl"):
        written = run_cli("answers", str(run), "--format", form, "--out", str(tmp_path / f"a.{form}"))
        assert written.returncode == 0 and "Traceback" not in written.stderr, written.stderr
    shown = run_cli("answers", str(run), "--format", "jsonl", "--out", "-")
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr
    for text in (shown.stdout, (tmp_path / "a.jsonl").read_text(encoding="utf-8")):
        assert [json.loads(line)["reply"] for line in text.splitlines()] == ["no verdict \ud800 here"] * 2
    with (tmp_path / "a.csv").open(newline="", encoding="utf-8") as handle:
        assert [r["reply"] for r in csv.DictReader(handle)] == ["no verdict \\ud800 here"] * 2


def test_unicode_line_breaks_in_a_reply_leave_every_jsonl_file_one_line_a_sample(tmp_path: Path) -> None:
    """NEL, U+2028 and U+2029 are legal raw in JSON, and were written raw: a reader that splits
    with str.splitlines() saw a sample's line broken in three. Each saved and written JSON line now
    holds them as \\u escapes, and they read back as they came."""
    reply = "heads\u0085tails\u2028heads\u2029ANSWER: YES"
    body = json.dumps({"choices": [{"index": 0, "message": {"content": reply}}]}, ensure_ascii=False).encode()
    with AnswerServer(lambda seen: answer(None, raw=body)) as srv:
        done = run_cli("eval", "--model", "m", "--api-url", srv.url, "--limit", "3", "--work-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    run = only_run_dir(tmp_path)
    shown = run_cli("answers", str(run), "--format", "jsonl", "--out", "-")
    assert shown.returncode == 0, shown.stderr
    (predictions,) = (run / "predictions").rglob("*.jsonl")
    for text in (predictions.read_text(encoding="utf-8"), shown.stdout):
        lines = text.splitlines()
        assert len(lines) == 3 and [json.loads(line)["reply"] for line in lines] == [reply] * 3


def test_answers_shown_on_a_terminal_never_carry_its_escape_sequences(tmp_path: Path) -> None:
    """`--out -` on a terminal: a reply's escape sequence (here one that retitles the window and
    one that turns text red) is shown as U+FFFD, not acted on; piped, the reply stays as written."""
    assert run_cli("eval", "--model", "oracle", "--limit", "3", "--work-dir", str(tmp_path)).returncode == 0
    run = only_run_dir(tmp_path)
    predictions = run / "predictions/oracle/coin_flip.jsonl"
    rows = read_jsonl(predictions)
    for row in rows:
        row["reply"] = "\x1b]0;owned\x07\x1b[31m" + row["reply"]
    predictions.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert run_cli("rescore", str(run)).returncode == 0
    piped = run_cli("answers", str(run), "--out", "-")
    assert piped.returncode == 0 and piped.stdout.count("\x1b]0;owned") == 3
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "COINFLIP_API_KEY")}
    code, text = on_terminal("answers", str(run), "--out", "-", env=env)
    assert code == 0
    assert "\x1b" not in text and "\x07" not in text and text.count("\ufffd]0;owned") == 3


def test_answers_out_to_a_fifo_writes_into_it_and_leaves_it_in_place(tmp_path: Path) -> None:
    """--out PIPE (or /dev/stdout, /dev/null) was replaced by a plain file: as root, /dev/null itself."""
    assert run_cli("eval", "--model", "oracle", "--limit", "6", "--work-dir", str(tmp_path / "w")).returncode == 0
    run = only_run_dir(tmp_path / "w")
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    reader = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)  # a reader waits: the writer's open never blocks
    try:
        result = run_cli("answers", str(run), "--out", str(pipe))
        received = os.read(reader, 1 << 16)
    finally:
        os.close(reader)
    assert result.returncode == 0, result.stderr
    assert stat.S_ISFIFO(os.lstat(pipe).st_mode) and received.startswith(b"id,"), received[:80]


def test_answers_out_through_a_link_writes_its_target(tmp_path: Path) -> None:
    """--out /dev/stdout is a link (to the file output is redirected to): replaced, as root it was /dev's own."""
    assert run_cli("eval", "--model", "oracle", "--limit", "6", "--work-dir", str(tmp_path / "w")).returncode == 0
    run = only_run_dir(tmp_path / "w")
    target, link = tmp_path / "target.csv", tmp_path / "stdout"
    link.symlink_to(target)
    assert run_cli("answers", str(run), "--out", str(link)).returncode == 0
    assert link.is_symlink() and target.read_text().startswith("id,")


def test_answers_to_standard_output_on_a_full_disk_is_one_line(tmp_path: Path) -> None:
    """`coinflip answers RUN --out - > file` on a full disk (as every command's output there) ended in an
    OSError traceback; now one line and exit 1, as any other write coinflip makes on a full disk."""
    assert run_cli("eval", "--model", "oracle", "--limit", "5", "--work-dir", str(tmp_path)).returncode == 0
    for args in (("answers", str(only_run_dir(tmp_path)), "--out", "-"), ("stats",)):
        with open("/dev/full", "w") as full:
            done = subprocess.run([sys.executable, "-m", "coinflip.cli", *args], stdout=full, stderr=subprocess.PIPE,
                                  text=True, timeout=300)  # fmt: skip
        assert done.returncode == 1 and done.stderr == "error: No space left on device (writing the output)\n"


def test_answers_out_to_a_folder_is_bad_input_as_for_every_other_out(tmp_path: Path) -> None:
    """--out FOLDER exited 1 ('cannot write ...: Is a directory'), the code of an incomplete run; generate and
    compare refuse such an --out as bad input, exit 2."""
    assert run_cli("eval", "--model", "oracle", "--limit", "3", "--work-dir", str(tmp_path)).returncode == 0
    run = only_run_dir(tmp_path)
    done = run_cli("answers", str(run), "--out", str(tmp_path))
    assert done.returncode == 2 and "is a directory" in done.stderr and len(done.stderr.splitlines()) == 1


def test_an_output_path_that_cannot_be_used_is_bad_input_and_a_full_disk_an_unfinished_write(tmp_path: Path) -> None:
    """answers --out exited 1 for a path that cannot exist (`FILE/x`), generate 2 for a full disk, compare said
    "File exists" of a device given as its folder: the same rule for every output the user names."""
    for model, work in (("oracle", "w"), ("always-no", "v")):
        assert run_cli("eval", "--model", model, "--limit", "3", "--work-dir", str(tmp_path / work)).returncode == 0
    run, other, plain = str(only_run_dir(tmp_path / "w")), str(only_run_dir(tmp_path / "v")), tmp_path / "plain"
    plain.write_text("a file, not a folder\n")
    (tmp_path / "loop").symlink_to(tmp_path / "pool")
    (tmp_path / "pool").symlink_to(tmp_path / "loop")  # a loop of links: Path.resolve raised RuntimeError
    cases = {
        ("answers", run, "--out", str(plain / "x.csv")): 2,
        ("answers", run, "--out", str(tmp_path / "loop")): 2,
        ("generate", "--count", "5", "--out", str(plain / "x.jsonl")): 2,
        ("compare", run, other, "--out", "/dev/null"): 2,
        ("eval", "--model", "oracle", "--limit", "3", "--work-dir", "/dev/null"): 2,
        ("answers", run, "--out", "/dev/full"): 1,
        ("generate", "--count", "5", "--out", "/dev/full"): 1,
    }
    for args, code in cases.items():
        done = run_cli(*args)
        assert done.returncode == code and len(done.stderr.splitlines()) == 1, (args, done.stderr)
        assert done.stderr.startswith("error: ") and "File exists" not in done.stderr, (args, done.stderr)
    assert "/dev/null: not a folder" in run_cli("compare", run, other, "--out", "/dev/null").stderr


def test_answers_to_a_closed_standard_output_is_one_line(tmp_path: Path) -> None:
    """`coinflip answers RUN --out - >&-`: Python gives a closed stdout as None, which ended in an AttributeError."""
    assert run_cli("eval", "--model", "oracle", "--limit", "3", "--work-dir", str(tmp_path)).returncode == 0
    args = [sys.executable, "-m", "coinflip.cli", "answers", str(only_run_dir(tmp_path)), "--out", "-"]
    done = subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=300,
                          preexec_fn=lambda: os.close(1))  # fmt: skip
    assert done.returncode == 2 and done.stderr == "error: --out -: standard output is closed; give --out FILE\n"


def test_answers_say_which_saved_samples_they_left_out(tmp_path: Path) -> None:
    """A predictions file of 6 samples whose reviews lost 2 lines (a resume killed before it scored), or whose
    reviews file holds no review at all, wrote 4 answers or 0, exit 0, without a word of the rest."""
    assert run_cli("eval", "--model", "oracle", "--limit", "6", "--work-dir", str(tmp_path)).returncode == 0
    run = only_run_dir(tmp_path)
    reviews = run / "reviews/oracle/coin_flip.jsonl"
    lines = reviews.read_text().splitlines(keepends=True)
    reviews.write_text("".join(lines[2:]))
    done = run_cli("answers", str(run), "--out", str(tmp_path / "a.csv"))
    assert done.returncode == 0, done.stderr
    said = done.stderr.splitlines()
    assert said[0] == f"wrote 4 answers to {tmp_path / 'a.csv'}"
    assert len(said) == 2 and "left out 2 saved predictions without a review" in said[1]
    assert f"coinflip rescore {run}" in said[1]
    reviews.write_text("not a review\n" * 6)
    done = run_cli("answers", str(run), "--format", "jsonl", "--out", "-")
    assert done.returncode == 0 and done.stdout == ""
    assert "left out 6 saved predictions without a review" in done.stderr


def test_answers_of_a_run_resumed_with_a_smaller_limit_leave_out_nothing_it_asks(tmp_path: Path) -> None:
    """The predictions of questions a smaller --limit dropped are not the run's: nothing is said of them."""
    assert run_cli("eval", "--model", "oracle", "--limit", "8", "--work-dir", str(tmp_path)).returncode == 0
    run = only_run_dir(tmp_path)
    assert run_cli("eval", "--use-cache", str(run), "--limit", "4").returncode == 0
    done = run_cli("answers", str(run))
    assert done.returncode == 0 and done.stderr == f"wrote 4 answers to {run / 'answers.csv'}\n"


@pytest.mark.parametrize("part", ["reviews", "predictions"])
def test_answers_of_a_sparse_terabyte_is_one_line_not_a_long_read(tmp_path: Path, part: str) -> None:
    """A run directory is untrusted: rescore and the index read at most ROWS_LIMIT of a rows file, `answers`
    read any size (a sparse file of a terabyte takes no disk and hours to read)."""
    done = run_cli("eval", "--model", "oracle", "--limit", "3", "--no-html", "--work-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    run = only_run_dir(tmp_path)
    rows = run / part / "oracle/coin_flip.jsonl"
    os.truncate(rows, 1 << 40)
    result = run_cli("answers", str(run))
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert f"{rows}: 1,099,511,627,776 bytes, more than the" in result.stderr and "Traceback" not in result.stderr
    assert not (run / "answers.csv").exists()
    told = run_cli("answers", str(run), "--out", "-")  # not even the CSV header before the refusal
    assert told.returncode == 2 and told.stdout == "" and len(told.stderr.strip().splitlines()) == 1, told


@pytest.mark.parametrize("which", ["predictions", "reviews"])
def test_a_fifo_in_place_of_a_run_file_is_named_not_called_missing(tmp_path: Path, which: str) -> None:
    """answers said "no reviews or predictions to join; coinflip rescore writes them" of a FIFO, while the other
    file was fine and a rescore could not help; rescore itself names it."""
    assert (
        run_cli("eval", "--model", "oracle", "--limit", "4", "--work-dir", str(tmp_path), "--no-timestamp").returncode
        == 0
    )
    path = tmp_path / which / "oracle" / "coin_flip.jsonl"
    path.unlink()
    os.mkfifo(path)
    result = run_cli("answers", str(tmp_path))
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        f"error: {path}: not a plain file (a FIFO, a device or a broken link); coinflip reads only those"
    ]


@pytest.mark.parametrize("command", ["eval", "answers", "stats"])
def test_a_reader_that_stops_reading_changes_no_exit_code(tmp_path: Path, command: str) -> None:
    """`coinflip eval ... | head -c 1`: click's own handling of the closed pipe exited 1 ("incomplete") with nothing
    said, after a complete run, and before its index.html; the work now goes on and its exit code is the work's."""
    run = tmp_path / "w"
    args = ["eval", "--model", "oracle", "--limit", "300", "--work-dir", str(run)]
    if command != "eval":
        assert run_cli(*args).returncode == 0
        args = ["answers", str(only_run_dir(run)), "--out", "-"] if command == "answers" else ["stats"]
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first byte
    try:
        done = subprocess.run([sys.executable, "-m", "coinflip", *args], stdout=write, stderr=subprocess.PIPE,
                              text=True, timeout=300)  # fmt: skip
    finally:
        os.close(write)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert (run / "index.html").exists() or command == "stats"


def test_a_reader_of_both_streams_that_stops_reading_changes_no_exit_code(tmp_path: Path) -> None:
    """`coinflip eval ... 2>&1 | head -1`: a note on stderr met the closed pipe and the run ended there, exit 1."""
    read, write = os.pipe()
    os.close(read)
    try:
        args = ["eval", "--model", "oracle", "--limit", "5", "--price-output", "1", "--work-dir", str(tmp_path)]
        done = subprocess.run([sys.executable, "-m", "coinflip", *args], stdout=write, stderr=write, timeout=300)
    finally:
        os.close(write)
    assert done.returncode == 0
    assert json.loads((only_run_dir(tmp_path) / "reports/oracle/coin_flip.json").read_text())["complete"]


def test_a_full_disk_under_stderr_changes_no_exit_code(tmp_path: Path) -> None:
    """`2>/dev/full`: a note on stderr raised OSError out of a complete resume (exit 1, a traceback to a stream that
    took none), and a bad setting's one line could not be written either, so it ended 1, not 2."""
    args = ["eval", "--model", "oracle", "--limit", "5", "--no-timestamp", "--work-dir", str(tmp_path)]
    with open("/dev/full", "w") as full:
        assert subprocess.run([sys.executable, "-m", "coinflip", *args], stderr=full, timeout=300).returncode == 0
        wider = [sys.executable, "-m", "coinflip", "eval", "--use-cache", str(tmp_path), "--limit", "8"]
        assert subprocess.run(wider, stdout=subprocess.DEVNULL, stderr=full, timeout=300).returncode == 0
        bad = [sys.executable, "-m", "coinflip", "eval", "--model", "oracle", "--limit", "-3"]
        assert subprocess.run(bad, stderr=full, timeout=300).returncode == 2
    assert json.loads((tmp_path / "reports/oracle/coin_flip.json").read_text())["counts"]["samples"] == 8
