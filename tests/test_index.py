"""`coinflip view`: the index of a work directory, checked in a real browser.

One work directory is built once, as a user would fill it: baselines, runs against the test
server (one with a hostile model name and a hostile reply, one whose every request failed),
a run on other data, a nested work directory, a run killed before its report, a garbage
config, a truncated report, a foreign folder and an empty one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from html import unescape
from pathlib import Path

import pytest
import yaml

from coinflip.rundir import RunDir
from coinflip.testing.server import FakeOpenAIServer

from .answer_server import AnswerServer, answer, chat
from .conftest import PATIENCE_S, only_run_dir, read_jsonl, run_cli, spawn_cli, wait_for
from .test_reports import _chromium

SENTINEL = "document.body.setAttribute('data-pwned','{}');document.title='PWNED'"
HOSTILE_MODEL = f'</script><script>{SENTINEL.format("model")}</script><img src=x onerror="{SENTINEL.format("img")}">'
HOSTILE_IMG = f'<img src=x onerror="{SENTINEL.format("reply-img")}">'
HOSTILE_REPLY = f"<script>{SENTINEL.format('reply')}</script>{HOSTILE_IMG}\nANSWER: maybe"


@dataclass
class Work:
    root: Path
    runs: dict[str, Path]  # what each run is -> its folder
    index: Path
    view_stderr: str


def _eval(work: Path, *args: str, code: int = 0) -> Path:
    before = {p for p in work.iterdir()} if work.exists() else set()
    result = run_cli("eval", *args, "--work-dir", str(work))
    assert result.returncode == code, result.stderr
    (new,) = [p for p in work.iterdir() if p.is_dir() and p not in before]
    return new


def _model_dir(run: Path) -> str:
    (name,) = [p.name for p in (run / "predictions").iterdir()]
    return name


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Work]:
    root = tmp_path_factory.mktemp("work") / "runs"
    runs = {
        "oracle": _eval(root, "--model", "oracle", "--limit", "40"),
        "random": _eval(root, "--model", "random", "--limit", "40"),
        "always-yes": _eval(root, "--model", "always-yes", "--limit", "40"),
    }
    with FakeOpenAIServer("mixed") as server:
        runs["hostile"] = _eval(root, "--model", HOSTILE_MODEL, "--api-url", server.url, "--limit", "40")
    with FakeOpenAIServer("correct", fail_rate=1.0, seed=2) as broken:
        broken.state.stall = 0.01
        flaky = ("--model", "flaky", "--api-url", broken.url, "--limit", "8", "--retries", "0", "--timeout", "1")
        runs["failed"] = _eval(root, *flaky, code=1)
    other = root.parent / "other.jsonl"
    assert run_cli("generate", "--people", "2-6", "--count", "30", "--seed", "9", "--out", str(other)).returncode == 0
    runs["other-data"] = _eval(root, "--model", "oracle", "--dataset-path", str(other))
    runs["nested"] = _eval(root / "team", "--model", "always-no", "--limit", "20")
    _hostile_reply(runs["hostile"], runs["oracle"])
    runs.update(_damaged_copies(root, runs))
    (root / "notes").mkdir()
    (root / "notes" / "todo.txt").write_text("not a run")
    (root / "empty").mkdir()
    result = run_cli("view", str(root))
    assert result.returncode == 0, result.stderr
    yield Work(root, runs, root / "index.html", result.stderr)


def _hostile_reply(run: Path, oracle: Path) -> None:
    """A reply holding markup, on a question the oracle gets right: listed where the two disagree."""
    name = _model_dir(run)
    predictions = run / f"predictions/{name}/coin_flip.jsonl"
    rows = read_jsonl(predictions)
    rows[0]["reply"] = HOSTILE_REPLY
    predictions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert run_cli("rescore", str(run)).returncode == 0


def _damaged_copies(root: Path, runs: dict[str, Path]) -> dict[str, Path]:
    out = {}
    out["garbage-config"] = shutil.copytree(runs["random"], root / "garbage_config")
    (out["garbage-config"] / "configs/task_config.yaml").write_bytes(b"\x00\xff{{{ not: [yaml")
    out["truncated-report"] = shutil.copytree(runs["always-yes"], root / "truncated_report")
    report = out["truncated-report"] / "reports/always-yes/coin_flip.json"
    report.write_bytes(report.read_bytes()[:200])
    out["killed"] = shutil.copytree(runs["oracle"], root / "killed")
    shutil.rmtree(out["killed"] / "reports")
    shutil.rmtree(out["killed"] / "reviews")
    predictions = out["killed"] / "predictions/oracle/coin_flip.jsonl"
    lines = predictions.read_bytes().splitlines(keepends=True)
    predictions.write_bytes(b"".join(lines[:15]) + lines[15][:40])  # killed mid-write
    return out


def _rel(work: Work, name: str) -> str:
    return work.runs[name].relative_to(work.root).as_posix()


def _dom(work: Work, tmp_path: Path, fragment: str = "") -> str:
    url = work.index.as_uri() + (f"#{fragment}" if fragment else "")
    result = _chromium(f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000", "--dump-dom", url)
    dom = result.stdout
    assert 'data-ready="1"' in dom, result.stderr[-2000:]
    assert re.search(r"<body[^>]*data-pwned", dom) is None, "a model name or reply ran as code"
    assert "PWNED" not in dom.split("</title>")[0]
    return dom


def _rows(dom: str) -> list[dict[str, str]]:
    """Each leaderboard row: its id, model, and its cells' text."""
    out = []
    for attrs, body in re.findall(r'<tr class="run[^"]*"([^>]*)>(.*?)</tr>', dom, re.S):
        cells = [unescape(re.sub(r"<[^>]+>", " ", c)).split() for c in re.findall(r"<td[^>]*>(.*?)</td>", body, re.S)]
        out.append(
            {
                "id": unescape(re.search(r'data-id="([^"]*)"', attrs)[1]),  # type: ignore[index]
                "model": unescape(re.search(r'data-model="([^"]*)"', attrs)[1]),  # type: ignore[index]
                "f1": re.search(r'class="num m-f1_score">([^<]*)<', body)[1],  # type: ignore[index]
                "cells": cells,  # type: ignore[dict-item]
            }
        )
    return out


