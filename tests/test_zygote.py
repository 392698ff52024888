"""run_cli's zygote (tests/zygote.py) gives a command what a fresh interpreter gives it: the same output and exit
code, in the caller's folder and environment, each command on its own even when several run at once."""

from __future__ import annotations

import os
import re
import subprocess
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from .answer_server import AnswerServer, Seen, answer, chat
from .conftest import PATIENCE_S, run_cli
from .zygote import ARGV0, Zygote, needs_interpreter

COMMANDS = [
    ("--version",),
    ("eval", "--limit", "x"),
    ("eval", "--model", "oracle", "--limit", "3", "--no-timestamp", "--work-dir", "w"),
    ("answers", "missing-run"),
]


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    made = Zygote(dict(os.environ))
    yield made
    made.close()


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_a_forked_command_prints_and_exits_as_a_fresh_interpreter(
    zygote: Zygote, tmp_path: Path, args: tuple[str, ...]
) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    results = []
    for way in ("fresh", "forked"):
        (tmp_path / way).mkdir()
        if way == "fresh":
            done = subprocess.run([*ARGV0, *args], cwd=tmp_path / way, env=env, capture_output=True, text=True)
        else:
            done = zygote.run(args, tmp_path / way, env, timeout=300)
        results.append((done.returncode, *(_masked(text, way) for text in (done.stdout, done.stderr))))
    assert results[0] == results[1]
    if "oracle" in args:  # in the caller's folder
        assert (tmp_path / "forked/w/predictions/oracle/coin_flip.jsonl").is_file()


def _masked(text: str, way: str) -> str:
    """The folder's name and the times (latency), which differ from run to run."""
    return re.sub(r"\d+\.\d+ s\b", "T s", text.replace(way, "WAY"))


def test_each_command_has_its_own_environment_even_at_once(zygote: Zygote, tmp_path: Path) -> None:
    def run(name: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "COINFLIP_API_KEY": f"key-of-{name}"}
        args = ("eval", "--model", "oracle", "--limit", "2", "--no-timestamp", "--work-dir", name)
        return zygote.run(args, tmp_path, env, timeout=300)

    with ThreadPoolExecutor(4) as pool:
        done = list(pool.map(run, ["a", "b", "c", "d"]))
    assert [d.returncode for d in done] == [0, 0, 0, 0], [d.stderr for d in done]
    for name in "abcd":
        assert (tmp_path / name / "predictions/oracle/coin_flip.jsonl").is_file()


def test_a_command_gets_the_callers_umask(zygote: Zygote, tmp_path: Path) -> None:
    before = os.umask(0o077)
    try:
        args = ("eval", "--model", "oracle", "--limit", "2", "--no-timestamp", "--work-dir", "w")
        assert zygote.run(args, tmp_path, {**os.environ, "PYTHONUNBUFFERED": "1"}, timeout=300).returncode == 0
    finally:
        os.umask(before)
    made = tmp_path / "w" / "predictions" / "oracle" / "coin_flip.jsonl"
    assert made.stat().st_mode & 0o077 == 0


def test_a_command_past_its_timeout_is_killed_and_the_next_is_served(zygote: Zygote, tmp_path: Path) -> None:
    """The command waits on a server that answers only once the test lets it: it cannot end before its timeout,
    whatever the machine's speed."""
    release = threading.Event()

    def respond(seen: Seen) -> bytes:
        release.wait(PATIENCE_S)
        return answer(chat("ANSWER: YES"))

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with AnswerServer(respond) as srv:
        args = ("eval", "--model", "m", "--api-url", srv.url, "--limit", "1", "--work-dir", str(tmp_path))
        with pytest.raises(subprocess.TimeoutExpired):
            zygote.run(args, tmp_path, env, timeout=2)
        release.set()
    assert zygote.run(("--version",), tmp_path, env, timeout=300).returncode == 0


def test_a_setting_read_as_the_interpreter_starts_gets_a_fresh_one(tmp_path: Path) -> None:
    base = {"PATH": "/bin", "LANG": "C.UTF-8"}
    assert not needs_interpreter({**base, "COINFLIP_API_KEY": "k", "PYTHONUNBUFFERED": "1"}, base)
    assert needs_interpreter({**base, "PYTHONIOENCODING": "latin-1"}, base)
    assert needs_interpreter({**base, "LANG": "C"}, base)
    assert needs_interpreter({"PATH": "/bin"}, base)  # one taken away counts too
    (tmp_path / "sitecustomize.py").write_text("import sys; sys.stderr.write('a fresh interpreter\\n')\n")
    shown = run_cli("--version", env={"PYTHONPATH": str(tmp_path)})
    assert shown.returncode == 0 and shown.stderr == "a fresh interpreter\n"
    assert "a fresh interpreter" not in run_cli("--version").stderr
