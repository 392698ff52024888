"""A work directory's contents are untrusted: FIFOs, devices, links out of the tree and huge
sparse files in sibling runs make those runs broken, never hang, bloat, fail or mislabel the
command that reads them (eval's index refresh, view, compare, rescore)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import run_cli

GENEROUS_S = 300  # an outer bound for a wedged process, never a timing assertion


def _good_run(work: Path, name: str, *flags: str) -> Path:
    result = run_cli("eval", "--model", "oracle", "--limit", "6", "--work-dir", str(work / name), "--no-timestamp",
                     *flags, timeout=GENEROUS_S)  # fmt: skip
    assert result.returncode == 0, result.stderr
    return work / name


def _hostile(work: Path, outside: Path) -> dict[str, Path]:
    """Copies of a good run, each with one file or folder replaced by something hostile."""
    template = _good_run(work, "good")
    outside.mkdir()
    (outside / "secret.json").write_text(json.dumps({"metrics": {"accuracy": 1.0}}))
    shutil.copytree(template, outside / "elsewhere-run")
    made = {}

    def copy(name: str) -> Path:
        made[name] = work / name
        shutil.copytree(template, made[name])
        return made[name]

    def replace(path: Path, how: str, target: str = "") -> None:
        path.unlink()
        if how == "fifo":
            os.mkfifo(path)
        elif how == "link":
            path.symlink_to(target)
        else:  # a sparse file of a terabyte: no disk, every byte zero
            with path.open("wb") as handle:
                handle.truncate(1 << 40)

    mine = "oracle/coin_flip"
    replace(copy("zero-reviews") / f"reviews/{mine}.jsonl", "link", "/dev/zero")
    replace(copy("fifo-predictions") / f"predictions/{mine}.jsonl", "fifo")
    replace(copy("fifo-reviews") / f"reviews/{mine}.jsonl", "fifo")
    replace(copy("zero-report") / f"reports/{mine}.json", "link", "/dev/zero")
    replace(copy("fifo-report") / f"reports/{mine}.json", "fifo")
    replace(copy("outside-report") / f"reports/{mine}.json", "link", str(outside / "secret.json"))
    replace(copy("sparse-reviews") / f"reviews/{mine}.jsonl", "sparse")
    replace(copy("sparse-predictions") / f"predictions/{mine}.jsonl", "sparse")
    replace(copy("fifo-config") / "configs/task_config.yaml", "fifo")
    replace(copy("zero-config") / "configs/task_config.yaml", "link", "/dev/zero")
    replace(copy("sparse-config") / "configs/task_config.yaml", "sparse")
    shutil.rmtree(copy("zero-incomplete") / "reports")  # no report: the index counts its predictions
    replace(made["zero-incomplete"] / f"predictions/{mine}.jsonl", "link", "/dev/zero")
    (work / "root-link").symlink_to("/")
    (work / "outside-link").symlink_to(outside)
    (work / "loop").symlink_to(work)
    return made


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, timeout=GENEROUS_S, env={"COLUMNS": "2000"})  # paths printed whole


@pytest.fixture
def hostile(tmp_path: Path) -> tuple[Path, dict[str, Path]]:
    work = tmp_path / "work"
    return work, _hostile(work, tmp_path / "outside")


def _listed(work: Path) -> dict[str, str]:
    """folder -> kind, as the index and compare see the work directory."""
    from coinflip.pages.catalog import scan

    return {found.rel: found.kind for found in scan(work)}


def test_eval_in_a_hostile_work_dir_finishes_its_own_run_intact(hostile: tuple[Path, dict[str, Path]]) -> None:
    work, evil = hostile
    result = _run("eval", "--model", "oracle", "--limit", "5", "--work-dir", str(work))
    assert result.returncode == 0, result.stderr
    assert "stopped" not in result.stderr and "Traceback" not in result.stderr
    mine = max(work.glob("2*"), key=lambda p: p.name)  # the timestamped run this eval made
    report = json.loads((mine / "reports/oracle/coin_flip.json").read_text())
    assert report["complete"] and report["metrics"]["accuracy"] == 1.0
    kinds = _listed(work)
    assert kinds[mine.name] == "run" and kinds["good"] == "run" and (work / "index.html").is_file()
    for name in evil:
        assert kinds.get(name) in ("broken", "incomplete", "foreign", "run"), (name, kinds)
    for name in ("zero-config", "fifo-config", "sparse-config", "zero-report", "fifo-report", "outside-report"):
        assert kinds[name] == "broken", (name, kinds[name])
    assert not any(k.startswith(("root-link/", "outside-link/")) for k in kinds), kinds  # links out are not walked,
    assert kinds["root-link"] == kinds["outside-link"] == "foreign"  # but listed: a run linked in is named itself


def test_view_of_a_hostile_work_dir_lists_the_broken_runs(hostile: tuple[Path, dict[str, Path]]) -> None:
    work, evil = hostile
    result = _run("view", str(work))
    assert result.returncode == 0, result.stderr
    kinds = _listed(work)
    assert kinds["good"] == "run"
    assert kinds["fifo-config"] == "broken" and kinds["zero-report"] == "broken"
    assert "a FIFO" in result.stderr and "a link to outside" in result.stderr, result.stderr


def test_a_probe_report_that_is_a_fifo_or_a_link_out_leaves_the_probe_off_the_index(tmp_path: Path) -> None:
    work = tmp_path / "work"
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"model": "leak", "headline": "read from outside", "complete": True}))
    for name, how in (("fifo", os.mkfifo), ("link", lambda path: path.symlink_to(outside))):
        _good_run(work / name / "runs", "base")
        (work / name / "probe.html").write_text("<p>page</p>")
        how(work / name / "probe.json")
    result = _run("view", str(work))
    assert result.returncode == 0, result.stderr
    page = (work / "index.html").read_text(encoding="utf-8")
    assert "read from outside" not in page and _listed(work)["fifo/runs/base"] == "run"


def test_compare_of_a_hostile_work_dir_compares_what_it_can(
    hostile: tuple[Path, dict[str, Path]], tmp_path: Path
) -> None:
    work, evil = hostile
    second = _good_run(work, "good-too", "--model-id", "oracle-2")
    result = _run("compare", str(work), "--out", str(tmp_path / "cmp"))
    assert result.returncode == 0, result.stderr
    compared = json.loads((tmp_path / "cmp/compare.json").read_text())
    assert "good-too" in json.dumps(compared) and second.exists()
    said = result.stdout + result.stderr
    for name in ("zero-reviews", "sparse-reviews"):  # their verdicts cannot be read: left out, rescore writes them
        assert f"skipped {work / name}: no readable reviews; run `coinflip rescore" in said
    for name, why in (("fifo-predictions", "a FIFO"), ("sparse-predictions", "1,099,511,627,776 bytes")):
        assert f"skipped {work / name}: its predictions cannot be read (rescore needs them too): " in said
        assert f"{work / name}/predictions/oracle/coin_flip.jsonl: {why}" in said


def test_compare_writes_its_own_folder_never_through_a_link_left_at_it(tmp_path: Path) -> None:
    """The work directory's compare/ a link to elsewhere (a work directory someone else wrote): compare's files go
    in a real compare/ folder there, the link's target is left as it was."""
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    _good_run(work, "a")
    _good_run(work, "b", "--model-id", "oracle-2")
    elsewhere.mkdir()
    (work / "compare").symlink_to(elsewhere, target_is_directory=True)
    result = _run("compare", str(work))
    assert result.returncode == 0, result.stderr
    assert not (work / "compare").is_symlink() and (work / "compare/compare.json").is_file()
    assert not any(elsewhere.iterdir())


