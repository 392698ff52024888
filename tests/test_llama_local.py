"""A real model end to end: SmolLM2-135M through llama.cpp's OpenAI-compatible server."""

from __future__ import annotations

import json
import os
import signal
import socket
from pathlib import Path

import pytest

from .conftest import PATIENCE_S, only_run_dir, read_jsonl, run_cli, spawn_cli, wait_for

pytest.importorskip("llama_cpp", reason="install coinflip[local]; .ci/run does")
# A model-bound step on a loaded 2-core machine: 6 replies took 5 minutes there beside
# other work, a few seconds on an idle one. The budget only catches a hang.
MODEL_BUDGET_S = 1800.0
# one worker runs them all (--dist loadgroup): two llama.cpp servers side by side on two cores took 2-4x as long each
pytestmark = [pytest.mark.llama, pytest.mark.timeout(2 * MODEL_BUDGET_S), pytest.mark.xdist_group("llama")]


def llama_processes(mark: str | None = None) -> list[int]:
    """llama.cpp servers running now; with `mark`, only those started by a test that set
    COINFLIP_TEST_MARK=mark (other sessions on the machine may run their own)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
                environ = (entry / "environ").read_bytes() if mark else b""
            except OSError:
                continue
            if b"llama_cpp.server" in cmdline and (not mark or f"COINFLIP_TEST_MARK={mark}".encode() in environ):
                found.append(int(entry.name))
    return found


def test_smollm2_replies_are_real_parsed_and_scored(tmp_path: Path) -> None:
    result = run_cli(
        "eval",
        "--model",
        "smollm2",
        "--limit",
        "4",
        "--generation-config",
        "max_tokens=48,temperature=0",
        "--work-dir",
        str(tmp_path),
        timeout=MODEL_BUDGET_S,
    )
    assert result.returncode == 0, result.stderr
    run = only_run_dir(tmp_path)
    rows = read_jsonl(run / "predictions/smollm2/coin_flip.jsonl")
    assert len(rows) == 4
    assert all(r["error"] is None and isinstance(r["reply"], str) and r["reply"].strip() for r in rows)
    assert len({r["reply"] for r in rows}) > 1  # the model's own text, not a canned reply
    assert all(r["usage"]["completion_tokens"] > 0 and r["usage"]["prompt_tokens"] > 100 for r in rows)
    assert all(r["latency_s"] > 0 for r in rows)
    report = json.loads((run / "reports/smollm2/coin_flip.json").read_text())
    counts = report["counts"]
    assert counts["samples"] == 4 and counts["errors"] == 0
    assert counts["invalid"] + counts["tp"] + counts["fp"] + counts["tn"] + counts["fn"] == 4
    assert "f1_score" in result.stdout


def test_no_server_left_after_a_failure(tmp_path: Path) -> None:
    bogus = tmp_path / "broken.gguf"
    bogus.write_bytes(b"GGUF not really a model")
    mark = str(tmp_path)
    result = run_cli(
        "eval", "--model", "mine", "--model-path", str(bogus), "--limit", "2", "--work-dir", str(tmp_path / "runs"),
        env={"COINFLIP_TEST_MARK": mark},
    )  # fmt: skip
    assert result.returncode == 2
    assert "llama.cpp server exited" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert "Failed to load model" in result.stderr and "llama_server.log" not in result.stderr  # a log since removed
    assert llama_processes(mark) == []
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # nothing left behind


def test_a_missing_model_file_creates_nothing(tmp_path: Path) -> None:
    result = run_cli(
        "eval", "--model-path", str(tmp_path / "missing.gguf"), "--model", "x", "--work-dir", str(tmp_path / "w")
    )
    assert result.returncode == 2 and "no such file" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert not (tmp_path / "w").exists()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL])
def test_no_server_left_after_a_signal(tmp_path: Path, sig: signal.Signals) -> None:
    mark = str(tmp_path)
    short = ("--generation-config", "max_tokens=8,temperature=0")  # a first reply in seconds on a loaded machine too
    proc = spawn_cli(
        "eval", "--model", "smollm2", "--limit", "40", *short, "--work-dir", mark, env={"COINFLIP_TEST_MARK": mark}
    )
    files = "*/predictions/smollm2/coin_flip.jsonl"
    found = wait_for(  # the server answers and a reply has landed
        lambda: [p for p in tmp_path.glob(files) if p.stat().st_size], "the first reply", MODEL_BUDGET_S
    )
    predictions = found[0]
    assert llama_processes(mark), "the server should be running mid-run"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=PATIENCE_S)
    wait_for(lambda: llama_processes(mark) == [], "the server to be gone, whatever the signal", 60)
    assert predictions is not None and read_jsonl(predictions)  # what finished is kept
    if sig != signal.SIGKILL:
        assert proc.returncode == 1 and "Traceback" not in err
        assert "--use-cache" in err and (sig == signal.SIGINT or sig.name in err)


def test_the_quick_start_against_the_python_llama_server_waits_on_no_queue(tmp_path: Path) -> None:
    """`python -m llama_cpp.server`, started by the user: one request at a time behind its lock, no
    /props, but its /v1/models owns every model as "me": one request goes at a time, none queues."""
    from coinflip.models.llama_local import bundled_gguf, llama_server

    with llama_server(bundled_gguf("smollm2"), "M", tmp_path / "llama.log") as url:  # one thread, as conftest sets
        result = run_cli(
            "eval", "--model", "M", "--api-url", url, "--api-key", "EMPTY_TOKEN", "--datasets", "coin_flip",
            "--limit", "4", "--generation-config", "max_tokens=32,temperature=0", "--work-dir", str(tmp_path / "runs"),
            timeout=MODEL_BUDGET_S,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    run = only_run_dir(tmp_path / "runs")
    assert len(read_jsonl(run / "predictions/M/coin_flip.jsonl")) == 4
    requests = json.loads(next(run.glob("reports/*/coin_flip.json")).read_text())["requests"]
    assert requests["timeouts"] == 0 and requests["retries"] == 0 and requests["server_slots"] == 1
    assert requests["sent"] == 4 and requests["in_flight_max"] == 1, requests


def test_a_server_that_dies_mid_run_is_named_and_the_run_resumes(tmp_path: Path) -> None:
    mark = str(tmp_path)
    args = ("--generation-config", "max_tokens=8,temperature=0", "--retries", "1")  # the stop comes in a second
    proc = spawn_cli(
        "eval", "--model", "smollm2", "--limit", "5", *args, "--work-dir", mark, env={"COINFLIP_TEST_MARK": mark}
    )
    files = "*/predictions/smollm2/coin_flip.jsonl"
    wait_for(lambda: [p for p in tmp_path.glob(files) if p.stat().st_size], "the first reply", MODEL_BUDGET_S)
    for pid in llama_processes(mark):
        os.kill(pid, signal.SIGKILL)  # out of memory, say
    _, err = proc.communicate(timeout=MODEL_BUDGET_S)
    last = err.strip().splitlines()[-1]  # after the progress lines
    assert proc.returncode == 1 and "Traceback" not in err and err.count("error:") == 1, err
    assert "llama.cpp server exited with code -9" in last and "--use-cache" in last  # not only a refused connection
    run = only_run_dir(tmp_path)
    resumed = run_cli("eval", "--use-cache", str(run), env={"COINFLIP_TEST_MARK": mark}, timeout=MODEL_BUDGET_S)
    assert resumed.returncode == 0, resumed.stderr
    assert len(read_jsonl(run / "predictions/smollm2/coin_flip.jsonl")) == 5


def test_a_resume_never_writes_the_server_log_through_a_link(tmp_path: Path) -> None:
    """A run directory is untrusted: a link at logs/llama_server.log must not make the server append elsewhere."""
    args = ("--model", "smollm2", "--generation-config", "max_tokens=4,temperature=0")
    first = run_cli("eval", *args, "--limit", "1", "--work-dir", str(tmp_path / "w"), timeout=MODEL_BUDGET_S)
    assert first.returncode == 0, first.stderr
    run = only_run_dir(tmp_path / "w")
    victim = tmp_path / "victim.txt"
    victim.write_text("mine\n")
    (run / "logs/llama_server.log").unlink()
    (run / "logs/llama_server.log").symlink_to(victim)
    resumed = run_cli("eval", *args, "--use-cache", str(run), "--limit", "2", timeout=MODEL_BUDGET_S)
    assert resumed.returncode == 0, resumed.stderr
    assert victim.read_text() == "mine\n"
    assert not (run / "logs/llama_server.log").is_symlink() and "llama" in (run / "logs/llama_server.log").read_text()


def test_a_proxy_in_the_environment_does_not_stop_the_local_server_starting(tmp_path: Path) -> None:
    """The local server is on 127.0.0.1, which no proxy can reach: the start-up check went through
    HTTP_PROXY (and never saw the server), as the client's requests do not."""
    with socket.socket() as dead:  # a proxy that refuses every connection
        dead.bind(("127.0.0.1", 0))
        proxy = f"http://127.0.0.1:{dead.getsockname()[1]}"
        result = run_cli(
            "eval", "--model", "smollm2", "--limit", "1", "--generation-config", "max_tokens=4,temperature=0",
            "--work-dir", str(tmp_path), env={"HTTP_PROXY": proxy, "http_proxy": proxy}, timeout=MODEL_BUDGET_S,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert len(read_jsonl(only_run_dir(tmp_path) / "predictions/smollm2/coin_flip.jsonl")) == 1


def test_a_resume_with_other_weights_under_the_same_name_is_another_run(tmp_path: Path) -> None:
    """--model-path names the file, --model the run: other weights must not land in the same run's numbers."""
    from coinflip.models.llama_local import bundled_gguf

    mine = tmp_path / "mine.gguf"
    mine.symlink_to(bundled_gguf("smollm2"))
    args = ("--model", "mine", "--generation-config", "max_tokens=4,temperature=0")
    first = run_cli("eval", *args, "--model-path", str(mine), "--limit", "1", "--work-dir", str(tmp_path / "w"),
                    timeout=MODEL_BUDGET_S)  # fmt: skip
    assert first.returncode == 0, first.stderr
    run = only_run_dir(tmp_path / "w")
    other = tmp_path / "other" / "mine.gguf"  # the same file name, other bytes
    other.parent.mkdir()
    other.write_bytes(b"GGUF another model")
    resumed = run_cli("eval", *args, "--model-path", str(other), "--use-cache", str(run), "--limit", "2")
    assert resumed.returncode == 2 and "was a different run" in resumed.stderr and "weights" in resumed.stderr
    assert len(resumed.stderr.strip().splitlines()) == 1
    assert len(read_jsonl(run / "predictions/mine/coin_flip.jsonl")) == 1


@pytest.mark.parametrize("threads", ["x", "0", "-2", "2.5"])
def test_a_thread_count_that_is_not_one_is_refused_before_any_run_directory(tmp_path: Path, threads: str) -> None:
    """$COINFLIP_LLAMA_THREADS sets llama.cpp's threads; anything but a whole number from 1 is one line, exit 2."""
    result = run_cli("eval", "--model", "smollm2", "--limit", "1", "--work-dir", str(tmp_path / "w"),
                     env={"COINFLIP_LLAMA_THREADS": threads})  # fmt: skip
    assert result.returncode == 2 and "COINFLIP_LLAMA_THREADS" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "w").exists()
