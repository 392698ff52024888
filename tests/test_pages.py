"""Pages are escaped by construction: whatever a run directory holds (config values, report fields,
model ids, replies, folder names), every page shows it as text. Each page is rendered with hostile
values in every field and parsed with an HTML parser: no tag, attribute or script of the payloads
survives, and the payloads are there as text."""

from __future__ import annotations

import io
import json
import re
import shutil
from collections.abc import Callable
from html.parser import HTMLParser
from itertools import cycle
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console

from coinflip.pages import compare, index, run_page, summary
from coinflip.testing.server import FakeOpenAIServer

from .answer_server import AnswerServer, answer, chat
from .conftest import only_run_dir, read_jsonl, run_cli
from .test_reports import _chromium

PAYLOADS = (
    "<img src=x onerror=alert(1)>",
    '"><script>alert(2)</script>',
    "' onmouseover='alert(3)' x='",
    "</style><script>alert(4)</script>",
    "</script><svg onload=alert(5)>",
    "javascript:alert(6)",
    "<!--<a href=javascript:alert(7)>-->",
    "{{ 7*7 }}{% if 1 %}jinja{% endif %}",
)
# every element the templates and the index script make; anything else was injected
ALLOWED = {
    *("html", "head", "meta", "title", "style", "body", "main", "section", "noscript", "script"),
    *("h1", "h2", "h3", "div", "span", "b", "i", "small", "p", "pre", "code", "br", "a", "ul", "li"),
    *("table", "thead", "tbody", "tr", "th", "td", "details", "summary"),
    *("button", "label", "select", "option", "input"),
    *("svg", "line", "text", "rect", "circle", "path"),
}


