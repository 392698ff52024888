"""One majority vote everywhere: the report, the board, `coinflip compare`, the index's McNemar
test and the probes give each question the same verdict for the same answers.

Each case is a real run (a `coinflip eval` of the oracle on one question, its answers rewritten
through records.py and rescored), in both arithmetics, beside an oracle run on that question and
one more (so every pair also has a question only one side holds).
"""

from __future__ import annotations

import json
import shutil
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coinflip.pages.board import row
from coinflip.pages.catalog import scan
from coinflip.pages.index import PAIR_RUNS, build
from coinflip.probes.run import _by_base
from coinflip.records import dumps, read_prediction
from coinflip.run.runner import rescore

from .conftest import run_cli

# answers, one a repeat: R/W the right/wrong answer; ? no valid answer (its forced answer says none
# either); ?R/?W no valid answer, forced to the right/wrong one; ! an errored sample
# case -> (answers, verdict by the strict answers, verdict with forced answers); True: right
CASES: dict[str, tuple[list[str], bool, bool]] = {
    "right_invalid_invalid": (["R", "?", "?"], True, True),  # issue 19: invalid answers do not vote
    "tie": (["R", "W"], False, False),  # a tie is no answer
    "tie_beside_invalid": (["W", "R", "?", "?"], False, False),
    "all_invalid": (["?", "?", "?"], False, False),
    "even_repeats": (["R", "R", "W", "?"], True, True),
    "errors_do_not_vote": (["!", "!", "W", "R", "R"], True, True),
    "errors_and_one_answer": (["!", "R", "!"], True, True),
    "errors_and_a_wrong_answer": (["!", "!", "W"], False, False),
    "one_repeat": (["R"], True, True),
    "one_wrong_repeat": (["W"], False, False),
    "one_invalid_repeat": (["?R"], False, True),
    "forced_outvotes": (["?R", "?R", "W"], False, True),
    "forced_ties": (["R", "?W"], True, False),
    "forced_says_nothing": (["?", "R"], True, True),
    "all_errored": (["!", "!"], False, False),  # EvalScope's arithmetic: no sample, no question
    "one_errored_repeat": (["!"], False, False),
    "six_tie_among_invalid_and_errors": (["R", "W", "?", "!", "R", "W"], False, False),
    "six_forced_breaks_a_tie": (["R", "R", "W", "W", "?", "?R"], False, True),
    "four_forced_makes_a_tie": (["?W", "?W", "R", "R"], True, False),
    "four_errors_then_a_tie": (["!", "!", "!", "!", "R", "W"], False, False),
    "errored_forced_never_votes": (["!", "R", "?W", "?W"], True, False),
}
ERRORED_ONLY = {"all_errored", "one_errored_repeat"}
# work directories of at most PAIR_RUNS runs (the cases and the oracle), so the index pairs them all
GROUPS = [list(CASES)[i : i + PAIR_RUNS - 1] for i in range(0, len(CASES), PAIR_RUNS - 1)]


def _said(target: str, answer: str) -> str:
    right = answer.endswith("R")
    return f"ANSWER: {target if right else ('NO' if target == 'YES' else 'YES')}"


def _row(template: dict[str, Any], target: str, repeat: int, answer: str) -> dict[str, Any]:
    row = {**template, "repeat": repeat, "target": target, "reply": "I cannot say.", "error": None}
    if answer in ("R", "W"):
        row["reply"] = "Counting.\n" + _said(target, answer)
    elif answer == "!":
        row |= {"reply": None, "finish_reason": None, "usage": None, "error": "HTTP 500: server error"}
    else:
        said = _said(target, answer) if len(answer) == 2 else "I cannot say."
        row["forced"] = {"reply": said, "finish_reason": "stop", "usage": None, "latency_s": 0.0, "attempts": 1}
        row["forced"]["error"] = None
    return row


def _eval(folder: Path, *args: str) -> Path:
    done = run_cli("eval", "--model", "oracle", "--no-timestamp", "--work-dir", str(folder), "--force-answer", *args)
    assert done.returncode == 0, done.stderr
    return folder


