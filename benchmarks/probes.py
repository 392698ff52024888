"""Probes of the baselines and of the bundled small model: `python benchmarks/probes.py`

Runs `coinflip probe` on 40 bundled questions per variant (and a length curve over 2 to 5
people, 20 questions each) for the oracle, always-yes and random baselines and for
SmolLM2-135M-Instruct through llama.cpp (`pip install 'coinflip[local]'`; plain completions,
the direct template, forced answers, temperature 0), and prints accuracy per variant, the paired
difference to the base, and each probe's headline. The README's Probes example is its output.
SmolLM2 costs most of the time (one request at a time on the CPU); `--models` picks others.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import COINFLIP  # noqa: E402

SMOLLM2 = [
    "--api-mode", "completions", "--prompt-template", "direct", "--force-answer",
    "--generation-config", "max_tokens=16,temperature=0,logprobs=5",
]  # fmt: skip


def run(model: str, args: argparse.Namespace, work: Path) -> dict:
    """One model's probe; a probe already under `work` (a stopped one) is resumed."""
    flags = SMOLLM2 if model == "smollm2" else []
    started = sorted((work / model).glob("probe_*"))
    if started:
        command = [COINFLIP, "probe", "--use-cache", str(started[-1])]
    else:
        command = [
            COINFLIP, "probe", "--model", model, "--limit", str(args.limit), "--work-dir", str(work / model),
            "--lengths", args.lengths, "--length-count", str(args.length_count), *flags,
        ]  # fmt: skip
    print("$ " + " ".join(command[1:]).replace(str(work), "WORK"), file=sys.stderr, flush=True)
    done = subprocess.run(command, capture_output=True, text=True)
    found = sorted((work / model).glob("probe_*/probe.json"))
    if done.returncode not in (0, 1) or not found:
        raise SystemExit(f"{model}: exit {done.returncode}\n{done.stderr}")
    result = dict(json.loads(found[-1].read_text(encoding="utf-8")))
    if "variants" not in result:
        raise SystemExit(f"{model}: the probe stopped before its report\n{done.stderr}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="oracle,always-yes,random,smollm2")
    parser.add_argument("--limit", type=int, default=40)
    parser.add_argument("--lengths", default="2-5")
    parser.add_argument("--length-count", type=int, default=20)
    parser.add_argument("--work-dir", type=Path, default=None, help="Keep the probes here (and resume them)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work_dir or Path(tmp)
        results = {model: run(model, args, work) for model in args.models.split(",")}
    first = next(iter(results.values()))
    names = [v["name"] for v in first["variants"]]
    print(
        f"{args.limit} bundled questions per variant (stratified, seed 42), lengths {args.lengths} x "
        f"{args.length_count}; accuracy (forced view for a model with forced answers), paired difference to base "
        "in points; "
        f"Python {platform.python_version()}"
    )
    print(f"{'model':<11}" + "".join(f"{n:>11}" for n in names) + "   falls at")
    for model, r in results.items():
        cells = []
        for v in r["variants"]:
            paired = v.get("paired")
            diff = f"{paired['difference'] * 100:+.0f}" if paired else ""
            cells.append((f"{v['metrics']['accuracy']:.2f}" + (f" ({diff})" if diff else "")).rjust(11))
        falls = r["length"]["falls_at"]
        print(f"{model:<11}" + "".join(cells) + f"   {falls if falls is not None else '-':>8}")
    for model, r in results.items():
        print(f"{model}: {r['headline']}")
        if r["length"]["points"]:
            print(f"{model}: length: {r['length']['verdict']}")


if __name__ == "__main__":
    main()
