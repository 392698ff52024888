"""The offline round trip's own files: `--batch-write FILE` and `--batch-results FILE` against a run directory,
with real processes and real files."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest

from .conftest import only_run_dir, read_jsonl, run_cli
from .test_batch import _ok, _written_offline


def _files(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


def _partly_answered(tmp_path: Path) -> Path:
    """A run of 5 written for `vllm run-batch`, 2 of them answered from a result file: 3 owed."""
    run = _written_offline(tmp_path)
    ids = [line["custom_id"] for line in read_jsonl(tmp_path / "requests.jsonl")]
    (tmp_path / "results.jsonl").write_bytes(b"".join(_ok(c, "ANSWER: YES") for c in ids[:2]))
    scored = run_cli("eval", "--use-cache", str(run), "--batch-results", str(tmp_path / "results.jsonl"))
    assert scored.returncode == 1 and len(read_jsonl(run / "predictions/m/coin_flip.jsonl")) == 2, scored.stderr
    return run


@pytest.mark.parametrize(
    "target", ["predictions", "settings", "a link to them", "a linked folder", "via ..", "a hard link"]
)
def test_a_request_file_inside_the_run_is_refused_before_anything_changes(tmp_path: Path, target: str) -> None:
    """`--batch-write RUN/predictions/m/coin_flip.jsonl` (or the settings, or a path that resolves there) wrote the
    requests over the run's own file: its answers or settings were lost, the run neither resumable nor rescorable."""
    run = _partly_answered(tmp_path)
    own = {
        "predictions": run / "predictions/m/coin_flip.jsonl",
        "settings": run / "configs/task_config.yaml",
        "a link to them": tmp_path / "link.jsonl",
        "a linked folder": tmp_path / "linked/configs/subset.json",
        "via ..": run / "logs/../predictions/m/../m/coin_flip.jsonl",
        "a hard link": tmp_path / "hard.jsonl",
    }[target]
    (tmp_path / "link.jsonl").symlink_to(run / "predictions/m/coin_flip.jsonl")
    os.link(run / "predictions/m/coin_flip.jsonl", tmp_path / "hard.jsonl")  # the same file, from outside the run
    (tmp_path / "linked").symlink_to(run, target_is_directory=True)
    before = _files(run)
    refused = run_cli("eval", "--use-cache", str(run), "--batch-write", str(own))
    assert refused.returncode == 2 and "--batch-write" in refused.stderr and str(run) in refused.stderr, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "Traceback" not in refused.stderr
    assert _files(run) == before
    elsewhere = tmp_path / "owed.jsonl"
    wrote = run_cli("eval", "--use-cache", str(run), "--batch-write", str(elsewhere))
    assert wrote.returncode == 0 and len(read_jsonl(elsewhere)) == 3, wrote.stderr
    assert run_cli("rescore", str(run)).returncode == 1  # incomplete, and scored


def test_a_request_file_over_a_new_run_s_settings_is_refused(tmp_path: Path) -> None:
    """With --no-timestamp the run's folder is known beforehand: the requests were written over its settings."""
    work = tmp_path / "work"
    refused = run_cli("eval", "--model", "m", "--limit", "3", "--no-timestamp", "--work-dir", str(work),
                      "--batch-write", str(work / "configs/task_config.yaml"))  # fmt: skip
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert not (work / "configs/task_config.yaml").exists()
    wrote = run_cli("eval", "--model", "m", "--limit", "3", "--no-timestamp", "--work-dir", str(work),
                    "--batch-write", str(tmp_path / "requests.jsonl"))  # fmt: skip
    assert wrote.returncode == 0 and len(read_jsonl(tmp_path / "requests.jsonl")) == 3, wrote.stderr
    assert only_run_dir(tmp_path) == work


