"""Probes: the oracle passes every variant, a phrase counter and a contaminated model are caught,
the page shows the variants side by side (in Chromium), and a probe resumes like any run."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from coinflip.config import TaskConfig
from coinflip.data.grammar import parse, solve
from coinflip.data.load import load_file
from coinflip.probes.run import ProbeOptions, probe
from coinflip.probes.variants import length_verdict
from coinflip.testing.policy import Policy
from coinflip.testing.server import FakeOpenAIServer

from .conftest import read_jsonl, run_cli
from .test_reports import _chromium

SURFACE = ("tails", "inverted", "rephrased", "idle", "scripts", "zh")


def _probe(tmp_path: Path, lengths: str = "0", **settings: Any) -> dict[str, Any]:
    config = TaskConfig(work_dir=str(tmp_path / "work"), limit=40, progress=False, **settings)
    return probe(config, ProbeOptions(lengths=lengths, length_count=30))


def _by_name(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in result["variants"]}


def test_oracle_scores_one_on_every_variant_and_the_truth_is_the_grammars(tmp_path: Path) -> None:
    result = _probe(tmp_path, lengths="2-3", model="oracle")
    variants = _by_name(result)
    assert list(variants) == ["base", "fresh", *SURFACE]
    for v in variants.values():
        assert v["metrics"]["accuracy"] == 1.0 and v["samples"] == 40, v["name"]
        assert v["invalid_rate"] == 0.0
    for name in ("fresh", *SURFACE):
        assert variants[name]["paired"]["shared"] == 40
        assert variants[name]["verdict"].startswith(("holds", "no sign of contamination")), variants[name]["verdict"]
    assert [p["people"] for p in result["length"]["points"]] == [2, 3]
    assert all(p["accuracy"] == 1.0 for p in result["length"]["points"])
    assert result["length"]["verdict"].startswith("stays above the always-yes baseline")
    root = Path(result["directory"])
    base = [r["question"] for r in read_jsonl(root / "runs/base/predictions/oracle/coin_flip.jsonl")]
    for name in ("fresh", *SURFACE):  # each variant question is its base question, one thing changed
        rows = read_jsonl(root / "data" / name / "test.jsonl")
        assert len(rows) == 40
        for row, question in zip(rows, base, strict=True):
            assert solve(row["question"]) == row["answer"]
            mine, theirs = parse(row["question"]), parse(question)
            assert mine is not None and theirs is not None
            assert [a for _, a in mine.sequence.steps if a != "idle"] == [a for _, a in theirs.sequence.steps]
    assert all(
        q.startswith("Q: A coin is tails up.")
        for q in (r["question"] for r in read_jsonl(root / "data/tails/test.jsonl"))
    )
    fresh = read_jsonl(root / "data/fresh/test.jsonl")
    assert not {r["question"] for r in fresh} & {r.question for r in load_file(_bundled_test())}
    assert [len(r["question"]) for r in fresh] == [len(q) for q in base]  # same names' lengths: same prompt length


def _bundled_test() -> Path:
    from coinflip.data.grammar import bundled_dir

    return bundled_dir() / "test.jsonl"


def test_a_phrase_counter_is_caught_on_rephrased_actions_and_a_tails_up_start(tmp_path: Path) -> None:
    with FakeOpenAIServer("shortcut") as server:
        result = _probe(tmp_path, model="m", api_url=server.url)
    v = _by_name(result)
    assert v["base"]["metrics"]["accuracy"] >= 0.95 and v["fresh"]["metrics"]["accuracy"] >= 0.95
    assert v["fresh"]["verdict"].startswith("no sign of contamination")
    yes_share = v["rephrased"]["metrics"]["yes_ratio"]  # a count of zero flips: always YES
    assert yes_share == 1.0 and v["rephrased"]["metrics"]["accuracy"] <= 0.75
    assert v["tails"]["metrics"]["accuracy"] <= 0.1
    assert re.match(
        r"drops [\d.]+ points when flips are phrased as 'turns the coin over': counts the phrase, not the state",
        v["rephrased"]["verdict"],
    )
    assert v["tails"]["verdict"].startswith("drops") and "assumes the coin starts heads up" in v["tails"]["verdict"]
    assert v["rephrased"]["paired"]["p_exact"] < 0.05 and v["rephrased"]["paired"]["high"] < 0
    assert v["inverted"]["verdict"].startswith("holds")  # it does read the side asked about
    assert "counts the phrase, not the state" in result["headline"]


def test_a_contaminated_model_is_caught_by_its_fresh_twin(tmp_path: Path) -> None:
    with FakeOpenAIServer("contaminated") as server:
        result = _probe(tmp_path, model="m", api_url=server.url)
    fresh = _by_name(result)["fresh"]
    assert _by_name(result)["base"]["metrics"]["accuracy"] == 1.0
    assert fresh["verdict"].startswith("sign of contamination: the base set scores")
    assert fresh["paired"]["p_exact"] < 0.001 and fresh["paired"]["high"] < 0
    assert result["headline"].startswith("sign of contamination")
    for name in SURFACE:  # a drop no worse than the twin's is the memorised base set's, not the variant's
        verdict = _by_name(result)[name]["verdict"]
        assert "the base set is memorised" in verdict or verdict.startswith(("holds", "no clear change")), verdict


def test_a_state_tracker_behind_a_server_passes_with_streaming_repeats_and_p_yes(tmp_path: Path) -> None:
    with FakeOpenAIServer("correct") as server:
        result = _probe(
            tmp_path,
            model="m",
            api_url=server.url,
            stream=True,
            repeats=2,
            limit_mode="first",
            generation_config="logprobs=true,top_logprobs=2",
        )
    for v in result["variants"]:
        assert v["metrics"]["accuracy"] == 1.0 and v["samples"] == 80, v["name"]
        report = json.loads((Path(result["directory"]) / v["run"] / "reports/m/coin_flip.json").read_text())
        assert report["repeats"] == 2 and report["calibration"]["samples"] == 80  # P(YES) read on every sample
    assert result["complete"] and "holds on all 6 surface variants" in result["headline"]


def test_with_forced_answers_the_probe_reads_the_forced_view(tmp_path: Path) -> None:
    with FakeOpenAIServer("mixed") as server:
        config = TaskConfig(
            work_dir=str(tmp_path / "w"), limit=60, progress=False, model="m", api_url=server.url, force_answer=True
        )
        result = probe(config, ProbeOptions(variants=("rephrased",), lengths="0"))
    assert result["view"] == "forced"
    root = Path(result["directory"])
    for v in result["variants"]:
        report = json.loads((root / v["run"] / "reports/m/coin_flip.json").read_text())
        assert v["metrics"] == report["forced"]["metrics"] and v["strict_metrics"] == report["metrics"]
        assert v["metrics"]["accuracy"] > report["metrics"]["accuracy"]  # forcing recovered some answers
    policy = Policy("mixed")  # the paired counts by hand: a sample is right by its strict answer, else its forced one
    base = read_jsonl(root / "runs/base/predictions/m/coin_flip.jsonl")
    variant = read_jsonl(root / "runs/rephrased/predictions/m/coin_flip.jsonl")

    def right(row: dict[str, Any]) -> bool:
        said = policy.expected(row["question"])
        if said is None:
            said = policy.forced(row["question"])
        return said == row["target"]

    only_base = sum(right(a) and not right(b) for a, b in zip(base, variant, strict=True))
    only_variant = sum(right(b) and not right(a) for a, b in zip(base, variant, strict=True))
    paired = _by_name(result)["rephrased"]["paired"]
    assert (paired["only_a"], paired["only_b"], paired["shared"]) == (only_base, only_variant, 60)


@pytest.mark.parametrize(
    ("b", "c", "n", "start"),
    [(0, 0, 40, "holds when flips are phrased as 'turns the coin over': within 0 points, p = 1.00"),
     (20, 1, 40, "drops 47.5 points when flips are phrased as 'turns the coin over': counts the phrase, not the state"),
     (1, 20, 40, "gains 47.5 points when flips are phrased as 'turns the coin over'"),
     (4, 2, 300, "holds when flips are phrased as 'turns the coin over': within 0.7 points, p = 0.69"),
     (7, 3, 20, "no clear change when flips are phrased as 'turns the coin over': -20 points, p = 0.34 (too few")],
)  # fmt: skip
def test_verdicts_say_what_the_paired_difference_says(b: int, c: int, n: int, start: str) -> None:
    from coinflip.probes.variants import BY_NAME, verdict
    from coinflip.scoring.paired import difference, mcnemar

    stats = {"shared": n, **mcnemar(b, c), **difference(b, c, n)}
    assert verdict(BY_NAME["rephrased"], stats).startswith(start)
    assert stats["low"] <= stats["difference"] <= stats["high"]
    assert (stats["low"] > 0 or stats["high"] < 0) == (min(b, c) * 5 < max(b, c))  # the clear cases only


def test_the_fresh_twin_verdict_names_contamination_only_when_the_base_set_is_better() -> None:
    from coinflip.probes.variants import FRESH, verdict
    from coinflip.scoring.paired import difference, mcnemar

    def line(b: int, c: int, bundled: bool = False) -> str:
        return verdict(FRESH, {"shared": 100, **mcnemar(b, c), **difference(b, c, 100)}, bundled)

    assert line(30, 2).startswith("sign of contamination: the base set scores 28 points above its fresh twin")
    assert line(3, 2) == "no sign of contamination: fresh twin within 1 points, p = 1.00"
    assert line(2, 30).startswith("no sign of contamination: the fresh twin scores 28 points above")
    assert "bundled set: coinflip generated it" in line(3, 2, bundled=True)


def test_a_model_at_a_trivial_baseline_gets_no_verdict_from_its_variants(tmp_path: Path) -> None:
    """always-yes scores what always-yes scores: its variants can show neither contamination nor holding."""
    result = _probe(tmp_path, model="always-yes")
    lines = [v["verdict"] for v in result["variants"] if v["name"] != "base"]
    assert len(lines) == 7 and all(line.endswith(": nothing to tell, the base set is not above a trivial baseline")
                                   for line in lines), lines  # the headline says it in full, once  # fmt: skip
    assert not any("contamination" in line or "holds" in line for line in lines)
    assert result["headline"].startswith("the variants cannot show anything: the base set is not above")
    assert "always-" in result["headline"] and "95% interval" in result["headline"]


def test_a_base_set_above_the_baseline_only_by_noise_is_at_the_floor() -> None:
    from coinflip.probes.variants import at_floor

    yes = {"always-yes": {"accuracy": 0.52}, "always-no": {"accuracy": 0.48}}
    base = {"metrics": {"accuracy": 0.55}, "intervals": {"accuracy": [0.45, 0.65]}}  # SmolLM2 near always-yes
    assert at_floor(base, yes) is not None and "always-yes 0.520" in str(at_floor(base, yes))
    assert at_floor({"metrics": {"accuracy": 0.9}, "intervals": {"accuracy": [0.85, 0.95]}}, yes) is None


def test_the_page_shows_the_variants_side_by_side_with_intervals_in_chromium(tmp_path: Path) -> None:
    with FakeOpenAIServer("shortcut") as server:
        result = _probe(tmp_path, lengths="2-3", model="m", model_id="<img src=x onerror=alert(1)>", api_url=server.url)
    page = Path(result["directory"]) / "probe.html"
    html = page.read_text(encoding="utf-8")
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    dom = _chromium(
        f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=3000", "--dump-dom", page.as_uri()
    ).stdout
    chart = re.search(r'<svg id="variants".*?</svg>', dom, re.S)
    assert chart is not None
    rows = re.findall(
        r'<g class="variant" data-name="(\w+)">.*?class="interval" x1="([\d.]+)" x2="([\d.]+)"', chart.group(0), re.S
    )
    assert [name for name, _, _ in rows] == ["base", "fresh", *SURFACE]
    assert all(float(low) < float(high) for _, low, high in rows)  # every variant has its interval drawn
    assert len(re.findall(r'<tr class="variant-row"', dom)) == 8
    assert "counts the phrase, not the state" in dom and re.search(r'<svg id="length"', dom)
    shot = tmp_path / "probe.png"
    _chromium(
        f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}", "--window-size=1280,1400", page.as_uri()
    )
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


def _probed_then_cut(server: FakeOpenAIServer, work: Path, limit: int, variant: str, keep: int, *options: str) -> Path:
    """A finished probe whose `variant` run keeps only its first `keep` replies, as if stopped there."""
    args = ("--model", "m", "--api-url", server.url, "--limit", str(limit), "--work-dir", str(work))
    first = run_cli("probe", *args, *options)
    assert first.returncode == 0, first.stderr
    root = next(work.glob("probe_*"))
    predictions = root / f"runs/{variant}/predictions/m/coin_flip.jsonl"
    lines = predictions.read_text(encoding="utf-8").splitlines(keepends=True)
    predictions.write_text("".join(lines[:keep]), encoding="utf-8")
    return root


def test_a_setting_typed_at_its_default_on_a_probe_resume_is_taken(tmp_path: Path) -> None:
    """`--retries 5` is the default, yet typed on the resume it must replace the saved 2, as it
    does for eval: what the user types is what is given, whatever its value."""
    with FakeOpenAIServer("correct") as server:
        root = _probed_then_cut(
            server, tmp_path, 6, "fresh", 1, "--variants", "fresh", "--lengths", "0", "--retries", "2"
        )
        again = run_cli("probe", "--use-cache", str(root), "--retries", "5")
    assert again.returncode == 0, again.stderr
    saved = yaml.safe_load((root / "runs/fresh/configs/task_config.yaml").read_text(encoding="utf-8"))
    assert saved["config"]["retries"] == 5


def test_a_probe_resumes_and_its_runs_are_listed_and_compared(tmp_path: Path) -> None:
    work = tmp_path / "work"
    with FakeOpenAIServer("correct") as server:
        options = ("--variants", "fresh,tails", "--lengths", "2-3", "--length-count", "10")
        root = _probed_then_cut(server, work, 20, "tails", 5, *options)
        before = sum(server.state.requests.values())
        again = run_cli("probe", "--use-cache", str(root))
        assert again.returncode == 0, again.stderr
        assert sum(server.state.requests.values()) - before == 15  # only what was missing
    report = json.loads((root / "probe.json").read_text(encoding="utf-8"))
    assert report["complete"] and [v["name"] for v in report["variants"]] == ["base", "fresh", "tails"]
    assert all(v["metrics"]["accuracy"] == 1.0 for v in report["variants"])
    assert "tails-up start" in again.stdout and "written:" in again.stdout
    index = (work / "index.html").read_text(encoding="utf-8")
    assert index.count("runs/tails") >= 1 and "runs/people_03" in index  # every variant's run is listed
    entry = re.search(r'<ul id="probes"><li><a href="([^"]+)">m</a>\s*(.*?)</li>', index, re.S)
    assert entry is not None and (work / entry.group(1)).is_file() and "no sign of contamination" in entry.group(2)
    listed = run_cli("view", str(work))
    assert listed.returncode == 0 and " 0 foreign" in listed.stderr  # the generated data is no stray folder
    other = run_cli(
        "probe",
        "--model",
        "always-yes",
        "--limit",
        "20",
        "--work-dir",
        str(work),
        "--variants",
        "tails",
        "--lengths",
        "0",
    )
    assert other.returncode == 0, other.stderr
    second = next(p for p in work.glob("probe_*") if p != root)
    assert (second / "data/tails/test.jsonl").read_bytes() == (root / "data/tails/test.jsonl").read_bytes()
    compared = run_cli("compare", str(root / "runs/tails"), str(second / "runs/tails"))  # two models, one variant
    assert compared.returncode == 0, compared.stderr
    assert "always-yes" in compared.stdout and "m" in compared.stdout


def test_the_runs_of_a_probe_are_viewed_and_its_base_run_resumed_on_their_own(tmp_path: Path) -> None:
    """`coinflip view PROBE/runs` (the folder `compare PROBE/runs --force` takes) ended in a ValueError traceback,
    and `eval --use-cache PROBE/runs/base` (as a stop in the base run tells) left its index unrefreshed with
    "...probe.html is not in the subpath of...": a probe's base run seen from inside listed the probe above it."""
    done = run_cli("probe", "--model", "oracle", "--limit", "5", "--variants", "tails", "--lengths", "0",
                   "--work-dir", str(tmp_path))  # fmt: skip
    assert done.returncode == 0, done.stderr
    (root,) = tmp_path.glob("probe_*")
    listed = run_cli("view", str(root / "runs"))
    assert listed.returncode == 0 and "wrote" in listed.stderr and "2 runs" in listed.stderr, listed.stderr
    resumed = run_cli("eval", "--use-cache", str(root / "runs/base"))
    assert resumed.returncode == 0 and "could not refresh" not in resumed.stderr, resumed.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--variants", "fresh,nope"), "unknown probe variant"),
        (("--lengths", "5-2"), "--lengths must be"),
        (("--length-count", "0"), "--length-count must be"),
    ],
)
def test_bad_probe_settings_end_in_one_line(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    result = run_cli("probe", "--model", "oracle", "--work-dir", str(tmp_path / "w"), *args)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "w").exists() or not any((tmp_path / "w").iterdir())


