"""A probe against failing servers, odd sets, changed settings, a cap and few questions: what it prints,
writes and exits with."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
from pathlib import Path

from coinflip.data.grammar import parse
from coinflip.rundir import in_use
from coinflip.testing.policy import last_question
from coinflip.testing.server import FakeOpenAIServer

from .answer_server import AnswerServer, Seen, answer, chat
from .conftest import run_cli, spawn_cli, wait_for


def _fails_chinese_and_five_people(seen: Seen) -> bytes:
    """Right on every question but those in Chinese and those with five people: a 500 each, worded apart
    (the letters of the request's number), so no run ends as a broken endpoint."""
    question = last_question(seen.body["messages"][-1]["content"])
    parsed = parse(question)
    if "问" in question or (parsed is not None and len(parsed.sequence.steps) == 5):
        word = "".join(chr(ord("a") + int(d)) for d in str(seen.index))
        return answer({"error": {"message": f"cannot answer this one ({word})"}}, 500)
    return answer(chat(seen.right_answer))


def test_a_probe_whose_runs_scored_nothing_in_evalscope_arithmetic_writes_its_page(tmp_path: Path) -> None:
    """In EvalScope's arithmetic errored samples are in no denominator: a run whose every sample errored has no
    accuracy interval, and the probe's length verdict, its page and its chart indexed it (a TypeError traceback)."""
    with AnswerServer(_fails_chinese_and_five_people) as server:
        args = ("--model", "m", "--api-url", server.url, "--limit", "4", "--variants", "zh", "--lengths", "4-5")
        done = run_cli("probe", *args, "--length-count", "10", "--retries", "0", "--metric-compat", "evalscope",
                       "--work-dir", str(tmp_path))  # fmt: skip
    assert "Traceback" not in done.stderr and done.returncode == 1, done.stderr
    (root,) = tmp_path.glob("probe_*")
    result = json.loads((root / "probe.json").read_text(encoding="utf-8"))
    zh, five = result["variants"][1], result["length"]["points"][1]
    assert zh["intervals"]["accuracy"] is None and five["interval"] is None and not result["complete"]
    assert result["length"]["falls_at"] == 5  # nothing measured: no sign it stays above the baseline
    page = (root / "probe.html").read_text(encoding="utf-8")
    assert page.count("(-)") == 4  # no interval: the chart label and its tooltip, the two tables


def _zh_probe(server: AnswerServer, work: Path, *options: str) -> subprocess.CompletedProcess[str]:
    args = ("--model", "m", "--api-url", server.url, "--limit", "4", "--variants", "zh", "--lengths", "0")
    return run_cli("probe", *args, "--retries", "0", "--work-dir", str(work), *options)


def test_a_probe_with_ignore_errors_exits_0_as_eval_does(tmp_path: Path) -> None:
    """--ignore-errors: 'exit 0 even when some samples got no reply'; eval did, the probe exited 1."""
    with AnswerServer(_fails_chinese_and_five_people) as server:
        done = _zh_probe(server, tmp_path, "--ignore-errors")
    assert done.returncode == 0, done.stderr
    (root,) = tmp_path.glob("probe_*")
    result = json.loads((root / "probe.json").read_text(encoding="utf-8"))
    assert not result["complete"] and result["errors_ignored"] and result["variants"][1]["errors"] == 4


def test_a_probe_left_incomplete_by_errors_says_so_and_how_to_resume_it(tmp_path: Path) -> None:
    """Samples without a reply in a variant's run: the probe went on, printed its verdicts and exited 1 without a
    word of why (eval says 'resume with: ...'); the last line now says it and how to resume the whole probe."""
    with AnswerServer(_fails_chinese_and_five_people) as server:
        done = _zh_probe(server, tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    (root,) = tmp_path.glob("probe_*")
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "incomplete" in last and "zh" in last, done.stderr
    assert last.endswith(f"resume with: coinflip probe --use-cache {root}")
    with AnswerServer(lambda seen: answer(chat(seen.right_answer))) as server:
        again = run_cli("probe", "--use-cache", str(root), "--api-url", server.url)
    assert again.returncode == 0, again.stderr
    assert json.loads((root / "probe.json").read_text(encoding="utf-8"))["complete"] is True


def test_a_probe_resume_refused_for_its_settings_changes_nothing(tmp_path: Path) -> None:
    """A resume whose settings the base run took (--limit: more questions) or the probe saved (--length-count)
    but a later run refused (its questions changed) extended the base run or saved the new settings first: every
    later resume of the probe, as saved, was refused. The refusal now comes before anything is run or saved."""
    with FakeOpenAIServer("correct") as server:
        first = run_cli("probe", "--model", "m", "--api-url", server.url, "--limit", "6", "--variants", "fresh",
                        "--lengths", "2", "--length-count", "4", "--work-dir", str(tmp_path))  # fmt: skip
        assert first.returncode == 0, first.stderr
        (root,) = tmp_path.glob("probe_*")
        saved = (root / "probe.json").read_bytes()
        asked = sum(server.state.requests.values())
        for changed in (("--limit", "8"), ("--length-count", "5")):
            refused = run_cli("probe", "--use-cache", str(root), *changed)
            assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
            assert (root / "probe.json").read_bytes() == saved and sum(server.state.requests.values()) == asked
            assert refused.stderr.strip().splitlines()[-1].startswith("error: the probe cannot resume with the")
        again = run_cli("probe", "--use-cache", str(root))
    assert again.returncode == 0, again.stderr
    assert json.loads((root / "probe.json").read_text(encoding="utf-8"))["base"]["questions"] == 6


def test_a_refused_probe_resume_leaves_the_questions_its_runs_were_asked(tmp_path: Path) -> None:
    """A resume refused for its settings (--limit 8 on a probe of 6) had first rewritten each variant's and length's
    questions (data/) for them: the files no longer held what the runs were asked, and a run's own resume
    (`coinflip eval --use-cache PROBE/runs/fresh`, as a stop tells) was refused as a different run."""
    with FakeOpenAIServer("correct") as server:
        first = run_cli("probe", "--model", "m", "--api-url", server.url, "--limit", "6", "--variants", "fresh",
                        "--lengths", "2", "--length-count", "4", "--work-dir", str(tmp_path))  # fmt: skip
        assert first.returncode == 0, first.stderr
        (root,) = tmp_path.glob("probe_*")
        questions = {p: p.read_bytes() for p in (root / "data").rglob("*.jsonl")}
        for changed in (("--limit", "8"), ("--length-count", "5")):
            assert run_cli("probe", "--use-cache", str(root), *changed).returncode == 2
            assert {p: p.read_bytes() for p in (root / "data").rglob("*.jsonl")} == questions
        again = run_cli("eval", "--use-cache", str(root / "runs" / "fresh"))
    assert again.returncode == 0, again.stderr


def test_a_probe_resumed_while_it_runs_is_refused_and_the_running_one_goes_on(tmp_path: Path) -> None:
    """A second `probe --use-cache` of a probe running its fresh twin rewrote that run's questions under it: the
    running probe ended 'data/fresh/test.jsonl: changed while being read ... start again' (exit 2), as a second
    eval of a running run never does ('in use by another coinflip process')."""
    with FakeOpenAIServer("correct", latency=0.3) as server:
        first = spawn_cli("probe", "--model", "m", "--api-url", server.url, "--limit", "8", "--variants", "fresh",
                          "--lengths", "0", "--eval-batch-size", "1", "--work-dir", str(tmp_path))  # fmt: skip
        fresh = wait_for(lambda: next(tmp_path.glob("probe_*/runs/fresh/predictions/m/coin_flip.jsonl"), None), "fresh")
        second = run_cli("probe", "--use-cache", str(fresh.parents[4]))
        out, err = first.communicate(timeout=120)
    assert second.returncode == 2 and "in use by another coinflip process" in second.stderr, second.stderr
    assert first.returncode == 0, err


def test_a_probe_resumed_while_one_of_its_runs_is_resumed_alone_is_refused_and_that_run_goes_on(
    tmp_path: Path,
) -> None:
    """`probe --use-cache` while `eval --use-cache PROBE/runs/fresh` (as a stop tells) runs: the probe rewrote that
    run's questions under it, and the eval ended 'data/fresh/test.jsonl: changed while being read ... start again'
    (exit 2); d8d5410 refused only a second probe."""
    with FakeOpenAIServer("correct", latency=0.3) as server:
        args = ("--variants", "fresh", "--lengths", "0", "--eval-batch-size", "1", "--work-dir", str(tmp_path))
        first = spawn_cli("probe", "--model", "m", "--api-url", server.url, "--limit", "8", *args, quiet=True)
        rows = wait_for(lambda: next(tmp_path.glob("probe_*/runs/fresh/predictions/m/coin_flip.jsonl"), None), "fresh")
        first.send_signal(signal.SIGKILL)
        first.wait(60)
        run = rows.parents[2]
        alone = spawn_cli("eval", "--use-cache", str(run), "--eval-batch-size", "1")
        wait_for(lambda: in_use(run), "the run's own resume")
        second = run_cli("probe", "--use-cache", str(run.parents[1]))
        out, err = alone.communicate(timeout=120)
    assert alone.returncode == 0, err
    assert second.returncode == 2 and "in use by another coinflip process" in second.stderr, second.stderr


def test_a_key_revoked_in_a_probe_s_run_says_how_to_resume_the_whole_probe(tmp_path: Path) -> None:
    """Six answers, then 401 (the key revoked) in the probe's fresh twin: the line said to resume that run alone
    (`coinflip eval --use-cache PROBE/runs/fresh`, fd70dfd), never the probe, whose page and report that leaves
    unwritten; a stop in a run says both."""

    def respond(seen: Seen) -> bytes:
        refused = {"error": {"message": "Incorrect API key provided"}}
        return answer(chat(f"ANSWER: {seen.right_answer}")) if seen.index < 6 else answer(refused, 401)

    with AnswerServer(respond) as srv:
        result = run_cli("probe", "--model", "m", "--api-url", srv.url, "--limit", "4", "--variants", "fresh",
                         "--lengths", "0", "--eval-batch-size", "1", "--work-dir", str(tmp_path))  # fmt: skip
    (root,) = tmp_path.glob("probe_*")
    assert result.returncode == 2 and "2 new samples kept" in result.stderr, result.stderr
    assert f"or the whole probe: coinflip probe --use-cache {root}" in result.stderr, result.stderr


def test_a_set_with_more_people_than_names_in_other_scripts_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    """A set of long sequences (`coinflip generate --people 100`): the scripts variant has too few names to
    rename everyone, which ended the probe in a ValueError traceback, the fresh twin's data already written."""
    data = tmp_path / "long.jsonl"
    assert run_cli("generate", "--people", "100", "--count", "3", "--out", str(data)).returncode == 0
    work = tmp_path / "work"
    done = run_cli("probe", "--model", "oracle", "--dataset-path", str(data), "--variants", "fresh,scripts",
                   "--lengths", "0", "--work-dir", str(work))  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("error: a question with 100 people, but only")
    assert not [p for p in work.rglob("*") if p.is_file()]


def _costs(root: Path) -> dict[str, float]:
    reports = {run.name: run / "reports/m/coin_flip.json" for run in (root / "runs").iterdir()}
    return {name: json.loads(path.read_text())["cost"]["total"] for name, path in reports.items() if path.is_file()}


def test_max_cost_caps_the_whole_probe_not_each_of_its_runs(tmp_path: Path) -> None:
    """--max-cost 3 ('stop before the run would cost more than this') let each of the probe's five runs spend up
    to 3: the probe spent 6.7 and exited 0. Each run now gets what the runs before it left of the cap."""
    prices = ("--price-input", "1000", "--price-output", "1000", "--generation-config", "max_tokens=20")
    with FakeOpenAIServer("correct") as server:
        done = run_cli("probe", "--model", "m", "--api-url", server.url, "--limit", "10", "--variants", "fresh,tails",
                       "--lengths", "2-3", "--length-count", "10", "--max-cost", "3", *prices,
                       "--work-dir", str(tmp_path))  # fmt: skip
        assert done.returncode == 1, done.stderr
        (root,) = tmp_path.glob("probe_*")
        assert 1 < sum(_costs(root).values()) <= 3
        assert done.stderr.strip().splitlines()[-1].endswith(f"or the whole probe: coinflip probe --use-cache {root}")
        again = run_cli("probe", "--use-cache", str(root), "--max-cost", "100")
    assert again.returncode == 0, again.stderr
    assert len(_costs(root)) == 5 and 6 < sum(_costs(root).values()) <= 100


def test_probes_started_in_the_same_second_each_get_their_own_folder(tmp_path: Path) -> None:
    """Two probes of one work directory started in the same second both took probe_<time> (the name was only
    checked to be free, then written into later): the second ended in 'runs/base already holds a run'."""
    from coinflip.probes.run import _new_folder

    root = tmp_path / "work" / "probe_20260101_120000"
    taken = [_new_folder(root) for _ in range(3)]
    assert [p.name for p in taken] == [root.name, f"{root.name}_1", f"{root.name}_2"] and all(p.is_dir() for p in taken)
    work = tmp_path / "many"
    args = ("--model", "oracle", "--limit", "3", "--variants", "tails", "--lengths", "0", "--work-dir", str(work))
    started = [spawn_cli("probe", *args, quiet=True) for _ in range(3)]
    assert [p.wait(timeout=300) for p in started] == [0, 0, 0]
    assert len([p for p in work.glob("probe_*") if (p / "probe.json").is_file()]) == 3


def test_the_length_verdict_says_the_interval_reaches_the_baseline_not_that_accuracy_falls(tmp_path: Path) -> None:
    """A perfect model on 5 questions a length 'falls to the always-yes baseline at 2 people (accuracy 1.000,
    always-yes 0.800)': its interval reached the baseline, its accuracy never fell."""
    with FakeOpenAIServer("correct") as server:
        done = run_cli("probe", "--model", "m", "--api-url", server.url, "--limit", "5", "--variants", "",
                       "--lengths", "2", "--length-count", "5", "--work-dir", str(tmp_path))  # fmt: skip
    assert done.returncode == 0, done.stderr
    (root,) = tmp_path.glob("probe_*")
    length = json.loads((root / "probe.json").read_text(encoding="utf-8"))["length"]
    (point,) = length["points"]
    assert point["accuracy"] == 1.0 and point["interval"][0] <= point["always_yes"] < 1.0 and length["falls_at"] == 2
    low, high = point["interval"]
    assert length["verdict"] == (
        f"its 95% interval reaches the always-yes baseline at 2 people (accuracy 1.000, interval {low:.3f} to "
        f"{high:.3f}; "
        f"always-yes {point['always_yes']:.3f})"
    )


def test_a_probe_whose_base_run_never_started_leaves_nothing(tmp_path: Path) -> None:
    """A wrong endpoint: the probe folder stayed with its data, probe.json and the base run's lock, which no resume
    could take ('its base run never started ... start a new probe') and `view` listed as a foreign folder."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    done = run_cli("probe", "--model", "m", "--api-url", f"http://127.0.0.1:{closed}/v1", "--limit", "3",
                   "--variants", "tails", "--lengths", "2", "--work-dir", str(tmp_path))  # fmt: skip
    assert done.returncode == 2 and "nothing is listening" in done.stderr.strip().splitlines()[-1]
    assert list(tmp_path.iterdir()) == []


def test_a_probe_into_its_work_dir_whose_base_run_never_started_can_be_started_again(tmp_path: Path) -> None:
    """--no-timestamp after a wrong endpoint: a new probe there was refused ('already holds a probe; resume it'),
    and the resume too ('its base run never started ... start a new probe'): the folder took neither."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    args = ("--model", "m", "--limit", "3", "--variants", "tails", "--lengths", "0", "--no-timestamp")
    work = ("--work-dir", str(tmp_path))
    assert run_cli("probe", *args, "--api-url", f"http://127.0.0.1:{closed}/v1", *work).returncode == 2
    with FakeOpenAIServer("correct") as server:
        again = run_cli("probe", *args, "--api-url", server.url, *work)
        assert again.returncode == 0, again.stderr
        twice = run_cli("probe", *args, "--api-url", server.url, *work)
    assert twice.returncode == 2 and "already holds a probe; resume it with --use-cache" in twice.stderr


def test_with_repeats_the_probe_says_its_differences_are_on_majority_votes(tmp_path: Path) -> None:
    """With --repeats the accuracies count every answer and the paired differences each question's majority
    vote: a variant read 'drops 7 points' beside accuracies 3.7 points apart, and nothing said why."""
    with FakeOpenAIServer("mixed") as server:
        done = run_cli("probe", "--model", "m", "--api-url", server.url, "--limit", "6", "--variants", "tails",
                       "--lengths", "0", "--repeats", "2", "--work-dir", str(tmp_path))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "(paired: each question by its majority vote; the accuracies count every answer)" in done.stdout
    (root,) = tmp_path.glob("probe_*")
    assert "With repeats each question counts once, by its majority vote" in (root / "probe.html").read_text()
