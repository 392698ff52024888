"""Hostile values a second pass found: in saved files a run directory holds (its predictions,
reviews, report and settings, edited by someone else), seen through every command that shows them:
the terminal (a real one: a pseudo-terminal), the pages in a real browser, compare.md
as a markdown viewer renders them, the answers CSV as a spreadsheet reads it, and probe.html's
links. Each test plants what broke before, in files a real run against the test server wrote."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from coinflip.config import safe_name
from coinflip.testing.server import FakeOpenAIServer

from .conftest import on_terminal, read_jsonl, run_cli
from .test_page_values import MARKDOWN_TAGS, Page, markdown_page
from .test_reports import _chromium

ESCAPES = "\x1b[2J\x1b]8;;https://evil.example\x07click\x1b]8;;\x07\x9b31m\u202e"  # clear, hidden link, C1 CSI, bidi
HALF = "\ud800"  # half a surrogate pair: JSON can hold it (as \ud800), UTF-8 cannot


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A work directory with two runs (a, b) of one model policy on the same questions, made by
    `coinflip eval` against the test server with forced answers; tests edit copies of it."""
    work = tmp_path_factory.mktemp("values2") / "w"
    with FakeOpenAIServer("mixed") as server:
        for name in ("a", "b"):
            made = run_cli(
                "eval", "--model", name, "--api-url", server.url, "--limit", "12", "--force-answer",
                "--work-dir", str(work / name), "--no-timestamp",
            )  # fmt: skip
            assert made.returncode == 0, made.stderr
    return work


def _copy(runs: Path, tmp_path: Path) -> Path:
    return shutil.copytree(runs, tmp_path / "w", ignore=shutil.ignore_patterns("index.html", "compare"))


def _edit_rows(path: Path, edit: Any) -> None:
    """Rewrite a JSON lines file with `edit(n, row)` applied to each row (json.dumps writes \\ud800)."""
    rows = read_jsonl(path)
    for n, row in enumerate(rows):
        edit(n, row)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _edit_report(run: Path, edit: Any) -> None:
    (path,) = run.glob("reports/*/coin_flip.json")
    report = json.loads(path.read_text())
    edit(report)
    path.write_text(json.dumps(report))  # NaN as NaN, as Python's json writes and reads it


def _drawn(page: Path, tmp_path: Path) -> str:
    """The page's DOM once its script ran, in Chromium."""
    return _chromium(
        f"--user-data-dir={tmp_path / 'p'}", "--virtual-time-budget=5000", "--dump-dom", page.as_uri()
    ).stdout


def _planted(received: str) -> list[str]:
    """What of ESCAPES reached the terminal as it was (rich's own colours are not in it)."""
    return [s for s in ("\x1b[2J", "\x1b]8;;https://evil", "\x9b", "\u202e", "\x07") if s in received]


def test_half_a_surrogate_in_saved_files_is_shown_as_a_replacement_not_a_traceback(runs: Path, tmp_path: Path) -> None:
    """A saved error (the summary's most common errors) and a saved report's model name (compare's
    table) with half a surrogate pair: printing them raised UnicodeEncodeError, a traceback."""
    work = _copy(runs, tmp_path)

    def errored(n: int, row: dict[str, Any]) -> None:
        if n == 0:
            row.update(error=f"boom {HALF}{ESCAPES}", reply=None)

    _edit_rows(work / "a/predictions/a/coin_flip.jsonl", errored)
    rescored = run_cli("rescore", str(work / "a"))
    assert rescored.returncode == 1 and "Traceback" not in rescored.stderr, (
        rescored.stderr
    )  # an errored sample: incomplete
    assert "boom \ufffd" in rescored.stdout and _planted(rescored.stdout) == []
    _edit_report(work / "b", lambda report: report.update(model=f"b{HALF}{ESCAPES}"))
    compared = run_cli("compare", str(work / "a"), str(work / "b"), "--out", str(tmp_path / "cmp"))
    assert compared.returncode == 0 and "Traceback" not in compared.stderr, compared.stderr
    assert "b\ufffd" in compared.stdout and _planted(compared.stdout) == []