def test_probe_help_reads_well() -> None:
    result = run_cli("probe", "--help")
    assert result.returncode == 0
    for word in ("--variants", "--lengths", "--length-count", "--limit", "--api-url", "--use-cache", "fresh twin"):
        assert word in result.stdout


def test_the_fresh_twin_of_the_official_set_draws_on_its_own_names(tmp_path: Path) -> None:
    from .conftest import SKRISHNA, shared

    official = shared(SKRISHNA)
    config = TaskConfig(model="oracle", dataset_path=str(official), limit=30, work_dir=str(tmp_path), progress=False)
    result = probe(config, ProbeOptions(variants=("fresh",), lengths="0"))
    assert not result["base"]["bundled"] and "bundled set" not in result["headline"]
    assert all(v["metrics"]["accuracy"] == 1.0 for v in result["variants"])
    theirs = {p for r in load_file(official) for p, _ in parse(r.question).sequence.steps}  # type: ignore[union-attr]
    root = Path(result["directory"])
    base = [r["question"] for r in read_jsonl(root / "runs/base/predictions/oracle/coin_flip.jsonl")]
    for row, question in zip(read_jsonl(root / "data/fresh/test.jsonl"), base, strict=True):
        twin, original = parse(row["question"]), parse(question)
        assert twin is not None and original is not None and row["question"] != question
        assert {p for p, _ in twin.sequence.steps} <= theirs  # the evaluated set's name pool
        assert [len(p) for p, _ in twin.sequence.steps] == [len(p) for p, _ in original.sequence.steps]


