"""Numbers the index and compare show agree with the run page and the report they come from:
found by building real runs and computing each figure again from the saved files."""

from __future__ import annotations

import json
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
