"""Re-scoring recomputes reviews and reports from saved predictions alone."""

from __future__ import annotations

import json
from pathlib import Path

from coinflip.testing.server import FakeOpenAIServer

from .conftest import only_run_dir, read_jsonl, run_cli


def _run(tmp_path: Path) -> Path:
    with FakeOpenAIServer("mixed") as srv:
        result = run_cli("eval", "--model", "m", "--api-url", srv.url, "--limit", "60", "--work-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    return only_run_dir(tmp_path)


def test_rescore_reproduces_the_report_exactly(tmp_path: Path) -> None:
    """The live run scored replies as they landed, out of order; the rescore reads the file."""
    run = _run(tmp_path)
    outputs = [run / "reports/m/coin_flip.json", run / "reports/m/coin_flip.html", run / "reviews/m/coin_flip.jsonl"]
    before = [path.read_bytes() for path in outputs]
    for path in outputs:
        path.unlink()
    result = run_cli("rescore", str(run))  # no server is running now
    assert result.returncode == 0, result.stderr
    assert [path.read_bytes() for path in outputs] == before


def test_editing_a_saved_reply_changes_the_report_as_it_should(tmp_path: Path) -> None:
    run = _run(tmp_path)
    predictions = run / "predictions/m/coin_flip.jsonl"
    old = json.loads((run / "reports/m/coin_flip.json").read_text())
    rows = read_jsonl(predictions)
    reviews = {r["id"]: r for r in read_jsonl(run / "reviews/m/coin_flip.jsonl")}
    victim = next(r for r in rows if reviews[r["id"]]["invalid"])  # an invalid answer becomes a correct one
    victim["reply"] = f"Fixed by hand.\nANSWER: {victim['target']}"
    predictions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert run_cli("rescore", str(run)).returncode == 0
    new = json.loads((run / "reports/m/coin_flip.json").read_text())
    assert new["counts"]["invalid"] == old["counts"]["invalid"] - 1
    assert new["counts"]["correct"] == old["counts"]["correct"] + 1
    assert abs(new["metrics"]["accuracy"] - (old["metrics"]["accuracy"] + 1 / 60)) < 1e-12


def test_rescore_with_the_other_arithmetic_keeps_both_reports(tmp_path: Path) -> None:
    run = _run(tmp_path)
    own = [run / "reports/m/coin_flip.json", run / "reports/m/coin_flip.html", run / "reviews/m/coin_flip.jsonl"]
    before = [path.read_bytes() for path in own]
    result = run_cli("rescore", str(run), "--metric-compat", "evalscope")
    assert result.returncode == 0, result.stderr
    assert [path.read_bytes() for path in own] == before  # the run's own report is not overwritten
    old = json.loads(own[0].read_text())
    new = json.loads((run / "reports/m/coin_flip.evalscope.json").read_text())
    assert (run / "reports/m/coin_flip.evalscope.html").is_file() and (
        run / "reviews/m/coin_flip.evalscope.jsonl"
    ).is_file()
    assert "coin_flip.evalscope.html" in result.stdout
    assert new["metric_compat"] == "evalscope" and old["metric_compat"] == "coinflip"
    assert new["metrics"]["accuracy"] == old["metrics"]["accuracy"]
    assert new["metrics"]["recall"] > old["metrics"]["recall"]  # invalid YES answers no longer count as misses
    again = run_cli("rescore", str(run))  # the run's own arithmetic: its own files, as before
    assert again.returncode == 0 and [path.read_bytes() for path in own] == before


def test_rescore_of_a_non_run_directory_is_one_line(tmp_path: Path) -> None:
    result = run_cli("rescore", str(tmp_path))
    assert result.returncode == 2 and "not a coinflip run directory" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_saved_row_with_a_repeat_the_run_never_asked_is_not_scored(tmp_path: Path) -> None:
    """A line for repeat 2 in a run of one repeat was scored as a sample: 6 samples became 7."""
    assert run_cli("eval", "--model", "oracle", "--limit", "6", "--work-dir", str(tmp_path)).returncode == 0
    run = only_run_dir(tmp_path)
    predictions = run / "predictions/oracle/coin_flip.jsonl"
    first = json.loads(predictions.read_text().splitlines()[0])
    wrong = "NO" if first["target"] == "YES" else "YES"
    with predictions.open("a") as handle:
        handle.write(json.dumps({**first, "repeat": 2, "reply": f"ANSWER: {wrong}"}) + "\n")
    for command in (("rescore", str(run)), ("eval", "--use-cache", str(run))):
        assert run_cli(*command).returncode == 0
        report = json.loads((run / "reports/oracle/coin_flip.json").read_text())
        assert report["counts"]["samples"] == 6 and report["metrics"]["accuracy"] == 1.0, command


def test_a_rescored_report_names_the_version_that_scored_it_beside_the_one_that_ran_it(tmp_path: Path) -> None:
    """Its numbers are this version's arithmetic on the saved replies: the report says so, and which version ran."""
    import coinflip

    run = _run(tmp_path)
    saved = (run / "configs/task_config.yaml").read_text(encoding="utf-8")
    (run / "configs/task_config.yaml").write_text(
        saved.replace(f"coinflip_version: {coinflip.__version__}", "coinflip_version: 0.0.1"), encoding="utf-8"
    )
    assert run_cli("rescore", str(run)).returncode == 0
    provenance = json.loads((run / "reports/m/coin_flip.json").read_text())["provenance"]
    assert provenance["coinflip_version"] == "0.0.1" and provenance["scored_by"] == coinflip.__version__
