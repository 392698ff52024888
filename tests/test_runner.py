"""The runner's order of things: a run directory is resumable from the moment it exists."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from pathlib import Path

import pytest

from coinflip.config import TaskConfig
from coinflip.errors import FatalAPIError
from coinflip.run.plan import prepare
from coinflip.run.runner import ask, finish, open_run, run_task
from coinflip.rundir import load_saved_config
from coinflip.testing.server import FakeOpenAIServer

from .answer_server import AnswerServer, Seen, answer, chat
from .conftest import PATIENCE_S, only_run_dir, wait_for


@pytest.mark.parametrize("model", ["oracle", "served"])
def test_the_config_is_on_disk_before_any_request(tmp_path: Path, model: str) -> None:
    with FakeOpenAIServer("mixed") as srv:
        url = None if model == "oracle" else srv.url
        plan = prepare(TaskConfig(model=model, api_url=url, work_dir=str(tmp_path), limit=30, quiet=True))
        run, fresh, _, _ = open_run(plan)
        assert fresh and not run.predictions.exists()
        saved = load_saved_config(run.root)  # written once, as YAML, before the first request
        assert saved["samples"] == 30 and saved["config"]["model"] == model
        assert srv.state.requests.total() == 0
        session = ask(plan, run, fresh)
    report = finish(run, "coinflip", show=False, session=session)
    assert report["counts"]["samples"] == 30
    assert run.config_file.read_text().startswith("config:")  # for people to read


def test_a_run_killed_before_its_first_reply_resumes(tmp_path: Path) -> None:
    plan = prepare(TaskConfig(model="oracle", work_dir=str(tmp_path), limit=12, quiet=True))
    run, _, _, _ = open_run(plan)  # the process dies here, before any request
    report = run_task(use_cache=str(run.root), quiet=True)  # nothing else given: the saved settings
    assert report["counts"]["samples"] == 12 and report["complete"]


def test_a_bad_key_leaves_no_run_directory(tmp_path: Path) -> None:
    with FakeOpenAIServer("correct", api_key="right") as srv:
        config = TaskConfig(model="m", api_url=srv.url, api_key="wrong", work_dir=str(tmp_path), limit=3, quiet=True)
        with pytest.raises(FatalAPIError, match="401"):
            run_task(config)
    assert not tmp_path.exists() or list(tmp_path.iterdir()) == []


def test_settings_from_a_yaml_or_json_file_and_a_list(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(f"model: oracle\nlimit: 6\nquiet: true\nwork_dir: {tmp_path / 'runs'}\n")
    (tmp_path / "b.json").write_text(
        json.dumps({"model": "always-no", "limit": 4, "quiet": True, "work_dir": str(tmp_path / "runs")})
    )
    reports = run_task([str(tmp_path / "a.yaml"), str(tmp_path / "b.json")])
    assert [r["model"] for r in reports] == ["oracle", "always-no"]
    assert [r["counts"]["samples"] for r in reports] == [6, 4]


def test_run_task_inside_a_running_event_loop_as_in_jupyter(tmp_path: Path) -> None:
    """A notebook's cell runs inside the kernel's event loop: run_task raised 'Cannot run the event loop while
    another loop is running' (the run directory left with no answers) where EvalScope's run_task just runs."""

    def respond(seen: Seen) -> bytes:  # the first request fails, which the run logs from inside its loop
        if seen.index == 0:
            return answer({"error": {"message": "down"}}, 500)
        return answer(chat(f"ANSWER: {seen.right_answer}"))

    async def cell(url: str) -> dict:
        return run_task({"model": "m", "api_url": url, "limit": 4, "retries": 0, "ignore_errors": True,
                         "work_dir": str(tmp_path), "quiet": True})  # fmt: skip

    with AnswerServer(respond) as srv:
        report = asyncio.run(cell(srv.url))
    assert report["counts"]["samples"] == 4 and report["counts"]["errors"] == 1
    assert "failed after 1 attempts" in (only_run_dir(tmp_path) / "logs" / "eval_log.log").read_text()


def test_runs_in_threads_of_one_process_each_log_their_own_lines(tmp_path: Path) -> None:
    """Every run's log took every line logged in the process: runs in threads (several models from one script)
    wrote each other's 'finished', errors and retries into their own eval_log.log."""
    asked, release = threading.Event(), threading.Event()

    def respond(seen: Seen) -> bytes:
        asked.set()
        release.wait(PATIENCE_S)
        return answer(chat(f"ANSWER: {seen.right_answer}"))

    with AnswerServer(respond) as srv:
        settings = {"model": "m", "api_url": srv.url, "limit": 1, "work_dir": str(tmp_path), "quiet": True}
        worker = threading.Thread(target=run_task, args=(settings,))
        worker.start()
        wait_for(asked.is_set, "the run's request")
        logging.getLogger("coinflip").warning("a line of another run in this process")
        release.set()
        worker.join()
    saved = (only_run_dir(tmp_path) / "logs" / "eval_log.log").read_text()
    assert "finished 1 samples" in saved and "another run" not in saved