class Page(HTMLParser):
    """Every start tag with its attributes, the text, and the content of each <script>."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.text: list[str] = []
        self.scripts: list[str] = []
        self._in_script = False
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))
        self._in_script = tag == "script"

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        (self.scripts if self._in_script else self.text).append(data)

    def handle_comment(self, data: str) -> None:
        raise AssertionError(f"a comment reached the page: {data[:80]!r}")


def assert_clean(html: str, scripts: int) -> Page:
    """No injected element, event handler, script URL or extra script; JSON cannot end its element."""
    page = Page(html)
    names = {tag for tag, _ in page.tags}
    assert names <= ALLOWED, f"injected elements: {names - ALLOWED}"
    for tag, attrs in page.tags:
        for name, value in attrs:
            assert not name.startswith("on"), (tag, name, value)
            assert name not in ("src", "srcdoc", "formaction"), (tag, name)
            if name == "href":
                assert value is not None and value.startswith(("./", "runs/", "#")), value
            if name == "style":
                assert re.fullmatch(r"background: ?(#[0-9a-f]{6}|rgb\(\d+, \d+, \d+\));?", value or ""), value
    assert [t for t, _ in page.tags].count("script") == scripts
    for body in page.scripts:
        assert "</script" not in body.lower() and "<!--" not in body
    return page


def hostile(value: Any, payloads: Any) -> Any:
    """The same structure with every leaf (string, number, bool, null) replaced by a payload."""
    if isinstance(value, dict):
        return {k: hostile(v, payloads) for k, v in value.items()}
    if isinstance(value, list):
        return [hostile(v, payloads) for v in value]
    return next(payloads)


def with_hostile_keys(report: dict[str, Any]) -> dict[str, Any]:
    """Fields whose keys are data (reasons, groups, settings) get hostile keys, and a new field too."""
    out = dict(report)
    for key in ("by_people", "invalid_reasons", "generation_config", "provenance"):
        out[key] = {**(out.get(key) or {}), PAYLOADS[0]: PAYLOADS[1]}
    out["usage"] = {**out["usage"], "finish_reasons": {PAYLOADS[2]: PAYLOADS[3]}, PAYLOADS[4]: PAYLOADS[5]}
    out[PAYLOADS[6]] = {PAYLOADS[0]: PAYLOADS[7]}
    return out


@pytest.fixture(scope="module")
def forced_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run with forced answers, probabilities and invalid reasons: every panel of the page is drawn."""
    work = tmp_path_factory.mktemp("forced")
    with FakeOpenAIServer("mixed") as srv:
        result = run_cli(
            "eval", "--model", "m", "--api-url", srv.url, "--limit", "120", "--force-answer",
            "--generation-config", "logprobs=true,top_logprobs=3", "--work-dir", str(work),
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return only_run_dir(work)


@pytest.fixture(scope="module")
def repeats_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("repeats")
    result = run_cli("eval", "--model", "random", "--limit", "20", "--repeats", "3", "--work-dir", str(work))
    assert result.returncode == 0, result.stderr
    return only_run_dir(work)


def test_repeats_panel_lists_each_repeat(repeats_run: Path) -> None:
    report = json.loads((repeats_run / "reports/random/coin_flip.json").read_text())
    html = (repeats_run / "reports/random/coin_flip.html").read_text()
    page = assert_clean(html, scripts=1)
    for name, spread in report["repeat_metrics"]["per_repeat"].items():
        each = " ".join(f"{v:.4f}" for v in spread["values"])
        assert f"<td>{name}</td><td>{spread['mean']:.4f}</td><td>{spread['std']:.4f}</td><td>{each}</td>" in html
    assert "built-in" not in "".join(page.text)


def _samples(run: Path) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    predictions = read_jsonl(run / "predictions/m/coin_flip.jsonl")
    reviews = read_jsonl(run / "reviews/m/coin_flip.jsonl")
    return list(zip(predictions, reviews, strict=True))


@pytest.mark.parametrize("keys", [False, True], ids=["values", "values-and-keys"])
def test_run_page_shows_hostile_values_in_every_field_as_text(forced_run: Path, repeats_run: Path, keys: bool) -> None:
    report = json.loads((forced_run / "reports/m/coin_flip.json").read_text())
    assert report["forced"] and report["calibration"]["available"]  # the page draws every panel
    repeated = json.loads((repeats_run / "reports/random/coin_flip.json").read_text())
    report["repeat_metrics"] = repeated["repeat_metrics"]  # and the repeats panel
    bad = hostile(report, cycle(PAYLOADS))
    bad = with_hostile_keys(bad) if keys else bad
    samples = hostile([list(s) for s in _samples(forced_run)], cycle(PAYLOADS))
    html = run_page.render(bad, [tuple(s) for s in samples], hostile([1.0, 2.0], cycle(PAYLOADS)), [3, 4])
    page = assert_clean(html, scripts=1)
    text = "".join(page.text)
    for payload in PAYLOADS:
        assert payload in text  # shown, as text
    assert "49jinja" not in text  # a value is never evaluated as a template
    # the terminal summary reads the same report through the same declaration: no crash, no markup
    shown = io.StringIO()
    summary.print_summary(bad, console=Console(file=shown, width=300))
    assert f"coin_flip - {bad['model']}" in shown.getvalue() and "samples ?  invalid ? (?)" in shown.getvalue()


def test_run_page_of_real_values_draws_every_panel(forced_run: Path) -> None:
    html = (forced_run / "reports/m/coin_flip.html").read_text()
    page = assert_clean(html, scripts=1)
    text = " ".join(page.text)
    report = json.loads((forced_run / "reports/m/coin_flip.json").read_text())
    # the forced series beside the strict one in both bar charts
    assert html.count('class="bar s1"') == len(report["by_people"]) + 1
    assert 'class="legend"' in html and "forced" in text
    # the reliability diagram says how many samples each bar holds
    bins = [b for b in report["calibration"]["bins"] if b["samples"]]
    counts = re.findall(r'<text class="count"[^>]*>(\d+)</text>', html)
    assert [int(c) for c in counts] == [b["samples"] for b in bins] and sum(map(int, counts)) > 0
    # an invalid answer the forced one got right is labelled so, and the forced cell says which part is which
    recovered = [
        r for r in read_jsonl(forced_run / "reviews/m/coin_flip.jsonl") if r["invalid"] and r["forced"] == r["target"]
    ]
    assert recovered and html.count("recovered by forcing</small>") == len(recovered)
    assert f"recovered by forcing ({len(recovered)})" in text
    assert html.count("<small>verdict</small>") == report["forced"]["asked"]


def test_index_and_compare_show_hostile_run_directories_as_text(forced_run: Path, tmp_path: Path) -> None:
    work = tmp_path / "w"
    for n in range(2):
        copy = shutil.copytree(forced_run, work / f"{PAYLOADS[n].replace('/', '_')}{n}")
        report_file = copy / "reports/m/coin_flip.json"
        report = json.loads(report_file.read_text())
        keep = {k: report[k] for k in ("metrics", "counts", "dataset")}  # still a run on the same data
        bad = with_hostile_keys(hostile(report, cycle(PAYLOADS[n:] + PAYLOADS[:n])))
        bad.update(model=PAYLOADS[n], metrics=keep["metrics"], counts=keep["counts"], dataset=keep["dataset"])
        report_file.write_text(json.dumps(bad))
        config_file = copy / "configs/task_config.yaml"
        saved = yaml.safe_load(config_file.read_text())
        saved["config"].update(model_id=PAYLOADS[0])  # a setting of another type makes a broken run (its reason shown)
        saved["provenance"] = hostile(saved.get("provenance") or {"created": 1}, cycle(PAYLOADS))
        config_file.write_text(yaml.safe_dump(saved))
    (work / PAYLOADS[3].replace("/", "_")).mkdir()  # a foreign folder with a hostile name
    broken = shutil.copytree(forced_run, work / "broken") / "configs/task_config.yaml"
    saved = yaml.safe_load(broken.read_text())
    saved["config"].update(prompt_template=PAYLOADS[1], few_shot_num=PAYLOADS[2])  # refused: a reason that holds them
    broken.write_text(yaml.safe_dump(saved))
    page = assert_clean(index.write(work).read_text(), scripts=2)
    data = json.loads(page.scripts[0])
    assert {r["model"] for r in data["runs"]} == {PAYLOADS[0], PAYLOADS[1]}  # read back whole, as data
    assert [p["kind"] for p in data["problems"] if p["id"] == "broken"] == ["broken"]
    dom = _chromium(
        f"--user-data-dir={tmp_path / 'profile'}",
        "--virtual-time-budget=5000",
        "--dump-dom",
        (work / "index.html").as_uri(),
    ).stdout
    drawn = assert_clean(dom, scripts=2)  # what the script drew holds no payload as markup either
    assert PAYLOADS[0] in "".join(drawn.text) and len(re.findall(r'<tr class="run', dom)) == 2

    result = compare.compare([str(work)])
    assert [r["model"] for r in result["leaderboard"]] and len(result["pairs"]) == 1
    written = compare.write_files(result, tmp_path / "cmp")
    from markdown_it import MarkdownIt

    md = (tmp_path / "cmp/compare.md").read_text()  # as a markdown viewer renders it, raw HTML allowed
    html = Page(MarkdownIt("commonmark", {"html": True}).enable("table").render(md))
    assert {tag for tag, attrs in html.tags if not attrs} == {tag for tag, _ in html.tags} <= ALLOWED | {"strong"}
    assert PAYLOADS[0] in "".join(html.text) and written


def _rescored_after_editing(tmp_path: Path, edit: Callable[[dict[str, Any]], None]) -> tuple[Path, Any]:
    """An oracle run of 5 questions whose task_config.yaml `edit` changed by hand, then rescored."""
    result = run_cli("eval", "--model", "oracle", "--limit", "5", "--work-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    run = only_run_dir(tmp_path)
    config_file = run / "configs/task_config.yaml"
    saved = yaml.safe_load(config_file.read_text())
    edit(saved)
    config_file.write_text(yaml.safe_dump(saved))
    return run, run_cli("rescore", str(run))


def test_a_config_value_edited_into_markup_stays_text_after_rescore(tmp_path: Path) -> None:
    """The issue's own case: few_shot_num set to a tag in task_config.yaml, then `coinflip rescore`."""
    run, rescored = _rescored_after_editing(tmp_path, lambda saved: saved["config"].update(few_shot_num=PAYLOADS[0]))
    page = assert_clean((run / "reports/oracle/coin_flip.html").read_text(), scripts=1)
    if rescored.returncode == 0:  # read back as it was written: shown as text
        assert f"few-shot {PAYLOADS[0]}" in "".join(page.text)
    else:  # or refused in one line, the page untouched
        assert rescored.returncode == 2 and len(rescored.stderr.strip().splitlines()) == 1


def test_saved_settings_of_the_wrong_type_are_left_out_of_the_page_and_summary(tmp_path: Path) -> None:
    """A rescore builds the report from task_config.yaml's fingerprint and provenance, which are not
    checked as settings: a section that is text, text where a count belongs, a number where a hash
    does. The page and the summary read the report through its declaration, so each such value
    shows as unknown, never used as its wrong type (nor crashes the summary)."""

    def edit(saved: dict[str, Any]) -> None:
        saved["fingerprint"]["template"] = PAYLOADS[0]
        saved["fingerprint"]["dataset"].update(rows=PAYLOADS[1], sha256=5)
        saved["provenance"] = {"created": [PAYLOADS[2]], "coinflip_version": 7}  # free-form: shown as text

    run, rescored = _rescored_after_editing(tmp_path, edit)
    assert rescored.returncode == 0, rescored.stderr
    assert "data bundled:coinflip/_data/test.jsonl (test, sha256 ?)  template default" in rescored.stdout
    page = assert_clean((run / "reports/oracle/coin_flip.html").read_text(), scripts=1)
    text = "".join(page.text)
    assert "(test, ? rows, sha256 ?)" in text and "template default ()" in text and "coinflip 7," in text
    assert PAYLOADS[0] not in text and PAYLOADS[1] not in text and PAYLOADS[2] in text
    written = json.loads((run / "reports/oracle/coin_flip.json").read_text())  # saved as it is read: checked
    assert "template" not in written and "sha256" not in written["dataset"] and "rows" not in written["dataset"]


def test_templates_never_mark_a_value_safe() -> None:
    """Escaping is the default and no template opts out of it."""
    folder = Path(run_page.__file__).parent / "templates"
    for template in folder.iterdir():
        text = template.read_text()
        assert "|safe" not in text.replace(" ", "") and "autoescape false" not in text, template.name


@pytest.mark.parametrize(
    ("reply", "says"),
    [
        ("The coin... I am not sure.", "no forced answer gave a YES or NO answer to read them at"),
        ("ANSWER: {right}", "the server did not return them"),
    ],
    ids=["no-answer-to-read-them-at", "none-returned"],
)
def test_asked_for_probabilities_the_page_says_why_there_are_none(tmp_path: Path, reply: str, says: str) -> None:
    """`logprobs=5` was given: the page must not tell the user to ask for them, but say what went wrong."""
    with AnswerServer(lambda s: answer(chat(reply.format(right=s.right_answer)))) as srv:
        result = run_cli(
            "eval", "--model", "m", "--api-url", srv.url, "--limit", "6", "--force-answer", "--stream",
            "--generation-config", "logprobs=5", "--retries", "0", "--work-dir", str(tmp_path),
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    run = only_run_dir(tmp_path)
    report = json.loads((run / "reports/m/coin_flip.json").read_text())
    why = report["calibration"]["reason"]
    assert report["calibration"]["available"] is False and says in why and "ask for them" not in why, why
    page = assert_clean((run / "reports/m/coin_flip.html").read_text(), scripts=1)
    assert why in "".join(page.text)