def _report(run: Path) -> dict:
    return json.loads((run / f"reports/{_model_dir(run)}/coin_flip.json").read_text())


LEADERBOARD = ("oracle", "random", "always-yes", "hostile", "failed", "other-data", "nested")


def test_index_lists_every_run_and_every_problem(work: Work, tmp_path: Path) -> None:
    html = work.index.read_text()
    offline = html.replace("'http://www.w3.org/2000/svg'", "")  # SVG's namespace name, never fetched
    assert "http://" not in offline and "https://" not in offline  # nothing to fetch: opens offline
    assert html.count("<script") == 2 and "<img src=x" not in html  # the data and the code, nothing injected
    dom = _dom(work, tmp_path)
    rows = _rows(dom)
    assert sorted(r["id"] for r in rows) == sorted(_rel(work, k) for k in LEADERBOARD)
    assert {r["model"] for r in rows} == {"oracle", "random", "always-yes", HOSTILE_MODEL, "flaky", "always-no"}
    assert "&lt;/script&gt;&lt;script&gt;document.body.setAttribute" in dom  # the hostile name, shown as text
    default = [float(r["f1"]) for r in rows]  # sorted by F1, best first, by default
    assert default == sorted(default, reverse=True)
    problems = re.search(r'<ul id="problems">(.*?)</ul>', dom, re.S)[1]  # type: ignore[index]
    listed = {code: kind for kind, code in re.findall(r'<li class="p-(\w+)">.*?<code>([^<]*)</code>', problems)}
    assert listed == {
        "garbage_config": "broken",
        "truncated_report": "broken",
        "killed": "incomplete",
        _rel(work, "failed"): "incomplete",
        "notes": "foreign",
        "empty": "foreign",
    }
    assert "15 of 40 predictions saved" in problems and "is no JSON object" in problems
    failed = next(r for r in rows if r["model"] == "flaky")
    assert failed["cells"][-1] == ["incomplete"] and failed["cells"][1] == ["–"]  # shown, never ranked
    assert (
        "7 runs on 2 data sets (1 incomplete); also 1 incomplete without a report, 2 broken, 2 foreign"
        in work.view_stderr
    )
    assert "garbage_config" in work.view_stderr and len(work.view_stderr.splitlines()) == 7
    mixed = re.search(r'<div id="mixed" class="note">([^<]*)</div>', dom)
    assert mixed and "2 data sets" in mixed[1]  # different data is never ranked together unmarked
    tags = {r["id"]: r["cells"][4][0] for r in rows}
    assert tags[_rel(work, "other-data")] == "D2" and tags[_rel(work, "oracle")] == "D1"
    assert len(re.findall(r'<path [^>]*class="line"', dom)) == 5  # the first five rows are drawn
    a, b = re.search(r'id="pair" data-a="([^"]*)" data-b="([^"]*)"', dom).groups()  # type: ignore[union-attr]
    assert a == rows[0]["id"]  # by default the best run, against the next best on the same data
    assert b == next(r["id"] for r in rows[1:] if tags[r["id"]] == tags[a])
    assert re.search(r'id="latency".*?<rect', dom, re.S)


def test_screenshot(work: Work, tmp_path: Path) -> None:
    shot = tmp_path / "index.png"
    _chromium(
        f"--user-data-dir={tmp_path / 'profile'}",
        "--virtual-time-budget=5000",
        f"--screenshot={shot}",
        "--window-size=1400,1800",
        work.index.as_uri(),
    )
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000