def _case_run(template: Path, folder: Path, answers: list[str]) -> None:
    """A copy of a real run on one question, its answers rewritten in the project's record format."""
    shutil.copytree(template, folder)
    (saved,) = (folder / "predictions" / "oracle").glob("*.jsonl")
    first = read_prediction(saved.read_bytes().splitlines()[0])
    assert first is not None
    saved.write_bytes(b"".join(dumps(_row(dict(first), first["target"], k, a)) for k, a in enumerate(answers)))  # type: ignore[arg-type]
    rescore(folder, show=False)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, int], Path]:
    """A work directory per arithmetic and group of cases: each case's run, and the oracle on two questions."""
    root = tmp_path_factory.mktemp("majority")
    works = {}
    for compat in ("coinflip", "evalscope"):
        oracle = _eval(root / f"oracle-{compat}", "--limit", "2", "--metric-compat", compat)
        templates = {
            k: _eval(root / f"template-{compat}-{k}", "--limit", "1", "--repeats", str(k), "--metric-compat", compat)
            for k in sorted({len(answers) for answers, _, _ in CASES.values()})
        }
        for group, names in enumerate(GROUPS):
            work = root / f"{compat}-{group}"
            shutil.copytree(oracle, work / "oracle")
            for name in names:
                _case_run(templates[len(CASES[name][0])], work / name, CASES[name][0])
            works[(compat, group)] = work
    return works


def _expected(compat: str, name: str, forced: bool) -> bool | None:
    """The one definition's verdict; None: the question does not count (no sample in EvalScope's arithmetic)."""
    if compat == "evalscope" and name in ERRORED_ONLY:
        return None
    return CASES[name][2 if forced else 1]


def _question(run: Path) -> tuple[int, str]:
    (saved,) = (run / "predictions" / "oracle").glob("*.jsonl")
    row = read_prediction(saved.read_bytes().splitlines()[0])
    assert row is not None
    return row["id"], row["question"]


@pytest.mark.parametrize("group", range(len(GROUPS)))
@pytest.mark.parametrize("compat", ["coinflip", "evalscope"])
def test_every_place_gives_each_question_the_same_majority_verdict(
    runs: dict[tuple[str, int], Path], compat: str, group: int
) -> None:
    work = runs[(compat, group)]
    found = {f.path.name: f for f in scan(work)}
    assert set(found) == {*GROUPS[group], "oracle"} and all(f.kind == "run" for f in found.values())
    partner = _question(work / "oracle")
    out = work.parent / f"compare-{compat}-{group}"
    compared = run_cli("compare", str(work), "--out", str(out))
    assert compared.returncode == 0, compared.stderr
    pairs = {(p["a"], p["b"]): p for p in json.loads((out / "compare.json").read_text())["pairs"]}
    assert "McNemar tests (shared questions" in compared.stdout  # one verdict a question, however many repeats
    index = build(work)
    rows = index["runs"]
    tested = {(rows[p["a"]]["run"], rows[p["b"]]["run"]): p for p in index["pairs"]}
    verdicts: dict[str, bool | None] = {}
    for name in GROUPS[group]:
        run = work / name
        question = _question(run)
        assert question == partner  # the oracle's first question
        report = json.loads((run / "reports/oracle/coin_flip.json").read_text())
        expected = _expected(compat, name, forced=False)
        # the report, on one question: its majority vote's accuracy (one repeat: its accuracy) is the verdict
        for forced, part in ((False, report), (True, report["forced"])):
            votes = part.get("repeat_metrics")
            counted = (
                votes["questions"]
                if votes
                else report["counts"]["samples"] - report["counts"]["errors"] * (compat == "evalscope")
            )
            assert counted == (0 if expected is None else 1), (name, forced)
            accuracy = votes["majority_vote"]["accuracy"] if votes else part["metrics"]["accuracy"]
            if expected is not None:
                assert accuracy == float(_expected(compat, name, forced)), (name, forced)
            # the board shows the report's number
            shown = row(found[name])["extra"]["forced_majority_accuracy" if forced else "majority_accuracy"]
            assert shown == (votes["majority_vote"]["accuracy"] if votes else None), (name, forced)
        # the probes, in both views (a probe with --force-answer pairs forced verdicts)
        for forced in (False, True):
            probe = _by_base(run, "oracle", {question[0]: question[1]}, forced, compat)
            assert probe == ({} if expected is None else {question[1]: _expected(compat, name, forced)}), (name, forced)
        verdicts[name] = expected
    # compare and the index pair every two runs on the questions they share, one verdict each
    verdicts["oracle"] = True
    for a, b in combinations(sorted(verdicts), 2):
        label_a, label_b = f"oracle [{a}]", f"oracle [{b}]"
        pair = pairs.get((label_a, label_b)) or _swapped(pairs.get((label_b, label_a)))
        both = verdicts[a] is not None and verdicts[b] is not None
        listed = tested.get((a, b)) or _swapped(tested.get((b, a)))
        if not both:
            assert pair is None and (listed is None or listed["shared"] == 0), (a, b)  # nothing shared: no test
            continue
        expected_counts = (1, int(bool(verdicts[a]) and not verdicts[b]), int(bool(verdicts[b]) and not verdicts[a]))
        assert pair is not None and (pair["shared"], pair["only_a"], pair["only_b"]) == expected_counts, (a, b)
        assert listed is not None and (listed["shared"], listed["only_a"], listed["only_b"]) == expected_counts
        # the index shows each run's answer on the questions where they differ: the one its verdict is on
        record, flip = (tested[(a, b)], False) if (a, b) in tested else (tested[(b, a)], True)
        assert len(record["rows"]) == expected_counts[1] + expected_counts[2]
        for shown in record["rows"]:
            target = index["questions"][shown[0]][1]
            said_a, said_b = (shown[2], shown[1]) if flip else (shown[1], shown[2])
            assert (said_a == target, said_b == target) == (verdicts[a], verdicts[b]), (a, b, said_a, said_b)


