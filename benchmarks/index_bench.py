"""The index of a big work directory, measured. `python benchmarks/index_bench.py [--runs 1000]`

Builds a work directory of real runs: baseline models (oracle, random with many seeds,
always-yes, always-no) evaluated through `run_task` on the bundled test split at three sizes
and on four generated sets, each run then copied (as re-runs of a deterministic model would
be) until there are `--runs` of them, a third of them in nested work directories. Then it
times `coinflip view` as a whole process against the 5 s target, and loads the page in
headless Chromium to read how long the script takes to draw the table, the charts and the
pair view (the page records it in `data-render-ms`), first as opened and then sorted and
filtered from the URL fragment.
"""

from __future__ import annotations

import argparse
import compileall
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PY = sys.executable
_SCRIPT = Path(PY).parent / "coinflip"
COINFLIP = str(_SCRIPT) if _SCRIPT.exists() else (shutil.which("coinflip") or "coinflip")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def row(name: str, measured: float, target: float, unit: str) -> str:
    return f"{name:<58} {measured:>9.3f} {unit:<3} / {target:<7g} {'PASS' if measured <= target else 'FAIL'}"


def base_runs(build: Path) -> list[Path]:
    """About 50 distinct real runs, each in its own work directory (so no index grows while building)."""
    from coinflip import generate_file, run_task
    from coinflip.data.generate import PeopleRange

    plans: list[dict[str, object]] = []
    for limit in (50, 100, 200):
        plans += [{"model": m, "limit": limit} for m in ("oracle", "always-yes", "always-no")]
        plans += [{"model": "random", "limit": limit, "seed": s} for s in range(8)]
    for k in range(4):
        data = build / f"set{k}.jsonl"
        generate_file(data, PeopleRange(2, 8), 300, k)
        plans += [{"model": m, "dataset_path": str(data)} for m in ("oracle", "always-yes")]
        plans += [{"model": "random", "dataset_path": str(data), "seed": s} for s in range(3)]
    runs = []
    for n, plan in enumerate(plans):
        work = build / f"w{n:03d}"
        run_task(work_dir=str(work), quiet=True, progress=False, **plan)  # type: ignore[arg-type]
        (run,) = [p for p in work.iterdir() if p.is_dir()]
        runs.append(run)
    return runs


def fill(work: Path, runs: list[Path], total: int) -> None:
    """`total` run directories from the base runs: a third in nested work directories."""
    homes = [work, work / "team_a", work / "team_b" / "long_context"]
    for n in range(total):
        source = runs[n % len(runs)]
        shutil.copytree(source, homes[n % 3] / f"{source.name}_{n:04d}")


def view_seconds(work: Path, tries: int = 3) -> float:
    best = float("inf")
    for _ in range(tries):
        start = time.perf_counter()
        subprocess.run([COINFLIP, "view", str(work)], check=True, capture_output=True)
        best = min(best, time.perf_counter() - start)
    return best


def render_ms(page: Path, fragment: str, profile: Path) -> tuple[float, int]:
    """The script's own time to draw the page, and the rows it drew."""
    assert CHROMIUM, "needs Debian's chromium"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
    flags += [f"--user-data-dir={profile}", "--virtual-time-budget=20000", "--dump-dom"]
    dom = subprocess.run(
        [CHROMIUM, *flags, page.as_uri() + fragment], capture_output=True, text=True, timeout=180
    ).stdout
    found = re.search(r'data-rows="(\d+)" data-render-ms="([\d.]+)"', dom)
    if not found:
        raise RuntimeError("the page did not finish drawing")
    return float(found[2]), int(found[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    options = parser.parse_args()
    import coinflip

    machine = f"{os.cpu_count()} cores, {platform.platform()}"
    print(f"coinflip {coinflip.__version__}, Python {platform.python_version()}, {machine}")
    compileall.compile_dir(Path(coinflip.__file__).parent, quiet=1)
    tmp = Path(tempfile.mkdtemp(prefix="coinflip-index-bench-"))
    try:
        started = time.perf_counter()
        runs = base_runs(tmp / "build")
        work = tmp / "work"
        fill(work, runs, options.runs)
        print(f"built {options.runs} runs ({len(runs)} distinct) in {time.perf_counter() - started:.1f} s")
        seconds = view_seconds(work)
        size = (work / "index.html").stat().st_size / 1e6
        print(row(f"coinflip view, {options.runs} runs (whole process, best of 3)", seconds, 5.0, "s"))
        print(f"{'index.html size':<58} {size:>9.2f} MB")
        page, profile = work / "index.html", tmp / "profile"
        first, rows = render_ms(page, "", profile)
        print(row(f"page opened: {rows} runs, first 100 rows drawn, laid out", first, 200, "ms"))
        sorted_ms, shown = render_ms(page, "#sort=model&dir=asc&q=random", profile)
        print(row(f"page sorted by model and filtered to {shown} runs", sorted_ms, 200, "ms"))
        refresh = time.perf_counter()
        subprocess.run(
            [COINFLIP, "eval", "--model", "oracle", "--limit", "20", "--work-dir", str(work)],
            check=True,
            capture_output=True,
        )
        with_index = time.perf_counter() - refresh
        alone = time.perf_counter()
        subprocess.run(
            [COINFLIP, "eval", "--model", "oracle", "--limit", "20", "--work-dir", str(tmp / "empty")],
            check=True,
            capture_output=True,
        )
        print(
            f"coinflip eval --limit 20: {with_index:.2f} s into the {options.runs}-run work directory "
            f"(refreshing its index), {time.perf_counter() - alone:.2f} s into an empty one"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
