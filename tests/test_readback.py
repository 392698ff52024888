"""Saved state reads back, whatever the user typed: every setting survives the run directory
and reads back equal (or is refused before anything is sent); a saved line that is not a row is
counted and skipped, never fatal; a run folder appears whole; config files are read safely."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coinflip import jsonl
from coinflip._files import ROWS_LIMIT, UnreadableFile
from coinflip.config import SETTINGS_VERSION, TaskConfig
from coinflip.errors import ConfigError, StorageError
from coinflip.jsonl import PredictionIndex, compact_predictions, index_predictions, set_aside, set_aside_lines
from coinflip.run.runner import run_task
from coinflip.rundir import RunDir, load_saved_config
from coinflip.testing.server import FakeOpenAIServer

from .conftest import only_run_dir, read_jsonl, run_cli

# All of Unicode but lone surrogates (bytes that were not UTF-8 are refused at the edge): C0 and
# C1 controls, DEL, U+0092, NEL, U+2028, byte order marks, non-characters, astral planes.
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=30)
SOME_TEXT = TEXT.filter(lambda t: t.strip() != "")
SAVE = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _saved_and_read(tmp_path: Path, config: TaskConfig) -> dict[str, Any]:
    run = RunDir(tmp_path / "run", config.name)
    run.save_config({"config": config.redacted(), "fingerprint": {"k": config.name}, "samples": 1})
    return load_saved_config(run.root)["config"]


@SAVE
@given(
    model=SOME_TEXT,
    model_id=TEXT,
    system_prompt=TEXT,
    prompt_template=TEXT,
    dataset_id=TEXT,
    work_dir=TEXT.filter(lambda t: "\0" not in t and t.strip()),  # an empty path is refused
    stop=st.lists(TEXT.filter(bool), min_size=1, max_size=3),
    kwargs=st.dictionaries(TEXT, TEXT, max_size=3),
)
def test_every_setting_reads_back_equal_from_the_run_directory(tmp_path: Path, **values: Any) -> None:
    stop, kwargs = values.pop("stop"), values.pop("kwargs")
    template = values.pop("prompt_template") + "{question}"
    config = TaskConfig(
        **values,
        dataset_hub="huggingface",  # a dataset_id is a hub's: without one it is refused
        prompt_template=template,
        generation_config={"stop": stop, "chat_template_kwargs": kwargs, "temperature": 0.5},
    )
    read = _saved_and_read(tmp_path, config)
    assert {"version": SETTINGS_VERSION, **read} == config.redacted()  # read as this version reads it
    again = TaskConfig(**{k: v for k, v in read.items() if k not in ("api_key", "dataset_args", "use_cache")})
    assert again.redacted() == config.redacted()  # what a resume builds from it


@pytest.mark.parametrize(
    "flags",
    [
        ["--system-prompt", "Don\u0092t overthink."],
        ["--model-id", "m\x7fodel"],
        ["--prompt-template", "Q\x7f {question}\nA\u0085:"],
        ["--generation-config", json.dumps({"stop": ["\x7f", "\u2028x"]})],
        ["--system-prompt", "\ufeff\x9b2J\ufffe\U0001f600"],
    ],
)
def test_a_run_with_odd_characters_in_its_settings_rescores_and_resumes(tmp_path: Path, flags: list[str]) -> None:
    work = tmp_path / "w\x7fork"
    with FakeOpenAIServer("correct") as srv:
        args = ("--model", "m", "--api-url", srv.url, "--limit", "6", "--limit-mode", "first")
        done = run_cli("eval", *args, *flags, "--work-dir", str(work))
        assert done.returncode == 0, done.stderr
        run = only_run_dir(work)
        predictions = next(run.glob("predictions/*/coin_flip.jsonl"))
        lines = predictions.read_bytes().split(b"\n")  # not str.splitlines: U+0085 and U+2028 split those
        predictions.write_bytes(b"\n".join(lines[:3]) + b"\n")  # half of it lost
        resumed = run_cli("eval", "--use-cache", str(run), "--api-url", srv.url)
        assert resumed.returncode == 0, resumed.stderr
    assert predictions.read_bytes().count(b"\n") == 6
    rescored = run_cli("rescore", str(run))
    assert rescored.returncode == 0, rescored.stderr


# --- saved rows ---------------------------------------------------------------------------

NOT_IDS = st.one_of(
    st.just("1e400"), st.just("-1"), st.just("1.0"), st.just("true"), st.just("null"), st.just('"7"'),
    st.just("[1]"), st.just("0.0"), st.just("9" * 5000), st.floats().map(repr),
)  # fmt: skip
GARBAGE = st.one_of(
    NOT_IDS.map(lambda i: f'{{"id": {i}, "target": "YES", "reply": "ANSWER: YES", "error": null}}'),
    NOT_IDS.filter(lambda r: r != "null").map(  # a null repeat is repeat 0
        lambda r: f'{{"id": 1, "repeat": {r}, "target": "YES", "reply": "x", "error": null}}'
    ),
    st.binary(max_size=40)
    .map(lambda b: b.replace(b"\n", b" ").decode("latin-1"))
    .filter(
        lambda t: t.encode().strip()  # a blank line is no line to keep
    ),
    st.just("[" * 5000 + "]" * 5000),
    st.just('{"id": NaN}'),
    st.just("[1, 2]"),
)


def _row(i: int) -> str:
    return json.dumps({"id": i, "repeat": 0, "target": "YES", "reply": "ANSWER: YES", "error": None})


@pytest.mark.usefixtures("no_old_garbage")
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 5), GARBAGE), max_size=6))
def test_lines_that_are_not_rows_are_counted_and_skipped(tmp_path: Path, inserted: list[tuple[int, str]]) -> None:
    lines = [_row(i) for i in range(5)]
    for where, junk in sorted(inserted, reverse=True):
        lines.insert(where, junk)
    path = tmp_path / "p.jsonl"
    path.write_bytes(("\n".join(lines) + "\n").encode("utf-8", "surrogatepass"))
    index = index_predictions(path)
    assert sorted(index.where) == [i * 4096 for i in range(5)]
    assert index.unreadable == len(inserted) and isinstance(index, PredictionIndex)
    before = path.read_bytes().splitlines(keepends=True)
    compacted = compact_predictions(path)  # the rows in order; every other line moved aside as it was
    after = path.read_bytes().splitlines(keepends=True)
    aside = set_aside(path).read_bytes().splitlines(keepends=True) if inserted else []
    assert after == [f"{_row(i)}\n".encode() for i in range(5)] and sorted(after + aside) == sorted(before)
    assert compacted == index_predictions(path) and set_aside_lines(path) == len(inserted)
    set_aside(path).unlink(missing_ok=True)


def test_a_row_with_an_impossible_id_is_skipped_reported_and_asked_again(tmp_path: Path) -> None:
    args = ("--model", "oracle", "--limit", "6", "--limit-mode", "first")
    assert run_cli("eval", *args, "--work-dir", str(tmp_path)).returncode == 0
    run = only_run_dir(tmp_path)
    predictions = run / "predictions/oracle/coin_flip.jsonl"
    text = predictions.read_text()
    first = text.splitlines()[0]
    assert json.loads(first)["id"] == 0
    predictions.write_text(text.replace(first, re.sub(r'^\{"id":\s*0,', '{"id": 1e400,', first), 1))
    edited = predictions.read_text().splitlines()[0]
    for _ in range(2):  # a rescore erases nothing it cannot read, and the next one still counts it
        rescored = run_cli("rescore", str(run))
        assert rescored.returncode == 1 and "Traceback" not in rescored.stderr, rescored.stderr  # incomplete
        report = json.loads((run / "reports/oracle/coin_flip.json").read_text())
        assert report["unreadable_rows"] == 1 and any("could not be read" in w for w in report["warnings"])
        assert set_aside(predictions).read_text().splitlines() == [edited]  # moved aside, as it was
        assert edited not in predictions.read_text()
    resumed = run_cli("eval", "--use-cache", str(run))
    assert resumed.returncode == 0, resumed.stderr
    rows = [json.loads(line) for line in predictions.read_text().splitlines()]
    assert [r["id"] for r in rows] == list(range(6))  # the sample was asked again, in order
    assert set_aside(predictions).read_text().splitlines() == [edited]
    report = json.loads((run / "reports/oracle/coin_flip.json").read_text())
    assert report["complete"] and report["unreadable_rows"] == 1


# --- hand-edited saved values ---------------------------------------------------------------

WRONG = {
    "seed": st.one_of(TEXT, st.floats(), st.lists(st.integers(), max_size=2), st.integers(max_value=-1)),
    "repeats": st.one_of(TEXT, st.integers(max_value=0), st.integers(min_value=4097)),
    "timeout": st.one_of(TEXT, st.just(float("nan")), st.floats(max_value=0), st.booleans()),
    "metric_compat": TEXT.filter(lambda t: t not in ("coinflip", "evalscope")),
    "html_report": st.one_of(TEXT, st.integers()),
    "generation_config": st.one_of(st.integers(), st.just({"temperature": "hot"}), st.just({"bogus": 1})),
    "model_id": st.one_of(st.integers(), st.lists(TEXT, max_size=2)),
    "version": st.one_of(TEXT, st.integers(min_value=SETTINGS_VERSION + 1), st.integers(max_value=0), st.floats()),
}


@SAVE
@given(st.sampled_from(sorted(WRONG)).flatmap(lambda k: st.tuples(st.just(k), WRONG[k])))
def test_hand_edited_saved_values_are_checked_as_typed_ones(tmp_path: Path, edit: tuple[str, Any]) -> None:
    key, value = edit
    run = RunDir(tmp_path / "run", "m")
    run.save_config({"config": {**TaskConfig(model="m").redacted(), key: value}, "fingerprint": {}, "samples": 1})
    with pytest.raises(ConfigError) as caught:
        load_saved_config(run.root)
    message = str(caught.value)
    assert "task_config.yaml" in message and "\n" not in message.strip()


def test_a_hand_edited_seed_is_one_line_in_rescore_and_resume(tmp_path: Path) -> None:
    assert run_cli("eval", "--model", "oracle", "--limit", "4", "--work-dir", str(tmp_path)).returncode == 0
    run = only_run_dir(tmp_path)
    saved = run / "configs/task_config.yaml"
    saved.write_text(saved.read_text().replace("seed: 42", 'seed: "abc"'))
    for args in (["rescore", str(run)], ["eval", "--use-cache", str(run)]):
        result = run_cli(*args)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1 and "seed must be a whole number" in lines[0], result.stderr


# --- a run folder appears whole ---------------------------------------------------------------

KILL_AT = """
import os, sys
import coinflip.rundir as rundir
original = rundir.RunDir.{method}
def killed(self, *args, **kwargs):
    {before}
    os.kill(os.getpid(), 9)