def test_an_incomplete_result_file_s_last_line_gives_the_offline_command_that_writes_the_rest(tmp_path: Path) -> None:
    """Its note said to write the rest with --batch-write, its last line 'resume with: coinflip eval --use-cache RUN',
    which goes online (here: refused, as the run has no --api-url)."""
    run = _written_offline(tmp_path)
    ids = [line["custom_id"] for line in read_jsonl(tmp_path / "requests.jsonl")]
    (tmp_path / "results.jsonl").write_bytes(b"".join(_ok(c, "ANSWER: YES") for c in ids[:2]))
    key = {"OPENAI_API_KEY": "sk-of9"}  # a key in the environment: saved as given (masked), needed by no request file
    scored = run_cli("eval", "--use-cache", str(run), "--batch-results", "results.jsonl", cwd=tmp_path, env=key)
    assert scored.returncode == 1 and "3 requests still owed (write them with --batch-write)" in scored.stderr
    last = scored.stderr.strip().splitlines()[-1]
    assert last.startswith("resume with: coinflip eval") and "--batch-write" in last, scored.stderr
    assert "API key" not in last
    command = shlex.split(last.removeprefix("resume with: "))
    assert "results.jsonl" not in command  # never written over the file just read
    wrote = run_cli(*command[1:], cwd=tmp_path)
    assert wrote.returncode == 0 and (tmp_path / "results.jsonl").read_bytes(), wrote.stderr
    assert sorted(line["custom_id"] for line in read_jsonl(tmp_path / command[-1])) == sorted(ids[2:])


def test_the_offline_command_printed_inside_the_run_directory_works_pasted_there(tmp_path: Path) -> None:
    """Run from inside the run directory (`--use-cache ..` from its configs), its last line said '--batch-write
    owed.jsonl', which, pasted where it was printed, was refused (exit 2): a request file in the run directory."""
    run = _written_offline(tmp_path)
    ids = [line["custom_id"] for line in read_jsonl(tmp_path / "requests.jsonl")]
    (tmp_path / "results.jsonl").write_bytes(b"".join(_ok(c, "ANSWER: YES") for c in ids[:2]))
    scored = run_cli(
        "eval", "--use-cache", "..", "--batch-results", str(tmp_path / "results.jsonl"), cwd=run / "configs"
    )
    last = scored.stderr.strip().splitlines()[-1]
    assert scored.returncode == 1 and last.startswith("resume with: coinflip eval"), scored.stderr
    command = shlex.split(last.removeprefix("resume with: "))
    wrote = run_cli(*command[1:], cwd=run / "configs")
    assert wrote.returncode == 0, wrote.stderr
    owed = [p for p in tmp_path.rglob("owed*.jsonl") if not p.is_relative_to(run)]
    assert [sorted(line["custom_id"] for line in read_jsonl(p)) for p in owed] == [sorted(ids[2:])]


@pytest.mark.parametrize("where", ["a folder", "no such folder"])
def test_a_request_file_that_cannot_be_written_is_refused_before_the_run_is_made_or_changed(
    tmp_path: Path, where: str
) -> None:
    """A fresh run exited 1 (incomplete) and left a run directory behind for a typo in --batch-write's folder."""
    path = tmp_path / "requests.jsonl" if where == "a folder" else tmp_path / "missing/requests.jsonl"
    if where == "a folder":
        path.mkdir()
    fresh = run_cli("eval", "--model", "m", "--limit", "3", "--batch-write", str(path),
                    "--work-dir", str(tmp_path / "w"))  # fmt: skip
    line = fresh.stderr.strip()
    assert fresh.returncode == 2 and len(line.splitlines()) == 1 and str(path) in line, fresh.stderr
    assert not (tmp_path / "w").exists() or not any((tmp_path / "w").iterdir())
    (tmp_path / "old").mkdir()
    run = _partly_answered(tmp_path / "old")
    before = _files(run)
    resumed = run_cli("eval", "--use-cache", str(run), "--batch-write", str(path))
    line = resumed.stderr.strip()
    assert resumed.returncode == 2 and len(line.splitlines()) == 1 and str(path) in line, resumed.stderr
    assert _files(run) == before


def _named(custom_id: str, model: str) -> bytes:
    """A result line whose body names the model that answered, as `vllm run-batch` and the Batch API write it."""
    body = {"model": model, "choices": [{"index": 0, "message": {"content": "ANSWER: NO"}, "finish_reason": "stop"}]}
    return json.dumps({"custom_id": custom_id, "response": {"status_code": 200, "body": body}}).encode() + b"\n"