def test_rescore_beside_hostile_runs_and_of_one(hostile: tuple[Path, dict[str, Path]]) -> None:
    work, evil = hostile
    good = _run("rescore", str(work / "good"))
    assert good.returncode == 0, good.stderr
    assert json.loads((work / "good/reports/oracle/coin_flip.json").read_text())["metrics"]["accuracy"] == 1.0
    for name, message in (
        ("fifo-predictions", "a FIFO, not a plain file"),
        ("zero-config", "a link to outside"),
        ("sparse-config", "more than the"),
        ("fifo-config", "a FIFO, not a plain file"),
    ):
        result = _run("rescore", str(evil[name]))
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1 and message in lines[0], (name, result.stderr)
    for name in ("fifo-reviews", "fifo-report", "zero-reviews", "zero-report"):  # written anew, never through
        result = _run("rescore", str(evil[name]))
        assert result.returncode == 0, (name, result.stderr)
        for part in ("reviews/oracle/coin_flip.jsonl", "reports/oracle/coin_flip.json"):
            written = evil[name] / part
            assert written.is_file() and not written.is_symlink(), written
        assert json.loads((evil[name] / "reports/oracle/coin_flip.json").read_text())["metrics"]["accuracy"] == 1.0


def test_only_plain_files_inside_their_folder_are_opened(tmp_path: Path) -> None:
    from coinflip._files import UnreadableFile, open_regular, read_regular

    (tmp_path / "plain").write_bytes(b"12345")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "zero").symlink_to("/dev/zero")
    for path, within, message in (
        (Path("/dev/zero"), None, "a device, not a plain file"),
        (tmp_path / "fifo", tmp_path, "a FIFO, not a plain file"),
        (tmp_path / "zero", tmp_path, "a link to outside"),
        (tmp_path, None, "a folder"),
        (tmp_path / "plain", None, "more than the 4 read"),
    ):
        with pytest.raises(UnreadableFile, match=message):
            read_regular(path, 4, within)
    with open_regular(tmp_path / "plain", 5, tmp_path) as handle:
        assert handle.read() == b"12345"


