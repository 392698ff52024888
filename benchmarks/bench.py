"""Harness overhead, measured side by side in one run. `python benchmarks/bench.py`

Starts the fake OpenAI-compatible server on 127.0.0.1 (the one the tests use; its latency is
counted from each request's arrival, so its own work is part of the 200 ms), then measures
whole processes: a bare aiohttp client (the ceiling) against a full `coinflip eval` of the
3,333-sample test split, run through the installed `coinflip` command, instant and at 200 ms
latency, plus memory, start-up, generation, and what replies that cost more than their bytes cost
a run (`costly_replies.py`). Prints each figure as measured / target.
The package's bytecode is compiled first, as `pip install` does: an editable install under
PYTHONDONTWRITEBYTECODE=1 would otherwise recompile every module in every process.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
PY = sys.executable
_SCRIPT = Path(PY).parent / "coinflip"
COINFLIP = str(_SCRIPT) if _SCRIPT.exists() else (shutil.which("coinflip") or "coinflip")
SAMPLES = 3333


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    def __init__(self, latency: float = 0.0) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [PY, "-m", "coinflip.testing.server", "--port", str(self.port), "--latency", str(latency)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.url = f"http://127.0.0.1:{self.port}/v1"
        for _ in range(200):
            try:
                urllib.request.urlopen(f"{self.url}/models", timeout=1).read()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("server did not start")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait()


def timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of a whole child process."""
    wrapper = (
        "import resource,subprocess,sys,time;t=time.perf_counter();"
        "r=subprocess.run(sys.argv[1:],stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL);"
        "print(time.perf_counter()-t,resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss/1024,r.returncode)"
    )
    out = subprocess.run([PY, "-c", wrapper, *cmd], capture_output=True, text=True, env=env, check=True).stdout.split()
    if out[2] != "0":
        raise RuntimeError(f"{' '.join(cmd)} exited {out[2]}")
    return float(out[0]), float(out[1])


def best(cmd: list[str], runs: int = 3) -> tuple[float, float]:
    results = [timed(cmd) for _ in range(runs)]
    return min(r[0] for r in results), max(r[1] for r in results)


def write_prompts(path: Path) -> None:
    from coinflip.data.grammar import bundled_dir
    from coinflip.data.load import load_split
    from coinflip.data.prompts import build_prompt

    with path.open("w", encoding="utf-8") as handle:
        for r in load_split(bundled_dir(), "test"):
            handle.write(json.dumps({"prompt": build_prompt(r.question)}) + "\n")


def row(name: str, measured: float, target: float, unit: str, lower_is_better: bool = True) -> str:
    ok = measured <= target if lower_is_better else measured >= target
    return f"{name:<58} {measured:>9.3f} {unit:<3} / {target:<7g} {'PASS' if ok else 'FAIL'}"


class Lines(list[str]):
    """Prints each figure as soon as it is measured."""

    def append(self, line: str) -> None:
        print(line, flush=True)
        super().append(line)


def evalscope_run(binary: str, url: str, tmp: Path) -> tuple[float, float]:
    """EvalScope on the same server and data: a local directory with test.jsonl and validation.jsonl."""
    from coinflip.data.grammar import bundled_dir

    data = tmp / "evalscope-data"
    data.mkdir()
    for split in ("test", "validation"):
        shutil.copy(bundled_dir() / f"{split}.jsonl", data / f"{split}.jsonl")
    args = json.dumps({"coin_flip": {"local_path": str(data)}})
    command = [binary, "eval", "--model", "m", "--api-url", url, "--api-key", "EMPTY", "--datasets", "coin_flip"]
    return timed([*command, "--dataset-args", args, "--eval-batch-size", "32", "--work-dir", str(tmp / "es")])


def latency_rows(lines: Lines, tmp: Path, prompts: Path, evaluate: list[str], stream: bool) -> None:
    """At 200 ms latency and 128 in flight, against the ideal; with `stream`, also the instant
    server at 32 in flight, since streaming's cost is per event, not per round trip."""
    tag, flag, extra = (" streaming", ["--stream"], ["stream"]) if stream else ("", [], [])
    client = [PY, str(HERE / "bare_client.py")]
    if stream:
        server = Server()
        try:
            bare, _ = best([*client, f"{server.url}/chat/completions", "32", str(prompts), *extra])
            run = [*evaluate, *flag, "--api-url", server.url, "--eval-batch-size", "32", "--work-dir", str(tmp)]
            full, _ = best(run)
        finally:
            server.stop()
        lines.append(f"instant server{tag}, 32 in flight: bare client {bare:.2f} s, coinflip eval {full:.2f} s")
        lines.append(row(f"coinflip eval / bare client{tag} (whole processes)", full / bare, 1.3, "x"))
    server = Server(latency=0.2)
    try:
        url = f"{server.url}/chat/completions"
        bare_slow, _ = best([*client, url, "128", str(prompts), *extra], 3)
        slow, _ = best(
            [*evaluate, *flag, "--api-url", server.url, "--eval-batch-size", "128", "--work-dir", str(tmp / "b")], 3
        )
    finally:
        server.stop()
    ideal = SAMPLES * 0.2 / 128
    lines.append(
        f"200 ms latency{tag}, 128 in flight: bare client {bare_slow:.2f} s ({bare_slow / ideal:.3f} x ideal), "
        f"coinflip eval {slow:.2f} s; ideal N x latency / in-flight {ideal:.2f} s"
    )
    lines.append(row(f"coinflip eval / ideal{tag} (whole process)", slow / ideal, 1.08, "x"))
    lines.append(row(f"coinflip eval / bare client at 200 ms{tag}", slow / bare_slow, 1.05, "x"))