def test_a_result_file_of_another_model_is_refused_before_anything_is_recorded(tmp_path: Path) -> None:
    """Another run's results (the same questions, the same custom_ids, another model) were scored as this run's."""
    run = _written_offline(tmp_path)
    ids = [line["custom_id"] for line in read_jsonl(tmp_path / "requests.jsonl")]
    results = tmp_path / "results.jsonl"
    results.write_bytes(b"".join(_named(c, "Qwen/Qwen2.5-7B-Instruct") for c in ids))
    refused = run_cli("eval", "--use-cache", str(run), "--batch-results", str(results))
    line = refused.stderr.strip()
    assert refused.returncode == 2 and len(line.splitlines()) == 1 and "Traceback" not in line, refused.stderr
    assert "Qwen/Qwen2.5-7B-Instruct" in line and "model m" in line and str(results) in line
    assert not read_jsonl(run / "predictions/m/coin_flip.jsonl") and not (run / "reports").exists()
    # one line naming the run's model vouches for no other: a file mixing models is refused whole
    results.write_bytes(_named(ids[0], "m") + b"".join(_named(c, "other") for c in ids[1:]))
    mixed = run_cli("eval", "--use-cache", str(run), "--batch-results", str(results))
    assert mixed.returncode == 2 and "'other'" in mixed.stderr, mixed.stderr
    assert not read_jsonl(run / "predictions/m/coin_flip.jsonl")
    # the run's model (a provider's dated snapshot of it counts), or no model named at all: read
    results.write_bytes(_named(ids[0], "m-2024-07-18") + _named(ids[1], "m") + _ok(ids[2], "ANSWER: NO"))
    read = run_cli("eval", "--use-cache", str(run), "--batch-results", str(results))
    assert read.returncode == 1 and len(read_jsonl(run / "predictions/m/coin_flip.jsonl")) == 3, read.stderr


def test_request_lines_in_a_result_file_stay_owed_not_failed(tmp_path: Path) -> None:
    """A result file that holds request lines too (the two files joined by mistake): each request line, holding no
    response nor error, was recorded as a failed answer, 'batch: no response', and the note said '5 answers read
    (4 failed)', as c557e1d mended for a file of requests alone."""
    run = _written_offline(tmp_path)
    requests = (tmp_path / "requests.jsonl").read_bytes().splitlines(keepends=True)
    results = tmp_path / "results.jsonl"
    results.write_bytes(_ok(json.loads(requests[0])["custom_id"], "ANSWER: NO") + b"".join(requests[1:]))
    read = run_cli("eval", "--use-cache", str(run), "--batch-results", str(results))
    assert read.returncode == 1 and "1 answers read from" in read.stderr and "4 unreadable" in read.stderr, read.stderr
    assert [r["error"] for r in read_jsonl(run / "predictions/m/coin_flip.jsonl")] == [None]


def test_the_request_file_given_as_the_results_is_refused_before_anything_is_recorded(tmp_path: Path) -> None:
    """`--batch-results requests.jsonl` (run-batch's -i for its -o) recorded each request as a failed answer,
    'batch: no response', and said '5 answers read'."""
    run = _written_offline(tmp_path)
    refused = run_cli("eval", "--use-cache", str(run), "--batch-results", str(tmp_path / "requests.jsonl"))
    line = refused.stderr.strip()
    assert refused.returncode == 2 and len(line.splitlines()) == 1 and "Traceback" not in line, refused.stderr
    assert "no result line" in line and "requests.jsonl" in line
    assert not read_jsonl(run / "predictions/m/coin_flip.jsonl") and not (run / "reports").exists()


def test_a_request_file_over_another_run_s_file_is_refused(tmp_path: Path) -> None:
    """A new run's requests were written over another run's predictions (its answers lost); a new file beside them
    in that run, or anywhere else, is no file of it."""
    (tmp_path / "a").mkdir()
    other = _partly_answered(tmp_path / "a")
    before = _files(other)
    target = other / "predictions/m/coin_flip.jsonl"
    args = ("eval", "--model", "m", "--limit", "3", "--work-dir", str(tmp_path / "b"))
    refused = run_cli(*args, "--batch-write", str(target))
    assert refused.returncode == 2 and str(other) in refused.stderr, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and _files(other) == before
    wrote = run_cli(*args, "--batch-write", str(other / "owed.jsonl"))
    assert wrote.returncode == 0 and len(read_jsonl(other / "owed.jsonl")) == 3, wrote.stderr