@pytest.mark.parametrize("linked", ["reports/oracle", "reports", "reviews/oracle"])
def test_reports_are_never_written_through_a_linked_folder(tmp_path: Path, linked: str) -> None:
    run = _good_run(tmp_path, "run")
    elsewhere = tmp_path / "elsewhere"
    shutil.move(run / linked, elsewhere)  # the folder now lies outside the run, a link in its place
    (run / linked).symlink_to(elsewhere, target_is_directory=True)
    before = {p: p.read_bytes() for p in elsewhere.rglob("*") if p.is_file()}
    result = _run("rescore", str(run))
    assert result.returncode == 0, result.stderr
    assert {p: p.read_bytes() for p in elsewhere.rglob("*") if p.is_file()} == before  # nothing written there
    assert not (run / linked).is_symlink() and (run / linked).is_dir()  # a real folder took the link's place
    report = json.loads((run / "reports/oracle/coin_flip.json").read_text())
    assert report["metrics"]["accuracy"] == 1.0 and (run / "reviews/oracle/coin_flip.jsonl").is_file()


@pytest.mark.parametrize("linked", ["predictions", "predictions/oracle", "predictions/oracle/coin_flip.jsonl"])
def test_predictions_behind_a_link_out_of_the_run_are_refused_never_rewritten(tmp_path: Path, linked: str) -> None:
    """Rescore compacts the predictions and a resume appends to them: through a linked folder that
    rewrote (and added to) the file out there, another run's predictions, say."""
    run = _good_run(tmp_path, "run")
    with (run / "predictions/oracle/coin_flip.jsonl").open("a") as handle:
        handle.write("not a row: compaction would drop this line\n")
    elsewhere = tmp_path / "elsewhere"
    shutil.move(run / linked, elsewhere)
    (run / linked).symlink_to(elsewhere, target_is_directory=elsewhere.is_dir())
    before = {p: p.read_bytes() for p in [elsewhere, *elsewhere.rglob("*")] if p.is_file()}
    for args in (("rescore", str(run)), ("eval", "--use-cache", str(run)), ("answers", str(run))):
        result = _run(*args)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1 and "a link to outside" in lines[0], (args, result.stderr)
    assert {p: p.read_bytes() for p in [elsewhere, *elsewhere.rglob("*")] if p.is_file()} == before


@pytest.mark.parametrize("linked", ["logs", "logs/eval_log.log"])
def test_a_resume_never_writes_its_log_through_a_link(tmp_path: Path, linked: str) -> None:
    run = _good_run(tmp_path, "run")
    elsewhere = tmp_path / "elsewhere"
    shutil.move(run / linked, elsewhere)
    (run / linked).symlink_to(elsewhere, target_is_directory=elsewhere.is_dir())
    before = {p: p.read_bytes() for p in [elsewhere, *elsewhere.rglob("*")] if p.is_file()}
    result = _run("eval", "--use-cache", str(run))
    assert result.returncode == 0, result.stderr
    assert {p: p.read_bytes() for p in [elsewhere, *elsewhere.rglob("*")] if p.is_file()} == before
    log = run / "logs/eval_log.log"
    assert not (run / linked).is_symlink() and log.is_file() and "run " in log.read_text()


