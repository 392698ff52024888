"""`coinflip ARGS` in a fresh process that skips the interpreter's imports: a zygote.

Most of a CLI test's time was Python importing numpy, aiohttp, click, rich and coinflip again (0.6-0.9 s of
a 1 s oracle run on a slow 2-core machine, over a thousand times a suite). The zygote imports them once, then
forks a child per command: the child gets the caller's stdin, stdout, stderr, working directory and
environment, runs `coinflip.cli` as `python -m coinflip.cli` does (runpy, as `__main__`), and ends as the
interpreter ends it (its exit code, a traceback and 1, or the signal that killed it). Each child starts
from the zygote's untouched state, so no command sees another's.

What a fork cannot give a command falls back to a fresh interpreter (`needs_interpreter`): settings read at
interpreter start-up (PYTHON*, the locale). Start-up itself (signals before click loads, `--help`'s imports)
is tested with fresh interpreters elsewhere (`spawn_cli`, `on_terminal`, test_signals).

Run as a script, this file is the zygote: `python zygote.py NAME` (an abstract socket's); it ends when its stdin
closes.
"""

from __future__ import annotations

import contextlib
import gc
import json
import locale
import os
import secrets
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

ARGV0 = [sys.executable, "-m", "coinflip.cli"]
# read by the interpreter as it starts, before any code a fork could re-run
_STARTUP = ("PYTHON", "LANG", "LC_")
# what a run imports as it goes (a report's arithmetic, its pages, its table, a config file)
_PRELOADED = (
    "click",
    "numpy",
    "jinja2",
    "rich.console",
    "rich.table",
    "rich.progress",
    "yaml",
    "fractions",
    "hmac",
    "ctypes",
)
_NOT_PRELOADED = {"coinflip.cli", "coinflip.__main__", "coinflip.models.llama_local"}  # llama.cpp: its own start


def needs_interpreter(env: dict[str, str], base: dict[str, str]) -> bool:
    """Whether `env` differs from the zygote's `base` in a setting the interpreter reads as it starts."""
    keys = set(env) | set(base)
    return any(env.get(k) != base.get(k) for k in keys if k.startswith(_STARTUP) and k != "PYTHONUNBUFFERED")


class Zygote:
    """The client: one zygote per test process, started on first use, ended with the process."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = {**env, "PYTHONUNBUFFERED": "1"}
        # Linux's abstract namespace: no file to leave behind, and no limit of 108 bytes on a long TMPDIR's path
        self.path = f"\0coinflip-zygote-{os.getpid()}-{secrets.token_hex(8)}"
        self.proc = subprocess.Popen(
            [sys.executable, __file__, self.path[1:]], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, env=self.env
        )

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait()

    def run(
        self, args: tuple[str, ...], cwd: Path | None, env: dict[str, str], timeout: float
    ) -> subprocess.CompletedProcess[str]:
        """As `subprocess.run([*ARGV0, *args], capture_output=True, text=True, ...)` would return."""
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as conn:
            self._connect(conn)
            order = {"args": list(args), "cwd": str(cwd or Path.cwd()), "env": env, "umask": _umask()}
            socket.send_fds(conn, [json.dumps(order).encode()], [0, out_w, err_w])
            os.close(out_w)
            os.close(err_w)
            pid = json.loads(conn.recv(1 << 16))["pid"]
            got: dict[int, bytes] = {}
            readers = [threading.Thread(target=_drain, args=(fd, got)) for fd in (out_r, err_r)]
            for reader in readers:
                reader.start()
            conn.settimeout(timeout)
            try:
                status = json.loads(conn.recv(1 << 16))["status"]
            except TimeoutError:
                os.kill(pid, signal.SIGKILL)
                raise subprocess.TimeoutExpired([*ARGV0, *args], timeout) from None
            finally:
                for reader in readers:
                    reader.join()
        return subprocess.CompletedProcess([*ARGV0, *args], status, _text(got[out_r]), _text(got[err_r]))

    def _connect(self, conn: socket.socket) -> None:
        """The zygote binds its socket before its imports: until then, wait for it to appear."""
        while True:
            try:
                conn.connect(self.path)
                return
            except ConnectionRefusedError:  # an abstract socket not bound yet
                if self.proc.poll() is not None:
                    raise RuntimeError(f"the zygote ended ({self.proc.returncode}) before it served") from None
                threading.Event().wait(0.01)


def _umask() -> int:
    """This process's umask, which a child it started would have, read without setting it."""
    status = Path("/proc/self/status").read_text()
    return int(status.split("Umask:")[1].split()[0], 8)


