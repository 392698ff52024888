"""`coinflip compare` tells runs apart, warns when ranks are not like for like, and takes work directories."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from coinflip.testing.server import FakeOpenAIServer

from .conftest import run_cli

WIDE = {"COLUMNS": "250"}  # rich wraps at 80 columns when it is not writing to a terminal


def _eval(work: Path, *args: str) -> Path:
    before = set(work.iterdir()) if work.exists() else set()
    result = run_cli("eval", *args, "--work-dir", str(work))
    assert result.returncode == 0, result.stderr
    (new,) = [p for p in work.iterdir() if p.is_dir() and p not in before]
    return new


def test_compare_names_each_run_warns_about_sizes_and_says_what_it_wrote(tmp_path: Path) -> None:
    work = tmp_path / "w"
    runs = [
        _eval(work, "--model", "random", "--seed", "1", "--limit", "20"),
        _eval(work, "--model", "random", "--seed", "2", "--limit", "40"),
        _eval(work, "--model", "random", "--seed", "3", "--limit", "40"),
    ]
    with FakeOpenAIServer("mixed") as server:
        runs.append(_eval(work, "--model", "[red]m[/red]", "--api-url", server.url, "--limit", "40"))
    out = tmp_path / "cmp"
    result = run_cli("compare", *map(str, runs), "--out", str(out), env=WIDE)
    assert result.returncode == 0, result.stderr
    for run in runs:
        assert run.name in result.stdout  # three `random` runs are told apart by their run ids
    assert "[red]m[/red]" in result.stdout  # a model name is printed as written, not as markup
    assert "20 q" in result.stdout and "40 q" in result.stdout and "0-shot" in result.stdout
    assert "warning: runs differ in size (20 to 40 samples)" in result.stdout
    written = [out / "compare.md", out / "compare.json"]
    assert f"wrote {', '.join(map(str, written))}" in result.stdout
    data = json.loads(written[1].read_text())
    board = data["leaderboard"]
    assert sorted(r["run_id"] for r in board) == sorted(r.name for r in runs)
    assert sorted(r["samples"] for r in board) == [20, 40, 40, 40]
    assert len({r["template"] for r in board}) == 1 and board[0]["template"].startswith("default ")  # name and hash
    assert {r["few_shot"] for r in board} == {0}
    assert all(r["data"].startswith("bundled test ") for r in board)
    assert any("differ in size" in w for w in data["warnings"])
    # every pair is either tested on the questions it shares or listed as untested (random subsets may not meet)
    assert len(data["pairs"]) + len(data["untested"]) == 6 and all(p["shared"] > 0 for p in data["pairs"])
    assert all(u["reason"] == "no shared question" for u in data["untested"])
    md = written[0].read_text()
    assert all(r.name in md for r in runs) and "differ in size" in md


def test_compare_takes_a_work_dir_and_skips_what_it_cannot_compare(tmp_path: Path) -> None:
    work = tmp_path / "w"
    good = [
        _eval(work, "--model", "oracle", "--limit", "15"),
        _eval(work / "nested", "--model", "random", "--limit", "15"),
    ]
    (work / "empty_run").mkdir()
    garbage = shutil.copytree(good[0], work / "garbage")
    (garbage / "configs/task_config.yaml").write_text("{{{ not yaml")
    killed = shutil.copytree(good[0], work / "killed")
    shutil.rmtree(killed / "reports")
    out = tmp_path / "cmp"
    result = run_cli("compare", str(work), "--out", str(out), env=WIDE)
    assert result.returncode == 0, result.stderr
    board = json.loads((out / "compare.json").read_text())["leaderboard"]
    assert sorted(r["run"] for r in board) == sorted(map(str, good))
    notes = [line for line in result.stdout.splitlines() if line.startswith("note: skipped")]
    assert len(notes) == 3
    for folder, why in ((work / "empty_run", "empty"), (garbage, "not valid YAML"), (killed, "no report")):
        assert any(str(folder) in n and why in n for n in notes), (folder, notes)


def test_compare_of_a_work_dir_with_runs_on_two_data_sets(tmp_path: Path) -> None:
    work = tmp_path / "w"
    first = _eval(work, "--model", "oracle", "--limit", "20")
    other = tmp_path / "other.jsonl"
    assert run_cli("generate", "--count", "20", "--out", str(other)).returncode == 0
    asked = [json.loads(line) for line in (first / "predictions/oracle/coin_flip.jsonl").read_text().splitlines()]
    with other.open("a") as f:  # 5 of the first run's questions: the two data sets share them
        f.writelines(json.dumps({"question": r["question"], "answer": r["target"]}) + "\n" for r in asked[:5])
    _eval(work, "--model", "oracle", "--dataset-path", str(other))
    refused = run_cli("compare", str(work), "--out", str(tmp_path / "x"))
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "bundled test" in refused.stderr and "other.jsonl" in refused.stderr and "--force" in refused.stderr
    forced = run_cli("compare", str(work), "--force", "--out", str(tmp_path / "y"), env=WIDE)
    assert forced.returncode == 0 and "warning: runs used different data" in forced.stdout
    (tested,) = json.loads((tmp_path / "y/compare.json").read_text())["pairs"]
    assert tested["shared"] == 5  # only the shared questions are paired


def test_compare_needs_two_usable_runs(tmp_path: Path) -> None:
    work = tmp_path / "w"
    _eval(work, "--model", "oracle", "--limit", "5")
    (work / "empty").mkdir()
    result = run_cli("compare", str(work), "--out", str(tmp_path / "x"))
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "at least two runs" in result.stderr and "found 1" in result.stderr and "empty" in result.stderr


def test_runs_with_repeats_pair_on_majority_votes_and_say_so(tmp_path: Path) -> None:
    for repeats in ("1", "3"):
        done = run_cli(
            "eval", "--model", "random", "--limit", "30", "--repeats", repeats, "--work-dir", str(tmp_path / "w")
        )
        assert done.returncode == 0, done.stderr
    result = run_cli("compare", str(tmp_path / "w"), "--out", str(tmp_path / "out"), env=WIDE)
    assert result.returncode == 0, result.stderr
    data = json.loads((tmp_path / "out" / "compare.json").read_text())
    assert any("majority vote" in w for w in data["warnings"]) and "majority vote" in result.stdout
    assert data["pairs"][0]["shared"] == 30  # one verdict per question, not per repeat
    assert "30 q ·" in result.stdout and "30 q x 3 ·" in result.stdout and "90 q" not in result.stdout


def _md_tables(md: str) -> list[list[list[str]]]:
    """Each markdown table as rows of cells (a `\\|` inside a cell is not a border)."""
    tables: list[list[list[str]]] = []
    previous = False
    for line in md.splitlines():
        is_row = line.startswith("|")
        if is_row:
            cells = re.split(r"(?<!\\)\|", line.strip())[1:-1]
            if not previous:
                tables.append([])
            tables[-1].append(cells)
        previous = is_row
    return tables


def test_runs_that_share_no_question_get_no_test_and_no_rank_together(tmp_path: Path) -> None:
    work = tmp_path / "w"
    first = _eval(work, "--model", "oracle", "--limit", "30")
    apart = _eval(work, "--model", "oracle", "--limit", "30", "--seed", "7")
    alone = run_cli("compare", str(first), str(apart), "--out", str(tmp_path / "x"))
    assert alone.returncode == 2 and len(alone.stderr.strip().splitlines()) == 1
    assert "share a question" in alone.stderr and not (tmp_path / "x").exists()
    same = _eval(work, "--model", "random", "--limit", "30", "--few-shot-num", "3")
    result = run_cli("compare", str(work), "--out", str(tmp_path / "out"), env=WIDE)
    assert result.returncode == 0, result.stderr
    data = json.loads((tmp_path / "out/compare.json").read_text())
    assert sorted(r["run_id"] for r in data["leaderboard"]) == sorted([first.name, same.name])
    (tested,) = data["pairs"]
    assert tested["shared"] == 30 and data["untested"] == []
    (left,) = data["left_out"]
    assert apart.name in left and "sharing no question" in left and "no test" in left
    assert "shared=0" not in result.stdout and apart.name in result.stdout
    # few-shot counts are whole numbers everywhere
    assert any(w.endswith("few-shot counts (0, 3)") for w in data["warnings"]), data["warnings"]
    md = (tmp_path / "out/compare.md").read_text()
    assert "3.0" not in md and "| 3 |" in md
    for table in _md_tables(md):  # every table renders: header, separator and rows of one width
        assert len(table) >= 3 and all(set(c.strip()) == {"-"} for c in table[1])
        assert {len(row) for row in table} == {len(table[0])}, table


def test_compare_of_a_work_dir_a_probe_wrote_into(tmp_path: Path) -> None:
    work = tmp_path / "outputs"
    runs = [_eval(work, "--model", "oracle", "--limit", "20"), _eval(work, "--model", "random", "--limit", "20")]
    lengths = ("--variants", "", "--lengths", "2-4", "--length-count", "10")
    probed = run_cli("probe", "--model", "oracle", "--limit", "20", *lengths, "--work-dir", str(work))
    assert probed.returncode == 0, probed.stderr
    (base,) = work.glob("probe_*/runs/base")  # the probe's base set: the same 20 questions as the runs
    result = run_cli("compare", str(work), "--out", str(tmp_path / "out"), env=WIDE)
    assert result.returncode == 0, result.stderr
    data = json.loads((tmp_path / "out/compare.json").read_text())
    assert sorted(r["run"] for r in data["leaderboard"]) == sorted(map(str, [*runs, base]))
    assert len(data["pairs"]) == 3 and {p["shared"] for p in data["pairs"]} == {20}
    (left,) = data["left_out"]  # the three length runs, each alone on its generated set, in one short line
    assert left.startswith("3 runs left out, each the only run on its data") and len(left) < 400
    assert all(len(line) < 400 for line in result.stdout.splitlines())
    forced = run_cli("compare", str(work), "--force", "--out", str(tmp_path / "all"), env=WIDE)
    assert forced.returncode == 0, forced.stderr
    every = json.loads((tmp_path / "all/compare.json").read_text())
    assert all(p["shared"] > 0 for p in every["pairs"]) and len(every["pairs"]) == 3
    assert len(forced.stdout.splitlines()) < 40


def test_compare_never_breaks_a_number_or_a_run_id_in_a_pipe_or_at_80_columns(tmp_path: Path) -> None:
    """Before, a pipe or a CI log (80 columns) got `chi2 cc 4.166` and `7` on the next line."""
    import io

    from rich.console import Console

    from coinflip.pages.compare import compare, print_result

    work = tmp_path / "w"
    for model in ("oracle", "always-no", "random", "always-yes"):  # the same 40 questions: every pair is tested
        _eval(work, "--model", model, "--limit", "40")
    piped = run_cli("compare", str(work), "--out", str(tmp_path / "cmp"))  # no COLUMNS: what a pipe gets
    assert piped.returncode == 0, piped.stderr
    data = json.loads((tmp_path / "cmp/compare.json").read_text())
    terminal = io.StringIO()
    print_result(compare([work]), [], Console(file=terminal, force_terminal=True, width=80, color_system=None))
    keys = ("chi2", "p_value", "chi2_corrected", "p_corrected", "p_exact")
    numbers = [f"{p[k]:.4f}" if k.startswith("chi2") else f"{p[k]:.4g}" for p in data["pairs"] for k in keys]
    assert len(data["pairs"]) == 6 and any(len(n) >= 9 for n in numbers)  # wide enough to have been broken
    for shown in (piped.stdout, terminal.getvalue()):
        words = shown.split()
        assert all(n in words for n in numbers) and all(r["run_id"] in words for r in data["leaderboard"])
        assert all(f"{r['f1_score']:.3f}" in words for r in data["leaderboard"] if r["f1_score"] is not None)


def test_runs_that_drew_other_examples_or_generate_otherwise_are_not_like_for_like(tmp_path: Path) -> None:
    work, same = tmp_path / "w", ["--model", "random", "--limit", "20", "--few-shot-num", "2"]
    runs = [_eval(work, *same, "--few-shot-seed", "5"), _eval(work, *same, "--few-shot-seed", "5")]
    result = run_cli("compare", *map(str, runs), "--out", str(tmp_path / "a"), env=WIDE)
    assert result.returncode == 0, result.stderr
    alike = json.loads((tmp_path / "a/compare.json").read_text())["warnings"]
    assert not any("few-shot examples" in w or "generation settings" in w for w in alike), alike
    runs.append(_eval(work, *same, "--few-shot-seed", "6", "--generation-config", "temperature=0,max_tokens=64"))
    runs.append(_eval(work, *same, "--dataset-args", '{"coin_flip": {"few_shot_random": false}}'))
    result = run_cli("compare", *map(str, runs), "--out", str(tmp_path / "b"), env=WIDE)
    assert result.returncode == 0, result.stderr
    told = json.loads((tmp_path / "b/compare.json").read_text())["warnings"]
    drew = next(w for w in told if w.startswith("runs drew different few-shot examples (seed 5 ["))
    assert ", seed 6 [" in drew and ", the first rows [" in drew and drew.endswith("]): their prompts differ")
    assert "runs differ in generation settings (max_tokens, temperature)" in told
    assert "different few-shot examples" in result.stdout and "generation settings" in result.stdout


def test_a_hand_edited_generation_setting_not_named_by_a_text_is_named_not_a_traceback(tmp_path: Path) -> None:
    import yaml

    work = tmp_path / "w"
    runs = [_eval(work, "--model", "oracle", "--limit", "5") for _ in range(2)]
    path = runs[0] / "configs/task_config.yaml"
    saved = yaml.safe_load(path.read_text())
    saved["config"]["generation_config"] |= {1: 0.5, None: 2}  # YAML's `1:` and `~:`, beside texts
    path.write_text(yaml.safe_dump(saved))
    result = run_cli("compare", *map(str, runs), "--out", str(tmp_path / "o"), env=WIDE)  # as rescore, it is refused
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr
    assert "skipped" in result.stderr and "generation_config has a key 1 that is not a text" in result.stderr


@pytest.mark.parametrize("edit", [("  limit: 5\n", "  limit: .nan\n"), ("  timeout: 120.0\n", "  timeout: -1\n")])
def test_a_run_whose_saved_settings_rescore_refuses_is_broken_in_view_and_skipped_by_compare(
    tmp_path: Path, edit: tuple[str, str]
) -> None:
    """view counted it a run ("0 broken") and compare ranked and paired it, while rescore, answers and a resume
    refused its settings (exit 2): one rule for a saved run's settings, wherever they are read."""
    work = tmp_path / "w"
    runs = [_eval(work, "--model", "oracle", "--limit", "5") for _ in range(3)]
    path = runs[0] / "configs/task_config.yaml"
    assert edit[0] in path.read_text()
    path.write_text(path.read_text().replace(*edit))
    refused = run_cli("rescore", str(runs[0])).stderr.strip()
    assert refused.startswith("error: ") and refused.splitlines() == [refused]
    viewed = run_cli("view", str(work))
    assert viewed.returncode == 0 and "1 broken" in viewed.stderr and refused[len("error: ") :] in viewed.stderr
    odd_key = run_cli("view", str(work), env={"OPENAI_API_KEY": "sk-abc\n"})  # sends nothing: the key is not read
    assert odd_key.returncode == 0 and "1 broken" in odd_key.stderr, odd_key.stderr
    compared = run_cli("compare", *map(str, runs), "--out", str(tmp_path / "o"), env=WIDE)
    assert compared.returncode == 0 and f"skipped {runs[0]}" in compared.stdout + compared.stderr