rundir.RunDir.{method} = killed
from coinflip.cli import main
main(sys.argv[1:])
"""


@pytest.mark.parametrize(
    ("method", "before"),
    [("save_config", "pass"), ("save_subset", "pass"), ("save_subset", "original(self, *args, **kwargs)")],
)
def test_a_kill_while_a_run_folder_is_made_leaves_no_half_run(tmp_path: Path, method: str, before: str) -> None:
    work = tmp_path / "w"
    code = KILL_AT.format(method=method, before=before)
    args = ["eval", "--model", "oracle", "--limit", "5", "--work-dir", str(work)]
    killed = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300)
    assert killed.returncode == -9, killed.stderr
    assert [p.name for p in work.iterdir() if not p.name.startswith(".")] == []  # nothing a user would resume
    view = run_cli("view", str(work))
    assert (
        view.returncode == 0
        and "0 runs on 0 data sets (0 incomplete); also 0 incomplete without a report, 0 broken, 0 foreign"
        in view.stderr
    )
    again = run_cli(*args)
    assert again.returncode == 0, again.stderr
    (run,) = work.glob("2*")  # the killed one left at most a hidden draft
    assert run_cli("eval", "--use-cache", str(run)).returncode == 0


HOLD_DRAFT = """
import sys
from pathlib import Path
from coinflip.rundir import RunDir
run = RunDir.create(Path(sys.argv[1]), "m")
print(run.root.name, flush=True)
sys.stdin.readline()  # still filling its draft, until the test lets it go
"""


def test_the_next_run_removes_a_killed_run_s_draft_and_never_a_live_one(tmp_path: Path) -> None:
    work = tmp_path / "w"
    args = ["eval", "--model", "oracle", "--limit", "5", "--work-dir", str(work)]
    code = KILL_AT.format(method="save_subset", before="original(self, *args, **kwargs)")
    for _ in range(2):
        killed = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300)
        assert killed.returncode == -9, killed.stderr
    lost, recent = sorted(work.glob(".*.new"))  # two drafts whose makers were killed
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_DRAFT, str(work)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdin is not None
        live = work / holder.stdout.readline().strip()
        an_hour_ago = time.time() - 3600
        for draft in (lost, live):  # as old as a draft left an hour ago
            os.utime(draft, (an_hour_ago, an_hour_ago))
        view = run_cli("view", str(work))
        again = run_cli(*args)
        left = sorted(work.glob(".*.new"))
    finally:
        if holder.stdin is not None:
            holder.stdin.close()
        holder.wait(60)
    assert view.returncode == 0 and ".new" not in view.stdout + view.stderr
    assert (
        "0 runs on 0 data sets (0 incomplete); also 0 incomplete without a report, 0 broken, 0 foreign" in view.stderr
    )
    assert again.returncode == 0, again.stderr
    # the lost one is gone; a live maker's is kept however old, and a recent one (its maker may be
    # between making it and locking it) until it is a minute old
    assert left == sorted([recent, live]) and live.is_dir()
    assert len(list(work.glob("2*"))) == 1 and ".new" not in (work / "index.html").read_text()


def test_a_user_s_own_hidden_folder_named_like_a_draft_is_never_removed(tmp_path: Path) -> None:
    """A folder that merely looks like a draft (`.STAMP.anything.new`), with no lock file because
    coinflip never made it, was removed with its files by the next new run in the work directory."""
    work = tmp_path / "w"
    mine = [work / ".20240101_120000.my-notes.new", work / ".20240101_120000.abcdefgh.new"]
    killed = work / ".20240101_120000.k1ll3d_x.new"  # what a maker killed before its lock leaves
    for folder in mine:
        (folder / "configs").mkdir(parents=True)
        (folder / "thesis.txt").write_text("mine")
    (killed / "configs").mkdir(parents=True)
    an_hour_ago = time.time() - 3600
    for folder in (*mine, killed):
        os.utime(folder, (an_hour_ago, an_hour_ago))
    result = run_cli("eval", "--model", "oracle", "--limit", "2", "--work-dir", str(work))
    assert result.returncode == 0, result.stderr
    assert all((folder / "thesis.txt").read_text() == "mine" for folder in mine)
    assert not killed.exists()


# --- config files -----------------------------------------------------------------------------


def test_a_yaml_alias_bomb_fails_fast(tmp_path: Path) -> None:
    bomb = ["model: oracle", 'a: &a ["x","x","x","x","x","x","x","x","x"]']
    for i in range(9):
        name, before = chr(98 + i), chr(97 + i)
        bomb.append(f"{name}: &{name} [*{before},*{before},*{before},*{before}]")
    bomb.append("judge: {x: *j}")
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(bomb) + "\n")
    assert path.stat().st_size < 1024
    with pytest.raises(ConfigError, match="aliases") as caught:
        run_task(str(path))
    assert "\n" not in str(caught.value)


def test_a_yaml_bomb_given_as_a_dict_fails_fast() -> None:
    part: list[Any] = ["x"] * 9
    for _ in range(30):
        part = [part] * 9
    with pytest.raises(ConfigError, match="uses a part twice"):
        TaskConfig(model="oracle", judge={"x": part})


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-8-sig"])
def test_a_config_file_with_a_byte_order_mark_is_read(tmp_path: Path, encoding: str) -> None:
    path = tmp_path / "task.yaml"
    text = 'model: oracle\nlimit: 3\nsystem_prompt: "Don\\u0092t \u00e9 \U0001f600"\n'
    bom = {"utf-16-le": b"\xff\xfe", "utf-16-be": b"\xfe\xff"}.get(encoding, b"")
    path.write_bytes(bom + text.encode(encoding))
    from coinflip.config.files import read_file

    assert read_file(path) == {"model": "oracle", "limit": 3, "system_prompt": "Don\u0092t \u00e9 \U0001f600"}


def test_a_config_file_in_another_encoding_without_a_mark_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "task.yaml"
    path.write_bytes("model: oracle\n".encode("utf-16-le"))
    with pytest.raises(ConfigError, match="save it as UTF-8") as caught:
        run_task(str(path))
    assert "\n" not in str(caught.value)


NO_LOCKS = """
import errno, fcntl, sys
def flock(*args):
    raise OSError(errno.ENOLCK, "No locks available")  # what some NFS mounts answer
