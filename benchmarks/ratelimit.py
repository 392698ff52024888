"""Endpoints at their limits: `python benchmarks/ratelimit.py` (about a minute).

Starts the test server with each limit of issue 18 and runs `coinflip eval --limit 400` against
it with default settings, as a new user would:
- 500 ms replies, 20 requests/s with a burst of 5, 429 with Retry-After beyond (ideal 20 s);
- 200 ms replies, 8 in flight, 429 without Retry-After beyond (ideal 10 s);
- instant replies, 20 requests/s with a burst of 5 (ideal 20 s: only pacing helps there).
Prints, for each: samples lost, exit code, requests sent, 429s, and the whole process's wall time
against the ideal (the target is judged on it), with, for context, the time the limit alone cost:
the wall time less that of the same run against the server without limits, measured first.
Targets: nothing lost and exit 0 in all three; the first two within 1.3x of ideal with refusals at
most 20% of the samples; the third within 2x of ideal.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench import COINFLIP, PY, free_port  # noqa: E402

SAMPLES = 400
SCENARIOS = [
    # name, server flags, ideal seconds, time target (x ideal), refusal target (share of samples)
    ("20 req/s burst 5, 500 ms, Retry-After", ["--latency", "0.5", "--rate", "20", "--burst", "5"], 20.0, 1.3, 0.2),
    ("8 in flight, 200 ms, no Retry-After", ["--latency", "0.2", "--max-in-flight", "8"], 10.0, 1.3, 0.2),
    ("20 req/s burst 5, instant, Retry-After", ["--rate", "20", "--burst", "5"], 20.0, 2.0, None),
]


def serve(flags: list[str]) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        [PY, "-m", "coinflip.testing.server", "--port", str(port), *flags],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/v1"
    for _ in range(200):
        try:
            urllib.request.urlopen(f"{url}/models", timeout=1).read()
            return proc, url
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("server did not start")


def run(
    name: str, flags: list[str], ideal: float, factor: float, refusals: float | None, overhead: float = 0.0
) -> tuple[bool, float]:
    proc, url = serve(flags)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [COINFLIP, "eval", "--model", "m", "--api-url", url, "--limit", str(SAMPLES), "--work-dir", tmp]
            started = time.perf_counter()
            result = subprocess.run(cmd, capture_output=True, text=True)
            wall = time.perf_counter() - started
            rows = [json.loads(x) for p in Path(tmp).glob("*/predictions/*/coin_flip.jsonl") for x in p.open()]
            reports = list(Path(tmp).glob("*/reports/*/coin_flip.json"))
            requests = json.loads(reports[0].read_text()).get("requests", {}) if reports else {}
    finally:
        proc.terminate()
        proc.wait()
    lost = SAMPLES - sum(1 for r in rows if r.get("error") is None)
    refused = int(requests.get("refused", -1))
    spent = wall - overhead  # the limit's share: the same run against a server without limits is the rest
    ok = lost == 0 and result.returncode == 0 and wall <= factor * ideal  # the whole process, start-up included
    ok = ok and (refusals is None or 0 <= refused <= refusals * SAMPLES)
    print(
        f"{name}: lost {lost}, exit {result.returncode}, {requests.get('sent', '?')} requests, {refused} refused, "
        f"in flight up to {requests.get('in_flight_max', '?')} "
        f"(lowest limit {requests.get('in_flight_lowest_limit')}), "
        f"{requests.get('waited_on_limits_s', '?')} s held back; {wall:.1f} s = {wall / ideal:.2f} x ideal "
        f"({spent / ideal:.2f} x less the {overhead:.1f} s of the same run without limits) "
        f"(target {factor} x{'' if refusals is None else f', refused <= {refusals:.0%}'}) {'ok' if ok else 'MISSED'}",
        flush=True,
    )
    if result.returncode:
        print("  " + result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "", flush=True)
    return ok, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", type=int, help="run only this scenario (1, 2 or 3)")
    args = parser.parse_args()
    chosen = [SCENARIOS[args.only - 1]] if args.only else SCENARIOS
    _, overhead = run("baseline: no limits, instant", [], 1.0, math.inf, None)  # start-up, 400 instant requests
    results = [run(*scenario, overhead=overhead)[0] for scenario in chosen]
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