def test_the_key_columns_fit_1280_pixels(work: Work, tmp_path: Path) -> None:
    """Invalid %, errors, forced accuracy and AUROC are visible without scrolling sideways."""
    root = shutil.copytree(work.root, tmp_path / "w", symlinks=True)  # the shared fixture stays as it is
    oracle = root / work.runs["oracle"].relative_to(work.root)
    _edit_report(oracle, {"calibration": {"auroc": 0.93}, "forced": {"metrics": {"accuracy": 0.5}}})
    assert run_cli("view", str(root)).returncode == 0
    flags = (f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000", "--window-size=1280,900")
    dom = _chromium(*flags, "--dump-dom", (root / "index.html").as_uri()).stdout
    assert 'data-ready="1"' in dom and re.search(r'data-board-overflow="0"', dom), re.search(r"<body[^>]*>", dom)
    head = re.findall(r"<th[^>]*>([^<]*)</th>", dom.split('id="board"')[1].split("</thead>")[0])
    for column in ("invalid", "errors", "forced acc.", "AUROC", "status"):
        assert any(h.startswith(column) for h in head), (column, head)


def test_sorting_and_filters_follow_the_url_fragment(work: Work, tmp_path: Path) -> None:
    rows = _rows(_dom(work, tmp_path, "sort=accuracy&dir=asc"))
    accuracy = {_rel(work, k): _report(work.runs[k])["metrics"]["accuracy"] for k in LEADERBOARD}
    assert [accuracy[r["id"]] for r in rows] == sorted(accuracy.values())
    rows = _rows(_dom(work, tmp_path, "sort=model&dir=desc"))
    assert [r["model"] for r in rows] == sorted((r["model"] for r in rows), reverse=True)
    assert {r["id"] for r in _rows(_dom(work, tmp_path, "model=oracle"))} == {
        _rel(work, "oracle"),
        _rel(work, "other-data"),
    }
    assert [r["id"] for r in _rows(_dom(work, tmp_path, "q=other.jsonl"))] == [_rel(work, "other-data")]
    bundled = _report(work.runs["oracle"])["dataset"]
    on_bundled = {r["id"] for r in _rows(_dom(work, tmp_path, f"data={bundled['sha256'][:12]}/test"))}
    assert on_bundled == {_rel(work, k) for k in LEADERBOARD if k != "other-data"}
    assert [r["id"] for r in _rows(_dom(work, tmp_path, "status=incomplete"))] == [_rel(work, "failed")]
    assert [r["model"] for r in _rows(_dom(work, tmp_path, "q=ALWAYS&sort=model&dir=asc"))] == [
        "always-no",
        "always-yes",
    ]


def test_chart_draws_the_chosen_runs(work: Work, tmp_path: Path) -> None:
    chosen = [_rel(work, "other-data"), _rel(work, "random")]
    dom = _dom(work, tmp_path, "sel=" + ",".join(chosen))
    lines = re.findall(r'<path [^>]*class="line" data-id="([^"]*)"', dom)
    assert lines == chosen
    other = _report(work.runs["other-data"])["by_people"]  # one point per number of people in that run
    people = re.findall(r"<title>oracle · [^:]+: (\d+) people, accuracy", dom)
    assert sorted(set(people)) == sorted(other)
    assert "2 of 7" not in dom and 'checked=""' not in dom  # ticks are state, not markup


def _verdicts(run: Path) -> dict[str, bool]:
    name = _model_dir(run)
    questions = {p["id"]: p["question"] for p in read_jsonl(run / f"predictions/{name}/coin_flip.jsonl")}
    return {questions[r["id"]]: r["correct"] for r in read_jsonl(run / f"reviews/{name}/coin_flip.jsonl")}


def test_pair_view_shows_mcnemar_and_the_questions_where_runs_disagree(work: Work, tmp_path: Path) -> None:
    a, b = _verdicts(work.runs["oracle"]), _verdicts(work.runs["hostile"])
    only_a = sum(a[q] and not b[q] for q in a if q in b)
    only_b = sum(b[q] and not a[q] for q in a if q in b)
    assert only_a > 0
    dom = _dom(work, tmp_path, f"a={_rel(work, 'oracle')}&b={_rel(work, 'hostile')}")
    stats = dict(re.findall(r'data-stat="([^"]+)">([^<]*)<', dom))
    assert (stats["shared"], stats["only A right"], stats["only B right"]) == ("40", str(only_a), str(only_b))
    assert len(re.findall(r'<tr class="dq">', dom)) == only_a + only_b
    assert "&lt;script&gt;document.body.setAttribute('data-pwned','reply')" in dom  # the reply, shown as text
    assert "&lt;img src=x onerror=" in dom
    swapped = _dom(work, tmp_path, f"a={_rel(work, 'hostile')}&b={_rel(work, 'oracle')}")
    stats = dict(re.findall(r'data-stat="([^"]+)">([^<]*)<', swapped))
    assert (stats["only A right"], stats["only B right"]) == (str(only_b), str(only_a))
    other = _dom(work, tmp_path, f"a={_rel(work, 'other-data')}")
    assert "No other run on D2" in other  # runs on other data are never paired


def test_shortened_texts_never_cut_an_emoji_in_half(tmp_path: Path) -> None:
    """A question's first 110 UTF-16 units (a start time's 16, a chart's label's 51) were cut with slice(): an emoji
    there lost its second half, a lone surrogate that headless chromium died on and other browsers show as \ufffd."""
    data = tmp_path / "emoji.jsonl"
    with data.open("w", encoding="utf-8") as out:
        for i in range(6):  # the emoji takes the 110th and 111th UTF-16 units; odd rows flip, so always-yes errs
            story = "x" * (89 - len(str(i))) + f"{i}\U0001f600 family \U0001f468\u200d\U0001f469\u200d\U0001f467."
            flips = " Ann flips the coin." if i % 2 else " Ann does not flip the coin."
            question = f"A coin is heads up. {story}{flips} Is the coin still heads up?"
            out.write(json.dumps({"question": question, "answer": "no" if i % 2 else "yes"}) + "\n")
    work = tmp_path / "w"
    runs = {m: _eval(work, "--model", m, "--dataset-path", str(data)) for m in ("oracle", "always-yes")}
    report = runs["oracle"] / "reports/oracle/coin_flip.json"
    tampered = {"started_at": "2026-11-27 12:3\U0001f600", "model": "o" * 50 + "\U0001f600"}  # cut at 16 and 51
    report.write_text(json.dumps({**json.loads(report.read_text()), **tampered}))
    assert run_cli("view", str(work)).returncode == 0
    dom = _dom(
        Work(work, runs, work / "index.html", ""), tmp_path, f"a={runs['oracle'].name}&b={runs['always-yes'].name}"
    )
    summaries = [unescape(s) for s in re.findall(r"<summary>([^<]*)</summary>", dom)]
    assert len(summaries) == 3 and all(re.fullmatch(r"A coin is heads up\. x+\d\u2026", s) for s in summaries), (
        summaries
    )
    assert '<small class="date">2026-11-27 12:3</small>' in dom and f'y="10">{"o" * 50}</text>' in dom
    assert "\ufffd" not in dom


def test_every_eval_and_rescore_refreshes_the_index(tmp_path: Path) -> None:
    work = tmp_path / "w"
    first = _eval(work, "--model", "oracle", "--limit", "5")
    page = work / "index.html"
    assert first.name in page.read_text()
    second = _eval(work, "--model", "random", "--limit", "5")
    assert first.name in page.read_text() and second.name in page.read_text()
    page.unlink()
    assert run_cli("rescore", str(second)).returncode == 0
    assert second.name in page.read_text()


def test_a_run_still_going_is_listed_as_running_and_is_left_to_go_on(tmp_path: Path) -> None:
    """Its lock held by the live eval: before, view said it had stopped before the end."""
    work = tmp_path / "w"
    with FakeOpenAIServer("correct", latency=0.5) as srv:
        args = ("--model", "m", "--api-url", srv.url, "--eval-batch-size", "1", "--limit", "200")
        proc = spawn_cli("eval", *args, "--work-dir", str(work))
        try:
            saved = "*/predictions/m/coin_flip.jsonl"
            predictions = wait_for(lambda: next((p for p in work.glob(saved) if p.stat().st_size), None), "a reply")
            seen = run_cli("view", str(work))
            assert seen.returncode == 0 and "incomplete" in seen.stderr and "running: " in seen.stderr, seen.stderr
            assert "stopped before the end" not in seen.stderr and "running: " in _problems(work / "index.html")
            done = predictions.read_bytes().count(b"\n")
            wait_for(lambda: predictions.read_bytes().count(b"\n") > done + 1, "the run going on after the view")
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=PATIENCE_S)
    assert proc.returncode == 1 and f"--use-cache {only_run_dir(work)}" in err  # stopped by the signal, not the view
    after = run_cli("view", str(work))
    assert "stopped before the end" in after.stderr and "running" not in _problems(work / "index.html")
    assert f"coinflip eval --use-cache {only_run_dir(work)}`" in after.stderr  # which run to resume


