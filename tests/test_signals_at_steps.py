"""A stop signal at an exact step of a run, sent from inside the step by the process to itself:
Python runs the handler at once, so each test stops the run at that step, with no timing involved.

While the run directory is being made, or just after: the directory is on disk with its settings,
so the stop is the run's, one RunIncomplete line that says how to resume it (it said 'before the
run started' with no path, or a bare 'stopped by SIGTERM' escaped run_task). As the requests are
about to start: one line too (the coroutine made for them was left 'never awaited', which Python
reported in two more lines at exit)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from coinflip import run_task
from coinflip.errors import RunIncomplete
from coinflip.run import runner
from coinflip.testing.server import FakeOpenAIServer


@pytest.mark.parametrize("step", ["open_run", "_attach_log"])
def test_a_stop_as_the_run_directory_is_made_says_how_to_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    real = getattr(runner, step)

    def signalled(*args: Any) -> Any:
        done = real(*args)
        os.kill(os.getpid(), signal.SIGTERM)  # the run directory exists (open_run) or the run is set up
        return done

    monkeypatch.setattr(runner, step, signalled)
    with FakeOpenAIServer("correct") as srv:
        config = {"model": "m", "api_url": srv.url, "limit": 4, "work_dir": str(tmp_path), "quiet": True}
        with pytest.raises(RunIncomplete) as stopped:
            run_task(config)
        monkeypatch.setattr(runner, step, real)
        (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
        assert str(stopped.value) == f"stopped by SIGTERM; resume with: coinflip eval --use-cache {run}"
        assert run_task({"use_cache": str(run), "quiet": True})["complete"]


AS_THE_REQUESTS_START = """
import os, signal, sys
from coinflip.cli import main
from coinflip.run.stop import StopRequest

real = StopRequest.run

def run(self, *args):
    os.kill(os.getpid(), signal.SIGTERM)  # the stop lands as the requests are about to be sent
    return real(self, *args)

StopRequest.run = run
sys.argv = ["coinflip", "eval", "--model", "oracle", "--limit", "2", "--work-dir", sys.argv[1]]
main()
"""


def test_a_stop_as_the_requests_start_ends_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", AS_THE_REQUESTS_START, str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    line = f"error: stopped by SIGTERM: 0 new samples kept; resume with: coinflip eval --use-cache {run}\n"
    assert (done.returncode, done.stderr) == (1, line), done


def test_a_stop_while_the_request_file_is_written_resumes_by_writing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--batch-write FILE` stopped said 'resume with: coinflip eval --use-cache RUN', which runs the
    run online and, with no --api-url saved, ends in exit 2: the resume is the same file again."""
    from coinflip.models.offline import RequestFile

    real = RequestFile.end

    async def signalled(*args: Any) -> Any:
        os.kill(os.getpid(), signal.SIGTERM)
        return await real(*args)

    monkeypatch.setattr(RequestFile, "end", signalled)
    requests = tmp_path / "requests.jsonl"
    config = {"model": "m", "limit": 4, "work_dir": str(tmp_path / "work"), "batch_write": str(requests)}
    with pytest.raises(RunIncomplete) as stopped:
        run_task(config)
    monkeypatch.setattr(RequestFile, "end", real)
    (run,) = (tmp_path / "work").iterdir()
    again = f"coinflip eval --use-cache {run} --batch-write {requests}"
    assert str(stopped.value) == f"stopped by SIGTERM; resume with: {again}"
    assert run_task({"use_cache": str(run), "batch_write": str(requests)})["batch_written"]["requests"] == 4