fcntl.flock = flock
from coinflip.cli import main
sys.argv = ["coinflip", *sys.argv[1:]]
main()
"""


def test_a_file_system_without_locks_runs_and_resumes_and_clears_drafts_by_age(tmp_path: Path) -> None:
    """flock answering ENOLCK (some NFS mounts) refused every new run with exit 2; now a run there
    goes as on a system without advisory locks, and a lost draft is known by its age alone (a day)."""
    work = tmp_path / "w"
    day_old, hour_old = work / ".20240101_120000.aaaaaaaa.new", work / ".20240101_130000.bbbbbbbb.new"
    for draft, age in ((day_old, 2 * 86400), (hour_old, 3600)):
        (draft / "configs").mkdir(parents=True)
        (draft / "configs" / "run.lock").touch()
        os.utime(draft, (time.time() - age, time.time() - age))

    def unlocked(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", NO_LOCKS, *args], capture_output=True, text=True, timeout=300)

    first = unlocked("eval", "--model", "oracle", "--limit", "4", "--work-dir", str(work))
    assert first.returncode == 0, first.stderr
    assert not day_old.exists() and hour_old.is_dir()
    (run,) = work.glob("2*")
    again = unlocked("eval", "--use-cache", str(run))
    assert again.returncode == 0, again.stderr
    assert len(read_jsonl(next((run / "predictions").rglob("*.jsonl")))) == 4


@pytest.mark.parametrize("junk", [b"\xff\xfe", b"\xc3", b"\xc0\xaf"])  # not UTF-8
def test_a_saved_line_with_bytes_that_are_not_utf8_is_counted_and_skipped(tmp_path: Path, junk: bytes) -> None:
    lines = [_row(i).encode() for i in range(3)]
    lines[1] = lines[1].replace(b"ANSWER", junk + b"ANSWER")
    path = tmp_path / "p.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    index = index_predictions(path)
    assert sorted(index.where) == [0, 2 * 4096] and index.unreadable == 1


def test_a_run_whose_saved_lines_are_not_utf8_rescores_answers_and_resumes(tmp_path: Path) -> None:
    args = ("--model", "oracle", "--limit", "6", "--limit-mode", "first")
    assert run_cli("eval", *args, "--work-dir", str(tmp_path)).returncode == 0
    run = only_run_dir(tmp_path)
    for name in ("predictions", "reviews"):
        path = run / f"{name}/oracle/coin_flip.jsonl"
        path.write_bytes(path.read_bytes().replace(b'"YES"', b'"YES\xff"', 1))
    for command in (("rescore", str(run)), ("answers", str(run))):
        done = run_cli(*command)
        assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr
    resumed = run_cli("eval", "--use-cache", str(run))
    assert resumed.returncode == 0 and "Traceback" not in resumed.stderr, resumed.stderr
    assert json.loads((run / "reports/oracle/coin_flip.json").read_text())["complete"]


@pytest.mark.parametrize(
    "edit",
    [
        ("samples: 6", "samples: 18446744073709551616"),
        ("count: 6", "count: -5"),
        ("of: 3333", "of: 10000000000000000000000"),
    ],
)
def test_hand_edited_counts_beyond_any_run_are_one_line(tmp_path: Path, edit: tuple[str, str]) -> None:
    """A count no run can hold read as one: 18446744073709551610 samples 'never run', or a subset of -5."""
    args = ("--model", "oracle", "--limit", "6")
    assert run_cli("eval", *args, "--work-dir", str(tmp_path)).returncode == 0
    run = only_run_dir(tmp_path)
    config = run / "configs/task_config.yaml"
    text = config.read_text()
    assert f"\n{edit[0]}\n" in text or f"  {edit[0]}\n" in text, text
    config.write_text(text.replace(edit[0] + "\n", edit[1] + "\n", 1))
    for command in (("rescore", str(run)), ("eval", "--use-cache", str(run))):
        done = run_cli(*command)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and str(config) in lines[0], done.stderr


def test_a_rewrite_that_fails_takes_back_the_lines_it_moved_aside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lines were moved aside before the rewrite: each failed try (a full disk, a read-only folder) moved them
    again, and the report counted them once per try."""
    path = tmp_path / "p.jsonl"
    path.write_text(f"{_row(1)}\nnot a row\n{_row(0)}\n")
    real = jsonl.replacing

    @contextlib.contextmanager
    def full(target: Path) -> Iterator[Any]:
        raise jsonl.storage_error(target, OSError(errno.ENOSPC, "No space left on device"))
        yield

    monkeypatch.setattr(jsonl, "replacing", full)
    for _ in range(3):
        with pytest.raises(StorageError):
            compact_predictions(path)
    assert set_aside_lines(path) == 0 and "not a row" in path.read_text()
    monkeypatch.setattr(jsonl, "replacing", real)
    compact_predictions(path)
    assert set_aside_lines(path) == 1 and path.read_text() == f"{_row(0)}\n{_row(1)}\n"