def test_a_run_being_resumed_is_listed_as_running_not_as_one_to_resume(tmp_path: Path) -> None:
    """Its report from before said 'resume to retry them' while the resume was going on."""
    work = tmp_path / "w"
    with AnswerServer(
        lambda s: answer({"error": {"message": "down"}}, 500) if s.index == 0 else answer(chat(s.right_answer))
    ) as bad:
        run = _eval(
            work,
            "--model",
            "m",
            "--api-url",
            bad.url,
            "--limit",
            "4",
            "--eval-batch-size",
            "1",
            "--retries",
            "0",
            code=1,
        )
    with FakeOpenAIServer("correct", latency=PATIENCE_S) as srv:  # the sample asked again gets no reply meanwhile
        proc = spawn_cli("eval", "--use-cache", str(run), "--api-url", srv.url)
        try:
            wait_for(lambda: sum(srv.state.requests.values()), "the resume asking again")
            seen = run_cli("view", str(work))
            assert "incomplete " in seen.stderr and "running: being resumed now" in seen.stderr, seen.stderr
            assert "running: being resumed now" in _problems(work / "index.html")
        finally:
            proc.terminate()
            proc.communicate(timeout=PATIENCE_S)
    assert "running" not in run_cli("view", str(work)).stderr


def test_a_view_asking_about_a_run_never_makes_its_eval_fail_as_in_use(tmp_path: Path) -> None:
    """`in_use` holds a free lock for a moment: an eval or rescore starting then said 'in use by another coinflip
    process' (3% of starts while a view asked without pause)."""
    root = tmp_path / "run"
    (root / "configs").mkdir(parents=True)
    (root / "configs" / "run.lock").touch()
    asking = f"import pathlib, coinflip.rundir as r\nfor _ in range(20000): r.in_use(pathlib.Path({str(root)!r}))"
    view = subprocess.Popen([sys.executable, "-c", asking])  # another process, as `coinflip view` is
    try:
        while view.poll() is None:
            with RunDir(root, "m").locked():
                pass
    finally:
        view.kill()
        view.wait(timeout=PATIENCE_S)
    assert view.returncode == 0