def test_answers_from_a_result_file_have_no_latency_rather_than_none_at_all(tmp_path: Path) -> None:
    """`vllm run-batch` answered them elsewhere, at times its file does not give: the summary said "batch
    turnaround median 0.00 s" and the report's latency quantiles were all 0."""
    run = _written_offline(tmp_path)
    ids = [line["custom_id"] for line in read_jsonl(tmp_path / "requests.jsonl")]
    (tmp_path / "results.jsonl").write_bytes(b"".join(_ok(c, "ANSWER: NO") for c in ids))
    scored = run_cli("eval", "--use-cache", str(run), "--batch-results", str(tmp_path / "results.jsonl"))
    assert scored.returncode == 0, scored.stderr
    rows = read_jsonl(run / "predictions/m/coin_flip.jsonl")
    assert len(rows) == 5 and all(r["latency_s"] is None and r["reply"] == "ANSWER: NO" for r in rows)
    report = json.loads((run / "reports/m/coin_flip.json").read_text())
    assert report["usage"]["latency_s"] == {} and report["counts"]["samples"] == 5
    assert "median" not in scored.stdout and "no latency is known" in scored.stdout, scored.stdout
    page = (run / "reports/m/coin_flip.html").read_text()
    assert "none recorded" in page and "no s recorded" not in page  # the latency panel, empty
    rescored = run_cli("rescore", str(run))
    assert rescored.returncode == 0 and "median" not in rescored.stdout, rescored.stdout


