"""What `--max-cost` spends beside its cap, against the test server on 127.0.0.1.
`python benchmarks/max_cost.py` writes the table between the README's max-cost markers;
`--check` (CI) exits 1 with a diff where the README shows something else.

Three cases: long replies (4,000 tokens, no max_tokens) online, and in batch mode (refused
without max_tokens; with it, held to the worst case); cheap replies; and the test server's
200 questions at gpt-4o-mini's prices.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from coinflip.testing.server import FakeOpenAIServer

README = Path(__file__).resolve().parents[1] / "README.md"
BEGIN, END = "<!-- BEGIN max-cost (generated: python benchmarks/max_cost.py) -->", "<!-- END max-cost -->"
PRICES = ("--price-input", "0.15", "--price-output", "0.60")
CASES = [  # what, reply tokens, cap, extra arguments
    ("long replies, online", 4000, 0.02, ("--limit", "40")),
    ("long replies, online, max_tokens=4096", 4000, 0.02, ("--limit", "40", "--generation-config", "max_tokens=4096")),
    ("long replies, --batch", 4000, 0.02, ("--limit", "40", "--batch", "--batch-poll-s", "0.05")),
    (
        "long replies, --batch, max_tokens=4096",
        4000,
        0.02,
        ("--limit", "40", "--batch", "--batch-poll-s", "0.05", "--generation-config", "max_tokens=4096"),
    ),
    ("cheap replies", 0, 0.001, ("--limit", "40")),
    ("the test server's 200 questions", 0, 0.01, ("--limit", "200")),
]


def case(reply_tokens: int, cap: float, extra: tuple[str, ...], work: Path) -> str:
    with FakeOpenAIServer("mixed", reply_tokens=reply_tokens) as srv:
        args = ("eval", "--model", "m", "--api-url", srv.url, *PRICES, "--max-cost", f"{cap:g}", *extra)
        done = subprocess.run(
            [sys.executable, "-m", "coinflip", *args, "--work-dir", str(work)],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "COLUMNS": "200"},
        )
    reports = list(work.glob("*/reports/m/coin_flip.json"))
    n = extra[extra.index("--limit") + 1]
    if not reports:
        return f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1]}"
    report = json.loads(reports[0].read_text())
    note = [line for line in done.stderr.splitlines() if "--max-cost" in line]
    said = f"; {note[-1].split(':', 2)[1].strip()}" if note else ""
    answered, cost = report["tokens"]["requests"], report["cost"]["total"]
    return f"exit {done.returncode}, {answered} of {n} answered, cost {cost:.4f}{said}"


def table() -> str:
    rows = ["| case | cap | outcome |", "|---|---|---|"]
    for what, reply_tokens, cap, extra in CASES:
        with tempfile.TemporaryDirectory() as tmp:
            rows.append(f"| {what} | {cap:g} | {case(reply_tokens, cap, extra, Path(tmp))} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 with a diff where the README differs (CI)")
    check = parser.parse_args().check
    readme = README.read_text(encoding="utf-8")
    head, _, rest = readme.partition(BEGIN)
    wanted = f"{head}{BEGIN}\n{table()}\n{END}{rest.partition(END)[2]}"
    if not check:
        README.write_text(wanted, encoding="utf-8")
    elif wanted != readme:
        print("\n".join(difflib.unified_diff(readme.splitlines(), wanted.splitlines(), lineterm="")))
        sys.exit("README.md's --max-cost table is not what benchmarks/max_cost.py measures: run it")


if __name__ == "__main__":
    main()