def test_a_model_name_is_not_markup_to_the_progress_bar(tmp_path: Path) -> None:
    """The bar's label holds the model's name (here from a saved config, resumed): rich read it as
    markup, so `[/]` ended the run with MarkupError and `[link=...]` drew a hidden link."""
    work = tmp_path / "w"
    made = run_cli("eval", "--model", "oracle", "--limit", "6", "--work-dir", str(work), "--no-timestamp")
    assert made.returncode == 0, made.stderr
    path = work / "configs/task_config.yaml"
    saved = yaml.safe_load(path.read_text())
    for part in ("config", "fingerprint"):  # another name: another model folder, whose samples are all to ask
        saved[part]["model_id"] = f"[/]x[link=https://evil.example]y[/link]{ESCAPES}"
    path.write_text(yaml.safe_dump(saved))
    code, received = on_terminal("eval", "--use-cache", str(work))
    assert code == 0, received[-3000:]
    assert "MarkupError" not in received and "[link=https://evil.example]y[/link]" in received
    assert "\x1b]8;" not in received and _planted(received) == []  # no link, rich's or the name's


@pytest.mark.parametrize("form", ["csv", "jsonl"])
def test_answers_on_a_terminal_show_escapes_in_a_saved_list_as_replacements(
    runs: Path, tmp_path: Path, form: str
) -> None:
    """A hand-edited review holding a list or an object where a word was: JSON keeps C1 controls
    and bidi overrides inside it as they are, and they reached the terminal."""
    work = _copy(runs, tmp_path)

    def hostile(n: int, row: dict[str, Any]) -> None:
        if n < 2:
            row.update(people={"k": ESCAPES}, target=[ESCAPES])

    _edit_rows(work / "a/reviews/a/coin_flip.jsonl", hostile)
    code, received = on_terminal("answers", str(work / "a"), "--out", "-", "--format", form)
    assert code == 0, received[-2000:]
    assert _planted(received) == [] and "\ufffd" in received and "click" in received


@pytest.mark.parametrize(
    "interval",
    [[0.5, float("nan")], [float("-inf"), 0.5]],
    ids=["nan", "infinite"],
)
def test_half_an_interval_in_a_saved_report_leaves_the_index_drawn(
    runs: Path, tmp_path: Path, interval: list[Any]
) -> None:
    """An interval with one finite end: the index's script drew the low end and stopped at the
    high one, leaving the page without its leaderboard."""
    work = _copy(runs, tmp_path)
    _edit_report(work / "a", lambda report: report["intervals"].update(f1_score=interval, accuracy=interval))
    assert run_cli("view", str(work)).returncode == 0
    dom = _drawn(work / "index.html", tmp_path)
    assert 'data-ready="1"' in dom and len(re.findall(r'<tr class="run', dom)) == 2


def test_a_saved_count_of_people_in_other_digits_leaves_the_chart_to_the_others(runs: Path, tmp_path: Path) -> None:
    """by_people keyed "²" (a digit to Python's isdigit, NaN to the page's Number): the chart's
    axis took NaN for an end and drew every run's points off the chart."""
    work = _copy(runs, tmp_path)
    _edit_report(work / "a", lambda report: report["by_people"].update({"²": report["by_people"]["2"]}))
    assert run_cli("view", str(work)).returncode == 0
    dom = _drawn(work / "index.html", tmp_path)
    chart = re.search(r'<div id="chart">(.*?)</div>', dom, re.S)
    assert chart is not None
    width = float(re.search(r'<svg width="([\d.]+)"', chart[1])[1])  # type: ignore[index]
    xs = [float(x) for x in re.findall(r'<circle cx="([^"]+)"', chart[1])]
    assert len(xs) >= 4 and all(0 <= x <= width for x in xs), (width, xs)


BLOCKS = ["# a heading", "- an item", "1. a number", "---", "*emphasis* and _this_", "> a quote", "    code"]


def test_compare_markdown_keeps_a_note_that_looks_like_markdown_as_text(runs: Path, tmp_path: Path) -> None:
    """compare.md lists notes (warnings, skipped runs, runs left out) as list items, and names
    runs by their model: a note or a name beginning `# ` became a heading, `*x*` emphasis."""
    from coinflip.pages.compare import to_markdown

    out = tmp_path / "cmp"
    assert run_cli("compare", str(runs / "a"), str(runs / "b"), "--out", str(out)).returncode == 0
    result = json.loads((out / "compare.json").read_text())
    result["warnings"], result["skipped"] = [], BLOCKS
    for entry in result["leaderboard"]:
        entry["model"] = '~~struck~~ *em* <b onmouseover="alert(1)">b</b>'  # a tag markdown reads as one
    shown = markdown_page(to_markdown(result))
    assert {tag for tag, _ in shown.tags} <= MARKDOWN_TAGS
    assert [tag for tag, _ in shown.tags].count("h1") == 1 and all(len(set(t)) == 1 for t in shown.tables)
    assert (
        all(block.strip() in shown.text for block in BLOCKS)
        and '~~struck~~ *em* <b onmouseover="alert(1)">b</b>' in shown.text
    )