def _problems(page: Path) -> str:
    """The text of the page's list of runs needing attention."""
    found = re.search(r'<ul id="problems">(.*?)</ul>', page.read_text(encoding="utf-8"), re.S)
    return unescape(re.sub(r"<[^>]+>", " ", found.group(1))) if found else ""


def test_a_run_dir_that_is_its_own_work_dir(tmp_path: Path) -> None:
    run = _eval(tmp_path / "w", "--model", "oracle", "--limit", "5")
    result = run_cli("view", str(run))
    assert result.returncode == 0 and "1 run on 1 data set" in result.stderr
    dom = _dom(Work(run, {}, run / "index.html", ""), tmp_path)
    assert [r["id"] for r in _rows(dom)] == ["."]
    assert 'href="./reports/oracle/coin_flip.html"' in dom

    from coinflip.pages.index import work_dir_of

    assert work_dir_of(run, {"no_timestamp": True}) == run
    assert work_dir_of(run, {"no_timestamp": False}) == run.parent


def test_the_command_refreshes_the_index_after_a_run_and_a_rescore_and_the_library_does_not(tmp_path: Path) -> None:
    """The runner writes no page of the work directory (a program that calls run_task owns its
    folder); `coinflip eval` and `coinflip rescore` refresh its index, --no-timestamp runs included."""
    from coinflip import run_task

    run_task({"model": "oracle", "limit": 3, "work_dir": str(tmp_path / "lib"), "quiet": True})
    assert not (tmp_path / "lib/index.html").exists()
    run = _eval(tmp_path / "cli", "--model", "oracle", "--limit", "3")
    assert "oracle" in (tmp_path / "cli/index.html").read_text()
    (tmp_path / "cli/index.html").unlink()
    assert run_cli("rescore", str(run)).returncode == 0 and (tmp_path / "cli/index.html").is_file()
    own = tmp_path / "own"
    ran = run_cli("eval", "--model", "oracle", "--limit", "3", "--no-timestamp", "--work-dir", str(own))
    assert ran.returncode == 0, ran.stderr
    assert (own / "index.html").is_file()


