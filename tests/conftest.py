"""Shared fixtures: the real fake server, the CLI as a subprocess, and the shared data files."""

from __future__ import annotations

import gc
import json
import os
import pty
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from coinflip.testing.server import FakeOpenAIServer

from .zygote import ARGV0, Zygote, needs_interpreter

# Hypothesis's 200 ms deadline per example is a guess of the machine's speed: under a load of 4 one masking case
# took 250 ms and failed. Examples are bounded by their sizes, never by the clock.
settings.register_profile("coinflip", deadline=None)
settings.load_profile("coinflip")
# llama.cpp's threads spin: two of them beside the other worker's tests on two cores took up to 30x as long (298 s
# against 9 s alone); one thread each keeps the SmolLM2 tests near their speed on any machine
os.environ.setdefault("COINFLIP_LLAMA_THREADS", "1")

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
SKRISHNA = SHARED / "data" / "coin_flip_validation_skrishna.json"
SEED_EN = SHARED / "seeds" / "coin_flip_en.txt"


PATIENCE_S = 300.0  # the longest a test waits for an event: far more than a loaded 2-core machine needs


def wait_for(condition: Callable[[], Any], what: str, budget: float = PATIENCE_S) -> Any:
    """Poll `condition` until it holds (and return its value): tests wait on events, not on guesses
    of how long something takes. Only a budget far beyond any real wait ends it, as a failure."""
    deadline = time.monotonic() + budget
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"waited {budget:.0f} s for {what}")
        time.sleep(0.02)


def hand_metrics(pairs: list[tuple[str, str | None]]) -> dict[str, float]:
    """The five metrics counted by hand from (target, answer) pairs, in coinflip's arithmetic:
    an invalid answer (None) is wrong, and a miss on a YES target."""
    tp = sum(t == "YES" and a == "YES" for t, a in pairs)
    fp = sum(t == "NO" and a == "YES" for t, a in pairs)
    tn = sum(t == "NO" and a == "NO" for t, a in pairs)
    yes = sum(t == "YES" for t, _ in pairs)
    precision, recall = tp / (tp + fp), tp / yes
    return {
        "accuracy": (tp + tn) / len(pairs),
        "precision": precision,
        "recall": recall,
        "f1_score": 2 * precision * recall / (precision + recall),
        "yes_ratio": (tp + fp) / len(pairs),
    }


def shared(path: Path) -> Path:
    """A file of ../shared, which sits beside this project's own checkout and CI's, but not beside
    a fresh clone elsewhere: there the test skips and says why. CI sets COINFLIP_REQUIRE_SHARED,
    so there a missing file fails the test instead of skipping it."""
    if path.is_file():
        return path
    if os.environ.get("COINFLIP_REQUIRE_SHARED"):
        pytest.fail(f"{path} is missing, and COINFLIP_REQUIRE_SHARED says ../shared must be here")
    pytest.skip(f"{path} is not here: ../shared exists only beside the project's own checkout (and in CI)")


_ZYGOTE: list[Zygote] = []  # this test process's, started by its first run_cli


@pytest.fixture(scope="session", autouse=True)
def zygote_ends() -> Iterator[None]:
    yield
    for zygote in _ZYGOTE:
        zygote.close()


def run_cli(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run `coinflip ARGS` in a fresh process, as a user would: forked from a process that has imported
    coinflip already (tests/zygote.py), or with a fresh interpreter where `env` changes its start-up."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    for key in ("OPENAI_API_KEY", "COINFLIP_API_KEY"):
        if env is None or key not in env:
            full_env.pop(key, None)
    if not _ZYGOTE and os.environ.get("COINFLIP_TEST_ZYGOTE", "1") != "0":
        _ZYGOTE.append(Zygote(dict(os.environ)))  # not `env`: this command's own settings are not every command's
    if _ZYGOTE and not needs_interpreter(full_env, _ZYGOTE[0].env):
        return _ZYGOTE[0].run(args, cwd, full_env, timeout)
    return subprocess.run(
        [*ARGV0, *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def signals_as_from_a_terminal(*ignored: signal.Signals) -> Callable[[], None]:
    """A preexec_fn: the stop signals at their defaults, as a terminal starts a command, but for
    `ignored` (as `nohup` starts it: SIGHUP), whatever this test process was started with (a
    shell's background job ignores SIGINT), since the command keeps an ignored signal ignored."""

    def reset() -> None:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN if sig in ignored else signal.SIG_DFL)

    return reset


def spawn_cli(*args: str, env: dict[str, str] | None = None, quiet: bool = False) -> subprocess.Popen[str]:
    """Start `coinflip ARGS` in the background (to signal or kill it), without the machine's keys."""
    base = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "COINFLIP_API_KEY")}
    out = subprocess.DEVNULL if quiet else subprocess.PIPE
    return subprocess.Popen(
        [*ARGV0, *args],
        stdout=out,
        stderr=out,
        text=True,
        env={**base, **(env or {})},
        preexec_fn=signals_as_from_a_terminal(),
    )


def on_terminal(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run `coinflip ARGS` with a pseudo-terminal as its stdin, stdout and stderr, as in a
    terminal window (`env`: the environment, default this one): its exit code and everything the terminal received."""
    parent, child = pty.openpty()
    env = {**(os.environ if env is None else env), "COLUMNS": "200", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([*ARGV0, *args], stdin=child, stdout=child, stderr=child, env=env)
    os.close(child)
    received = b""
    while True:
        try:
            chunk = os.read(parent, 1 << 16)
        except OSError:  # EIO: the process closed the terminal
            break
        if not chunk:
            break
        received += chunk
    os.close(parent)
    return proc.wait(timeout=300), received.decode("utf-8", "replace")


def whole_lines(path: Path) -> list[dict]:
    """The rows a killed writer finished: a last line cut mid-write is not one."""
    if not path.exists():
        return []
    data = path.read_text(encoding="utf-8")
    return [json.loads(line) for line in data[: data.rfind("\n") + 1].split("\n") if line]


def only_run_dir(work_dir: Path) -> Path:
    runs = [p for p in work_dir.iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    return runs[0]


def read_jsonl(path: Path) -> list[dict]:
    """JSON Lines split at \\n alone: a reply may hold U+2028 or U+0085 unescaped, which JSON allows
    and str.splitlines() would split at."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]


@pytest.fixture
def no_old_garbage() -> None:
    """For a test that parses JSON nested to the recursion limit in this process: a garbage collection at that
    depth would run an earlier test's finalizers with no stack left, an unraisable error pytest cannot print."""
    gc.collect()


@pytest.fixture(autouse=True)
def no_proxy_from_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests talk to servers on 127.0.0.1 only; a proxy set for the package registries stays out."""
    for key in list(os.environ):
        if key.lower().endswith("_proxy"):
            monkeypatch.delenv(key)


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer("mixed") as srv:
        yield srv


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("OPENAI_API_KEY", "COINFLIP_API_KEY"):
        monkeypatch.delenv(key, raising=False)
