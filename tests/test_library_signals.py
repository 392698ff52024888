"""coinflip used from Python leaves its caller's signal handlers as it found them.

The command line ignores the stop signals while it prints its outcome (stop.py, `settle`), which
is right only because its process ends right after: in a caller's process an ignored SIGTERM
would be inherited by every process started later (SIG_IGN survives exec), which then could not
be stopped. The servers coinflip starts itself get the default dispositions whatever its own are.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from coinflip import run_task
from coinflip._signals import default_signals
from coinflip.cli import main
from coinflip.testing.server import FakeOpenAIServer

from .conftest import signals_as_from_a_terminal

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGALRM)
SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]
EXIT_BUDGET_S = 60.0  # a child dies on SIGTERM at once; generous for a loaded machine


def handlers() -> dict[int, Any]:
    return {sig: signal.getsignal(sig) for sig in SIGNALS}


def dies_on_sigterm(proc: subprocess.Popen[bytes]) -> bool:
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=EXIT_BUDGET_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode == -signal.SIGTERM


def ignores_sigterm(pid: int) -> bool:
    """Whether the process has SIGTERM ignored (Linux: SigIgn in /proc)."""
    status = Path(f"/proc/{pid}/status").read_text()
    ignored = next(int(line.split()[1], 16) for line in status.splitlines() if line.startswith("SigIgn:"))
    return bool(ignored >> (signal.SIGTERM - 1) & 1)


def by_run_task(url: str, work: Path) -> None:
    run_task({"model": "m", "api_url": url, "limit": 2, "work_dir": str(work)})


def by_main(url: str, work: Path) -> None:
    try:
        main(["eval", "--model", "m", "--api-url", url, "--limit", "2", "--work-dir", str(work)])
    except SystemExit as ended:
        assert ended.code in (0, None)


@pytest.mark.parametrize("call", [by_run_task, by_main], ids=["run_task", "cli.main"])
def test_a_run_in_process_puts_back_the_callers_handlers(tmp_path: Path, call: Callable[[str, Path], None]) -> None:
    before = handlers()
    with FakeOpenAIServer("correct") as srv:
        call(srv.url, tmp_path)
    assert list(tmp_path.glob("*/reports/*/coin_flip.json")), "the run did not finish"
    assert handlers() == before
    assert dies_on_sigterm(subprocess.Popen(SLEEPER))  # nothing ignored is passed on


def test_a_child_started_with_default_signals_dies_on_sigterm_though_its_parent_ignores_it() -> None:
    before = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        ignoring = subprocess.Popen(SLEEPER)
        reset = subprocess.Popen(SLEEPER, preexec_fn=default_signals)  # as the llama.cpp server starts
    finally:
        signal.signal(signal.SIGTERM, before)
    try:
        assert ignores_sigterm(ignoring.pid)  # what a child inherits without the reset
    finally:
        ignoring.kill()
        ignoring.wait()
    assert not ignores_sigterm(reset.pid)
    assert dies_on_sigterm(reset)


CALLERS_ALARM = """
import os, signal, sys
from coinflip import run_task
from coinflip.run import runner

fired = []
signal.signal(signal.SIGALRM, lambda *_: fired.append(True))
real = runner.prepare

def prepare(*args):
    os.kill(os.getpid(), signal.SIGALRM)  # the caller's own timer goes off during the call
    return real(*args)