def test_only_what_owasp_lists_as_a_formula_start_is_quoted_in_the_csv(runs: Path, tmp_path: Path) -> None:
    """OWASP's list (= + - @ tab CR at the start) gets an apostrophe; a reply that starts with a line
    break or any other character is written as it is, so pandas users get their text back."""
    work = _copy(runs, tmp_path)
    starts = ["=", "+", "-", "@", "\t", "\r", "\n", "\n=", " =", "\uff1d", "'", "A"]
    texts = [f'{start}HYPERLINK("http://x")' for start in starts]
    _edit_rows(work / "a/predictions/a/coin_flip.jsonl", lambda n, row: row.update(question=texts[n % len(texts)]))
    out = run_cli("answers", str(work / "a"), "--out", str(tmp_path / "a.csv"))
    assert out.returncode == 0, out.stderr
    with (tmp_path / "a.csv").open(newline="", encoding="utf-8") as handle:  # as written: \r stays \r
        questions = [r["question"] for r in csv.DictReader(handle)]
    assert len(questions) >= len(texts)
    expected = [("'" if n < 6 else "") + text for n, text in enumerate(texts)]
    assert questions[: len(texts)] == expected


def test_a_probe_links_its_runs_pages_whatever_letters_the_model_name_has(tmp_path: Path) -> None:
    """safe_name keeps letters of any script in a model's folder; the probe page's link to that
    folder was not quoted, so the link check turned it into "#"."""
    made = run_cli(
        "probe",
        "--model",
        "oracle",
        "--model-id",
        "модель",
        "--limit",
        "10",
        "--lengths",
        "0",
        "--work-dir",
        str(tmp_path),
    )
    assert made.returncode == 0, made.stderr
    (page,) = tmp_path.glob("probe_*/probe.html")
    hrefs = [dict(attrs)["href"] for tag, attrs in Page(page.read_text()).tags if tag == "a"]
    assert hrefs and all(h != "#" for h in hrefs)
    from urllib.parse import unquote

    assert all((page.parent / unquote(h or "")).is_file() for h in hrefs)


@pytest.fixture(scope="module")
def probed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A probe's folder, as `coinflip probe` leaves it; tests resume copies of it."""
    work = tmp_path_factory.mktemp("probed")
    made = run_cli("probe", "--model", "oracle", "--limit", "6", "--lengths", "0", "--work-dir", str(work))
    assert made.returncode == 0, made.stderr
    (folder,) = work.glob("probe_*")
    return folder


def test_a_resumed_probe_says_its_saved_model_name_as_text(probed: Path, tmp_path: Path) -> None:
    """`probe --use-cache` takes the model's name from the base run's saved settings, and printed
    it raw in each variant's progress line."""
    folder = shutil.copytree(probed, tmp_path / "probe")
    path = folder / "runs/base/configs/task_config.yaml"
    saved = yaml.safe_load(path.read_text())
    for part in ("config", "fingerprint"):
        saved[part]["model_id"] = f"m{ESCAPES}"
    path.write_text(yaml.safe_dump(saved))
    resumed = run_cli("probe", "--use-cache", str(folder))
    assert resumed.returncode == 0, resumed.stderr
    assert "probe m\ufffd" in resumed.stderr and _planted(resumed.stderr + resumed.stdout) == []


@pytest.mark.parametrize("seconds", [1e308, -5.0])
def test_a_saved_duration_that_is_none_is_left_out_of_the_latency_summary(
    runs: Path, tmp_path: Path, seconds: float
) -> None:
    """latency_s 1e308 in two saved rows: their sum overflowed and rescore ended in OverflowError;
    a negative one is no request's time either."""
    work = _copy(runs, tmp_path)
    _edit_rows(
        work / "a/predictions/a/coin_flip.jsonl", lambda n, row: row.update(latency_s=seconds) if n < 2 else None
    )
    rescored = run_cli("rescore", str(work / "a"))
    assert rescored.returncode == 0 and "Traceback" not in rescored.stderr, rescored.stderr
    (report,) = (work / "a").glob("reports/*/coin_flip.json")
    latency = json.loads(report.read_text())["usage"]["latency_s"]
    assert 0 <= latency["mean"] <= latency["max"] < 1e9


FORGED = "\nfake line: all runs complete"  # a line break, then what would read as a line of coinflip's