def _swapped(pair: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if pair is None else {**pair, "only_a": pair["only_b"], "only_b": pair["only_a"]}


def test_evalscope_repeats_leave_errored_samples_out_as_its_metrics_do() -> None:
    """Per repeat and by majority vote, EvalScope's arithmetic counts no errored sample, as its
    headline metrics do: repeat 0 is 1 right of 1 answered (not 1 of 2), and a question whose
    every repeat errored is no question."""
    from coinflip.scoring.report import build_report
    from coinflip.scoring.scorer import Scorer

    answers = {0: ("YES", ["!", "!"]), 1: ("NO", ["R", "W"]), 2: ("YES", ["R", "R"])}
    saved = {"config": {"model": "m"}, "fingerprint": {"repeats": 2}, "samples": 6}
    reports = {}
    for compat in ("coinflip", "evalscope"):
        scorer = Scorer(compat=compat)
        for question, (target, said) in answers.items():
            for k, a in enumerate(said):
                scorer.add(_row({"id": question, "people": 2, "question": f"q{question}"}, target, k, a))  # type: ignore[arg-type]
        reports[compat] = build_report(saved, "r", scorer, compat)
    strict, evalscope = reports["coinflip"]["repeat_metrics"], reports["evalscope"]["repeat_metrics"]
    assert strict["per_repeat"]["accuracy"]["values"] == [pytest.approx(2 / 3), pytest.approx(1 / 3)]
    assert evalscope["per_repeat"]["accuracy"]["values"] == [1.0, 0.5]
    assert (strict["questions"], strict["majority_vote"]["accuracy"]) == (3, pytest.approx(1 / 3))  # q1 ties
    assert (evalscope["questions"], evalscope["majority_vote"]["accuracy"]) == (2, 0.5)
    assert reports["evalscope"]["metrics"]["accuracy"] == 0.75  # 3 right of the 4 that did not error


def test_choices_per_request_are_repeats_in_the_report_and_compare_says_it_pairs_their_majority(
    tmp_path: Path,
) -> None:
    """n=3 in --generation-config asks each question three times, as --repeats 3 does: the report's
    `repeats` said 1 beside a majority vote of k=3, so compare paired majority votes without saying so."""
    from coinflip.testing.server import FakeOpenAIServer

    work = tmp_path / "w"
    with FakeOpenAIServer("mixed") as server:
        for run, extra in (("n3", ["--generation-config", "n=3"]), ("one", [])):
            args = ["--model", "m", "--api-url", server.url, "--limit", "10", "--no-timestamp"]
            done = run_cli("eval", *args, "--work-dir", str(work / run), *extra)
            assert done.returncode == 0, done.stderr
    report = json.loads((work / "n3/reports/m/coin_flip.json").read_text())
    assert report["repeats"] == report["repeat_metrics"]["k"] == 3 and report["counts"]["samples"] == 30
    compared = run_cli("compare", str(work), "--out", str(tmp_path / "cmp"))
    assert compared.returncode == 0, compared.stderr
    warnings = json.loads((tmp_path / "cmp/compare.json").read_text())["warnings"]
    assert any("[n3]" in w and "majority vote" in w for w in warnings), warnings


def test_a_question_a_data_set_holds_twice_is_two_questions_in_pairs_as_in_the_report(tmp_path: Path) -> None:
    """The report counts each id; compare and the index keyed votes by question text, so the same
    text under two ids (one answered right, one wrong) became one tied vote: wrong, on 1 shared question."""
    rows = (Path(__file__).parents[1] / "src/coinflip/_data/test.jsonl").read_text().splitlines()
    data = tmp_path / "twice.jsonl"
    data.write_text("\n".join([rows[0], rows[0], rows[1]]) + "\n")
    work = tmp_path / "w"
    _eval(work / "oracle", "--dataset-path", str(data))
    _eval(tmp_path / "template", "--dataset-path", str(data))
    shutil.copytree(tmp_path / "template", work / "half")
    (saved,) = (work / "half/predictions/oracle").glob("*.jsonl")
    first = [read_prediction(line) for line in saved.read_bytes().splitlines()]
    said = {0: "R", 1: "W", 2: "R"}  # ids 0 and 1 hold the same question
    saved.write_bytes(b"".join(dumps(_row(dict(r), r["target"], 0, said[r["id"]])) for r in first if r))  # type: ignore[arg-type]
    report = rescore(work / "half", show=False)
    assert report["counts"]["samples"] == 3 and report["counts"]["correct"] == 2
    compared = run_cli("compare", str(work), "--out", str(tmp_path / "cmp"))
    assert compared.returncode == 0, compared.stderr
    (pair,) = json.loads((tmp_path / "cmp/compare.json").read_text())["pairs"]
    assert pair["shared"] == 3 and sorted([pair["only_a"], pair["only_b"]]) == [0, 1]
    (listed,) = build(work)["pairs"]
    assert listed["shared"] == 3 and listed["only_a"] + listed["only_b"] == 1


def test_a_probe_pairs_each_base_question_once_even_when_its_text_comes_twice(tmp_path: Path) -> None:
    """A probe keyed its verdicts by the base question's text, so two copies of one question were
    one vote (and one pair) where the report counts two questions."""
    from coinflip.config import TaskConfig
    from coinflip.probes.run import ProbeOptions, probe

    rows = (Path(__file__).parents[1] / "src/coinflip/_data/test.jsonl").read_text().splitlines()
    data = tmp_path / "twice.jsonl"
    data.write_text("\n".join([rows[0], rows[0], rows[1]]) + "\n")
    config = TaskConfig(
        work_dir=str(tmp_path / "work"), model="random", dataset_path=str(data), dataset_hub="local", progress=False
    )
    result = probe(config, ProbeOptions(lengths="0", length_count=30))
    variants = [v for v in result["variants"] if v["name"] != "base"]
    assert variants and all(v["paired"]["shared"] == 3 == v["samples"] for v in variants), variants


ANSWER_KINDS = ["R", "W", "?", "!", "?R", "?W"]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(  # questions: each a list of (target, answer) repeats; a hand edit may give one id two targets
        st.lists(st.tuples(st.sampled_from(["YES", "NO"]), st.sampled_from(ANSWER_KINDS)), min_size=1, max_size=6),
        min_size=1,
        max_size=5,
    ),
    st.sampled_from(["coinflip", "evalscope"]),
    st.booleans(),
)
def test_the_verdicts_pages_and_probes_read_from_reviews_are_the_reports_majority_vote(
    questions: list[list[tuple[str, str]]], compat: str, forced: bool
) -> None:
    """Votes (compare, the index, the probes) read the saved reviews; the report reads the
    scorer: over any answers, the share of questions whose vote is right is the report's
    majority-vote accuracy, on as many questions. (A question whose samples name two targets, as
    a hand edit may leave, was a YES question for the report and its first review's target for
    the pages: Votes now runs the report's own steps.)"""
    import io

    from coinflip.records import read_review
    from coinflip.scoring.reducers import Votes
    from coinflip.scoring.report import build_report
    from coinflip.scoring.scorer import Scorer

    k = max(len(q) for q in questions)
    scorer = Scorer(compat=compat)
    for question, said in enumerate(questions):
        for repeat, (target, answer) in enumerate(said):
            scorer.add(_row({"id": question, "people": 2, "question": f"q{question}"}, target, repeat, answer))  # type: ignore[arg-type]
    saved = {
        "config": {"model": "m", "force_answer": True},
        "fingerprint": {"repeats": max(k, 2)},
        "samples": len(scorer),
    }
    report = build_report(saved, "r", scorer, compat)
    votes = (report["forced"] if forced else report)["repeat_metrics"]
    written = io.BytesIO()
    scorer.write_reviews(written)
    pages = Votes(compat, forced)
    for line in written.getvalue().splitlines():
        review = read_review(line)
        assert review is not None
        pages.add(f"q{review['id']}", review)
    right = pages.right()
    assert votes["questions"] == len(right)
    if right:  # none (every sample errored, EvalScope's arithmetic): the report's 0 is EvalScope's undefined
        assert votes["majority_vote"]["accuracy"] == pytest.approx(sum(right.values()) / len(right))