def one_question(lines: Lines, tmp: Path, prompts: Path, evaluate: list[str]) -> None:
    """A one-question run (`--limit 1`, the HTML page too) against the bare client's one request:
    start-up, settings, data, one round trip, scoring and the report, as a first try costs."""
    one = tmp / "one.jsonl"
    one.write_text(prompts.read_text(encoding="utf-8").splitlines()[0] + "\n", encoding="utf-8")
    server = Server()
    try:
        bare, _ = best([PY, str(HERE / "bare_client.py"), f"{server.url}/chat/completions", "1", str(one)], 5)
        run = [*evaluate[:-1], "--api-url", server.url, "--limit", "1", "--work-dir", str(tmp / "one")]
        full, _ = best(run, 5)
        token, _ = best([*run, "--api-key", "t" * 2000], 3)  # a JWT from a gateway: its masker is built, not used
    finally:
        server.stop()
    lines.append(f"one question (--limit 1): bare client {bare:.2f} s, coinflip eval {full:.2f} s")
    lines.append(row("coinflip eval --limit 1 / bare client, one request", full / bare, 2.5, "x"))
    lines.append(row("the same with a 2,000-character --api-key / without", token / full, 1.2, "x"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evalscope", metavar="BIN", help="evalscope executable in its own venv, for part (c)")
    options = parser.parse_args()
    try:
        import aiohttp  # the bare client's library, from the dev extra
    except ImportError:
        sys.exit("the benchmark needs the dev extra: pip install -e '.[dev]'")

    import coinflip

    print(
        f"coinflip {coinflip.__version__}, Python {platform.python_version()}, aiohttp {aiohttp.__version__}, "
        f"{platform.machine()} {os.cpu_count()} cores, {platform.platform()}"
    )
    compileall.compile_dir(Path(coinflip.__file__).parent, quiet=1)
    tmp = Path(tempfile.mkdtemp(prefix="coinflip-bench-"))
    prompts = tmp / "prompts.jsonl"
    write_prompts(prompts)
    evaluate = [COINFLIP, "eval", "--model", "m", "--no-html"]
    lines = Lines()

    server = Server()
    try:
        bare, bare_rss = best([PY, str(HERE / "bare_client.py"), f"{server.url}/chat/completions", "32", str(prompts)])
        full, full_rss = best(
            [*evaluate, "--api-url", server.url, "--eval-batch-size", "32", "--work-dir", str(tmp / "a")]
        )
        html, html_rss = best(
            [*evaluate[:-1], "--api-url", server.url, "--eval-batch-size", "32", "--work-dir", str(tmp / "h")], 1
        )
        evalscope = evalscope_run(options.evalscope, server.url, tmp) if options.evalscope else None
    finally:
        server.stop()
    lines.append(
        f"instant server, 32 in flight, {SAMPLES} samples: bare client {bare:.2f} s, coinflip eval {full:.2f} s"
        f" ({html:.2f} s with the HTML report)"
    )
    lines.append(row("coinflip eval / bare client (whole processes)", full / bare, 1.4, "x"))
    lines.append(row("peak RSS of a full run (MB)", max(full_rss, html_rss), 80, "MB"))
    one_question(lines, tmp, prompts, evaluate)
    if evalscope:
        lines.append(f"EvalScope 1.14.1, same server and data: {evalscope[0]:.2f} s, peak RSS {evalscope[1]:.0f} MB")
        lines.append(
            row("EvalScope / coinflip eval (whole processes)", evalscope[0] / full, 8, "x", lower_is_better=False)
        )

    for stream in (False, True):
        latency_rows(lines, tmp, prompts, evaluate, stream)

    rss = {}
    for count in (10_000, 100_000):
        data = tmp / f"gen{count}.jsonl"
        subprocess.run(
            [COINFLIP, "generate", "--count", str(count), "--out", str(data)],
            check=True,
            capture_output=True,
        )
        _, rss[count] = timed(
            [
                COINFLIP,
                "eval",
                "--model",
                "oracle",
                "--no-html",
                "--dataset-path",
                str(data),
                "--work-dir",
                str(tmp / "g"),
            ]
        )
    lines.append(
        f"oracle over generated sets: peak RSS {rss[10_000]:.0f} MB at 10k, {rss[100_000]:.0f} MB at 100k questions"
    )
    lines.append(row("peak RSS growth, 100k vs 10k questions", rss[100_000] / rss[10_000], 1.15, "x"))

    helps = [timed([COINFLIP, "--help"])[0] for _ in range(5)]
    lines.append(row("coinflip --help (best of 5)", min(helps), 0.3, "s"))
    heavy = "('asyncio','ssl','aiohttp','yarl','numpy','rich','yaml','pyarrow','click')"
    probe = f"import sys,coinflip;print(sorted(m for m in {heavy} if m in sys.modules))"
    loaded = subprocess.run([PY, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
    lines.append(f"{'modules loaded by import coinflip':<58} {loaded} (target: [])")

    gen = [timed([COINFLIP, "generate", "--count", "1000000", "--out", str(tmp / "m.jsonl")])[0] for _ in range(2)]
    lines.append(row("coinflip generate --count 1000000 (whole process)", min(gen), 5.0, "s"))

    import costly_replies  # replies that cost more than their bytes: tiny-event streams, small JSON objects

    costly_replies.main(lines)

    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