def test_a_resume_of_an_offline_run_needs_a_server_only_for_what_it_still_owes(tmp_path: Path) -> None:
    """A plain `--use-cache RUN` of a run answered with --batch-results asked for --api-url, complete or not."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    owing = _partly_answered(tmp_path / "a")
    before = _files(owing)
    for dry in ([], ["--dry-run"]):  # a dry run says what the resume would
        refused = run_cli("eval", "--use-cache", str(owing), *dry)
        assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        assert f"{owing} still owes requests and names no server: give --api-url" in refused.stderr
        assert _files(owing) == before  # refused before its settings were saved again
    run = _written_offline(tmp_path / "b")
    ids = [line["custom_id"] for line in read_jsonl(tmp_path / "b/requests.jsonl")]
    (tmp_path / "results.jsonl").write_bytes(b"".join(_ok(c, "ANSWER: NO") for c in ids))
    assert run_cli("eval", "--use-cache", str(run), "--batch-results", str(tmp_path / "results.jsonl")).returncode == 0
    again = run_cli("eval", "--use-cache", str(run))  # complete: reported again, no server needed
    assert again.returncode == 0 and "f1_score" in again.stdout, again.stderr
    report = json.loads((run / "reports/m/coin_flip.json").read_text())
    assert report["batch"] is True and "no latency is known" in again.stdout  # still told how it was answered
    assert len(read_jsonl(run / "predictions/m/coin_flip.jsonl")) == 5


def test_a_result_file_s_failed_lines_count_as_still_owed(tmp_path: Path) -> None:
    """Its note said '2 requests still owed' beside a failed line, which the next --batch-write writes too."""
    run = _written_offline(tmp_path)
    ids = [line["custom_id"] for line in read_jsonl(tmp_path / "requests.jsonl")]
    failed = {"custom_id": ids[2], "response": {"status_code": 500, "body": {"error": {"message": "boom"}}}}
    lines = b"".join(_ok(c, "ANSWER: YES") for c in ids[:2]) + json.dumps(failed).encode() + b"\n"
    (tmp_path / "results.jsonl").write_bytes(lines)
    scored = run_cli("eval", "--use-cache", str(run), "--batch-results", str(tmp_path / "results.jsonl"))
    assert scored.returncode == 1 and "3 requests still owed (1 of them failed here)" in scored.stderr, scored.stderr
    wrote = run_cli("eval", "--use-cache", str(run), "--batch-write", str(tmp_path / "owed.jsonl"))
    assert wrote.returncode == 0 and "wrote 3 requests" in wrote.stderr, wrote.stderr
    assert sorted(line["custom_id"] for line in read_jsonl(tmp_path / "owed.jsonl")) == sorted(ids[2:])


@pytest.mark.parametrize("results", [b"", b'{"custom_id": "q999999-r0", "response": {"status_code": 500}}\n'])
def test_a_result_file_that_answers_nothing_leaves_the_run_incomplete_in_one_line(
    tmp_path: Path, results: bytes
) -> None:
    """An empty result file, or one that answers only requests the run does not owe: the run ended 'no predictions
    to score' (exit 2, about the run's own file) after the note, as if the settings were wrong; it is incomplete."""
    run = _written_offline(tmp_path)
    (tmp_path / "results.jsonl").write_bytes(results)
    read = run_cli("eval", "--use-cache", str(run), "--batch-results", str(tmp_path / "results.jsonl"))
    last = read.stderr.splitlines()[-1]
    assert read.returncode == 1 and last.startswith("error: no answer came back"), read.stderr
    assert "--batch-write" in last and "Traceback" not in read.stderr


def _billed(custom_id: str, choices: list[str]) -> bytes:
    """A result line the model billed (usage) with `choices` answered: none, a malformed body that still costs."""
    body = {
        "model": "m", "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
        "choices": [{"index": i, "message": {"content": c}, "finish_reason": "stop"} for i, c in enumerate(choices)],
    }  # fmt: skip
    return json.dumps({"custom_id": custom_id, "response": {"status_code": 200, "body": body}}).encode() + b"\n"


def _prompt_tokens(run: Path) -> int:
    return sum(
        (row.get("usage") or {}).get("prompt_tokens", 0) for row in read_jsonl(run / "predictions/m/coin_flip.jsonl")
    )


def test_a_result_line_already_recorded_is_never_counted_again(tmp_path: Path) -> None:
    """A billed line with no answer stays owed, its usage in a failed row; reading the file again (or it with the
    next round's results put after it) added that line's usage once more each time, and the cost with it."""
    run = _written_offline(tmp_path)
    ids = [line["custom_id"] for line in read_jsonl(tmp_path / "requests.jsonl")]
    first = b"".join(_billed(c, ["ANSWER: YES"]) for c in ids[:4]) + _billed(ids[4], [])
    (tmp_path / "results.jsonl").write_bytes(first)
    args = ("eval", "--use-cache", str(run), "--batch-results")
    assert run_cli(*args, str(tmp_path / "results.jsonl")).returncode == 1
    assert _prompt_tokens(run) == 500
    again = run_cli(*args, str(tmp_path / "results.jsonl"))
    assert again.returncode == 1 and "1 recorded before (read once only)" in again.stderr, again.stderr
    assert _prompt_tokens(run) == 500
    (tmp_path / "all.jsonl").write_bytes(first + _billed(ids[4], ["ANSWER: NO"]))  # the next round's, put after
    done = run_cli(*args, str(tmp_path / "all.jsonl"))
    assert done.returncode == 0 and _prompt_tokens(run) == 600, done.stderr  # six lines billed, each once
    report = json.loads((run / "reports/m/coin_flip.json").read_text())
    assert report["tokens"]["prompt"] == 600 and report["counts"]["samples"] == 5


def test_a_draw_a_server_half_answered_is_not_filled_from_the_same_line_again(tmp_path: Path) -> None:
    """n=2 and a server that gave one choice: reading the file again put that one answer in the second row too,
    one billed answer scored as two samples."""
    requests = tmp_path / "requests.jsonl"
    args = ("eval", "--model", "m", "--limit", "3", "--generation-config", "n=2", "--work-dir", str(tmp_path / "o"))
    assert run_cli(*args, "--batch-write", str(requests)).returncode == 0
    run = only_run_dir(tmp_path / "o")
    ids = [line["custom_id"] for line in read_jsonl(requests)]
    (tmp_path / "results.jsonl").write_bytes(b"".join(_billed(c, ["ANSWER: YES"]) for c in ids))
    for _ in range(2):
        read = run_cli("eval", "--use-cache", str(run), "--batch-results", str(tmp_path / "results.jsonl"))
        assert read.returncode == 1, read.stderr
        rows = read_jsonl(run / "predictions/m/coin_flip.jsonl")
        assert sum(row["error"] is None for row in rows) == 3 and _prompt_tokens(run) == 300


def test_another_run_s_answers_under_the_same_ids_are_not_recorded(tmp_path: Path) -> None:
    """The custom_ids (q{id}-r{repeat}) are the same in every run of the questions: run A's results read into run B
    (the same model, other prompts) were recorded as B's answers, exit 0. A request file's ids now carry a hash of
    the body they ask, and an answer to another body is left out, said, and its request stays owed."""
    args = ("eval", "--model", "m", "--limit", "4")
    assert run_cli(*args, "--batch-write", str(tmp_path / "a.jsonl"), "--work-dir", str(tmp_path / "a")).returncode == 0
    b = ("--few-shot-num", "2", "--prompt-template", "direct", "--work-dir", str(tmp_path / "b"))
    assert run_cli(*args, *b, "--batch-write", str(tmp_path / "b.jsonl")).returncode == 0
    run_b = only_run_dir(tmp_path / "b")
    ids = {name: [line["custom_id"] for line in read_jsonl(tmp_path / f"{name}.jsonl")] for name in ("a", "b")}
    assert [i.partition(".")[0] for i in ids["a"]] == [i.partition(".")[0] for i in ids["b"]]
    (tmp_path / "a_results.jsonl").write_bytes(b"".join(_ok(c, "ANSWER: YES") for c in ids["a"]))
    read = run_cli("eval", "--use-cache", str(run_b), "--batch-results", str(tmp_path / "a_results.jsonl"))
    assert read.returncode == 1 and not read_jsonl(run_b / "predictions/m/coin_flip.jsonl"), read.stderr
    assert "4 answering other prompts or settings under an owed request's id" in read.stderr
    (tmp_path / "b_results.jsonl").write_bytes(b"".join(_ok(c, "ANSWER: YES") for c in ids["b"]))
    done = run_cli("eval", "--use-cache", str(run_b), "--batch-results", str(tmp_path / "b_results.jsonl"))
    assert done.returncode == 0 and len(read_jsonl(run_b / "predictions/m/coin_flip.jsonl")) == 4, done.stderr


def test_a_result_file_put_in_twice_is_read_as_once(tmp_path: Path) -> None:
    """`cat res.jsonl res.jsonl`: each answer twice, byte for byte, was a conflict (no answer kept, the usage
    counted twice), and the rows then named the line twice, so the right file could no longer answer them."""
    run = _written_offline(tmp_path)
    ids = [line["custom_id"] for line in read_jsonl(tmp_path / "requests.jsonl")]
    once = b"".join(_billed(c, ["ANSWER: YES"]) for c in ids)
    (tmp_path / "first.jsonl").write_bytes(once.splitlines(keepends=True)[0])  # one answered before
    assert run_cli("eval", "--use-cache", str(run), "--batch-results", str(tmp_path / "first.jsonl")).returncode == 1
    (tmp_path / "twice.jsonl").write_bytes(once + once)
    read = run_cli("eval", "--use-cache", str(run), "--batch-results", str(tmp_path / "twice.jsonl"))
    assert read.returncode == 0 and "0 with two answers); 1 lines for requests not owed now" in read.stderr, read.stderr
    assert _prompt_tokens(run) == 500 and all(
        r["error"] is None for r in read_jsonl(run / "predictions/m/coin_flip.jsonl")
    )


def test_a_file_to_write_or_read_that_cannot_be_is_refused_before_the_run(tmp_path: Path) -> None:
    """--batch-write into a loop of links made the run directory and ended exit 1 ("the run holds no answers
    yet"); --batch-results naming no file on a complete run exited 0 and saved that path, the report then saying
    "batch mode" of an oracle run."""
    (tmp_path / "loop").symlink_to(tmp_path / "pool")
    (tmp_path / "pool").symlink_to(tmp_path / "loop")
    work = tmp_path / "work"
    wrote = run_cli(
        "eval", "--model", "m", "--limit", "3", "--batch-write", str(tmp_path / "loop"), "--work-dir", str(work)
    )
    assert wrote.returncode == 2 and "a loop of links" in wrote.stderr and not work.exists(), wrote.stderr
    assert run_cli("eval", "--model", "oracle", "--limit", "3", "--work-dir", str(work)).returncode == 0
    run, missing = only_run_dir(work), tmp_path / "results.jsonl"
    before = (run / "configs/task_config.yaml").read_bytes()
    read = run_cli("eval", "--use-cache", str(run), "--batch-results", str(missing))
    assert read.returncode == 2 and f"--batch-results {missing}: no such file" in read.stderr, read.stderr
    assert (run / "configs/task_config.yaml").read_bytes() == before and len(read.stderr.splitlines()) == 1