def test_the_lines_moved_aside_are_read_as_the_predictions_are(tmp_path: Path) -> None:
    """The count followed a link out of the run (it counted /etc/passwd's lines) and read a line whole, of any
    size; a FIFO there was a full disk's exit 1."""
    path = tmp_path / "run" / "p.jsonl"
    path.parent.mkdir()
    path.write_text(f"{_row(1)}\nnot a row\n{_row(0)}\n")
    outside = tmp_path / "elsewhere.txt"
    outside.write_text("a\nb\nc\n")
    set_aside(path).symlink_to(outside)
    with pytest.raises(UnreadableFile):
        set_aside_lines(path)
    with pytest.raises(UnreadableFile):
        compact_predictions(path)  # nothing written through the link
    assert outside.read_text() == "a\nb\nc\n" and "not a row" in path.read_text()
    set_aside(path).unlink()
    os.mkfifo(set_aside(path))
    with pytest.raises(UnreadableFile):
        compact_predictions(path)
    set_aside(path).unlink()
    with set_aside(path).open("wb") as sparse:
        sparse.truncate(ROWS_LIMIT + 1)
    with pytest.raises(UnreadableFile):
        set_aside_lines(path)


def test_a_move_aside_that_fails_leaves_the_file_aside_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk while the lines were moved left half a line aside, which the next try moved again after it; a
    hand note without its newline had the first line moved glued to it."""
    path = tmp_path / "p.jsonl"
    path.write_text(f"{_row(1)}\nnot a row\nnor this\n{_row(0)}\n")
    set_aside(path).write_text("a note of mine")
    real, calls = jsonl._line_at, []

    def failing(src: Any, offset: int) -> bytes:
        calls.append(offset)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(src, offset)

    monkeypatch.setattr(jsonl, "_line_at", failing)
    with pytest.raises(StorageError, match="unreadable.txt"):
        compact_predictions(path)
    assert set_aside(path).read_text() == "a note of mine" and "nor this" in path.read_text()
    monkeypatch.setattr(jsonl, "_line_at", real)
    compact_predictions(path)
    assert set_aside(path).read_text() == "a note of mine\nnot a row\nnor this\n" and set_aside_lines(path) == 3
