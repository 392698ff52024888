"""Whatever a disk, a user or a saved file sends: one line, the right exit code, nothing finished lost."""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from coinflip.testing.server import FakeOpenAIServer

from .conftest import only_run_dir, read_jsonl, run_cli


@contextlib.contextmanager
def small_disk(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` at `path`; skips where the test may not mount one (see the patched-write test)."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.decode().strip()}); the patched-write test covers it")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def test_disk_full_keeps_what_finished_and_the_run_resumes(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", "600k") as disk:
        result = run_cli("eval", "--model", "oracle", "--work-dir", str(disk), "--no-html")
        assert result.returncode == 1
        line = _one_line(result)
        assert "No space left on device" in line and "coin_flip.jsonl" in line
        run = only_run_dir(disk)
        predictions = run / "predictions/oracle/coin_flip.jsonl"
        text = predictions.read_text()
        assert text.endswith("\n")  # only whole lines: a half-written one was cut
        kept = [json.loads(line) for line in text.splitlines()]
        assert 100 < len(kept) < 3333
        subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)  # room again
        again = run_cli("eval", "--use-cache", str(run))
        assert again.returncode == 0, again.stderr
        rows = read_jsonl(predictions)
        assert len(rows) == 3333 and len({r["id"] for r in rows}) == 3333
        assert {r["id"]: r["reply"] for r in rows if r["id"] in {k["id"] for k in kept}} == {
            k["id"]: k["reply"] for k in kept
        }


def test_a_full_disk_through_a_patched_write_is_one_line_and_resumable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same rule where no tmpfs can be mounted: the writer's OS call fails with ENOSPC."""
    import errno

    from coinflip import jsonl
    from coinflip.errors import StorageError
    from coinflip.run.runner import run_task

    original = jsonl.PredictionWriter.flush
    calls = {"n": 0}

    def flaky_flush(self: jsonl.PredictionWriter) -> None:
        calls["n"] += 1
        if calls["n"] == 3:
            raise jsonl.storage_error(self.path, OSError(errno.ENOSPC, "No space left on device", str(self.path)))
        original(self)

    monkeypatch.setattr(jsonl.PredictionWriter, "flush", flaky_flush)
    with FakeOpenAIServer("correct", latency=0.01) as srv, pytest.raises(StorageError, match="No space left"):
        run_task(model="m", api_url=srv.url, limit=200, eval_batch_size=8, work_dir=str(tmp_path), quiet=True)
    monkeypatch.setattr(jsonl.PredictionWriter, "flush", original)
    run = only_run_dir(tmp_path)
    with FakeOpenAIServer("correct") as srv:
        report = run_task(use_cache=str(run), api_url=srv.url, quiet=True)
    assert report["complete"] and report["counts"]["samples"] == 200


def test_read_only_run_directory_on_rescore_and_resume(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", "16m") as disk:
        done = run_cli("eval", "--model", "oracle", "--limit", "20", "--work-dir", str(disk))
        assert done.returncode == 0
        run = only_run_dir(disk)
        before = (run / "predictions/oracle/coin_flip.jsonl").read_bytes()
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        rescored = run_cli("rescore", str(run))
        resumed = run_cli("eval", "--use-cache", str(run), "--limit", "30")
        for result, code in ((rescored, 2), (resumed, 1)):  # a folder given that cannot be written; a run left
            assert result.returncode == code  # incomplete (its new samples could not be kept)
            assert "Read-only file system" in _one_line(result) and str(run) in _one_line(result)
            assert _one_line(result).endswith("the saved predictions are kept")  # a rescore finished none "so far"
        assert (run / "predictions/oracle/coin_flip.jsonl").read_bytes() == before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--timeout", "nan"], "timeout must be a positive number"),
        (["--timeout", "inf"], "timeout must be a positive number"),
        (["--generation-config", "temperature=NaN"], "not a finite number"),
        (["--generation-config", '{"extra_body": {"x": Infinity}}'], "not a finite number"),
        (["--api-url", "http://bad host/v1"], "no valid host"),
        (["--api-url", "http://"], "no valid host"),
        (["--api-url", "http://[::1/v1"], "not a valid URL"),
        (["--api-url", "http://127.0.0.1:abc/v1"], "not a valid URL"),
        (["--api-url", "http://127.0.0.1:99999/v1"], "not a valid URL"),
        (["--api-url", "http://user:hunter2@127.0.0.1:8000/v1"], "carries credentials"),
        (["--limit", "-1"], "limit must be a count"),
        (["--repeats", "0"], "repeats must be a whole number >= 1"),
        (["--prompt-template", "no placeholder here"], "holding {question}"),
        (["--prompt-template", "{question} {answer}"], "unknown placeholder"),
        (["--eval-type", "llm_ckpt"], "not supported yet"),
    ],
)
def test_bad_options_are_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    result = run_cli("eval", "--model", "m", "--api-url", "http://127.0.0.1:9/v1", *args, "--work-dir", str(tmp_path))
    assert result.returncode == 2
    line = _one_line(result)
    assert message in line
    assert "hunter2" not in result.stderr + result.stdout
    assert not tmp_path.exists() or not any(tmp_path.iterdir())  # nothing was created


def test_bad_data_files_are_one_line(tmp_path: Path) -> None:
    nested = tmp_path / "nested.json"
    nested.write_text("[" * 100_000 + "]" * 100_000)
    huge = tmp_path / "huge.jsonl"
    huge.write_text(
        json.dumps({"question": "Q: A coin is heads up.  Is the coin still heads up?"})[:-1]
        + ', "answer": '
        + "9" * 5000
        + "}\n"
    )
    loop = tmp_path / "loop.jsonl"
    loop.symlink_to(loop)
    tree = tmp_path / "tree"
    (tree / "deep" / "er").mkdir(parents=True)
    (tree / "deep" / "er" / "test.json").write_text("[]")  # an unrelated file far below: never looked at
    for path, message in (
        (nested, "nested too deeply"),
        (huge, "huge.jsonl: line 1"),
        (loop, "loop.jsonl"),
        (tree, "no test.* file"),
    ):
        result = run_cli("eval", "--model", "oracle", "--dataset-path", str(path), "--work-dir", str(tmp_path / "w"))
        assert result.returncode == 2, (path, result.stderr)
        assert message in _one_line(result)


def test_user_text_is_printed_literally_never_as_markup(tmp_path: Path) -> None:
    work = tmp_path / "runs[/b]"
    for name in ("x[/]", "[bold red]pwn"):
        result = run_cli("eval", "--model", "oracle", "--model-id", name, "--limit", "3", "--work-dir", str(work))
        assert result.returncode == 0, result.stderr
        assert f"coin_flip - {name}" in result.stdout and "runs[/b]" in result.stdout
        assert "\x1b[" not in result.stdout


def test_a_very_long_model_name_gets_a_short_path(tmp_path: Path) -> None:
    name = "org/" + "m" * 300
    result = run_cli("eval", "--model", "oracle", "--model-id", name, "--limit", "3", "--work-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    report_file = next(only_run_dir(tmp_path).glob("reports/*/coin_flip.json"))
    assert len(report_file.parent.name) <= 100 and json.loads(report_file.read_text())["model"] == name


def test_rescore_and_resume_survive_odd_saved_data(tmp_path: Path) -> None:
    done = run_cli("eval", "--model", "oracle", "--limit", "8", "--limit-mode", "first", "--work-dir", str(tmp_path))
    assert done.returncode == 0
    run = only_run_dir(tmp_path)
    predictions = run / "predictions/oracle/coin_flip.jsonl"
    rows = read_jsonl(predictions)
    rows[0]["reply"] = 1
    rows[1]["usage"] = {"prompt_tokens": "120", "completion_tokens": [3]}
    rows[2]["latency_s"] = "slow"
    rows[3]["people"] = "many"
    rows[4]["finish_reason"] = {"odd": True}
    text = "".join(json.dumps(r) + "\n" for r in rows)
    text += '{"id": 5, "reply": NaN, "target": "YES", "error": null}\n' + "not json at all\n" + "[1, 2]\n"
    predictions.write_text(text)
    rescored = run_cli("rescore", str(run))
    assert rescored.returncode == 0, rescored.stderr
    report = json.loads((run / "reports/oracle/coin_flip.json").read_text())
    assert report["counts"]["samples"] == 8 and report["counts"]["invalid"] >= 1  # the reply 1 is no answer
    for line in predictions.read_text().splitlines():  # valid JSON Lines, NaN gone
        json.loads(line, parse_constant=lambda c: pytest.fail(f"{c} in the predictions file"))
    resumed = run_cli("eval", "--use-cache", str(run))
    assert resumed.returncode == 0, resumed.stderr


def test_numbers_too_large_for_a_float_in_saved_data_are_not_counted(tmp_path: Path) -> None:
    """An integer of 400 digits is valid JSON and Python reads it whole; float() of it raises, and
    rescore and resume (with --max-cost pricing what is saved) ended in a traceback."""
    prices = ("--price-input", "1", "--price-output", "2")
    done = run_cli("eval", "--model", "oracle", "--limit", "4", *prices, "--work-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    run = only_run_dir(tmp_path)
    predictions = run / "predictions/oracle/coin_flip.jsonl"
    rows, huge = read_jsonl(predictions), 10**400
    rows[0]["usage"] = {"prompt_tokens": huge, "completion_tokens": 7}
    rows[1]["usage"] = {"prompt_tokens": 10, "completion_tokens": huge, "reasoning_tokens": huge}
    rows[2]["latency_s"], rows[2]["ttft_s"] = huge, -huge
    answer = [{"token": "ANSWER: ", "logprob": -0.1, "top": {}}, {"token": "YES", "logprob": -huge, "top": {"NO": -1}}]
    rows[3]["answer_logprobs"] = answer  # math.exp of it raised; the online path reads it as "-inf", impossible
    predictions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for args in (("rescore", str(run)), ("eval", "--use-cache", str(run), "--max-cost", "5")):
        result = run_cli(*args)
        assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    report = json.loads((run / "reports/oracle/coin_flip.json").read_text())
    assert report["tokens"]["prompt"] == 10 and report["tokens"]["completion"] == 7
    assert report["usage"]["latency_s"]["max"] < 1e6
    assert report["calibration"]["impossible_logprobs"] == 1


def test_a_price_of_400_digits_in_a_pricing_file_is_one_line(tmp_path: Path) -> None:
    table = tmp_path / "prices.yaml"
    table.write_text("oracle: {input: " + "9" * 400 + ", output: 1}\n")
    args = ("--limit", "2", "--pricing-file", str(table), "--work-dir", str(tmp_path))
    result = run_cli("eval", "--model", "oracle", *args)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "oracle input must be a number >= 0" in result.stderr


SAVED_EDITS = {  # a hand edit of configs/task_config.yaml: (where, what)
    "repeats as text": (("fingerprint", "repeats"), "abc"),
    "the data set as text": (("fingerprint", "dataset"), "abc"),
    "the data set null": (("fingerprint", "dataset"), None),
    "generation settings as a list": (("fingerprint", "generation_config"), [1]),
    "generation settings null": (("config", "generation_config"), None),
    "the batch discount null": (("config", "batch_discount"), None),
    "provenance as text": (("provenance",), "abc"),
    "a count of 400 digits": (("subset", "count"), 10**400),
}


@pytest.mark.parametrize("edit", SAVED_EDITS)
def test_a_hand_edited_task_config_is_read_as_unknown_or_refused_in_one_line(edit: str, tmp_path: Path) -> None:
    """Each of these ended rescore or resume in a traceback (build_report, the resume's provenance
    and masked-secret checks, the batch discount's check, the summary's number format)."""
    import yaml

    done = run_cli("eval", "--model", "oracle", "--limit", "4", "--work-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    run = only_run_dir(tmp_path)
    path, value = SAVED_EDITS[edit]
    saved_file = run / "configs/task_config.yaml"
    saved = yaml.safe_load(saved_file.read_text())
    section = saved
    for key in path[:-1]:
        section = section[key]
    section[path[-1]] = value
    saved_file.write_text(yaml.safe_dump(saved))
    for args in (("rescore", str(run)), ("eval", "--use-cache", str(run)), ("view", str(tmp_path))):
        result = run_cli(*args)
        assert result.returncode in (0, 2) and "Traceback" not in result.stderr, (args, result.stderr)
        if result.returncode == 2:
            _one_line(result)