def test_a_stop_while_a_long_request_file_is_written_ends_it_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C on `--batch-write` of 200,000 questions wrote all of them (3 s more) and only then said 'interrupted':
    a request file never awaits, so the stop waited for the loop until the last request (before it was a model
    backend, the write stopped at once). The loop breathes after each request left owed: the stop lands at once."""
    from coinflip.models.offline import RequestFile
    from coinflip.models.predict import MAX_BATCH

    real = RequestFile.complete

    async def signalled(self: RequestFile, request: Any) -> Any:
        if self.count == 10:
            os.kill(os.getpid(), signal.SIGTERM)
        return await real(self, request)

    monkeypatch.setattr(RequestFile, "complete", signalled)
    requests = tmp_path / "requests.jsonl"
    config = {"model": "m", "limit": 3 * MAX_BATCH, "work_dir": str(tmp_path / "work"), "batch_write": str(requests)}
    with pytest.raises(RunIncomplete, match="stopped by SIGTERM"):
        run_task(config)
    assert len(requests.read_bytes().splitlines()) < MAX_BATCH  # a line per worker at most, after the 10th


def test_a_stop_while_a_result_file_is_read_resumes_by_reading_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C during `--use-cache RUN --batch-results FILE` said 'resume with: coinflip eval --use-cache RUN',
    which sends the rest of the run online (or ends in exit 2 without --api-url) instead of reading the file's
    answers: the resume is the same file again. Before that line came the file's note, '0 requests still owed'
    and the answers not read yet as 'lines for requests not owed now': the note comes once all are in."""
    from coinflip.models.offline import ResultsFile
    from coinflip.models.predict import MAX_BATCH

    requests, results = tmp_path / "requests.jsonl", tmp_path / "results.jsonl"
    config = {"model": "m", "limit": 3 * MAX_BATCH, "work_dir": str(tmp_path / "work"), "batch_write": str(requests)}
    run_task(config)
    (run,) = (tmp_path / "work").iterdir()
    answer = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "ANSWER: YES"}}]}
    lines = [{"custom_id": json.loads(line)["custom_id"], "response": {"status_code": 200, "body": answer}}
             for line in requests.read_text().splitlines()]  # fmt: skip
    results.write_text("".join(json.dumps(line) + "\n" for line in lines))
    real = ResultsFile.complete

    async def signalled(self: ResultsFile, request: Any) -> Any:
        if self.counts["read"] == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return await real(self, request)

    monkeypatch.setattr(ResultsFile, "complete", signalled)
    with pytest.raises(RunIncomplete) as stopped:  # one worker: the stop lands as the loop breathes (MAX_BATCH)
        run_task({"use_cache": str(run), "batch_results": str(results), "quiet": True, "eval_batch_size": 1})
    monkeypatch.setattr(ResultsFile, "complete", real)
    assert str(stopped.value).endswith(f"resume with: coinflip eval --use-cache {run} --batch-results {results}")
    assert "note:" not in capsys.readouterr().err
    assert run_task({"use_cache": str(run), "batch_results": str(results), "quiet": True})["complete"]
    assert "; 0 requests still owed" in capsys.readouterr().err


AS_THE_INDEX_IS_REFRESHED = """
import os, signal, sys
from coinflip.cli import main
from coinflip.pages import index

real = index.refresh

def refresh(*args):
    os.kill(os.getpid(), signal.SIGTERM)  # the run is reported: the stop lands as the index is refreshed
    return real(*args)

index.refresh = refresh
sys.argv = ["coinflip", *sys.argv[2:], "--work-dir", sys.argv[1]]
main()
"""


AS_THE_REPORT_IS_WRITTEN = """
import os, signal, sys
from coinflip.cli import main
from coinflip.run import runner

real = runner.finish

def finish(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)  # every reply is in: the stop lands as the report is written
    return real(*args, **kwargs)

runner.finish = finish
sys.argv = ["coinflip", *sys.argv[2:], "--work-dir", sys.argv[1]]
main()
"""


@pytest.mark.parametrize("script", [AS_THE_REPORT_IS_WRITTEN, AS_THE_INDEX_IS_REFRESHED], ids=["report", "index"])
def test_a_stop_after_the_last_reply_leaves_the_exit_code_the_run_s(tmp_path: Path, script: str) -> None:
    """A SIGTERM while the report was written, or during the work directory's index refresh after it, exited 1
    ('stopped by SIGTERM; resume with ...' under a finished run's summary), so a scheduler ran a finished run
    again. The report is what the run was: it is written whole, and the stop ends what follows, the refresh."""
    with FakeOpenAIServer("mixed") as srv:
        args = ["eval", "--model", "m", "--api-url", srv.url, "--limit", "4"]
        done = subprocess.run([sys.executable, "-c", script, str(tmp_path), *args],
                              capture_output=True, text=True, timeout=120)  # fmt: skip
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert json.loads((run / "reports/m/coin_flip.json").read_text())["complete"]
    assert done.returncode == 0 and "resume with" not in done.stderr, done
    assert "note: stopped by SIGTERM before the work directory's index.html was refreshed" in done.stderr, done
    assert "Traceback" not in done.stderr and not (tmp_path / "index.html").exists()


AS_A_RESCORE_S_REPORT_IS_WRITTEN = AS_THE_REPORT_IS_WRITTEN.replace(
    'sys.argv = ["coinflip", *sys.argv[2:], "--work-dir", sys.argv[1]]', 'sys.argv = ["coinflip", *sys.argv[1:]]'
)


def test_a_stop_as_a_rescore_s_report_is_written_leaves_both_files_whole(tmp_path: Path) -> None:
    """A SIGTERM during `rescore --metric-compat evalscope` ended it at once (exit 1): EvalScope's reviews written,
    no report beside them. A rescore's report step is held as a run's: written whole, the exit code its own."""
    assert run_task({"model": "oracle", "limit": 4, "work_dir": str(tmp_path), "quiet": True})["complete"]
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    args = ["rescore", str(run), "--metric-compat", "evalscope"]
    done = subprocess.run([sys.executable, "-c", AS_A_RESCORE_S_REPORT_IS_WRITTEN, *args],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0 and "resume with" not in done.stderr, done
    assert json.loads((run / "reports/oracle/coin_flip.evalscope.json").read_text())["complete"]
    assert (run / "reviews/oracle/coin_flip.evalscope.jsonl").is_file()
    assert "note: stopped by SIGTERM before the work directory's index.html was refreshed" in done.stderr, done
