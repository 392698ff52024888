"""HTML report in a real browser, run comparison with McNemar tests, and the probe's length curve."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import only_run_dir, read_jsonl, run_cli

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
XSS_SCRIPT = "<script>document.body.setAttribute('data-pwned','script');document.title='PWNED'</script>"
XSS_IMG = "<img src=x onerror=\"document.body.setAttribute('data-pwned','img')\">"


def _oracle_run(work: Path, limit: int = 40, *extra: str) -> Path:
    result = run_cli("eval", "--model", "oracle", "--limit", str(limit), "--work-dir", str(work), *extra)
    assert result.returncode == 0, result.stderr
    return only_run_dir(work)


def _edit_replies(run: Path, model: str, replies: dict[int, str]) -> None:
    """Replace the replies of the run's n-th samples (in file order, which is id order)."""
    predictions = run / f"predictions/{model}/coin_flip.jsonl"
    rows = read_jsonl(predictions)
    for n, row in enumerate(rows):
        if n in replies:
            row["reply"] = replies[n]
    predictions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert run_cli("rescore", str(run)).returncode == 0


def _chromium(*args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM, "Debian's chromium is needed (apt-get install chromium); .ci/run installs it"
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ]
    return subprocess.run([CHROMIUM, *flags, *args], capture_output=True, text=True, timeout=120)


def test_html_report_renders_in_chromium_and_model_markup_stays_text(tmp_path: Path) -> None:
    run = _oracle_run(tmp_path / "runs")
    _edit_replies(run, "oracle", {0: f"Look: {XSS_SCRIPT}\nANSWER: YES", 1: f"{XSS_IMG}\nANSWER: maybe"})
    page = run / "reports/oracle/coin_flip.html"
    html = page.read_text()
    assert "<script>document.body" not in html and "<img src=x" not in html
    assert "http://" not in html and "https://" not in html  # nothing to fetch: opens offline
    profile = tmp_path / "profile"
    dom = _chromium(f"--user-data-dir={profile}", "--virtual-time-budget=3000", "--dump-dom", page.as_uri()).stdout
    assert re.search(r"<body[^>]*data-pwned", dom) is None, "a model reply ran as code"
    assert "<title>coin_flip - oracle</title>" in dom
    assert "&lt;script&gt;document.body.setAttribute" in dom  # shown literally
    assert "&lt;img src=x onerror=" in dom
    assert 'class="card primary"' in dom and "f1_score" in dom  # headline metrics, F1 first
    assert dom.index("f1_score") < dom.index("accuracy")
    assert re.search(r'id="by-people".*?<svg.*?<rect', dom, re.S)  # the chart
    assert len(re.findall(r'<tr class="s ', dom)) == 40  # the sample table
    shot = tmp_path / "report.png"
    _chromium(f"--user-data-dir={profile}", f"--screenshot={shot}", "--window-size=1280,1600", page.as_uri())
    assert shot.is_file() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


def test_sample_filters_show_only_the_chosen_kind(tmp_path: Path) -> None:
    run = _oracle_run(tmp_path / "runs", 10)
    _edit_replies(run, "oracle", {2: "no idea", 3: "ANSWER: " + ("NO" if True else "")})
    html = (run / "reports/oracle/coin_flip.html").read_text()
    assert html.count('<tr class="s invalid notok') == 1
    assert 'data-f="invalid"' in html and 'data-f="error"' in html and 'data-f="wrong"' in html


def test_compare_gives_mcnemar_computed_by_hand(tmp_path: Path) -> None:
    a = _oracle_run(tmp_path / "a")
    b = _oracle_run(tmp_path / "b")
    _edit_replies(a, "oracle", {i: "ANSWER: maybe" for i in range(5)})  # A wrong on 0-4
    _edit_replies(b, "oracle", {i: "ANSWER: maybe" for i in range(5, 16)})  # B wrong on 5-15
    out = tmp_path / "cmp"
    result = run_cli("compare", str(a), str(b), "--out", str(out))
    assert result.returncode == 0, result.stderr
    data = json.loads((out / "compare.json").read_text())
    pair = data["pairs"][0]
    # A is first on the leaderboard (F1 higher): only A right on 5-15 (11), only B right on 0-4 (5)
    assert (pair["only_a"], pair["only_b"], pair["shared"]) == (11, 5, 40)
    assert pair["chi2"] == pytest.approx(36 / 16)
    assert pair["p_value"] == pytest.approx(0.1336144, abs=1e-6)  # chi-square, 1 df, at 2.25
    assert pair["chi2_corrected"] == pytest.approx(25 / 16)
    assert pair["p_exact"] == pytest.approx(2 * sum(math.comb(16, k) for k in range(6)) / 2**16)
    assert [r["rank"] for r in data["leaderboard"]] == [1, 2]
    assert "McNemar" in (out / "compare.md").read_text()
    assert "only A right" in result.stdout or "McNemar" in result.stdout