def test_a_run_in_a_folder_named_in_bytes_that_are_not_utf8_is_listed_and_linked(runs: Path, tmp_path: Path) -> None:
    """A folder name of bytes that are not UTF-8 (Python reads them as lone surrogates) made the
    run's link fail to quote: the index listed a complete run as broken, and compare ended in a
    traceback. Its name, with a line break in it, prints as one line."""
    work = _copy(runs, tmp_path)
    odd = os.fsencode(work) + b"/\xff\xfe" + os.fsencode(f"\x1b[2J\x9b31m\u202e<b>{FORGED}")  # no "/"
    os.rename(os.fsencode(work / "b"), odd)
    viewed = run_cli("view", str(work))
    assert viewed.returncode == 0, viewed.stderr
    data = json.loads(Page((work / "index.html").read_text()).scripts[0])
    assert len(data["runs"]) == 2 and data["problems"] == []
    from urllib.parse import unquote_to_bytes

    (href,) = [r["href"] for r in data["runs"] if r["run"] != "a"]
    assert os.path.isfile(os.fsencode(work) + b"/" + unquote_to_bytes(href))  # the link finds the page
    compared = run_cli("compare", str(work), "--out", str(tmp_path / "cmp"))
    assert compared.returncode == 0 and "Traceback" not in compared.stderr, compared.stderr
    printed = compared.stdout.splitlines()
    assert not any(line.lstrip().startswith("fake line") for line in printed) and _planted(compared.stdout) == []


def test_a_saved_model_name_with_a_line_break_prints_as_one_line(runs: Path, tmp_path: Path) -> None:
    """The summary's title, and compare's name cell, hold the model's name: a line break in a
    saved one printed a line that read as the summary's own."""
    work = _copy(runs, tmp_path)
    path = work / "a/configs/task_config.yaml"
    saved = yaml.safe_load(path.read_text())
    saved["config"]["model_id"] = f"a{FORGED}"
    path.write_text(yaml.safe_dump(saved))
    (work / "a/predictions/a").rename(work / "a/predictions" / safe_name(f"a{FORGED}"))  # the name's folder
    rescored = run_cli("rescore", str(work / "a"))
    assert rescored.returncode == 0, rescored.stderr
    assert "a\ufffdfake line" in rescored.stdout
    assert not any(line.lstrip("│ ").startswith("fake line") for line in rescored.stdout.splitlines())


def test_an_error_naming_a_saved_value_with_a_line_break_is_one_line(runs: Path, tmp_path: Path) -> None:
    """compare's 'nothing to compare' names each run's data; a saved split with a line break
    made exit 2 print two lines, the second a forged 'error:'."""
    work = _copy(runs, tmp_path)
    _edit_report(work / "b", lambda report: report["dataset"].update(split="test\nerror: forged"))
    compared = run_cli("compare", str(work / "a"), str(work / "b"), "--out", str(tmp_path / "cmp"))
    assert compared.returncode == 2 and len(compared.stderr.strip().splitlines()) == 1, compared.stderr
    assert "test\ufffderror: forged" in compared.stderr


@pytest.mark.parametrize("setting", ["lengths", "length_count"])
def test_a_huge_saved_probe_setting_is_named_in_a_short_line(probed: Path, tmp_path: Path, setting: str) -> None:
    """A probe.json edited to hold 300,000 letters where a setting was: the refusal quoted all of them."""
    folder = shutil.copytree(probed, tmp_path / "probe")
    saved = json.loads((folder / "probe.json").read_text())
    saved["settings"][setting] = "W" * 300_000
    (folder / "probe.json").write_text(json.dumps(saved))
    resumed = run_cli("probe", "--use-cache", str(folder))
    assert resumed.returncode == 2 and len(resumed.stderr.strip().splitlines()) == 1, resumed.stderr[:500]
    assert len(resumed.stderr) < 500 and setting.replace("_", "-") in resumed.stderr


def test_the_resume_hint_shows_a_folder_names_escapes_as_replacements(runs: Path, tmp_path: Path) -> None:
    """An incomplete run's hint quotes its folder for a shell; shlex.quote keeps escape sequences
    inside the quotes, so a folder someone named with them acted on the terminal."""
    run = shutil.copytree(runs / "a", tmp_path / "a\x1b[2J\x9b31m\u202e")

    def errored(n: int, row: dict[str, Any]) -> None:
        if n == 0:
            row.update(error="boom", reply=None)

    _edit_rows(run / "predictions/a/coin_flip.jsonl", errored)
    rescored = run_cli("rescore", str(run))
    assert rescored.returncode == 1 and "resume with: coinflip eval --use-cache" in rescored.stderr, rescored.stderr
    assert _planted(rescored.stdout + rescored.stderr) == []
