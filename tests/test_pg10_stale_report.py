"""A report older than its run's settings: a resume that widened the run was killed before it scored."""

from __future__ import annotations

import json
import re
from pathlib import Path

from .conftest import run_cli


def _index_rows(page: Path) -> dict[str, dict]:
    found = re.search(r'<script type="application/json" id="coinflip-data">(.*?)</script>', page.read_text(), re.S)
    assert found
    return {r["id"]: r for r in json.loads(found[1])["runs"]}


def test_a_resume_killed_before_it_scored_leaves_its_run_incomplete_in_view_and_compare(tmp_path: Path) -> None:
    """`--use-cache RUN --limit 8` on a run of 4, killed (-9, out of memory, a reboot) before its report, leaves
    settings asking 8 and the report of 4: view listed the run complete and ranked it, compare ranked it unwarned."""
    work = tmp_path / "w"
    assert run_cli("eval", "--model", "oracle", "--limit", "4", "--work-dir", str(work)).returncode == 0
    (run,) = [p for p in work.iterdir() if p.is_dir()]
    done = run_cli("eval", "--model", "always-yes", "--limit", "4", "--work-dir", str(work))
    assert done.returncode == 0, done.stderr
    (other,) = [p for p in work.iterdir() if p.is_dir() and p != run]
    saved = {p: p.read_bytes() for p in (run / "reports/oracle/coin_flip.json", run / "reviews/oracle/coin_flip.jsonl")}
    assert run_cli("eval", "--use-cache", str(run), "--limit", "8").returncode == 0
    for path, content in saved.items():  # as the killed resume left them: its settings and predictions are of 8
        path.write_bytes(content)
    seen = run_cli("view", str(work))
    assert seen.returncode == 0, seen.stderr
    assert re.search(rf"incomplete +{run.name}: .*4 of the 8 samples", seen.stderr), seen.stderr
    row = _index_rows(work / "index.html")[run.name]
    assert row["complete"] is False and row["rank"] is None
    compared = run_cli("compare", str(run), str(other))
    assert compared.returncode == 0, compared.stderr
    assert f"oracle [{run.name}] is incomplete" in compared.stdout and "INCOMPLETE" in compared.stdout