def _drain(fd: int, got: dict[int, bytes]) -> None:
    """Everything the command and whatever it started write, until the last of them closes the pipe."""
    with open(fd, "rb") as pipe:
        got[fd] = pipe.read()


def _text(data: bytes) -> str:
    """As subprocess's text mode decodes: the locale's encoding, universal newlines."""
    return data.decode(locale.getpreferredencoding(False)).replace("\r\n", "\n").replace("\r", "\n")


# The zygote itself.


def _preload() -> None:
    import importlib
    import pkgutil

    import coinflip

    for info in pkgutil.walk_packages(coinflip.__path__, "coinflip."):
        if info.name not in _NOT_PRELOADED:
            importlib.import_module(info.name)
    for name in _PRELOADED:
        importlib.import_module(name)


def _serve(path: str) -> None:
    """Fork a child per order; tell each order's caller its child's pid, then its exit status. One thread:
    a fork copies only the thread that makes it, so the zygote must never have another."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(f"\0{path}")
    listener.listen(64)
    _preload()
    # What the imports made lives as long as any process that made them: out of the collector's way, as the
    # console script does it. Here it also spares each child's exit a walk of them all (0.2 s: its pages copied)
    gc.freeze()
    woken, wake = os.pipe()
    os.set_blocking(wake, False)
    signal.set_wakeup_fd(wake)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    waiting: dict[int, socket.socket] = {}
    chooser = selectors.DefaultSelector()
    for source in (listener, woken, sys.stdin):
        chooser.register(source, selectors.EVENT_READ)
    while True:
        for key, _ in chooser.select():
            if key.fileobj is sys.stdin:
                return  # the test process has gone
            if key.fileobj is woken:
                os.read(woken, 4096)
                _reap(waiting)
                continue
            conn, _ = listener.accept()
            message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
            pid = os.fork()
            if pid == 0:
                for sock in (listener, conn, *waiting.values()):
                    sock.close()  # this process's copies: the zygote's stay open
                os.close(woken)
                os.close(wake)
                _become(json.loads(message), fds)
                return  # the child runs the command above this loop: see _child
            for fd in fds:
                os.close(fd)
            _tell(conn, {"pid": pid})
            waiting[pid] = conn


def _reap(waiting: dict[int, socket.socket]) -> None:
    while waiting:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        conn = waiting.pop(pid)
        _tell(conn, {"status": os.waitstatus_to_exitcode(status)})
        conn.close()


def _tell(conn: socket.socket, message: dict[str, int]) -> None:
    """A caller that has gone (it timed out and killed its command) is not the zygote's end."""
    with contextlib.suppress(OSError):
        conn.sendall(json.dumps(message).encode())


_ORDER: list[list[str]] = []  # the child's command, set by _become


def _become(order: dict[str, Any], fds: list[int]) -> None:
    """The child: the caller's stdio, folder, umask and environment, the signals the zygote was started with."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(order["cwd"])
    os.umask(order["umask"])
    sys.path[0] = os.getcwd()  # as `python -m` puts it first, not this script's folder
    os.environ.clear()
    os.environ.update(order["env"])
    tempfile.tempdir = None  # read from TMPDIR again
    _ORDER.append(order["args"])


def _child() -> None:
    """What `python -m coinflip.cli ARGS` runs, in this process that has imported it all; whatever it raises ends
    the process as it would end the interpreter."""
    import runpy

    sys.argv = ["-m", *_ORDER[0]]
    runpy.run_module("coinflip.cli", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    _serve(sys.argv[1])
    if _ORDER:
        _child()