@pytest.mark.parametrize("where", ["logs/eval_log.log", "configs/run.lock"])
@pytest.mark.parametrize("what", ["fifo", "link out"])
def test_a_fifo_or_link_at_the_log_or_the_lock_never_hangs_nor_is_used(tmp_path: Path, where: str, what: str) -> None:
    """Both are opened for appending: a FIFO there waited forever for a reader, a link was written or locked."""
    run = _good_run(tmp_path, "run")
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (run / where).unlink(missing_ok=True)
    if what == "fifo":
        os.mkfifo(run / where)
    else:
        (run / where).symlink_to(victim)
    for args in (("rescore", str(run)), ("eval", "--use-cache", str(run))):
        result = run_cli(*args, timeout=60)  # a hang is a TimeoutExpired
        assert result.returncode == 0 and "Traceback" not in result.stderr, (args, result.stderr)
    assert (run / where).is_file() and not (run / where).is_symlink() and victim.read_text() == "keep"


def test_rescore_reads_no_predictions_file_past_its_size_limit(tmp_path: Path) -> None:
    """A sparse file of a terabyte was read to its end (an hour); past 1 GB it is one line, at once."""
    run = _good_run(tmp_path, "run")
    predictions = run / "predictions/oracle/coin_flip.jsonl"
    with predictions.open("r+b") as handle:
        handle.truncate((1 << 30) + 1)  # the rows, then a hole: a file that holds no such bytes on disk
    result = run_cli("rescore", str(run), timeout=GENEROUS_S)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert str(predictions) in lines[0] and "more than" in lines[0], lines


def test_answers_never_joins_reviews_behind_a_link_out_of_the_run(tmp_path: Path) -> None:
    """Another run's verdicts were joined to this run's replies, as if they were its own."""
    run, other = _good_run(tmp_path, "run"), _good_run(tmp_path, "other", "--model", "always-yes")
    reviews = run / "reviews/oracle/coin_flip.jsonl"
    reviews.unlink()
    reviews.symlink_to(other / "reviews/always-yes/coin_flip.jsonl")
    result = run_cli("answers", str(run), timeout=GENEROUS_S)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and "a link to outside" in lines[0], result.stderr
    assert not (run / "answers.csv").exists()


def test_saved_rows_are_held_to_the_run_s_data_where_it_is_read_again(tmp_path: Path) -> None:
    """A resume read each saved row's target and people count as written: a target flipped by hand scored a wrong
    answer right (a run reported 0.94 where its replies make 0.68), and 999999 people made a group of its own."""
    from coinflip.testing.server import FakeOpenAIServer

    from .conftest import read_jsonl

    with FakeOpenAIServer("mixed") as srv:
        args = ("eval", "--model", "m", "--api-url", srv.url, "--work-dir", str(tmp_path), "--no-timestamp")
        assert run_cli(*args, "--limit", "30").returncode == 0
        honest = json.loads((tmp_path / "reports/m/coin_flip.json").read_text())
        path = tmp_path / "predictions/m/coin_flip.jsonl"
        rows = read_jsonl(path)
        reviews = {r["id"]: r for r in read_jsonl(tmp_path / "reviews/m/coin_flip.jsonl")}
        wrong = [row for row in rows if reviews[row["id"]]["correct"] is False]
        for row in wrong:  # each wrong answer made right by its target
            row["target"] = "NO" if row["target"] == "YES" else "YES"
        rows[0]["people"] = 999999
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        resumed = run_cli(*args, "--use-cache", str(tmp_path), "--limit", "31")
    report = json.loads((tmp_path / "reports/m/coin_flip.json").read_text())
    assert resumed.returncode == 0 and wrong, resumed.stderr
    assert report["corrected_rows"] == len(wrong) + (rows[0] not in wrong) and "999999" not in report["by_people"]
    again = {r["id"]: r for r in read_jsonl(tmp_path / "reviews/m/coin_flip.jsonl")}
    assert {i: again[i]["correct"] for i in reviews} == {i: r["correct"] for i, r in reviews.items()}  # as honest
    assert report["counts"]["correct"] == sum(r["correct"] is True for r in again.values()) and len(again) == 31
    assert honest["counts"]["samples"] == 30 and "scored by the data's" in resumed.stdout
    rescored = run_cli("rescore", str(tmp_path))  # the data is at hand (bundled): held to it too
    read_again = json.loads((tmp_path / "reports/m/coin_flip.json").read_text())
    assert rescored.returncode == 0 and read_again["counts"] == report["counts"]
    assert read_again["corrected_rows"] == report["corrected_rows"]