def test_a_resumed_probe_writes_its_data_whole_never_through_a_link_or_into_a_fifo(tmp_path: Path) -> None:
    """A probe writes its variants' and lengths' data again on a resume: a link left at a data file
    was written through (the file it named overwritten) and a FIFO there hung the resume."""
    work, outside = tmp_path / "work", tmp_path / "outside.txt"
    outside.write_text("precious", encoding="utf-8")
    args = ("--model", "oracle", "--limit", "5", "--variants", "tails", "--lengths", "2", "--length-count", "5")
    assert run_cli("probe", *args, "--work-dir", str(work)).returncode == 0
    root = next(work.glob("probe_*"))
    linked, fifo = root / "data/tails/test.jsonl", root / "data/people_02/test.jsonl"
    rows = linked.read_text(encoding="utf-8")
    linked.unlink()
    linked.symlink_to(outside)
    fifo.unlink()
    os.mkfifo(fifo)
    again = run_cli("probe", "--use-cache", str(root), timeout=120)  # a hang ends here, as a failure
    assert again.returncode == 0, again.stderr
    assert outside.read_text(encoding="utf-8") == "precious"
    assert not linked.is_symlink() and linked.read_text(encoding="utf-8") == rows and fifo.is_file()


def test_a_probe_resumes_from_another_working_directory(tmp_path: Path) -> None:
    """A variant's run saved its data path as the probe gave it, relative to where the probe started;
    resumed from elsewhere, the saved path won over the probe's own and named no file."""
    (tmp_path / "a").mkdir()
    first = run_cli("probe", "--model", "oracle", "--limit", "4", "--variants", "fresh", "--lengths", "2-2",
                    "--length-count", "4", "--work-dir", "out", cwd=tmp_path / "a")  # fmt: skip
    assert first.returncode == 0, first.stderr
    (root,) = (tmp_path / "a" / "out").glob("probe_*")
    again = run_cli("probe", "--use-cache", str(root), cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert json.loads((root / "probe.json").read_text())["complete"] is True


def test_the_length_verdict_shows_the_interval_that_reaches_the_baseline() -> None:
    """ "falls to the always-yes baseline at 2 people (accuracy 0.650, always-yes 0.450)" read as a
    contradiction: it is the interval's lower end that reaches the baseline, and the line must show it."""
    point = {"people": 2, "accuracy": 0.65, "interval": (0.433, 0.819), "always_yes": 0.45}
    people, line = length_verdict([point])
    assert people == 2 and "0.433" in line and "0.450" in line, line


@pytest.mark.parametrize("html", [True, False])
def test_a_variant_links_its_run_page_only_where_one_was_written(tmp_path: Path, html: bool) -> None:
    config = TaskConfig(work_dir=str(tmp_path / "work"), limit=10, progress=False, model="oracle", html_report=html)
    result = probe(config, ProbeOptions(variants=("fresh",), lengths="0"))
    root = Path(result["directory"])
    page = (root / "probe.html").read_text(encoding="utf-8")
    for v in result["variants"]:
        pages = list((root / v["run"]).rglob("*.html"))
        if html:
            assert v["page"] is not None and (root / v["page"]).resolve() in [p.resolve() for p in pages]
            assert f'href="{v["page"]}"' in page
        else:
            assert v["page"] is None and not pages
            assert "coin_flip.html" not in page


def test_a_probe_without_variants_has_a_headline(tmp_path: Path) -> None:
    """docs/probes.md's `coinflip probe --variants "" --lengths ...` (the base set and the curve only) printed an
    empty first line, 'probe oracle: ', and the page an empty headline: the headline spoke of variants alone."""
    done = run_cli("probe", "--model", "oracle", "--limit", "40", "--variants", "", "--lengths", "2-3",
                   "--length-count", "5", "--work-dir", str(tmp_path))  # fmt: skip
    assert done.returncode == 0, done.stderr
    (root,) = tmp_path.glob("probe_*")
    result = json.loads((root / "probe.json").read_text(encoding="utf-8"))
    assert result["headline"] == result["length"]["verdict"] != "no length curve"
    assert done.stdout.splitlines()[0] == f"probe oracle: {result['headline']}"