def test_compare_refuses_runs_on_different_data(tmp_path: Path) -> None:
    a = _oracle_run(tmp_path / "a", 20)
    data = tmp_path / "other.jsonl"
    assert run_cli("generate", "--count", "20", "--out", str(data)).returncode == 0
    c = _oracle_run(tmp_path / "c", 20, "--dataset-path", str(data))
    refused = run_cli("compare", str(a), str(c), "--out", str(tmp_path / "x"))
    assert refused.returncode == 2
    assert "different data" in refused.stderr and "--force" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    forced = run_cli("compare", str(a), str(c), "--force", "--out", str(tmp_path / "y"))
    # the two generated sets share no question: no paired test is possible, and nothing is written
    assert forced.returncode == 2 and len(forced.stderr.strip().splitlines()) == 1
    assert "share a question" in forced.stderr and not (tmp_path / "y").exists()


def test_the_probes_length_curve_draws_one_point_per_length(tmp_path: Path) -> None:
    """What `coinflip sweep` did: a fresh set per number of people, its accuracy and interval each."""
    lengths = ("--variants", "", "--lengths", "2-7", "--length-count", "120")
    result = run_cli("probe", "--model", "random", "--limit", "10", *lengths, "--work-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    folder = only_run_dir(tmp_path)
    points = json.loads((folder / "probe.json").read_text())["length"]["points"]
    assert [p["people"] for p in points] == [2, 3, 4, 5, 6, 7]
    for point in points:
        assert 0.35 <= point["accuracy"] <= 0.65 and point["samples"] == 120
        lo, hi = point["interval"]
        assert lo <= point["accuracy"] <= hi
    assert '<svg id="length"' in (folder / "probe.html").read_text()
    for k in range(2, 8):  # each set really has k people per question
        rows = read_jsonl(folder / f"data/people_{k:02d}/test.jsonl")
        assert all(r["question"].count(" the coin.") == k for r in rows)


def test_a_report_says_which_few_shot_examples_its_prompts_showed(tmp_path: Path) -> None:
    """Two runs that differed only in --few-shot-seed wrote reports alike but for their numbers: the report (and
    the page) held few_shot_num alone. It now says how the examples were drawn and the hash of those shown."""
    shown = {}
    for name, flags in {"s1": ["--few-shot-seed", "1"], "s2": ["--few-shot-seed", "2"],
                        "first": ["--no-few-shot-random"]}.items():  # fmt: skip
        work = tmp_path / name
        args = ("eval", "--model", "oracle", "--limit", "4", "--few-shot-num", "3", "--no-timestamp")
        assert run_cli(*args, *flags, "--work-dir", str(work)).returncode == 0
        assert run_cli("rescore", str(work)).returncode == 0  # kept by a rescore
        shown[name] = json.loads((work / "reports/oracle/coin_flip.json").read_text())["few_shot"]
        assert shown[name]["examples_sha256"] in (work / "reports/oracle/coin_flip.html").read_text()
    assert shown["s1"]["seed"] == 1 and shown["s2"]["seed"] == 2 and shown["first"] == {**shown["first"], "seed": None}
    assert len({s["examples_sha256"] for s in shown.values()}) == 3 and not shown["first"]["random"]
    saved = tmp_path / "s1/configs/task_config.yaml"  # a settings file without the seed: its default, 42
    saved.write_text("".join(line for line in saved.read_text().splitlines(True) if "few_shot_seed" not in line))
    assert run_cli("rescore", str(tmp_path / "s1")).returncode == 0
    assert json.loads((tmp_path / "s1/reports/oracle/coin_flip.json").read_text())["few_shot"]["seed"] == 42
    assert run_cli("eval", "--model", "oracle", "--limit", "2", "--work-dir", str(tmp_path / "zero")).returncode == 0
    assert "few_shot" not in json.loads(next((tmp_path / "zero").glob("*/reports/oracle/coin_flip.json")).read_text())