def _bound_by_modes(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """`coinflip ARGS` as a process that file modes bind: root reads a mode-000 folder, unless it gives up the
    capabilities that let it (then it is bound as the files' owner)."""
    drop = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"] if os.geteuid() == 0 else []
    return subprocess.run([*drop, sys.executable, "-m", "coinflip", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)  # fmt: skip


def test_a_run_whose_settings_cannot_be_read_is_bad_input_told_in_one_line(tmp_path: Path) -> None:
    """A run's configs/ folder its user may not read: compare and answers ended "error: Permission denied" with
    exit 1, the code of an incomplete run, and view called the run another tool's folder."""
    work = tmp_path
    for name in ("a", "b"):
        args = ("eval", "--model", "oracle", "--limit", "4", "--no-timestamp", "--work-dir", str(work / name))
        assert run_cli(*args).returncode == 0
    (work / "a" / "configs").chmod(0)
    try:
        for args in (["compare", "a", "b", "--out", "cmp"], ["answers", "a", "--out", "-"], ["view", "."]):
            done = _bound_by_modes(args, work)
            assert "Traceback" not in done.stderr, done.stderr
            if args[0] != "view":  # view lists every run it found
                assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
            assert "Permission denied" in done.stderr
        assert "another tool" not in (work / "index.html").read_text()
    finally:
        (work / "a" / "configs").chmod(0o700)


def test_a_question_whose_target_differs_between_data_sets_is_not_paired(tmp_path: Path) -> None:
    """compare --force paired on the question text alone: the same replies to the same questions, one data set with
    the targets flipped, read as a significant difference (p 0.005). A question pairs with its target now."""
    work = tmp_path / "w"
    first = _eval(work, "--model", "always-yes", "--limit", "20")
    asked = [json.loads(line) for line in (first / "predictions/always-yes/coin_flip.jsonl").read_text().splitlines()]
    flipped = tmp_path / "flipped.jsonl"
    other = {"YES": "NO", "NO": "YES"}
    answers = [other[r["target"]] if i < 15 else r["target"] for i, r in enumerate(asked)]
    flipped.write_text(
        "".join(
            json.dumps({"question": r["question"], "answer": a}) + "\n" for r, a in zip(asked, answers, strict=True)
        )
    )
    _eval(work, "--model", "always-yes", "--dataset-path", str(flipped))
    forced = run_cli("compare", str(work), "--force", "--out", str(tmp_path / "y"), env=WIDE)
    assert forced.returncode == 0 and "15 question(s) have another target in another run's data" in forced.stdout
    (tested,) = json.loads((tmp_path / "y/compare.json").read_text())["pairs"]
    assert tested["shared"] == 5 and tested["only_a"] == tested["only_b"] == 0


def test_the_same_seed_on_other_validation_rows_is_told_as_other_examples(tmp_path: Path) -> None:
    """compare told few-shot draws apart by the saved seed alone: the same seed on another validation split showed
    other examples, and no warning said so. The report's hash of the rows shown tells them apart."""
    work = tmp_path / "w"
    for name, seed in (("a", "1"), ("b", "2")):
        folder = tmp_path / name
        folder.mkdir()
        assert run_cli("generate", "--count", "20", "--seed", "7", "--out", str(folder / "test.jsonl")).returncode == 0
        made = run_cli("generate", "--count", "10", "--seed", seed, "--out", str(folder / "validation.jsonl"))
        assert made.returncode == 0
        _eval(work, "--model", "oracle", "--dataset-path", str(folder), "--few-shot-num", "2")
    done = run_cli("compare", str(work), "--out", str(tmp_path / "y"), env=WIDE)
    assert done.returncode == 0 and "runs drew different few-shot examples (seed 42 [" in done.stdout


def test_a_review_line_given_again_is_one_vote_as_answers_and_a_resume_read_it(tmp_path: Path) -> None:
    """compare counted every line of the reviews: a sample's line written three times was three votes, and a
    repeat the run never asked one more, so its question lost a majority that `answers` (a sample's last line)
    and the report gave it."""
    from coinflip.pages.catalog import read_answers, scan

    args = ("--model", "oracle", "--limit", "2", "--repeats", "3", "--no-html", "--work-dir", str(tmp_path))
    assert run_cli("eval", *args).returncode == 0
    found = next(f for f in scan(tmp_path) if f.kind == "run")
    reviews = found.file("reviews")
    lines = reviews.read_text().splitlines(keepends=True)
    wrong = json.loads(lines[0]) | {"extracted": "NO" if json.loads(lines[0])["target"] == "YES" else "YES"}
    never = [json.dumps(wrong | {"correct": False, "repeat": r}) + "\n" for r in (3, 4, 5)]  # never asked
    reviews.write_text("".join(lines) + (json.dumps(wrong | {"correct": False}) + "\n") * 3 + "".join(never))
    answers = read_answers(found)
    assert answers is not None and all(answers.correct.values()), answers.correct  # 2 of its 3 samples right
