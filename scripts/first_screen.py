"""The README's first screen: what the README's first command prints, kept current by CI.

Runs the `coinflip eval` of the README's first command, word for word as the README writes it
(SmolLM2-135M through llama.cpp, offline), in an empty temporary folder, 100 columns wide and
without colour. It keeps everything the command prints except what differs from run to run: the
progress lines (rates, ETA), the latency line and the requests line (seconds), and the run
folder's timestamp, shown as <timestamp>. Then it writes that between the README's markers, or,
with --check, exits 1 with a diff when the README shows something else: other lines or words, for the
numbers may differ in the last digits on another CPU (llama.cpp's arithmetic follows its instructions,
and a token at the margin of two can flip).

    python scripts/first_screen.py           # rewrite the README's block
    python scripts/first_screen.py --check   # CI: fail when the README is not what the command prints
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BEGIN = "<!-- BEGIN first-screen (generated: python scripts/first_screen.py) -->"
END = "<!-- END first-screen -->"
DROPPED = (  # lines that hold times or rates, so differ between two runs of the same command
    re.compile(r"^coin_flip \S+: \d+/\d+ "),  # progress without a terminal: counts, rate and ETA
    re.compile(r"^latency median "),
    re.compile(r"^requests \d+ sent"),
)
STAMP = re.compile(r"\b\d{8}_\d{6}(_\d+)?\b")  # the run folder's name
DIGITS = re.compile(r"\d")  # --check: the lines and words as printed; the numbers, on another CPU, may differ


def readme_command(readme: str) -> list[str]:
    """The arguments of the `coinflip eval` in the README's first command."""
    line = next(x for x in readme.splitlines() if ".venv/bin/coinflip eval " in x)
    return shlex.split(line.split(".venv/bin/coinflip ", 1)[1])


def first_screen(args: list[str]) -> str:
    env = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb", "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))  # this checkout's
    with tempfile.TemporaryDirectory() as folder:
        done = subprocess.run(
            [sys.executable, "-m", "coinflip", *args],
            cwd=folder,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
    if done.returncode != 0:
        sys.exit(f"the README's first command failed (exit {done.returncode}):\n{done.stdout}")
    kept = [STAMP.sub("<timestamp>", x.rstrip()) for x in done.stdout.splitlines()]
    return "\n".join(x for x in kept if not any(p.search(x) for p in DROPPED))


def with_screen(readme: str, args: list[str], screen: str) -> str:
    head, found, rest = readme.partition(BEGIN)
    if not found or END not in rest:
        sys.exit(f"README.md lacks the markers {BEGIN} ... {END}")
    return f"{head}{BEGIN}\n```text\n$ coinflip {shlex.join(args)}\n{screen}\n```\n{END}{rest.partition(END)[2]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 with a diff where the README differs (CI)")
    check = parser.parse_args().check
    readme = README.read_text(encoding="utf-8")
    args = readme_command(readme)
    wanted = with_screen(readme, args, first_screen(args))
    if not check:
        README.write_text(wanted, encoding="utf-8")
        return
    diff = "\n".join(
        difflib.unified_diff(readme.splitlines(), wanted.splitlines(), "README.md", "printed", lineterm="")
    )
    if DIGITS.sub("0", wanted) != DIGITS.sub("0", readme):
        print(diff)
        sys.exit("README.md's first screen is not what its first command prints: run python scripts/first_screen.py")
    if diff:  # the same lines and words: the numbers of this CPU's arithmetic, shown for the record
        print(f"{diff}\nREADME.md's first screen is what its first command prints, but for numbers (this CPU's)")
        return
    print("README.md's first screen is what its first command prints")


if __name__ == "__main__":
    main()
