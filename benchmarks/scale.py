"""What the harness needs at scale, measured: `python benchmarks/scale.py`

Requests in flight: the test server answers after 1 s, and a whole `coinflip eval` of the
3,333-question test split runs with 100, 1,000 and 2,000 requests in flight. Printed: wall
time against the ideal (rounds of 1 s), peak RSS and CPU seconds of the coinflip process, and
what 1,000 more requests in flight cost. (Replicas are a load balancer's work: see the README.)
"""

from __future__ import annotations

import math
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import COINFLIP, PY, SAMPLES, Server  # noqa: E402

LATENCY = 1.0


def run(args: list[str]) -> dict[str, float]:
    """Wall seconds, peak RSS (MB) and CPU seconds of one whole `coinflip eval` process."""
    wrapper = (
        "import resource,subprocess,sys,time;t=time.perf_counter();"
        "r=subprocess.run(sys.argv[1:],stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL);"
        "u=resource.getrusage(resource.RUSAGE_CHILDREN);"
        "print(time.perf_counter()-t,u.ru_maxrss/1024,u.ru_utime+u.ru_stime,r.returncode)"
    )
    with tempfile.TemporaryDirectory() as work:
        cmd = [COINFLIP, "eval", "--model", "m", *args, "--no-html", "--work-dir", work]
        out = subprocess.run([PY, "-c", wrapper, *cmd], capture_output=True, text=True, check=True).stdout.split()
    if out[3] != "0":
        raise RuntimeError(f"{' '.join(cmd)} exited {out[3]}")
    return {"wall": float(out[0]), "rss": float(out[1]), "cpu": float(out[2])}


def in_flight() -> None:
    server = Server(latency=LATENCY)
    try:
        results = {}
        for n in (100, 1000, 2000):
            r = results[n] = run(["--api-url", server.url, "--eval-batch-size", str(n)])
            ideal = math.ceil(SAMPLES / n) * LATENCY
            cpu = f"CPU {r['cpu']:.2f} s ({r['cpu'] / SAMPLES * 1000:.2f} s per 1,000 requests)"
            print(
                f"{n:>5} in flight: {r['wall']:6.2f} s (ideal {ideal:.0f} s of 1 s rounds, {r['wall'] / ideal:.3f} x), "
                f"peak RSS {r['rss']:.0f} MB, {cpu}"
            )
    finally:
        server.stop()
    per_thousand = (results[2000]["rss"] - results[100]["rss"]) / 1.9
    print(f"memory per 1,000 more requests in flight: {per_thousand:.1f} MB (2,000 against 100)")


def main() -> None:
    print(f"coinflip scale check, Python {platform.python_version()}, {os.cpu_count()} cores, {platform.platform()}")
    in_flight()


if __name__ == "__main__":
    main()
