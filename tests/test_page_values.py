"""Every page shows whatever a run directory holds as plain text that fits the page, checked in a
real browser: values with control characters, bidi overrides (U+202E would reverse the run id
written after a model name), half a surrogate pair, a word of thousands of letters, markup, and
names that are also JavaScript's own keys. The page is opened in an iframe of a small page of the
test's own, which reads back what the browser built: its width, its text, whether any injected
code ran."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from html import unescape as html_unescape
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import yaml

from coinflip.pages import answers, html, index, run_page
from coinflip.rundir import RunDir
from coinflip.testing.server import FakeOpenAIServer

from .conftest import read_jsonl, run_cli
from .test_reports import _chromium

UNSHOWABLE = "\u202e\u2067\x00\x1b[31m\x07\x7f\x9b\ud800"  # what no page may hold as it is
UNSHOWN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
MARKUP = "<img src=x onerror=window.__pwned=1>"
WORD = "W" * 5000  # one word: a page must wrap it, not grow wider than the window
VALUE = f"{UNSHOWABLE}{MARKUP}{WORD}"
MODEL = f"\u202e\x1b[31m{MARKUP}{WORD}"  # a command line holds no NUL and no half pair
FOLDER = f"\u202e\x1b{MARKUP}"  # nor does a folder name hold NUL or /


@dataclass
class Pages:
    run: Path  # a run's coin_flip.html
    index: Path
    compare: Path  # compare.json beside compare.md
    rescored: str  # what rescore printed: the terminal summary
    compared: str  # what compare printed


def _edit(run: Path, answer: str) -> None:
    """Every text a prediction holds made hostile; each reply with its own finish_reason."""
    (folder,) = (run / "predictions").iterdir()
    predictions = folder / "coin_flip.jsonl"
    rows = read_jsonl(predictions)
    for n, row in enumerate(rows):
        row.update(question=row["question"] + VALUE, prompt=VALUE, reply=f"{VALUE}\nANSWER: {answer}")
        row.update(finish_reason=f"{UNSHOWABLE}{n}{WORD}", reasoning=VALUE)
    predictions.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pages]:
    """Two runs of a hostile model on the same questions, whose predictions were made hostile and
    rescored, one in a hostile folder; then `coinflip view` and `coinflip compare`."""
    work = tmp_path_factory.mktemp("pages") / "w"
    with FakeOpenAIServer("mixed") as server:
        for n in range(2):
            args = ("--model", MODEL, "--api-url", server.url, "--limit", "24", "--work-dir", str(work / str(n)))
            assert run_cli("eval", *args, "--no-timestamp").returncode == 0
    runs = [work / "0", (work / "1").rename(work / FOLDER)]
    rescored = ""
    for run, answer in zip(runs, ("YES", "NO"), strict=True):
        _edit(run, answer)
        record = json.loads((run / "logs/requests.json").read_text())  # a long hint: it must not squeeze the keys
        record["hints"] = ["the server took at most 18 requests at once: give --eval-batch-size 18. " * 6]
        (run / "logs/requests.json").write_text(json.dumps(record))
        result = run_cli("rescore", str(run))
        assert result.returncode == 0, result.stderr
        rescored += result.stdout
    assert run_cli("view", str(work)).returncode == 0
    compared = run_cli("compare", str(work), "--out", str(work.parent / "cmp"))
    assert compared.returncode == 0, compared.stderr
    (page,) = (runs[0] / "reports").glob("*/coin_flip.html")
    yield Pages(page, work / "index.html", work.parent / "cmp/compare.json", rescored, compared.stdout)


def _look(page: Path, tmp_path: Path, fragment: str = "") -> dict:
    """What the browser built of `page`, 1280 pixels wide: its width and the window's, its title,
    its text, the <img> elements in it and whether `window.__pwned` was set."""
    frame = tmp_path / "frame.html"
    url = page.as_uri() + (f"#{fragment}" if fragment else "")
    frame.write_text(
        '<!DOCTYPE html><html><body style="margin:0">'
        f'<iframe id="f" src="{url}" style="width:1280px;height:900px;border:0"></iframe><pre id="out"></pre>'
        "<script>var f=document.getElementById('f');f.onload=function(){var d=f.contentDocument,e=d.documentElement;"
        "document.getElementById('out').textContent=JSON.stringify({width:e.scrollWidth,window:e.clientWidth,"
        "title:d.title,text:d.title+e.textContent,imgs:d.getElementsByTagName('img').length,"
        "pwned:f.contentWindow.__pwned!==undefined,ready:d.body.getAttribute('data-ready'),split:split(d)})};"
        # cells holding one short word drawn on more than one line: a column squeezed to nothing
        "function split(d){return Array.prototype.filter.call(d.querySelectorAll('th,td'),function(c){"
        "if(c.childNodes.length!==1||c.firstChild.nodeType!==3||!/^[^\\s-]{1,20}$/.test(c.textContent.trim()))"
        "return false;var r=d.createRange();r.selectNodeContents(c);"
        "return r.getClientRects().length>1}).map(function(c){return c.textContent})}</script></body></html>"
    )
    result = _chromium(
        f"--user-data-dir={tmp_path / 'profile'}",
        "--allow-file-access-from-files",  # the frame's page may read the page it holds
        "--virtual-time-budget=5000",
        "--dump-dom",
        frame.as_uri(),
    )
    out = re.search(r'<pre id="out">(.*?)</pre>', result.stdout, re.S)
    assert out is not None and out[1], result.stderr[-2000:]
    return json.loads(html_unescape(out[1]))


class Page(HTMLParser):
    """An HTML document's elements, its text, and how many cells each row of each table has."""

    def __init__(self, document: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.tables: list[list[int]] = []
        self.scripts: list[str] = []
        self.text = ""
        self.feed(document)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append(0)
        elif tag in ("td", "th"):
            self.tables[-1][-1] += 1

    def handle_data(self, data: str) -> None:
        if self.lasttag == "script":
            self.scripts.append(data)
        else:
            self.text += data


def _probe_page(tmp_path: Path) -> Path:
    """probe.html of a probe whose every text is hostile, written as `coinflip probe` writes it."""
    from coinflip.probes.page import render

    metrics = {"accuracy": 0.5, "f1_score": 0.5, "precision": 0.5, "recall": 0.5, "yes_ratio": 0.5}
    variant = {"metrics": metrics, "intervals": {"accuracy": [0.4, 0.6]}, "invalid_rate": 0.1}
    point = {"accuracy": 0.5, "interval": [0.4, 0.6], "always_yes": 0.5, "f1_score": 0.5, "invalid_rate": 0.0}
    paired = {"difference": -0.1, "low": -0.2, "high": 0.0, "p_exact": 0.01}
    result = {
        "model": VALUE, "created": VALUE, "coinflip_version": VALUE, "directory": VALUE, "headline": VALUE,
        "complete": False, "view": "strict",
        "base": {"dataset": {"source": VALUE, "path": VALUE, "split": VALUE}, "bundled": False, "questions": 3,
                 "seed": 1},
        "variants": [
            {**variant, "name": "base", "title": VALUE, "run": VALUE, "page": f"javascript:{VALUE}"},
            {**variant, "name": "tails", "title": VALUE, "run": VALUE, "page": "../" + VALUE, "paired": paired,
             "verdict": VALUE},
        ],
        "length": {"points": [{**point, "people": 2, "samples": 3, "run": VALUE}], "verdict": VALUE},
    }  # fmt: skip
    page = tmp_path / "probe.html"
    page.write_text(render(result), encoding="utf-8")
    return page


def test_the_probe_page_quotes_its_resume_command_for_a_shell(tmp_path: Path) -> None:
    text = Page(_probe_page(tmp_path).read_text()).text
    assert "resume with\ncoinflip probe --use-cache '\ufffd\ufffd" in text  # one argument, whatever the folder holds


@pytest.mark.parametrize("which", ["run", "index", "probe"])
def test_every_page_shows_hostile_text_as_text_that_fits_the_window(pages: Pages, tmp_path: Path, which: str) -> None:
    page = {
        "run": lambda: pages.run,
        "index": lambda: pages.index,
        "probe": lambda: _probe_page(tmp_path),
    }[which]()
    seen = _look(page, tmp_path)
    assert not seen["pwned"] and seen["imgs"] == 0
    assert MARKUP in seen["text"] and WORD[:150] in seen["text"]  # shown, as text (names are cut at 200)
    assert UNSHOWN.findall(seen["text"]) == [], "a control character, bidi override or half pair reached the page"
    assert seen["width"] <= seen["window"], "a long value made the page wider than the window"
    assert seen["split"] == [], "a long value squeezed another column until its words broke"
    if which == "index":
        assert seen["ready"] == "1"  # the script drew everything


def test_the_terminal_shows_bidi_overrides_as_replacements(pages: Pages) -> None:
    """The summary after rescore and compare's tables print the model name: U+202E would reverse
    what follows it on the line."""
    for printed in (pages.rescored, pages.compared):
        assert "W" * 20 in printed and UNSHOWN.findall(printed) == []


MARKDOWN_TAGS = {"h1", "h2", "h3", "table", "thead", "tbody", "tr", "th", "td", "ul", "li", "p"}
"""What coinflip's markdown files may render to: headings, tables and lists of text."""


def markdown_page(text: str) -> Page:
    """Markdown as a CommonMark reader with tables, strikethrough and raw HTML renders it."""
    from markdown_it import MarkdownIt

    return Page(MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"]).render(text))


MARKDOWN = "[a link](javascript:alert(1)) ![an image](x) `code` a|b c\\"


def test_compare_markdown_holds_markup_and_markdown_as_text(pages: Pages) -> None:
    """compare.md rendered as a markdown viewer renders it (HTML allowed, GitHub's tables): no
    element a name made, each row as many cells as the header, and the names there as text."""
    from coinflip.pages.compare import to_markdown

    result = json.loads(pages.compare.read_text())
    for n, entry in enumerate(result["leaderboard"]):
        entry["model"] = [MARKDOWN, entry["model"]][n % 2]
    shown = markdown_page(to_markdown(result))
    assert {tag for tag, _ in shown.tags} <= MARKDOWN_TAGS | {"strong"}
    assert all(len(set(table)) == 1 for table in shown.tables)  # no | of a name split a cell, no line break a row
    assert MARKDOWN.rstrip("\\") in shown.text and MARKUP in shown.text


def test_a_server_naming_a_finish_reason_per_reply_adds_ten_rows_to_the_page(pages: Pages) -> None:
    html = pages.run.read_text()
    table = re.search(r"<h2>finish_reason</h2><table>(.*?)</table>", html, re.S)
    assert table is not None
    rows = re.findall(r"<tr><td>(.*?)</td><td class=\"num\">(.*?)</td></tr>", table[1], re.S)
    assert len(rows) == 11 and rows[-1] == ("14 others", "14")  # 24 replies: ten kinds, then the rest


@pytest.mark.parametrize(
    "target",
    [
        "javascript:alert(1)",
        "JaVaScRiPt:alert(1)",
        " javascript:alert(1)",
        "data:text/html,<script>alert(1)</script>",
        "vbscript:x",
        "//evil.example/x",
        "/etc/passwd",
        "../../secret.html",
        "./a/%2e%2e/%2E%2E/b",
        'a" onmouseover="alert(1)',
        "a\\..\\b",
        "a\nb",
        "#\u202e",
        None,
        ["./a"],
    ],
)
def test_a_link_is_a_relative_path_or_http(target: object) -> None:
    assert html.link(target) == "#"


@pytest.mark.parametrize(
    ("target", "href"),
    [
        ("runs/base/reports/m/coin_flip.html", "./runs/base/reports/m/coin_flip.html"),
        ("./20250101_000000/reports/m%3Cb%3E/coin_flip.html", "./20250101_000000/reports/m%3Cb%3E/coin_flip.html"),
        ("https://example.org/a?b=c#d", "https://example.org/a?b=c#d"),
    ],
)
def test_a_relative_or_http_link_is_kept(target: str, href: str) -> None:
    assert html.link(target) == href


def test_every_link_in_a_template_goes_through_the_link_filter() -> None:
    folder = Path(run_page.__file__).parent / "templates"
    for template in folder.glob("*.html"):
        for value in re.findall(r'href="([^"]*)"', template.read_text()):
            assert re.fullmatch(r"\{\{ [\w.]+ \| link \}\}", value), (template.name, value)
    script = (folder / "index.js").read_text()
    assert script.count("setAttribute('href'") == 1 and "a.setAttribute('href',r.href)" in script  # board.href: link()


@pytest.fixture(scope="module")
def named_like_javascript(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Runs named `constructor` and `toString`, one of a model named `__proto__`: names that are
    keys every plain JavaScript object already has."""
    work = tmp_path_factory.mktemp("keys") / "w"
    for name, model in (("constructor", "oracle"), ("toString", "random")):
        made = run_cli("eval", "--model", model, "--limit", "10", "--work-dir", str(work / name), "--no-timestamp")
        assert made.returncode == 0, made.stderr
    report = work / "toString/reports/random/coin_flip.json"
    report.write_text(json.dumps({**json.loads(report.read_text()), "model": "__proto__"}))
    assert run_cli("view", str(work)).returncode == 0
    return work / "index.html"


@pytest.mark.parametrize(
    "fragment", ["", "a=constructor", "sel=toString,hasOwnProperty", "b=__proto__&a=valueOf", "model=__proto__"]
)
def test_the_index_script_takes_any_name_as_a_key(named_like_javascript: Path, tmp_path: Path, fragment: str) -> None:
    dom = _chromium(
        f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000", "--dump-dom",
        named_like_javascript.as_uri() + (f"#{fragment}" if fragment else ""),
    ).stdout  # fmt: skip
    assert 'data-ready="1"' in dom, "the index's script stopped"
    models = re.search(r'<select id="f-model">(.*?)</select>', dom, re.S)
    assert models is not None and '<option value="__proto__"' in models[1]  # the model can be picked
    drawn = re.findall(r'<tr class="run[^"]*" data-id="([^"]*)"', dom)
    assert sorted(drawn) == (["toString"] if fragment == "model=__proto__" else ["constructor", "toString"])
    assert '<tr class="details">' not in dom  # no run's details open by themselves


def test_a_run_folder_named_like_a_dunder_is_listed(tmp_path: Path) -> None:
    """`__proto__` is a run name like any other (docs/viewing.md): view lists it, not silently skips it."""
    for name in ("__proto__", "__init__"):
        made = run_cli(
            "eval", "--model", "oracle", "--limit", "5", "--work-dir", str(tmp_path / name), "--no-timestamp"
        )
        assert made.returncode == 0, made.stderr
    assert sorted(r["id"] for r in index.build(tmp_path)["runs"]) == ["__init__", "__proto__"]


def test_a_saved_subset_that_is_not_a_count_is_one_line(tmp_path: Path) -> None:
    made = run_cli("eval", "--model", "oracle", "--limit", "5", "--work-dir", str(tmp_path), "--no-timestamp")
    assert made.returncode == 0, made.stderr
    config = tmp_path / "configs/task_config.yaml"
    saved = yaml.safe_load(config.read_text())
    saved["subset"]["of"] = "<b>all</b>"
    config.write_text(yaml.safe_dump(saved))
    result = run_cli("rescore", str(tmp_path))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "subset must hold whole numbers" in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("links") / "w"
    for name in ("oracle", "random"):
        made = run_cli("eval", "--model", name, "--limit", "10", "--work-dir", str(work / name), "--no-timestamp")
        assert made.returncode == 0, made.stderr
    return work


def _saved_answers(work: Path) -> int:
    run = RunDir.open(work / "oracle")
    return answers.save(run, answers.default_path(run, "csv"), "csv")


ANSWERS, COMPARE, VIEW = (
    (lambda work: run_cli("answers", str(work / "oracle"))),
    (lambda work: run_cli("compare", str(work))),
    (lambda work: run_cli("view", str(work))),
)


@pytest.mark.parametrize(
    ("planted", "written", "write"),
    [
        (f"oracle/.answers.csv.{os.getpid()}.tmp", "oracle/answers.csv", _saved_answers),  # in this process
        ("oracle/answers.csv", "oracle/answers.csv", ANSWERS),
        ("compare/compare.md", "compare/compare.md", COMPARE),
        ("index.html", "index.html", VIEW),
        (f".index.html.{os.getpid()}.tmp", "index.html", index.write),  # in this process: its pid
    ],
    ids=["answers-tmp", "answers", "compare-md", "index", "index-tmp"],
)
def test_a_link_left_in_a_work_directory_is_never_written_through(
    two_runs: Path, tmp_path: Path, planted: str, written: str, write: Callable[[Path], Any]
) -> None:
    """Whoever wrote the work directory may have left a link where a page or its temporary file
    will be written: the page replaces the link, the file it pointed to stays as it was."""
    victim = tmp_path / "victim"
    victim.write_text("precious")
    link_path = two_runs / planted
    link_path.parent.mkdir(exist_ok=True)
    link_path.unlink(missing_ok=True)
    link_path.symlink_to(victim)
    try:
        done = write(two_runs)
        assert getattr(done, "returncode", 0) == 0, getattr(done, "stderr", "")
        assert victim.read_text() == "precious"
        page = two_runs / written
        assert page.is_file() and not page.is_symlink() and page.stat().st_size > 100
    finally:
        link_path.unlink(missing_ok=True)


def test_a_resumed_probe_replaces_a_link_left_at_its_page(tmp_path: Path) -> None:
    made = run_cli("probe", "--model", "oracle", "--limit", "10", "--lengths", "0", "--work-dir", str(tmp_path / "w"))
    assert made.returncode == 0, made.stderr
    (folder,) = (tmp_path / "w").glob("probe_*")
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (folder / "probe.html").unlink()
    (folder / "probe.html").symlink_to(victim)
    resumed = run_cli("probe", "--use-cache", str(folder))
    assert resumed.returncode == 0, resumed.stderr
    assert victim.read_text() == "precious" and not (folder / "probe.html").is_symlink()


def test_the_index_lists_long_questions_cut(two_runs: Path, tmp_path: Path) -> None:
    """The pair view lists the questions two runs disagree on: one of 200,000 characters (a data
    file someone wrote) is listed by its first 2,000, so 20,000 listed rows stay a page."""
    work = shutil.copytree(two_runs, tmp_path / "w", ignore=shutil.ignore_patterns("index.html", "compare"))
    for run in ("oracle", "random"):
        predictions = work / run / f"predictions/{run}/coin_flip.jsonl"
        rows = read_jsonl(predictions)
        predictions.write_text(
            "".join(json.dumps({**r, "question": r["question"] + "x" * 200_000}) + "\n" for r in rows)
        )
    data = json.loads(Page(index.write(work).read_text()).scripts[0])
    assert data["questions"] and all(len(q) <= 2000 and q.endswith("…") for q, _, _ in data["questions"])


def test_a_chart_wider_than_its_panel_scrolls_rather_than_hides_bars(tmp_path: Path) -> None:
    """Data with 2 to 16 people: accuracy by people is 740 px wide in a 380 px panel at 1280 px. Each
    svg was shrunk to its panel and clipped its drawing there: 9 to 16 people hidden, no scrollbar."""
    from coinflip.data.generate import PeopleRange, generate_file

    generate_file(tmp_path / "mixed.jsonl", PeopleRange(2, 16), 60, 1)
    args = ("--model", "oracle", "--dataset-hub", "local", "--dataset-path", str(tmp_path / "mixed.jsonl"))
    assert run_cli("eval", *args, "--work-dir", str(tmp_path / "w"), "--no-timestamp").returncode == 0
    frame, page = tmp_path / "frame.html", (tmp_path / "w/reports/oracle/coin_flip.html").as_uri()
    frame.write_text(
        f'<iframe id="f" src="{page}" style="width:1280px;height:900px">'
        "</iframe><pre id=out></pre><script>var f=document.getElementById('f');f.onload=function(){"
        "var s=f.contentDocument.querySelectorAll('svg');document.getElementById('out').textContent=s.length+' '+"
        "Array.prototype.filter.call(s,function(e){var b=e.getBBox();"
        "return b.x+b.width>e.getBoundingClientRect().width+2})"
        ".map(function(e){return e.getAttribute('aria-label')}).join('|')}</script>"
    )
    dom = _chromium(
        f"--user-data-dir={tmp_path / 'profile'}", "--allow-file-access-from-files", "--virtual-time-budget=5000",
        "--dump-dom", frame.as_uri(),
    ).stdout  # fmt: skip
    out = re.search(r'<pre id="out">(\d+) (.*?)</pre>', dom, re.S)
    assert out is not None and int(out[1]) >= 3, dom[-2000:]
    assert out[2] == "", f"charts drawn past their box, hidden: {out[2]}"
