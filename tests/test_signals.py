"""SIGINT, SIGTERM and SIGHUP at random moments of `coinflip eval`: from the moment its handlers are
in place, through requests in flight, to the report being written. Every process ends within a
budget far above what it needs, with one line and no traceback, and every run it left resumes
(in this process, to spare a second start-up per run).

The processes run ten at a time against one test server; each waits on an event (its handlers
installed, its first reply on disk, its reviews being written) and then a random short delay.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from coinflip import run_task
from coinflip.rundir import DRAFT
from coinflip.testing.server import FakeOpenAIServer

from .conftest import read_jsonl, signals_as_from_a_terminal, spawn_cli

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
MOMENTS = ("start-up", "in flight", "report", "any")
ROUNDS, AT_ONCE = 6, 10  # 60 processes, each sent a signal: every moment with every signal met 5 times
LIMIT = 16
EXIT_BUDGET_S = 60.0  # "within seconds" on an idle machine; generous for a loaded one
NOISE = ("Traceback", "Exception", "Task was destroyed", "never awaited", "Error")


def handles_signals(pid: int) -> bool:
    """Whether the process has its own SIGTERM handler yet (Linux: SigCgt in /proc)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next(int(line.split()[1], 16) for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(caught >> (signal.SIGTERM - 1) & 1)


@dataclass
class Case:
    work: Path
    moment: str
    sig: signal.Signals
    delay: float
    twice: bool
    proc: subprocess.Popen[str] | None = None
    started: float = 0.0
    trigger: float | None = None
    sent: list[float] = field(default_factory=list)
    ended: float | None = None
    err: str = ""

    def run_dir(self) -> Path | None:
        """The run, never a hidden draft: a second signal as it is made exits at once and may leave one, as a
        kill would (the next run in the work directory clears it, `view` never lists it)."""
        runs = (
            [p for p in self.work.iterdir() if p.is_dir() and not DRAFT.fullmatch(p.name)] if self.work.exists() else []
        )
        assert len(runs) <= 1, runs
        return runs[0] if runs else None

    def reached(self, now: float) -> bool:
        """Whether the event this case waits on has happened."""
        assert self.proc is not None
        if not handles_signals(self.proc.pid):
            return False
        run = self.run_dir()
        if self.moment == "in flight":
            predictions = run / "predictions/m/coin_flip.jsonl" if run else None
            return bool(predictions and predictions.exists() and predictions.stat().st_size)
        if self.moment == "report":
            return bool(run and (run / "reviews").exists())
        if self.moment == "any":
            return now >= self.started + self.delay
        return True


def drive(cases: list[Case], url: str) -> None:
    """Start every case, signal each at its moment, and wait for all to end."""
    for case in cases:
        args = ["eval", "--model", "m", "--api-url", url, "--limit", str(LIMIT), "--eval-batch-size", "4"]
        if case.sig == signal.SIGHUP:
            args.append("--force-answer")  # follow-up requests in flight too
        case.proc = spawn_cli(*args, "--work-dir", str(case.work))
        case.started = time.monotonic()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        now = time.monotonic()
        for case in cases:
            assert case.proc is not None
            if case.ended is not None:
                continue
            if case.proc.poll() is not None:
                case.ended = now
                continue
            if case.trigger is None and case.reached(now):
                case.trigger = now + (0 if case.moment in ("report", "any") else case.delay)
            if case.trigger is not None and now >= case.trigger and len(case.sent) < 1 + case.twice:
                case.proc.send_signal(case.sig)
                case.sent.append(now)
                case.trigger = now + random.uniform(0, 0.3)  # the second signal, if any
        if all(case.ended is not None for case in cases):
            break
        time.sleep(0.01)
    for case in cases:
        assert case.proc is not None
        if case.proc.poll() is None:
            case.proc.kill()
        case.err = case.proc.communicate()[1]


def test_signals_at_random_moments_end_the_run_cleanly_and_it_resumes(tmp_path: Path) -> None:
    rng = random.Random(2121)
    signalled = 0
    with FakeOpenAIServer("mixed", latency=0.2) as srv:
        for round_ in range(ROUNDS):
            cases = [
                Case(
                    tmp_path / f"{round_}-{i}",
                    moment=MOMENTS[(n := round_ * AT_ONCE + i) % len(MOMENTS)],
                    sig=SIGNALS[n // len(MOMENTS) % len(SIGNALS)],  # each pair in turn, 12 processes apart
                    delay=rng.uniform(0, 0.8),  # a run's requests take about a second
                    twice=rng.random() < 0.15,
                )
                for i in range(AT_ONCE)
            ]
            drive(cases, srv.url)
            for case in cases:
                assert case.proc is not None
                described = f"{case.moment} {case.sig.name}: rc {case.proc.returncode}, stderr {case.err!r}"
                assert case.ended is not None, f"still running: {described}"
                if not case.sent:
                    assert case.proc.returncode == 0, described  # it finished before its moment came
                    continue
                signalled += 1
                assert case.ended - case.sent[0] < EXIT_BUDGET_S, described
                assert not any(word in case.err for word in NOISE), described
                stops = [line for line in case.err.splitlines() if "stopped by" in line or "interrupted" in line]
                if case.proc.returncode == 1:
                    assert len(stops) == 1, described
                elif case.proc.returncode < 0:  # Python's own teardown, after the last line: the default action
                    assert -case.proc.returncode == case.sig and len(stops) <= 1, described
                else:  # it was already ending: a stop after the last reply ends only the index refresh, and says so
                    refresh = "before the work directory's index.html was refreshed"
                    assert case.proc.returncode == 0 and all(refresh in line for line in stops[:1]), described
                    assert len(stops) <= 1, described
            for case in cases:
                run = case.run_dir()
                if run is None:  # stopped before its run directory existed: nothing was left behind but a draft
                    left = list(case.work.iterdir()) if case.work.exists() else []  # after a second signal
                    assert not left or case.twice and all(DRAFT.fullmatch(p.name) for p in left), case.err
                    continue
                report = run_task({"use_cache": str(run), "quiet": True})  # in-process: no second start-up
                assert report["complete"], case.err
                rows = read_jsonl(run / "predictions/m/coin_flip.jsonl")
                assert sorted(r["id"] for r in rows) == sorted({r["id"] for r in rows}) and len(rows) == LIMIT
                assert json.loads((run / "reports/m/coin_flip.json").read_text())["complete"]
    assert signalled >= 48


def test_a_stop_that_lands_where_python_cannot_raise_ends_the_process_in_one_line() -> None:
    """The handler raises `Interrupted` wherever the process is when the run has not begun; under
    load that was once inside importlib's weakref callback, where Python prints "Exception
    ignored" with a traceback and goes on. Here the handler runs inside such a callback, as it did
    then: the process ends at once with one line, and the same code without a stop goes on."""
    script = """
import gc, signal, sys, weakref
from coinflip.run.stop import StopRequest
stop = StopRequest().install()
class Thing: pass
thing = Thing()
keep = weakref.ref(thing, lambda _: stop.handler(signal.SIGINT, None) if "stop" in sys.argv else None)
del thing
gc.collect()
print("went on")
"""
    for argv, code, out, err in (("stop", 1, "", "interrupted: exiting now\n"), ("go", 0, "went on\n", "")):
        done = subprocess.run([sys.executable, "-c", script, argv], capture_output=True, text=True, timeout=120)
        assert (done.returncode, done.stdout, done.stderr) == (code, out, err), done


def test_a_second_signal_ends_the_process_at_once(tmp_path: Path) -> None:
    """A run held up by a slow server: the first SIGTERM cancels it; the second does not wait."""
    with FakeOpenAIServer("correct", latency=0.5) as srv:
        proc = spawn_cli("eval", "--model", "m", "--api-url", srv.url, "--limit", "40", "--work-dir", str(tmp_path))
        deadline = time.monotonic() + EXIT_BUDGET_S
        while not handles_signals(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        proc.send_signal(signal.SIGHUP)
        _, err = proc.communicate(timeout=EXIT_BUDGET_S)
    assert proc.returncode == 1
    assert not any(word in err for word in NOISE), err
    assert len(err.strip().splitlines()) == 1 and "SIG" in err, err


CLICK_HELD = '''"""Stands in for click while coinflip's CLI loads: says so, then waits there for the test."""
import sys

print("loading", flush=True)
sys.stdin.readline()
'''
CLI_HELD = '''"""Holds the command where its CLI begins to load (the first code after its entry), for the test."""
import sys


class Hold:
    def find_spec(self, name, path=None, target=None):
        if name == "coinflip.cli":
            sys.meta_path.remove(self)
            print("loading", flush=True)
            sys.stdin.readline()
        return None


sys.meta_path.insert(0, Hold())
'''


def console_script() -> str:
    """What pip writes for `coinflip`, from the entry point pyproject.toml declares."""
    declared = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    module, function = re.search(r'^coinflip = "([\w.]+):(\w+)"', declared, re.M).groups()  # type: ignore[union-attr]
    return (
        f"import re\nimport sys\nfrom {module} import {function}\nif __name__ == '__main__':\n"
        f"    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n    sys.exit({function}())\n"
    )


def held_command(
    tmp_path: Path, how: str, hook: tuple[str, str], ignored: tuple[signal.Signals, ...] = ()
) -> subprocess.Popen[str]:
    """`coinflip eval` (as `how` starts it, with `ignored` ignored) with `hook` (a file name and
    its text) on its path, once it has printed "loading" from where the hook holds it."""
    (tmp_path / "shim" / hook[0]).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "shim" / hook[0]).write_text(hook[1])
    (tmp_path / "coinflip").write_text(console_script())
    command = [str(tmp_path / "coinflip")] if how == "coinflip" else how.split()[1:]  # python -m ...
    path = os.pathsep.join([str(tmp_path / "shim"), os.environ.get("PYTHONPATH", "")])
    proc = subprocess.Popen(
        [sys.executable, *command, "eval", "--model", "oracle", "--work-dir", str(tmp_path / "w")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": path}, preexec_fn=signals_as_from_a_terminal(*ignored),
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline() == "loading\n", proc.communicate("")[1]
    return proc


def ended_in_one_line(proc: subprocess.Popen[str], sig: signal.Signals) -> str:
    proc.send_signal(sig)
    _, err = proc.communicate("", timeout=EXIT_BUDGET_S)
    assert proc.returncode == 1, err
    assert err == ("interrupted\n" if sig == signal.SIGINT else f"stopped by {sig.name}\n")
    return err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
@pytest.mark.parametrize("how", ["coinflip", "python -m coinflip.cli"])
def test_a_signal_while_the_command_loads_ends_it_in_one_line(tmp_path: Path, how: str, sig: signal.Signals) -> None:
    """Before main() installs its handlers, while click is being imported: the same line and code
    as a stop at any other moment before the run started, not Python's KeyboardInterrupt."""
    proc = held_command(tmp_path, how, ("click/__init__.py", CLICK_HELD))
    ended_in_one_line(proc, sig)
    assert not (tmp_path / "w").exists()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
@pytest.mark.parametrize("how", ["coinflip", "python -m coinflip"])
def test_a_signal_from_the_commands_first_code_ends_it_in_one_line(
    tmp_path: Path, how: str, sig: signal.Signals
) -> None:
    """From the entry's first line, before any of the CLI (its package, click, stop.py) loads:
    what is left to Python is the interpreter's own start-up, and `import coinflip`, which
    imports nothing."""
    proc = held_command(tmp_path, how, ("sitecustomize.py", CLI_HELD))
    ended_in_one_line(proc, sig)
    assert not (tmp_path / "w").exists()


@pytest.mark.parametrize("how", ["coinflip", "python -m coinflip"])
def test_a_command_started_under_nohup_is_not_stopped_by_sighup_at_start_up(tmp_path: Path, how: str) -> None:
    """`nohup coinflip eval ... &` starts it with SIGHUP ignored, so that a closed terminal does not
    stop it: the command's first code caught SIGHUP anyway, and ended the run ('stopped by SIGHUP')."""
    proc = held_command(tmp_path, how, ("sitecustomize.py", CLI_HELD), ignored=(signal.SIGHUP,))
    proc.send_signal(signal.SIGHUP)  # the terminal closes while the CLI loads
    _, err = proc.communicate("", timeout=EXIT_BUDGET_S)
    assert proc.returncode == 0 and "SIGHUP" not in err, err


def test_a_run_started_under_nohup_goes_on_after_sighup(tmp_path: Path) -> None:
    """In flight too: SIGHUP cancelled the run of a process started with it ignored."""
    with FakeOpenAIServer("correct", latency=0.3) as srv:
        args = ["eval", "--model", "m", "--api-url", srv.url, "--limit", "8", "--eval-batch-size", "2"]
        proc = subprocess.Popen(
            [sys.executable, "-m", "coinflip", *args, "--work-dir", str(tmp_path)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            preexec_fn=signals_as_from_a_terminal(signal.SIGHUP),
        )  # fmt: skip
        deadline = time.monotonic() + EXIT_BUDGET_S
        while time.monotonic() < deadline and proc.poll() is None:
            found = next(tmp_path.glob("*/predictions/m/coin_flip.jsonl"), None)
            if handles_signals(proc.pid) and found is not None and found.stat().st_size:  # in flight
                break
            time.sleep(0.01)
        proc.send_signal(signal.SIGHUP)
        _, err = proc.communicate(timeout=EXIT_BUDGET_S)
    assert proc.returncode == 0 and "SIGHUP" not in err, err
    assert len(read_jsonl(next(tmp_path.glob("*/predictions/m/coin_flip.jsonl")))) == 8


CHILD_IGNORES_SIGHUP = "import signal, sys; sys.exit(signal.getsignal(signal.SIGHUP) == signal.SIG_IGN)"


def test_a_child_of_a_process_started_under_nohup_ignores_sighup_too() -> None:
    """`default_signals` (how the llama.cpp server starts) put SIGHUP back to its default in the
    child of such a process: the closed terminal then ended the server, and with it the run."""
    parent = (
        "import subprocess, sys\nfrom coinflip._signals import default_signals\n"
        "from coinflip.run.stop import StopRequest\nStopRequest().install()\n"
        f"child = subprocess.run([sys.executable, '-c', {CHILD_IGNORES_SIGHUP!r}], preexec_fn=default_signals)\n"
        "sys.exit(child.returncode)"
    )
    nohup = signals_as_from_a_terminal(signal.SIGHUP)
    started = subprocess.run([sys.executable, "-c", parent], preexec_fn=nohup, timeout=EXIT_BUDGET_S)
    assert started.returncode == 1  # the child found SIGHUP ignored


def test_importing_coinflip_installs_no_handler_and_imports_nothing() -> None:
    """A library leaves its caller's signals alone; and the package's own import is part of the
    command's start-up, before its handlers can be in place, so it loads no other module."""
    probe = (
        "import signal, sys\n"
        "def handlers(): return [signal.getsignal(s) for s in signal.valid_signals()]\n"
        "before, installed = set(sys.modules), handlers()\n"
        "import coinflip\n"
        "print(sorted(set(sys.modules) - before - {'coinflip'}), handlers() == installed)"
    )
    shown = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert shown == "[] True\n"