runner.prepare = prepare
report = run_task({"model": "oracle", "limit": 2, "work_dir": sys.argv[1], "quiet": True})
print(report["complete"], fired)
"""


def test_the_callers_alarm_during_a_run_reaches_the_callers_handler(tmp_path: Path) -> None:
    """coinflip took SIGALRM (its 20 s limit after a stop) for the whole call, so a caller's timer
    (pytest-timeout's, a watchdog) going off during a run ended the process: 'interrupted, and
    still running 20 s later: exiting now'. It is coinflip's only once a stop signal came."""
    done = subprocess.run(
        [sys.executable, "-c", CALLERS_ALARM, str(tmp_path)], capture_output=True, text=True, timeout=EXIT_BUDGET_S
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "True [True]\n", ""), done


def test_a_run_in_process_leaves_the_callers_timer_running(tmp_path: Path) -> None:
    """Putting the handlers back also cancelled any alarm: pytest-timeout's, say, was gone after the call."""
    handler, timer = signal.getsignal(signal.SIGALRM), signal.getitimer(signal.ITIMER_REAL)  # pytest-timeout's
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    signal.setitimer(signal.ITIMER_REAL, 3600)
    try:
        run_task({"model": "oracle", "limit": 2, "work_dir": str(tmp_path), "quiet": True})
        left = signal.getitimer(signal.ITIMER_REAL)[0]
    finally:
        signal.setitimer(signal.ITIMER_REAL, *timer)
        signal.signal(signal.SIGALRM, handler)
    assert left > 3000


def test_a_stop_python_wrapped_while_a_module_loaded_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A signal during an import, inside a class's __set_name__, reached main as Python 3.11's RuntimeError
    ('Error calling __set_name__'), caused by the stop: a traceback instead of the stop's one line."""
    from coinflip import cli
    from coinflip.run.stop import Interrupted

    def loading(argv: object) -> None:
        try:
            raise Interrupted("SIGHUP")
        except Interrupted as exc:
            raise RuntimeError("Error calling __set_name__ on 'Field' instance 'subset' in 'Dataset'") from exc

    monkeypatch.setattr(cli, "_dispatch", loading)
    with pytest.raises(SystemExit) as ended:
        cli.main(["eval", "--model", "oracle"])
    assert ended.value.code == 1
    assert capsys.readouterr().err.strip().splitlines() == ["stopped by SIGHUP"]


RUN_IN_MAIN_AND_A_THREAD = """
import os, signal, sys, threading
from coinflip import run_task
from tests.answer_server import AnswerServer, answer, chat

asked = {name: threading.Event() for name in "ab"}
release = {name: threading.Event() for name in "ab"}
out = {}

def respond(seen):
    name = seen.body["model"]
    asked[name].set()
    release[name].wait(60)
    return answer(chat("ANSWER: " + seen.right_answer))

def run(name):
    try:
        settings = {"model": name, "api_url": url, "limit": 3, "work_dir": sys.argv[1], "quiet": True}
        out[name] = run_task(settings)["complete"]
    except Exception as exc:
        out[name] = type(exc).__name__

def meanwhile():  # b starts in a thread while a runs in the main thread; then Ctrl-C
    asked["a"].wait(60)
    b = threading.Thread(target=run, args=("b",))
    b.start()
    asked["b"].wait(60)
    os.kill(os.getpid(), signal.SIGINT)
    release["b"].set()
    b.join()
    release["a"].set()

with AnswerServer(respond) as srv:
    url = srv.url
    helper = threading.Thread(target=meanwhile)
    helper.start()
    run("a")
    helper.join()
print(out["a"], out["b"])
"""


def test_ctrl_c_stops_the_main_threads_run_not_a_threads(tmp_path: Path) -> None:
    """A run in a thread took over the main thread's stop handling: Ctrl-C cancelled the thread's run (which
    signals never reach) while the main thread's went on, its end 20 s later an os._exit of the caller.
    SIGINT at its default, as from a terminal: a pytest started as a background job ignores it, and a
    process started with it ignored keeps it ignored (docs/run-directory.md), so its run ran to its end."""
    done = subprocess.run(
        [sys.executable, "-c", RUN_IN_MAIN_AND_A_THREAD, str(tmp_path)], capture_output=True, text=True,
        timeout=EXIT_BUDGET_S, cwd=Path(__file__).parent.parent, preexec_fn=signals_as_from_a_terminal(),
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "RunIncomplete True\n"), done


STOPPED_AS_THE_REPORT_IS_WRITTEN = """
import os, signal, sys
from coinflip import run_task
from coinflip.run import runner

class Stopped(Exception):
    pass

def stopped(signum, frame):
    raise Stopped(signal.Signals(signum).name)

signal.signal(signal.SIGTERM, stopped)
real = runner.finish

def finish(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)  # every reply is in: the stop lands as the report is written
    return real(*args, **kwargs)

runner.finish = finish
config = {"model": "oracle", "limit": 3, "quiet": True}
try:
    run_task([{**config, "work_dir": sys.argv[1]}, {**config, "work_dir": sys.argv[2]}])
except Stopped as exc:
    print("caller's handler:", exc)
"""


def test_a_stop_as_a_library_run_s_report_is_written_reaches_the_caller_after_it(tmp_path: Path) -> None:
    """From Python, a SIGTERM while the report was written was dropped with coinflip's handler: run_task went on to
    its next run and returned, the caller never told. The report is written whole; then the caller's own handler
    gets the signal, and the next run never starts."""
    first, second = tmp_path / "first", tmp_path / "second"
    done = subprocess.run([sys.executable, "-c", STOPPED_AS_THE_REPORT_IS_WRITTEN, str(first), str(second)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0 and done.stdout == "caller's handler: SIGTERM\n", done
    (run,) = first.iterdir()
    assert json.loads((run / "reports/oracle/coin_flip.json").read_text())["complete"] and not second.exists()