def test_a_rescore_reads_a_data_file_again_only_when_it_is_small(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rescore of 20 rows of a 570 MB generated set read it twice (68 s, against 0.7 s): a file past HELD_BYTES
    is not read again, its rows are scored as saved."""
    import coinflip.data.load as load
    from coinflip.run import finish
    from coinflip.rundir import load_saved_config

    data = tmp_path / "data.jsonl"
    assert run_cli("generate", "--count", "40", "--out", str(data)).returncode == 0
    args = ("eval", "--model", "oracle", "--dataset-path", str(data), "--limit", "5", "--work-dir", str(tmp_path / "w"))
    assert run_cli(*args, "--no-timestamp").returncode == 0
    saved = load_saved_config(tmp_path / "w")
    held = finish._saved_data(saved)
    assert held is not None and sum(map(bool, held.answer)) == 40
    monkeypatch.setattr(load, "HELD_BYTES", data.stat().st_size - 1)
    assert finish._saved_data(saved) is None


def test_a_rescore_finds_a_run_s_data_file_given_by_a_relative_path_from_anywhere(tmp_path: Path) -> None:
    """A run made with --dataset-path data.jsonl was held to its data only when rescored from the folder it ran in."""
    from .conftest import read_jsonl

    assert run_cli("generate", "--count", "30", "--out", str(tmp_path / "data.jsonl")).returncode == 0
    args = ("eval", "--model", "oracle", "--dataset-path", "data.jsonl", "--limit", "4", "--work-dir", "w")
    assert run_cli(*args, "--no-timestamp", cwd=tmp_path).returncode == 0
    path = tmp_path / "w/predictions/oracle/coin_flip.jsonl"
    rows = read_jsonl(path)
    rows[0]["target"] = "NO" if rows[0]["target"] == "YES" else "YES"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert run_cli("rescore", str(tmp_path / "w"), cwd=elsewhere).returncode == 0
    report = json.loads((tmp_path / "w/reports/oracle/coin_flip.json").read_text())
    assert report["corrected_rows"] == 1 and report["metrics"]["accuracy"] == 1.0


def test_runs_deeper_than_the_walk_goes_are_said_not_read_never_not_a_run(tmp_path: Path) -> None:
    """Past MAX_DEPTH a folder of runs was listed as 'not a coinflip run'."""
    from coinflip.pages.catalog import MAX_DEPTH, scan

    work = tmp_path / "w"
    last = work.joinpath(*"abcdefghijklmnop"[: MAX_DEPTH - 1])  # its runs are MAX_DEPTH down: walked
    for where in (last, last / "deeper"):
        assert _run("eval", "--model", "oracle", "--limit", "2", "--no-html", "--work-dir", str(where)).returncode == 0
    shallow = next(p for p in last.iterdir() if p.name != "deeper")
    (shallow / "notes").mkdir()  # a folder of the user's inside the deepest run walked: the run is listed alone
    inner = shallow / "inner"  # a run inside that run: not walked, but said
    assert _run("eval", "--model", "oracle", "--limit", "2", "--no-html", "--work-dir", str(inner)).returncode == 0
    nested = next(inner.iterdir())
    (nested / "configs").rename(inner / "configs")  # the run folder itself, one level down from the run
    for part in ("predictions", "reviews", "reports", "logs"):
        if (nested / part).exists():
            (nested / part).rename(inner / part)
    listed = scan(work)
    found = {f.rel: f for f in listed}
    assert [f.kind for f in listed].count("run") == 1 and found[shallow.relative_to(work).as_posix()].kind == "run"
    assert len(listed) == len(found)  # no folder listed twice
    assert found[inner.relative_to(work).as_posix()].reason.startswith("not read")
    beyond = found[(last / "deeper").relative_to(work).as_posix()]
    assert beyond.kind == "foreign" and "not read" in beyond.reason and "not a coinflip run" not in beyond.reason
