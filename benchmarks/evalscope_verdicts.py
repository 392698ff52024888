"""Recompute the EvalScope verdict table of tests/test_evalscope.py with EvalScope's own code.

    .venv/bin/python benchmarks/evalscope_verdicts.py --python /tmp/es/bin/python

Each reply (and reasoning field) of the table goes through EvalScope 1.14.1 in its own venv, on
the path of an `openai_api` run: a ChatCompletion -> `chat_choices_from_openai` ->
`model_output_from_openai` -> `.completion` -> `CoinFlipAdapter.extract_answer` ->
`CoinFlipAdapter.match_score` -> `extract_verdict(..., allow_lowercase_exact=True)`. Prints every
row where the table, EvalScope or coinflip's `scoring.evalscope.verdict` disagree; exits 1 if any.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

_PROBE = """
import json, sys
from openai.types.chat import ChatCompletion
from evalscope.benchmarks.coin_flip.coin_flip_adapter import CoinFlipAdapter
from evalscope.models.utils.openai import chat_choices_from_openai, model_output_from_openai
from evalscope.utils.yes_no import extract_verdict
from evalscope.version import __version__

out = []
for reply, reasoning in json.load(sys.stdin):
    message = {"role": "assistant", "content": reply}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    choice = {"index": 0, "finish_reason": "stop", "message": message}
    raw = {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice]}
    completion = ChatCompletion.model_validate(raw)
    text = model_output_from_openai(completion, chat_choices_from_openai(completion, [])).completion
    filtered = CoinFlipAdapter.extract_answer(None, text, None)  # self is unused
    score = CoinFlipAdapter.match_score(None, text, filtered, "YES", None)
    out.append(extract_verdict(score.extracted_prediction or "", allow_lowercase_exact=True))
print(json.dumps({"version": __version__, "verdicts": out}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True, help="the python of a venv with evalscope==1.14.1")
    options = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.test_evalscope import EVALSCOPE_VERDICTS

    from coinflip.scoring.evalscope import verdict

    cases = [[reply, reasoning] for reply, reasoning, _ in EVALSCOPE_VERDICTS]
    env = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [options.python, "-c", _PROBE], input=json.dumps(cases), capture_output=True, text=True, env=env
    )
    if done.returncode != 0:
        sys.exit(done.stderr.strip()[-2000:])
    result = json.loads(done.stdout.strip().splitlines()[-1])
    bad = 0
    for (reply, reasoning, table), theirs in zip(EVALSCOPE_VERDICTS, result["verdicts"], strict=True):
        ours = verdict(reply, reasoning)
        if not table == theirs == ours:
            bad += 1
            print(f"{reply!r} (reasoning {reasoning!r}): table {table}, EvalScope {theirs}, coinflip {ours}")
    print(f"EvalScope {result['version']}: {len(cases) - bad} of {len(cases)} verdicts agree")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
