"""End to end against a real OpenAI-compatible HTTP server on 127.0.0.1 (no mocked client)."""

from __future__ import annotations

import http.client
import json
import random
import signal
import socket
import time
from pathlib import Path

import pytest

from coinflip.testing.policy import Policy
from coinflip.testing.server import FakeOpenAIServer, serve

from .conftest import PATIENCE_S, hand_metrics, only_run_dir, read_jsonl, run_cli, spawn_cli, wait_for, whole_lines


def expected_metrics(run: Path, policy: Policy) -> dict[str, float]:
    """Count the confusion matrix by hand from what the server is known to answer to the run's questions."""
    rows = read_jsonl(next(run.glob("predictions/*/coin_flip.jsonl")))
    return hand_metrics([(r["target"], policy.expected(r["question"])) for r in rows])


def test_specification_cli_call(server: FakeOpenAIServer, tmp_path: Path) -> None:
    result = run_cli(
        "eval",
        "--model",
        "YOUR_MODEL",
        "--api-url",
        server.url,
        "--api-key",
        "EMPTY_TOKEN",
        "--datasets",
        "coin_flip",
        "--limit",
        "10",
        "--work-dir",
        str(tmp_path),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    run = only_run_dir(tmp_path)
    report = json.loads((run / "reports" / "YOUR_MODEL" / "coin_flip.json").read_text())
    assert report["counts"]["samples"] == 10
    assert report["metrics"] == pytest.approx(expected_metrics(run, Policy("mixed")))
    assert "f1_score" in result.stdout and "yes_ratio" in result.stdout
    assert result.stdout.index("f1_score") < result.stdout.index("accuracy")


def test_specification_python_call(server: FakeOpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    from coinflip import run_task
    from coinflip.config import TaskConfig

    task_cfg = TaskConfig(
        model="YOUR_MODEL",
        api_url=server.url,
        api_key="EMPTY_TOKEN",
        datasets=["coin_flip"],
        limit=10,
    )
    report = run_task(task_cfg=task_cfg)
    assert report["metrics"] == pytest.approx(expected_metrics(only_run_dir(tmp_path / "outputs"), Policy("mixed")))
    assert (tmp_path / "outputs").is_dir()
    import coinflip

    assert coinflip.TaskConfig is TaskConfig


def test_larger_run_matches_known_answers_and_records_usage(server: FakeOpenAIServer, tmp_path: Path) -> None:
    result = run_cli("eval", "--model", "m", "--api-url", server.url, "--limit", "400", "--work-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    run = only_run_dir(tmp_path)
    report = json.loads((run / "reports/m/coin_flip.json").read_text())
    assert report["metrics"] == pytest.approx(expected_metrics(run, Policy("mixed")))
    assert report["counts"]["invalid"] > 0  # the mixed policy answers "maybe" sometimes
    rows = read_jsonl(run / "predictions/m/coin_flip.jsonl")
    ids = [r["id"] for r in rows]
    assert ids == sorted(set(ids)) and len(ids) == 400  # one line per sample, in id order
    assert all(
        r["usage"]["completion_tokens"] > 0 and r["latency_s"] > 0 and r["finish_reason"] == "stop" for r in rows
    )
    assert all(r["reasoning"].startswith("Scratch work") for r in rows)  # recorded, never scored
    assert (run / "configs/task_config.yaml").is_file() and (run / "logs/eval_log.log").is_file()
    assert (run / "reviews/m/coin_flip.jsonl").is_file() and (run / "reports/m/coin_flip.html").is_file()


def test_flaky_server_gives_the_same_metrics_as_a_clean_one(tmp_path: Path) -> None:
    with FakeOpenAIServer("mixed") as clean:
        ok = run_cli(
            "eval", "--model", "m", "--api-url", clean.url, "--limit", "150", "--work-dir", str(tmp_path / "clean")
        )
    with FakeOpenAIServer("mixed", fail_rate=0.3, stall=5.0, seed=3) as flaky:
        bad = run_cli(
            "eval",
            "--model",
            "m",
            "--api-url",
            flaky.url,
            "--limit",
            "150",
            "--timeout",
            "1",
            "--retries",
            "12",
            "--work-dir",
            str(tmp_path / "flaky"),
        )
        faults = dict(flaky.state.faults)
    assert ok.returncode == 0 and bad.returncode == 0, bad.stderr
    assert set(faults) == {"429", "500", "stall", "drop", "malformed", "empty"}
    assert sum(faults.values()) > 30
    clean_report = json.loads((only_run_dir(tmp_path / "clean") / "reports/m/coin_flip.json").read_text())
    flaky_report = json.loads((only_run_dir(tmp_path / "flaky") / "reports/m/coin_flip.json").read_text())
    assert flaky_report["metrics"] == clean_report["metrics"]
    assert flaky_report["counts"] == clean_report["counts"]
    attempts = [r["attempts"] for r in read_jsonl(only_run_dir(tmp_path / "flaky") / "predictions/m/coin_flip.jsonl")]
    assert max(attempts) > 1


def test_bad_key_stops_at_once_without_retrying(tmp_path: Path) -> None:
    with FakeOpenAIServer("correct", api_key="right-key") as srv:
        start = time.monotonic()
        result = run_cli(
            "eval",
            "--model",
            "m",
            "--api-url",
            srv.url,
            "--api-key",
            "wrong-key",
            "--eval-batch-size",
            "1",
            "--retries",
            "5",
            "--work-dir",
            str(tmp_path),
        )
        elapsed = time.monotonic() - start
        sent = len(srv.state.auth_headers)
    assert result.returncode == 2
    assert elapsed < 10
    assert sent == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "401" in lines[0] and "--api-key" in lines[0]
    assert "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []  # a run that never got a reply leaves nothing behind


def test_unknown_model_is_a_clear_error(tmp_path: Path) -> None:
    with FakeOpenAIServer("correct", models=("real-model",)) as srv:
        result = run_cli("eval", "--model", "typo-model", "--api-url", srv.url, "--work-dir", str(tmp_path))
    assert result.returncode == 2
    assert "404" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_api_key_never_reaches_a_file_or_log(tmp_path: Path) -> None:
    secret = "sk-live-TOPSECRET-1234567890"
    with FakeOpenAIServer("mixed", api_key=secret) as srv:
        flag = run_cli(
            "eval",
            "--model",
            "m",
            "--api-url",
            srv.url,
            "--api-key",
            secret,
            "--limit",
            "20",
            "--work-dir",
            str(tmp_path / "a"),
        )
        env = run_cli(
            "eval",
            "--model",
            "m",
            "--api-url",
            srv.url,
            "--limit",
            "20",
            "--work-dir",
            str(tmp_path / "b"),
            env={"OPENAI_API_KEY": secret},
        )
        assert srv.state.auth_headers.count(f"Bearer {secret}") == 40
    with FakeOpenAIServer("mixed", api_key="other") as srv:  # a server that rejects it must not echo it either
        rejected = run_cli(
            "eval", "--model", "m", "--api-url", srv.url, "--api-key", secret, "--work-dir", str(tmp_path / "c")
        )
    assert flag.returncode == 0 and env.returncode == 0 and rejected.returncode == 2
    for result in (flag, env, rejected):
        assert secret not in result.stdout + result.stderr
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(files) >= 10
    for path in files:
        assert secret.encode() not in path.read_bytes(), path
    config = (only_run_dir(tmp_path / "a") / "configs/task_config.yaml").read_text()
    assert "api_key: '***'" in config


def test_several_api_urls_are_one_line_naming_a_load_balancer(tmp_path: Path) -> None:
    """Replicas of one model belong behind a load balancer; coinflip talks to one endpoint."""
    urls = ("--api-url", "http://127.0.0.1:9/v1", "--api-url", "http://127.0.0.1:10/v1")
    result = run_cli("eval", "--model", "m", *urls, "--limit", "2", "--work-dir", str(tmp_path))
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr
    assert "give one --api-url, not 2" in lines[0] and "load balancer" in lines[0]
    assert list(tmp_path.iterdir()) == []


def test_settings_saved_before_versions_still_resume(tmp_path: Path) -> None:
    """A run directory from before the settings had a version (--api-url saved as a list, of
    replicas even) reads as this version reads it: its first URL; it resumes and rescores."""
    import yaml

    with FakeOpenAIServer("correct") as srv:
        done = run_cli("eval", "--model", "m", "--api-url", srv.url, "--limit", "4", "--work-dir", str(tmp_path))
        assert done.returncode == 0, done.stderr
        run = only_run_dir(tmp_path)
        path = run / "configs/task_config.yaml"
        saved = yaml.safe_load(path.read_text())
        assert saved["config"].pop("version") == 2
        saved["config"]["api_url"] = [srv.url, "http://127.0.0.1:9/v1"]  # what version 1 wrote: replicas
        path.write_text(yaml.safe_dump(saved))
        resumed = run_cli("eval", "--use-cache", str(run), "--limit", "6")
    assert resumed.returncode == 0, resumed.stderr
    assert run_cli("rescore", str(run)).returncode == 0
    assert yaml.safe_load(path.read_text())["config"]["api_url"] == srv.url


def test_a_run_from_before_subsets_resumes_its_own_first_questions(tmp_path: Path) -> None:
    """Before c4f33b2 --limit N took the first N questions and saved no subset: a resume drew a
    stratified subset instead, asked N other questions and reported them alone (the old answers dropped)."""
    import yaml

    with FakeOpenAIServer("correct") as srv:
        args = ("eval", "--model", "m", "--api-url", srv.url, "--limit", "4", "--limit-mode", "first")
        done = run_cli(*args, "--work-dir", str(tmp_path))
        assert done.returncode == 0, done.stderr
        run = only_run_dir(tmp_path)
        path = run / "configs/task_config.yaml"
        saved = yaml.safe_load(path.read_text())
        del saved["config"]["limit_mode"], saved["fingerprint"]["subset"], saved["subset"]  # as that version saved
        path.write_text(yaml.safe_dump(saved))
        (run / "configs/subset.json").unlink(missing_ok=True)
        first = [r["id"] for r in read_jsonl(run / "predictions/m/coin_flip.jsonl")]
        same = run_cli("eval", "--use-cache", str(run), "--limit", "4")
        more = run_cli("eval", "--use-cache", str(run), "--limit", "6")
    assert same.returncode == 0 and more.returncode == 0, same.stderr + more.stderr
    ids = [r["id"] for r in read_jsonl(run / "predictions/m/coin_flip.jsonl")]
    assert ids[:4] == first and len(set(ids)) == 6 and len(ids) == 6, ids  # two more asked, none again


@pytest.mark.parametrize(
    ("model", "expect"),
    [
        ("oracle", {"accuracy": 1.0, "precision": 1.0, "recall": 1.0, "f1_score": 1.0}),
        ("always-yes", {"recall": 1.0, "yes_ratio": 1.0}),
        ("always-no", {"recall": 0.0, "yes_ratio": 0.0, "f1_score": 0.0}),
    ],
)
def test_baselines(tmp_path: Path, model: str, expect: dict[str, float]) -> None:
    result = run_cli("eval", "--model", model, "--work-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    report = json.loads((only_run_dir(tmp_path) / f"reports/{model}/coin_flip.json").read_text())
    assert report["counts"]["samples"] == 3333
    for name, value in expect.items():
        assert report["metrics"][name] == value, name
    if model == "oracle":
        assert report["metrics"]["yes_ratio"] == pytest.approx(report["counts"]["target_yes"] / 3333)


def test_random_baseline_is_seeded_and_near_one_half(tmp_path: Path) -> None:
    a = run_cli("eval", "--model", "random", "--seed", "5", "--work-dir", str(tmp_path / "a"))
    b = run_cli("eval", "--model", "random", "--seed", "5", "--work-dir", str(tmp_path / "b"))
    ra = json.loads((only_run_dir(tmp_path / "a") / "reports/random/coin_flip.json").read_text())
    rb = json.loads((only_run_dir(tmp_path / "b") / "reports/random/coin_flip.json").read_text())
    assert a.returncode == b.returncode == 0
    assert ra["metrics"] == rb["metrics"] and abs(ra["metrics"]["accuracy"] - 0.5) < 0.05


def test_model_names_are_made_safe_for_paths(tmp_path: Path, server: FakeOpenAIServer) -> None:
    result = run_cli(
        "eval", "--model", "org/Model:7b", "--api-url", server.url, "--limit", "3", "--work-dir", str(tmp_path)
    )
    assert result.returncode == 0, result.stderr
    assert (only_run_dir(tmp_path) / "predictions/org_Model_7b/coin_flip.jsonl").is_file()


def test_samples_without_reply_are_errors_and_resume_asks_only_for_them(tmp_path: Path) -> None:
    with FakeOpenAIServer("correct", fail_rate=1.0, seed=1) as broken:
        broken.state.stall = 0.01
        result = run_cli(
            "eval",
            "--model",
            "m",
            "--api-url",
            broken.url,
            "--limit",
            "5",
            "--retries",
            "1",
            "--timeout",
            "0.5",
            "--work-dir",
            str(tmp_path),
        )
    assert result.returncode == 1
    run = only_run_dir(tmp_path)
    report = json.loads((run / "reports/m/coin_flip.json").read_text())
    assert report["counts"]["errors"] == 5 and not report["complete"] and report["warnings"]
    assert "INCOMPLETE" in result.stdout
    with FakeOpenAIServer("correct") as good:
        again = run_cli(
            "eval",
            "--model",
            "m",
            "--api-url",
            good.url,
            "--limit",
            "8",
            "--use-cache",
            str(run),
            "--work-dir",
            str(tmp_path),
        )
        asked = sum(good.state.requests.values())
    assert again.returncode == 0, again.stderr
    assert asked == 8  # the 5 errors and the 3 never run
    report = json.loads((run / "reports/m/coin_flip.json").read_text())
    assert report["complete"] and report["counts"]["errors"] == 0 and report["counts"]["samples"] == 8
    assert len(read_jsonl(run / "predictions/m/coin_flip.jsonl")) == 8


def test_use_cache_refuses_a_different_run(tmp_path: Path, server: FakeOpenAIServer) -> None:
    first = run_cli("eval", "--model", "m", "--api-url", server.url, "--limit", "3", "--work-dir", str(tmp_path))
    assert first.returncode == 0
    run = only_run_dir(tmp_path)
    result = run_cli(
        "eval",
        "--model",
        "other",
        "--api-url",
        server.url,
        "--limit",
        "3",
        "--few-shot-num",
        "2",
        "--generation-config",
        "temperature=0.5",
        "--use-cache",
        str(run),
    )
    assert result.returncode == 2
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1
    for word in ("model", "few_shot_num", "generation_config"):
        assert word in line


def _comparable(rows: list[dict]) -> list[tuple]:
    return sorted((r["id"], r["target"], r["prompt"], r["reply"], r["error"]) for r in rows)


def test_resume_after_sigkill_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    limit = 240
    rng = random.Random(1234)
    with FakeOpenAIServer("mixed", latency=0.03) as srv:
        base = ["eval", "--model", "m", "--api-url", srv.url, "--limit", str(limit), "--eval-batch-size", "8"]
        reference = run_cli(*base, "--work-dir", str(tmp_path / "ref"))
        assert reference.returncode == 0
        ref_rows = read_jsonl(only_run_dir(tmp_path / "ref") / "predictions/m/coin_flip.jsonl")
        work = tmp_path / "killed"
        proc = spawn_cli(*base, "--work-dir", str(work))
        files = "*/predictions/m/coin_flip.jsonl"
        wait_for(lambda: any(p.stat().st_size for p in work.glob(files)), "the first replies on disk")
        time.sleep(rng.uniform(0, 1.0))  # then a random moment of the run
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        run = only_run_dir(work)
        predictions = run / "predictions/m/coin_flip.jsonl"
        for _ in range(3):
            time.sleep(0.3)  # let requests that were in flight at the kill reach the server
            done = {r["question"] for r in whole_lines(predictions)}
            before = dict(srv.state.requests)
            proc = spawn_cli(*base, "--use-cache", str(run))
            time.sleep(rng.uniform(0.5, 1.5))
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait()
            for question in done:
                assert srv.state.requests[question] == before[question], "a finished sample was asked again"
        time.sleep(0.3)
        done = {r["question"] for r in whole_lines(predictions)}
        before = dict(srv.state.requests)
        final = run_cli(*base, "--use-cache", str(run))
        assert final.returncode == 0, final.stderr
        for question in done:
            assert srv.state.requests[question] == before[question]
    rows = read_jsonl(predictions)
    assert len(rows) == limit
    assert _comparable(rows) == _comparable(ref_rows)
    ref_report = json.loads((only_run_dir(tmp_path / "ref") / "reports/m/coin_flip.json").read_text())
    report = json.loads((run / "reports/m/coin_flip.json").read_text())
    assert report["metrics"] == ref_report["metrics"]


def test_half_written_last_line_is_tolerated(tmp_path: Path, server: FakeOpenAIServer) -> None:
    first = run_cli("eval", "--model", "m", "--api-url", server.url, "--limit", "6", "--work-dir", str(tmp_path))
    assert first.returncode == 0
    run = only_run_dir(tmp_path)
    predictions = run / "predictions/m/coin_flip.jsonl"
    lines = predictions.read_text().splitlines(keepends=True)
    predictions.write_text("".join(lines[:4]) + lines[4][: len(lines[4]) // 2])
    again = run_cli("eval", "--model", "m", "--api-url", server.url, "--limit", "6", "--use-cache", str(run))
    assert again.returncode == 0, again.stderr
    rows = read_jsonl(predictions)
    ids = [r["id"] for r in rows]
    assert ids == sorted(set(ids)) and len(ids) == 6  # the cut line asked again, nothing doubled


def test_ctrl_c_stops_cleanly_and_keeps_what_finished(tmp_path: Path) -> None:
    with FakeOpenAIServer("correct", latency=0.05) as srv:
        proc = spawn_cli(
            "eval", "--model", "m", "--api-url", srv.url, "--eval-batch-size", "4", "--work-dir", str(tmp_path)
        )
        files = "*/predictions/m/coin_flip.jsonl"
        wait_for(lambda: any(p.stat().st_size for p in tmp_path.glob(files)), "the first replies on disk")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=PATIENCE_S)
    assert proc.returncode == 1
    assert "Traceback" not in err
    assert "--use-cache" in err
    run = only_run_dir(tmp_path)
    kept = read_jsonl(run / "predictions/m/coin_flip.jsonl")
    assert 0 < len(kept) < 3333


def test_completions_mode_sends_the_same_text_as_one_prompt(tmp_path: Path) -> None:
    with FakeOpenAIServer("mixed") as srv:
        result = run_cli(
            "eval", "--model", "m", "--api-url", srv.url, "--api-mode", "completions", "--system-prompt", "Be careful.",
            "--limit", "30", "--work-dir", str(tmp_path),
        )  # fmt: skip
        asked = sum(srv.state.requests.values())
    assert result.returncode == 0, result.stderr
    assert asked == 30
    report = json.loads((only_run_dir(tmp_path) / "reports/m/coin_flip.json").read_text())
    assert report["metrics"] == pytest.approx(expected_metrics(only_run_dir(tmp_path), Policy("mixed")))


@pytest.mark.parametrize(
    ("url", "mode", "expected"),
    [
        ("http://h:8000/v1", "chat", "http://h:8000/v1/chat/completions"),
        ("http://h:8000/v1/", "completions", "http://h:8000/v1/completions"),
        ("http://h:8000", "chat", "http://h:8000/v1/chat/completions"),
        ("http://h:8000/v1/chat/completions", "chat", "http://h:8000/v1/chat/completions"),
        ("https://api.example.com/openai/v1", "chat", "https://api.example.com/openai/v1/chat/completions"),
    ],
)
def test_endpoint_urls(url: str, mode: str, expected: str) -> None:
    from coinflip.models._request import endpoint_url

    assert endpoint_url(url, mode) == expected


@pytest.mark.parametrize(
    ("url", "mode", "named"),
    [("http://h:1/v1/completions", None, "completions"), ("http://h:1/v1/chat/completions/", "completions", "chat")],
)
def test_a_full_endpoint_of_the_other_api_mode_is_refused_not_swapped(url: str, mode: str | None, named: str) -> None:
    """Sent to the other endpoint, a model would be asked another way (a chat template, or none) than the URL says."""
    result = run_cli("eval", "--model", "m", "--api-url", url, *(("--api-mode", mode) if mode else ()))
    assert result.returncode == 2 and f"--api-url is a {named} endpoint" in result.stderr, result.stderr
    assert f"pass --api-mode {named}" in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, None),
        ("3", 3.0),
        ("0.5", None),  # RFC 9110: a whole number of seconds, ASCII digits only
        ("-2", None),
        ("1_0", None),  # float() reads it as 10
        ("\u0663", None),  # an Arabic-Indic three: a digit to str.isdigit, not to RFC 9110
        ("3600", 60.0),
        ("Wed, 21 Oct 2015 07:28:30 GMT", 30.0),
        ("soon", None),
        ("Sun, 06 Nov 99999999999999999 08:49:37 GMT", None),  # a year past datetime's: OverflowError, a traceback
    ],
)
def test_retry_after_header(header: str | None, expected: float | None) -> None:
    from email.utils import parsedate_to_datetime

    from coinflip.models.openai_api import retry_after

    now = parsedate_to_datetime("Wed, 21 Oct 2015 07:28:00 GMT").timestamp()
    assert retry_after(header, now=now) == expected


def test_secrets_are_redacted_from_error_text() -> None:
    from coinflip.models._redact import Redactor

    redact = Redactor(["sk-abc123"])
    assert redact("Incorrect API key provided: sk-abc123") == "Incorrect API key provided: ***"
    assert Redactor([None])("nothing here") == "nothing here"


@pytest.mark.parametrize("header", ["2", "1_0"])
def test_retry_after_is_honoured_as_rfc_9110_writes_it(tmp_path: Path, header: str) -> None:
    """`Retry-After: 1_0` was read as 10 s (float() takes underscores): it is no Retry-After."""
    with FakeOpenAIServer("correct", throttle=[header]) as srv:
        result = run_cli("eval", "--model", "m", "--api-url", srv.url, "--limit", "1", "--work-dir", str(tmp_path))
        arrivals = list(srv.state.arrivals)
    assert result.returncode == 0, result.stderr
    assert len(arrivals) == 2
    if header == "2":
        assert arrivals[1] - arrivals[0] >= 2  # the client waited as told, not its own shorter backoff
    else:
        assert arrivals[1] - arrivals[0] < 10  # its own backoff, not ten seconds
    row = read_jsonl(only_run_dir(tmp_path) / "predictions/m/coin_flip.jsonl")[0]
    assert row["attempts"] == 2 and row["error"] is None


def test_the_hint_on_retries_points_to_a_log_that_names_each_failure(tmp_path: Path) -> None:
    """The summary says "N retries after failed requests: see the errors in the log": the log must hold them,
    where it held only the failures of samples that never got a reply (none here)."""
    with FakeOpenAIServer("correct", fail_rate=0.4, stall=0.0, seed=3) as flaky:
        result = run_cli("eval", "--model", "m", "--api-url", flaky.url, "--limit", "10", "--work-dir", str(tmp_path))
    run = only_run_dir(tmp_path)
    requests = json.loads((run / "reports/m/coin_flip.json").read_text())["requests"]
    assert requests["retries"] > 0 and "see the errors in the log" in result.stdout + result.stderr
    log = (run / "logs/eval_log.log").read_text()
    assert log.count("failed, retrying: ") == requests["retries"], log


@pytest.mark.timeout(60)  # the old server took bad seconds and served them forever
@pytest.mark.parametrize(
    "flags", [["--port", "99999"], ["--port", "-1"], ["--latency", "nan"], ["--slots", "-1"], ["--fail-rate", "2"]]
)
def test_the_test_servers_bad_options_end_in_one_line(flags: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """A port out of range or taken was a traceback (exit 1); a negative --slots served nothing, each
    request's connection closed without a word, and NaN or negative seconds were taken as they came."""
    with FakeOpenAIServer() as taken:
        for argv in (flags, ["--port", str(taken.port)]):
            with pytest.raises(SystemExit) as stopped:
                serve(argv)
            assert stopped.value.code == 2
            assert capsys.readouterr().err.splitlines()[-1].startswith("python -m coinflip.testing.server: error: --")


@pytest.mark.parametrize(
    ("route", "body", "param"),
    [
        ("chat/completions", b"not json {", None),
        ("chat/completions", b"\xff\xfe", None),
        ("chat/completions", b"[1, 2]", "messages"),
        ("chat/completions", b'{"model": "m"}', "messages"),
        ("chat/completions", b'{"model": "m", "messages": "hi"}', "messages"),
        ("chat/completions", b'{"model": "m", "messages": [1]}', "messages"),
        ("completions", b'{"model": "m"}', "prompt"),
        ("batches", b"not json {", None),
    ],
)
def test_the_test_server_answers_a_malformed_request_400_as_real_servers_do(
    route: str, body: bytes, param: str | None
) -> None:
    """Its connection was left hanging (the handler's exception in the log); a missing messages was answered 200."""
    with FakeOpenAIServer() as srv:
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)  # an outer bound for a hang, no timing
        conn.request("POST", f"/v1/{route}", body, {"Content-Type": "application/json"})
        answer = conn.getresponse()
        error = json.loads(answer.read())["error"]
        assert answer.status == 400 and error["type"] == "invalid_request_error" and error["message"]
        assert error["param"] == param
        good = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        conn.request("POST", "/v1/chat/completions", json.dumps(good), {"Content-Type": "application/json"})
        assert conn.getresponse().status == 200  # the same connection goes on serving
        conn.close()


@pytest.mark.parametrize(
    "head", [b"GARBAGE\r\n\r\n", b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: many\r\n\r\n{}"]
)
def test_the_test_server_answers_a_malformed_http_request_400_and_closes(head: bytes) -> None:
    """No request line, or a Content-Length that is no number: the connection hung, the parser's exception logged."""
    with FakeOpenAIServer() as srv, socket.create_connection(("127.0.0.1", srv.port), timeout=30) as conn:
        conn.sendall(head)  # the timeout: an outer bound for a hang, no timing
        got = b"".join(iter(lambda: conn.recv(65536), b""))  # until the server closes
    status, _, body = got.partition(b"\r\n\r\n")
    assert status.startswith(b"HTTP/1.1 400 ") and json.loads(body)["error"]["type"] == "invalid_request_error"
