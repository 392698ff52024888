"""Numbers the index and compare show agree with the run page and the report they come from:
found by building real runs and computing each figure again from the saved files."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

from coinflip.pages.board import row
from coinflip.pages.catalog import scan
from coinflip.testing.server import FakeOpenAIServer

from .conftest import run_cli


def test_index_token_totals_count_every_request_as_the_run_page_does(tmp_path: Path) -> None:
    """With --force-answer the index's "prompt tokens" left out the forced requests (the usage of
    first replies only) while the run page, the terminal and tokens.prompt in the same row counted them."""
    work = tmp_path / "w"
    with FakeOpenAIServer("mixed") as server:
        made = run_cli(
            "eval", "--model", "m", "--api-url", server.url, "--limit", "40", "--force-answer",
            "--work-dir", str(work), "--no-timestamp", "--no-html",
        )  # fmt: skip
    assert made.returncode == 0, made.stderr
    (report_path,) = work.glob("reports/*/coin_flip.json")
    tokens = json.loads(report_path.read_text())["tokens"]
    assert tokens["requests"] > 40  # forced requests were sent and paid for
    (found,) = [f for f in scan(work) if f.kind == "run"]
    shown = row(found)
    assert (shown["ptok"], shown["ctok"]) == (tokens["prompt"], tokens["completion"])
    assert f"tokens: {tokens['prompt']:,} prompt, {tokens['completion']:,} completion" in made.stdout


def test_compare_gives_equal_f1_an_equal_rank_as_the_index_does(tmp_path: Path) -> None:
    """Two oracle runs on the same questions (F1 1.0 both) were ranked 1 and 2 by compare, in the
    order they were found, while the index ranked both =1 ("equal F1 shares a rank")."""
    work = tmp_path / "w"
    for name in ("o1", "o2", "yes"):
        model = "always-yes" if name == "yes" else "oracle"
        made = run_cli("eval", "--model", model, "--model-id", name, "--limit", "20", "--work-dir", str(work / name))
        assert made.returncode == 0, made.stderr
    compared = run_cli("compare", str(work), "--out", str(tmp_path / "cmp"))
    assert compared.returncode == 0, compared.stderr
    saved = json.loads((tmp_path / "cmp/compare.json").read_text())
    ranks = {r["model"]: (r["rank"], r["tied"]) for r in saved["leaderboard"]}
    assert ranks == {"o1": (1, True), "o2": (1, True), "yes": (3, False)}
    index = run_cli("view", str(work))
    assert index.returncode == 0, index.stderr
    page = (work / "index.html").read_text()
    for model in ("o1", "o2"):
        assert re.search(r'"model": ?"' + model + r'".*?"rank": ?1,', page), model
    board = [line.split() for line in compared.stdout.splitlines() if line.split()[:1] in (["=1"], ["3"])]
    assert sorted(cells[:2] for cells in board) == [["3", "yes"], ["=1", "o1"], ["=1", "o2"]]
    # the paired tests name a tied run by its rank and run id, so "#=1" is never ambiguous
    assert "#=1 " in compared.stdout and "| =1 |" in (tmp_path / "cmp/compare.md").read_text()


def test_the_run_page_labels_a_warning_incomplete_only_where_the_terminal_does(tmp_path: Path) -> None:
    """An incomplete run's page put "INCOMPLETE:" before every warning ("INCOMPLETE: precision is
    undefined (no YES answers)"), while the terminal says WARNING for those and INCOMPLETE only for
    the samples without a reply or never run."""
    work = tmp_path / "w"
    made = run_cli("eval", "--model", "always-no", "--limit", "20", "--work-dir", str(work), "--no-timestamp")
    assert made.returncode == 0, made.stderr
    (predictions,) = work.glob("predictions/*/coin_flip.jsonl")
    rows = [json.loads(line) for line in predictions.read_text().splitlines()]
    rows[0].update(error="boom", reply=None)
    predictions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    rescored = run_cli("rescore", str(work))
    assert rescored.returncode == 1, rescored.stderr
    terminal = re.findall(r"^(INCOMPLETE|WARNING): (.*)$", rescored.stdout, re.M)
    assert ("WARNING", "precision is undefined (no YES answers)") in terminal
    assert any(label == "INCOMPLETE" for label, _ in terminal)
    (page,) = work.glob("reports/*/coin_flip.html")
    shown = re.findall(r'<div class="warn"><b>(INCOMPLETE|WARNING):</b> (.*?)</div>', page.read_text())
    assert [(label, html.unescape(text)) for label, text in shown] == terminal


def test_compare_ranks_an_undefined_f1_after_a_defined_one(tmp_path: Path) -> None:
    """On questions whose answer is always NO, oracle's F1 is undefined (no YES answer or target) and
    always-yes's is 0.0; compare counted undefined as 0 and ranked all three =1."""
    data = tmp_path / "d"
    data.mkdir()
    bundled = Path(__file__).parents[1] / "src/coinflip/_data"
    rows = [line for line in (bundled / "test.jsonl").read_text().splitlines() if '"answer": "NO"' in line][:20]
    (data / "test.jsonl").write_text("\n".join(rows) + "\n")
    (data / "validation.jsonl").write_text((bundled / "validation.jsonl").read_text())
    work = tmp_path / "w"
    for model in ("oracle", "always-yes", "always-no"):
        made = run_cli(
            "eval", "--model", model, "--dataset-hub", "local", "--dataset-path", str(data), "--work-dir", str(work)
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
    compared = run_cli("compare", str(work), "--out", str(tmp_path / "cmp"))
    assert compared.returncode == 0, compared.stderr
    board = json.loads((tmp_path / "cmp/compare.json").read_text())["leaderboard"]
    ranks = {r["model"]: (r["rank"], r["tied"], r["f1_score"]) for r in board}
    assert ranks == {"always-yes": (1, False, 0.0), "oracle": (2, True, None), "always-no": (2, True, None)}