def test_refresh_never_raises(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from coinflip.pages.index import refresh

    not_a_folder = tmp_path / "file.txt"
    not_a_folder.write_text("x")
    assert refresh(not_a_folder) is None
    assert "could not refresh" in caplog.text
    assert refresh(tmp_path) == tmp_path / "index.html"  # an empty work directory gets a page too


def test_view_opens_the_page_in_a_browser(work: Work, tmp_path: Path) -> None:
    opened = tmp_path / "opened.txt"
    browser = tmp_path / "browser.sh"
    browser.write_text(f'#!/bin/sh\necho "$1" > {opened}\n')
    browser.chmod(0o755)
    result = run_cli("view", str(work.root), "--open", env={"BROWSER": str(browser)})
    assert result.returncode == 0, result.stderr
    assert opened.read_text().strip() == work.index.resolve().as_uri()


def test_view_of_a_missing_folder_is_one_line(tmp_path: Path) -> None:
    result = run_cli("view", str(tmp_path / "nowhere"))
    assert result.returncode == 2 and "not a directory" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def _edit_report(run: Path, change: dict) -> None:
    path = run / f"reports/{_model_dir(run)}/coin_flip.json"
    report = json.loads(path.read_text())
    for key, value in change.items():
        if value is None:
            report.pop(key, None)
        else:
            report[key] = value
    path.write_text(json.dumps(report))


def test_fields_from_newer_and_older_reports_are_shown_or_skipped(tmp_path: Path) -> None:
    """Reports written by other versions: new fields appear, missing or odd ones never crash."""
    from coinflip.pages.index import build, render

    work = tmp_path / "w"
    newer = _eval(work, "--model", "oracle", "--limit", "10")
    older = _eval(work, "--model", "random", "--limit", "10")
    odd = _eval(work, "--model", "always-no", "--limit", "10")
    _edit_report(
        newer,
        {
            "template": {"name": "direct", "sha256": "ab12cd34ef56" * 5},
            "repeats": 3,
            "repeat_metrics": {"k": 3, "consistency": 0.9, "pass_at_k": 0.95},
            "forced": {"metrics": {"accuracy": 0.875}},
            "calibration": {"auroc": 0.93, "ece": 0.04, "brier": 0.07},
            "invalid_reasons": {"no_marker": 2, "cut_off": 1},
            "provenance": {"coinflip_version": "9.9.9", "python": "3.13"},
        },
    )
    _edit_report(older, {"intervals": None, "usage": None, "by_people": None, "dataset": None, "counts": None})
    _edit_report(odd, {"metrics": {"f1_score": None, "accuracy": "high"}, "warnings": "not a list", "by_people": []})
    (work / "loop").symlink_to(work)  # a symlink loop is walked once
    data = build(work)
    rows = {r["id"]: r for r in data["runs"]}
    assert set(rows) == {newer.name, older.name, odd.name}
    assert data["problems"] == [{"id": odd.name, "kind": "altered", "reason": rows[odd.name]["warnings"][0]}]
    assert rows[odd.name]["warnings"][0].endswith("left out warnings, metrics.accuracy, by_people")
    new = rows[newer.name]
    assert (new["template"], new["template_hash"], new["repeats"]) == ("direct", "ab12cd34ef", 3)
    assert new["extra"]["forced_accuracy"] == 0.875 and new["extra"]["auroc"] == 0.93 and new["extra"]["ece"] == 0.04
    assert new["extra"]["consistency"] == 0.9 and new["extra"]["pass_at_k"] == 0.95
    assert new["version"] == "9.9.9" and "no_marker: 2" in new["invalid_reasons"]
    assert ["provenance.python", "3.13"] in new["details"]  # a field with no column lands in the details
    assert [key for key, _ in data["extras"]] == [
        "forced_accuracy",
        "pass_at_k",
        "consistency",
        "auroc",
        "ece",
        "brier",
    ]
    old = rows[older.name]
    assert old["m"]["accuracy"][1:] == [None, None] and old["samples"] is None and old["people"] == {}
    assert old["data"]["label"].startswith("bundled")  # from the run's config when the report lacks it
    assert rows[odd.name]["m"]["f1_score"][0] is None and rows[odd.name]["m"]["accuracy"][0] is None
    assert len(rows[odd.name]["warnings"]) == 1  # "not a list": left out, and the note says so
    page = render(data)
    assert "9.9.9" in page and "forced acc." in page


def test_index_page_for_the_newer_fields_in_a_browser(tmp_path: Path) -> None:
    work = tmp_path / "w"
    run = _eval(work, "--model", "oracle", "--limit", "10")
    _edit_report(run, {"calibration": {"auroc": 0.93}, "forced": {"metrics": {"accuracy": 0.5}}})
    assert run_cli("view", str(work)).returncode == 0
    dom = _dom(Work(work, {}, work / "index.html", ""), tmp_path)
    assert re.search(r"<th[^>]*>AUROC</th>", dom) and re.search(r"<th[^>]*>forced acc\.</th>", dom)
    (row,) = _rows(dom)
    assert ["0.930"] in row["cells"] and ["0.500"] in row["cells"]


def test_folder_names_cannot_become_links_that_run_code(tmp_path: Path) -> None:
    work = tmp_path / 'w"><script>alert(1)</script>'
    run = _eval(work, "--model", "oracle", "--limit", "5")
    named = run.rename(work / "javascript:alert(1)")
    assert run_cli("view", str(work)).returncode == 0
    dom = _dom(Work(work, {}, work / "index.html", ""), tmp_path)
    (row,) = _rows(dom)
    assert row["id"] == named.name
    assert 'href="./javascript%3Aalert%281%29/reports/oracle/coin_flip.html"' in dom
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom  # the work directory's name, as text


def test_names_and_replies_that_are_not_utf8_still_make_a_page(tmp_path: Path) -> None:
    work = tmp_path / "w"
    run = _eval(work, "--model", "oracle", "--limit", "5")
    other = _eval(work, "--model", "random", "--limit", "5")
    os.mkdir(os.fsencode(work) + b"/not-utf8-\xff")  # a folder name Linux allows and UTF-8 does not
    predictions = other / "predictions/random/coin_flip.jsonl"
    rows = read_jsonl(predictions)
    rows[0]["reply"] = "half a pair \ud800 then ANSWER: maybe"
    predictions.write_text("".join(json.dumps(r) + "\n" for r in rows))  # json.dumps keeps it as \ud800
    assert run_cli("rescore", str(other)).returncode == 0
    result = run_cli("view", str(work))
    assert result.returncode == 0, result.stderr
    dom = _dom(Work(work, {}, work / "index.html", ""), tmp_path)
    assert len(_rows(dom)) == 2 and "not-utf8-" in dom and run.name in dom


def test_an_empty_work_dir_gets_a_page_that_says_so(tmp_path: Path) -> None:
    result = run_cli("view", str(tmp_path))
    assert result.returncode == 0 and "0 runs on 0 data sets" in result.stderr
    dom = _dom(Work(tmp_path, {}, tmp_path / "index.html", ""), tmp_path)
    assert 'data-rows="0"' in dom and "no accuracy by number of people" in dom and _rows(dom) == []


def test_a_resumed_run_shows_when_it_started(tmp_path: Path) -> None:
    work = tmp_path / "w"
    run = _eval(work, "--model", "oracle", "--limit", "5")
    config_file = run / "configs/task_config.yaml"
    saved = yaml.safe_load(config_file.read_text())
    saved["provenance"]["created"] = "2020-01-02T03:04:05+00:00"  # as if it started long ago
    config_file.write_text(yaml.safe_dump(saved, sort_keys=False))
    resumed = run_cli("eval", "--use-cache", str(run))
    assert resumed.returncode == 0, resumed.stderr
    provenance = _report(run)["provenance"]
    assert provenance["created"] == "2020-01-02T03:04:05+00:00" and provenance["resumed"] > provenance["created"]
    data = json.loads(re.search(r'id="coinflip-data">(.*?)</script>', (work / "index.html").read_text())[1])  # type: ignore[index]
    assert [r["date"] for r in data["runs"]] == ["2020-01-02 03:04:05"]
    page = (run / "reports/oracle/coin_flip.html").read_text()
    assert "started 2020-01-02T03:04:05+00:00, resumed " in page


def test_runs_on_other_questions_of_the_same_data_are_not_ranked_or_tested_together(tmp_path: Path) -> None:
    work = tmp_path / "w"
    first = _eval(work, "--model", "oracle", "--limit", "30")
    apart = _eval(work, "--model", "random", "--limit", "30", "--seed", "7")  # the same size, other questions
    dom = _dom(Work(work, {}, work / "index.html", ""), tmp_path, f"a={first.name}&b={apart.name}")
    rows = {r["id"]: r for r in _rows(dom)}
    assert rows[first.name]["cells"][1] == ["1"] and rows[apart.name]["cells"][1] == ["1"]  # each first of one
    pair = re.search(r'<div id="pair"[^>]*>(.*?)</div>', dom, re.S)
    assert pair and "share no question" in pair[1] and "McNemar" not in pair[1] and "p =" not in pair[1]


def test_tied_runs_share_a_rank_and_say_they_tie(tmp_path: Path) -> None:
    work = tmp_path / "w"
    twins = [_eval(work, "--model", "oracle", "--limit", "20") for _ in range(2)]  # F1 1.0, both
    last = _eval(work, "--model", "always-no", "--limit", "20")
    dom = _dom(Work(work, {}, work / "index.html", ""), tmp_path)
    rows = {r["id"]: r for r in _rows(dom)}
    assert [rows[t.name]["cells"][1] for t in twins] == [["=1"], ["=1"]] and rows[last.name]["cells"][1] == ["3"]
    assert dom.count('title="rank 1 (tied: equal F1) of 3 ') == 2 and 'title="rank 3 of 3 ' in dom


def test_view_of_a_missing_folder_names_only_options_view_takes(tmp_path: Path) -> None:
    """`coinflip view` without ./outputs said "give the work directory of your runs (--work-dir)", an option
    view refuses ("No such option"): the way out it names must be one view takes."""
    done = run_cli("view", cwd=tmp_path)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    view_help = run_cli("view", "--help").stdout
    assert "WORK_DIR" in done.stderr and all(o in view_help for o in re.findall(r"--[\w-]+", done.stderr))


def _framed(frame: Path, src: str, script: str, tmp_path: Path) -> str:
    """The text `script` leaves in `r`, run in Chromium once the page `src` has loaded in an iframe (document `d`)."""
    frame.write_text(
        f'<iframe id="f" src="{src}" style="width:1280px;height:900px"></iframe><pre id="out"></pre>'
        "<script>var f=document.getElementById('f');f.onload=function(){var d=f.contentDocument;"
        f"{script};document.getElementById('out').textContent=r}}</script>"
    )
    flags = (f"--user-data-dir={tmp_path / 'profile'}", "--allow-file-access-from-files", "--virtual-time-budget=5000")
    out = re.search(r'<pre id="out">(.*?)</pre>', _chromium(*flags, "--dump-dom", frame.as_uri()).stdout, re.S)
    assert out is not None
    return unescape(out[1])


def test_a_column_sorts_from_the_keyboard(work: Work, tmp_path: Path) -> None:
    """A column header took only a mouse click: it could not be reached with Tab nor sort with Enter."""
    script = (
        "var out=[];['model','model'].forEach(function(k){var th=d.querySelector('#board th[data-k='+k+']');"
        "out.push(th.tabIndex);th.focus();th.dispatchEvent(new KeyboardEvent('keydown',{key:'Enter',bubbles:true}));"
        "out.push(f.contentWindow.location.hash,d.activeElement.getAttribute('data-k'))});var r=out.join(' ')"
    )
    shown = _framed(tmp_path / "frame.html", work.index.as_uri(), script, tmp_path)
    assert shown == "0 #sort=model&dir=asc model 0 #sort=model model"  # Enter again: descending


def test_a_run_with_a_comma_in_its_path_can_be_ticked(tmp_path: Path) -> None:
    """#sel joins run ids with commas: a run in `lr=1,bs=2/` was read back as two ids, so its tick
    undid itself and the chart drew the first five rows instead of it."""
    for name in ("lr=1,bs=2", "plain"):
        made = run_cli(
            "eval", "--model", "oracle", "--limit", "5", "--work-dir", str(tmp_path / "w" / name), "--no-timestamp"
        )
        assert made.returncode == 0, made.stderr
    assert run_cli("view", str(tmp_path / "w")).returncode == 0
    script = (
        "var row='tr[data-id=\"lr=1,bs=2\"] input';d.querySelector(row).click();var r=d.querySelector(row).checked"
        "+' '+Array.prototype.map.call(d.querySelectorAll('path.line'),function(p){return p.getAttribute('data-id')})"
        ".join('|')"
    )
    assert _framed(tmp_path / "w/frame.html", "index.html", script, tmp_path) == "true lr=1,bs=2"


def test_a_rate_past_one_in_a_saved_report_stays_on_the_chart(work: Work, tmp_path: Path) -> None:
    """An edited report's accuracy by people of 1e308: the chart wrote y = -Infinity, the browser
    refused the path and that run's line vanished (console errors); a rate past 1 is left out (the report is
    said to be edited) and the rest of the line is drawn."""
    root = shutil.copytree(work.root, tmp_path / "w", symlinks=True)
    oracle = root / work.runs["oracle"].relative_to(work.root)
    people = {"2": {"samples": 3, "correct": 3, "accuracy": 1e308, "interval": [-1e308, 1e308]},
              "4": {"samples": 3, "correct": 3, "accuracy": 1.0, "interval": [0.4, 1.0]}}  # fmt: skip
    _edit_report(oracle, {"by_people": people})
    assert run_cli("view", str(root)).returncode == 0
    dom = _chromium(
        f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000", "--dump-dom",
        (root / "index.html").as_uri() + "#sel=" + _rel(work, "oracle"),
    ).stdout  # fmt: skip
    assert "Infinity" not in dom and re.search(r'<path d="M[0-9.]+,12\.0"[^>]*class="line"', dom), dom[-3000:]


def test_sorting_reads_numbers_in_names_as_numbers(tmp_path: Path) -> None:
    """Sorted by data, eleven data sets read D1, D10, D11, D2 ... (and step-1000 came before step-200)."""
    args = ("--model", "oracle", "--limit", "4", "--length-count", "2", "--lengths", "2-4")
    assert run_cli("probe", *args, "--work-dir", str(tmp_path / "w")).returncode == 0
    assert run_cli("view", str(tmp_path / "w")).returncode == 0
    url = (tmp_path / "w/index.html").as_uri() + "#sort=data&dir=asc"
    dom = _chromium(f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000", "--dump-dom", url).stdout
    tags = re.findall(r'<span class="tag"[^>]*>(D\d+)</span>', dom)
    assert len(tags) >= 11 and tags == sorted(tags, key=lambda t: int(t[1:])), tags
