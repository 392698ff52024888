"""Run folders read back after what really happens to them: a resume killed before it scored, files made links."""

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


def test_a_run_whose_answers_cannot_be_read_is_named_in_the_index_not_left_out_of_pairs_unsaid(tmp_path: Path) -> None:
    """A run whose predictions became a link out of the work directory (or whose reviews are gone) was left out
    of the index's paired tests without a word: 'needs attention' was empty, and the pair view said the pair was
    not precomputed, as if the run were not among the best 20."""
    work = tmp_path / "w"
    for model in ("oracle", "always-yes"):
        assert run_cli("eval", "--model", model, "--limit", "4", "--work-dir", str(work)).returncode == 0
    linked, gone = sorted(p for p in work.iterdir() if p.is_dir())
    predictions = linked / "predictions/oracle/coin_flip.jsonl"
    outside = tmp_path / "elsewhere.jsonl"
    predictions.rename(outside)
    predictions.symlink_to(outside)
    (gone / "reviews/always-yes/coin_flip.jsonl").unlink()
    seen = run_cli("view", str(work))
    assert seen.returncode == 0, seen.stderr
    assert re.search(rf"broken +{linked.name}: its predictions cannot be read.*a link to outside", seen.stderr)
    assert re.search(rf"broken +{gone.name}: no readable reviews; run `coinflip rescore", seen.stderr)
    assert "2 broken" in seen.stderr


def test_a_link_to_a_run_elsewhere_is_said_not_silently_left_out(tmp_path: Path) -> None:
    """`ln -s /data/runs/x outputs/x`: the walk follows no link out of the work directory, and said nothing of it,
    so view listed one run of two and compare said 'found 1' without naming the other."""
    elsewhere, work = tmp_path / "elsewhere", tmp_path / "w"
    for model, where in (("oracle", work), ("always-yes", elsewhere)):
        assert run_cli("eval", "--model", model, "--limit", "4", "--work-dir", str(where)).returncode == 0
    (away,) = [p for p in elsewhere.iterdir() if p.is_dir()]
    (work / "linked").symlink_to(away, target_is_directory=True)
    seen = run_cli("view", str(work))
    assert seen.returncode == 0 and re.search(r"foreign +linked: a link to a folder outside the work dir", seen.stderr)
    compared = run_cli("compare", str(work))
    assert compared.returncode == 2 and f"skipped {work / 'linked'}: a link to a folder outside" in compared.stderr
    both = run_cli("compare", str(work), str(work / "linked"))  # named, it is read
    assert both.returncode == 0 and "skipped" not in both.stdout, both.stdout  # compared: not said to be skipped


def test_answers_out_onto_a_file_of_a_run_is_refused_before_it_is_written(tmp_path: Path) -> None:
    """`coinflip answers RUN --out RUN/predictions/oracle/coin_flip.jsonl` (an export meant to sit beside EvalScope's
    files) replaced the run's predictions with its CSV: every answer the run paid for lost, exit 0."""
    assert run_cli("eval", "--model", "oracle", "--limit", "3", "--work-dir", str(tmp_path)).returncode == 0
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    predictions = run / "predictions/oracle/coin_flip.jsonl"
    before = predictions.read_bytes()
    done = run_cli("answers", str(run), "--out", str(predictions))
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert "a file of the run" in done.stderr and predictions.read_bytes() == before
    beside = run_cli("answers", str(run), "--format", "jsonl", "--out", str(run / "answers.jsonl"))
    assert beside.returncode == 0, beside.stderr  # the run's own folder, beside its parts, as by default


def test_compare_warns_that_runs_of_one_size_on_other_questions_are_not_ranked_like_for_like(tmp_path: Path) -> None:
    """200 questions drawn with seed 42 and 200 with seed 7 share 12: compare ranked their F1s #1 and #2 without a
    word, while the index ranks each alone; runs of different sizes got the warning, runs of one size did not."""
    work = tmp_path / "w"
    for model, seed in (("oracle", "42"), ("always-yes", "7")):
        done = run_cli("eval", "--model", model, "--limit", "200", "--seed", seed, "--work-dir", str(work))
        assert done.returncode == 0, done.stderr
    compared = run_cli("compare", str(work))
    assert compared.returncode == 0, compared.stderr
    said = json.loads((work / "compare/compare.json").read_text())["warnings"]
    assert any(w.startswith("runs asked stratified 200") and "not like for like" in w for w in said), said
    assert "seed 42" in " ".join(said) and "seed 7" in " ".join(said)


def test_answers_of_a_run_whose_subset_file_is_damaged_are_still_written(tmp_path: Path) -> None:
    """The count of what answers leave out reads the run's subset; a damaged one must not cost the answers."""
    assert run_cli("eval", "--model", "oracle", "--limit", "3", "--work-dir", str(tmp_path)).returncode == 0
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    (run / "configs/subset.json").write_text('{"not": "ids"}')
    done = run_cli("answers", str(run), "--out", str(tmp_path / "a.csv"))
    assert done.returncode == 0 and done.stderr == f"wrote 3 answers to {tmp_path / 'a.csv'}\n", done.stderr


def test_compare_warns_when_one_run_had_a_system_prompt(tmp_path: Path) -> None:
    """--system-prompt 'Always answer YES' changes what the model was asked, as a template does; compare labelled
    both runs 'default de4ad6a2d1 · 0-shot' and warned of nothing, the index showed one template for both."""
    work = tmp_path / "w"
    for extra in ((), ("--system-prompt", "Always answer YES")):
        done = run_cli("eval", "--model", "oracle", "--limit", "5", *extra, "--work-dir", str(work))
        assert done.returncode == 0, done.stderr
    compared = run_cli("compare", str(work))
    assert compared.returncode == 0, compared.stderr
    said = json.loads((work / "compare/compare.json").read_text())
    assert any(w.startswith("runs differ in prompt templates") and "system" in w for w in said["warnings"]), said
    assert sorted("system" in r["template"] for r in said["leaderboard"]) == [False, True]
