"""EvalScope parity: both tools score the same replies from one server. `python benchmarks/parity.py`

Starts an OpenAI-compatible server on 127.0.0.1 that answers each CoinFlip question with a reply
chosen by a seeded hash of the question, so every tool gets the same reply for the same question
whatever the order of its requests: about 20% wrong, 30% answers in styles such as
`ANSWER: yes`, `ANSWER: YES.`, `**ANSWER:** YES`, 10% prose verdicts without a marker, and a few
empty, cut-off, unclosed-reasoning or two-verdict replies; some replies carry a
`reasoning_content` field with the opposite answer, and a few questions always get HTTP 500.

Both tools read the same questions from one directory (`test.jsonl`, `validation.jsonl`: what
`coinflip eval --dataset-path DIR` and EvalScope's `dataset_args.coin_flip.local_path` both read)
and run against that server: `coinflip eval --metric-compat evalscope` and, with
`--evalscope BIN` (EvalScope 1.14.1 in its own venv), `evalscope eval --ignore-errors`. Prints
the five metrics of both reports side by side, whether they are identical, and whether each
sample's prediction agrees. EvalScope runs offline (HF/ModelScope offline variables, no proxy);
when strace is installed its connections are traced and any to a non-loopback address reported.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import platform
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from coinflip.testing.policy import last_question, truth
from coinflip.testing.server import HttpProtocol

PY = sys.executable
_SCRIPT = Path(PY).parent / "coinflip"
COINFLIP = str(_SCRIPT) if _SCRIPT.exists() else (shutil.which("coinflip") or "coinflip")
METRICS = ("accuracy", "precision", "recall", "f1_score", "yes_ratio")
MODEL = "m"

# (share, name, template): {A} YES/NO, {a} yes/no, {C} Yes/No, {W} the other answer
STYLES: list[tuple[float, str, str]] = [
    (0.50, "canonical", "Tracking the coin person by person.\nANSWER: {A}"),
    (0.05, "lowercase", "Two flips cancel out.\nANSWER: {a}"),
    (0.05, "period", "Counting flips.\nANSWER: {A}."),
    (0.04, "bold marker", "Step by step.\n**ANSWER:** {A}"),
    (0.04, "bold value", "Step by step.\nANSWER: **{A}**"),
    (0.03, "because", "Answer: {C}, because the flips leave it that way."),
    (0.03, "heading", "## Reasoning\nOne flip.\n\n## ANSWER: {A}"),
    (0.02, "full-width colon", "数一数。\nANSWER：{A}"),
    (0.02, "next line", "ANSWER:\n{A}"),
    (0.02, "think block", "<think>Maybe {W}? Recount.</think>\nANSWER: {A}"),
    (0.04, "prose", "The coin ends where it started or not; the answer is {C}."),
    (0.03, "bare word", "{C}."),
    (0.03, "lowercase prose", "so the answer is {a}, I think"),
    (0.02, "two verdicts", "ANSWER: {A} or {W}"),
    (0.02, "no verdict", "The coin... I am not sure.\nANSWER: maybe"),
    (0.02, "empty", ""),
    (0.02, "cut off", "<think>Person one flips, so tails. Person two"),
    (0.02, "unclosed think", "<think>tails, heads, tails... ANSWER: {A}"),
]


def pick(seed: int, question: str, salt: str) -> float:
    digest = hashlib.sha256(f"{seed}|{salt}|{question}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class Replies:
    """The seeded mix: what the server says to each question, the same for every client."""

    def __init__(self, seed: int, wrong: float, reasoning: float, failing: set[str]) -> None:
        self.seed, self.wrong, self.reasoning, self.failing = seed, wrong, reasoning, failing
        self.styles: Counter[str] = Counter()

    def style(self, question: str) -> tuple[str, str]:
        u, acc = pick(self.seed, question, "style"), 0.0
        for share, name, template in STYLES:
            acc += share
            if u < acc:
                return name, template
        return STYLES[0][1], STYLES[0][2]

    def message(self, question: str) -> tuple[dict[str, Any], str]:
        right = truth(question)
        answer = right if pick(self.seed, question, "wrong") >= self.wrong else ("NO" if right == "YES" else "YES")
        other = "NO" if answer == "YES" else "YES"
        name, template = self.style(question)
        self.styles[name] += 1
        text = template.format(A=answer, a=answer.lower(), C=answer.capitalize(), W=other)
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if pick(self.seed, question, "reasoning") < self.reasoning:
            message["reasoning_content"] = f"Scratch work that must never be scored. ANSWER: {other}"
        return message, "length" if name == "cut off" else "stop"


class Handler:
    def __init__(self, replies: Replies) -> None:
        self.replies = replies
        self.connections: set[object] = set()  # the test server's protocol keeps its open connections here

    async def __call__(
        self, method: str, path: str, headers: dict[str, str], body: bytes, arrived: float = 0.0
    ) -> tuple[int, bytes, dict[str, str]]:
        if method == "GET" and path.endswith("/models"):
            return _json(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
        if method != "POST" or not path.endswith("/chat/completions"):
            return _json(404, {"error": {"message": f"no route {method} {path}"}})
        request = json.loads(body)
        question = last_question("\n".join(str(m.get("content", "")) for m in request.get("messages", [])))
        if question in self.replies.failing:
            return _json(500, {"error": {"message": "internal error"}})
        message, finish = self.replies.message(question)
        usage = {"prompt_tokens": 120, "completion_tokens": 20, "total_tokens": 140}
        choice = {"index": 0, "finish_reason": finish, "message": message}
        completion = {"id": "chatcmpl-p", "object": "chat.completion", "created": 0, "model": MODEL}
        return _json(200, {**completion, "choices": [choice], "usage": usage})


def _json(status: int, payload: Any) -> tuple[int, bytes, dict[str, str]]:
    return status, json.dumps(payload).encode(), {}


class Server:
    """The reply mix behind coinflip's test-server HTTP protocol, on a free 127.0.0.1 port."""

    def __init__(self, replies: Replies) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        handler = Handler(replies)
        start = self.loop.create_server(lambda: HttpProtocol(handler), "127.0.0.1", 0, backlog=1024)  # type: ignore[arg-type]
        self.server = asyncio.run_coroutine_threadsafe(start, self.loop).result(10)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1"

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def write_data(directory: Path, count: int, seed: int) -> list[dict[str, Any]]:
    """A seeded sample of the bundled test split (both lengths of question), in its order."""
    from coinflip.data.grammar import bundled_dir

    rows = [json.loads(line) for line in (bundled_dir() / "test.jsonl").read_text(encoding="utf-8").splitlines()]
    chosen = sorted(random.Random(seed).sample(range(len(rows)), min(count, len(rows))))
    directory.mkdir(parents=True)
    sample = [rows[i] for i in chosen]
    (directory / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in sample), encoding="utf-8")
    shutil.copy(bundled_dir() / "validation.jsonl", directory / "validation.jsonl")
    return sample


def run_coinflip(url: str, data: Path, work: Path) -> tuple[dict[str, Any], dict[str, str | None], dict[str, Any]]:
    """The evalscope-compat report and predictions, then the same replies rescored by the strict rule."""
    command = [COINFLIP, "eval", "--model", MODEL, "--api-url", url, "--api-key", "EMPTY", "--no-html"]
    command += ["--dataset-path", str(data), "--metric-compat", "evalscope", "--retries", "0", "--work-dir", str(work)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode not in (0, 1):  # 1: an incomplete run, as when some samples errored
        sys.exit(f"coinflip eval failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    run = next(p for p in work.iterdir() if p.is_dir())
    report = json.loads((run / "reports" / MODEL / "coin_flip.json").read_text(encoding="utf-8"))
    predictions = {
        json.loads(line)["id"]: json.loads(line)
        for line in (run / "predictions" / MODEL / "coin_flip.jsonl").read_text(encoding="utf-8").splitlines()
    }
    reviews = (run / "reviews" / MODEL / "coin_flip.jsonl").read_text(encoding="utf-8").splitlines()
    verdicts = {predictions[r["id"]]["question"]: r["extracted"] for r in map(json.loads, reviews) if not r["error"]}
    rescore = [COINFLIP, "rescore", str(run), "--metric-compat", "coinflip"]
    strict = subprocess.run(rescore, capture_output=True, text=True)
    if strict.returncode != 0:
        sys.exit(f"coinflip rescore failed: {strict.stderr.strip()[-2000:]}")
    strict_report = json.loads((run / "reports" / MODEL / "coin_flip.json").read_text(encoding="utf-8"))
    strict_reviews = (run / "reviews" / MODEL / "coin_flip.jsonl").read_text(encoding="utf-8").splitlines()
    strict_report["reasons"] = Counter(r["invalid_reason"] for r in map(json.loads, strict_reviews) if r["invalid"])
    return report, verdicts, strict_report


def offline_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env.update(
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        DO_NOT_TRACK="1",
        NO_PROXY="127.0.0.1,localhost",
        OPENAI_API_KEY="EMPTY",
    )
    return env


def run_evalscope(binary: str, url: str, data: Path, work: Path) -> tuple[dict[str, Any], dict[str, str | None], str]:
    args = {"coin_flip": {"local_path": str(data)}}
    generation = {"retries": 1, "retry_interval": 0}  # an errored sample fails at once, as coinflip's --retries 0
    command = [binary, "eval", "--model", MODEL, "--api-url", url, "--api-key", "EMPTY", "--datasets", "coin_flip"]
    command += ["--dataset-args", json.dumps(args), "--generation-config", json.dumps(generation)]
    command += ["--eval-batch-size", "32", "--ignore-errors", "--work-dir", str(work)]
    trace = work.parent / "evalscope.strace"
    if shutil.which("strace"):
        command = ["strace", "-f", "-qq", "-e", "trace=connect", "-o", str(trace), *command]
    done = subprocess.run(command, capture_output=True, text=True, env=offline_env())
    if done.returncode != 0:
        sys.exit(f"evalscope eval failed ({done.returncode}): {done.stderr.strip()[-3000:]}")
    report_file = next(work.glob("*/reports/*/coin_flip.json"))
    report = json.loads(report_file.read_text(encoding="utf-8"))
    verdicts: dict[str, str | None] = {}
    from_evalscope = Path(binary).parent / "python"
    for review in work.glob("*/reviews/*/coin_flip*.jsonl"):  # EvalScope's own verdict per sample, by its code
        verdicts.update(evalscope_verdicts(str(from_evalscope), review))
    return report, verdicts, connections(trace) if trace.exists() else "not traced (no strace)"


_PROBE = """
import json, sys
from evalscope.utils.yes_no import extract_verdict
for line in open(sys.argv[1], encoding="utf-8"):
    row = json.loads(line)
    prompt = row["messages"][0]["content"]
    prompt = prompt if isinstance(prompt, str) else "".join(part.get("text") or "" for part in prompt)
    extracted = row["sample_score"]["score"]["extracted_prediction"] or ""
    print(json.dumps([prompt, extract_verdict(extracted, allow_lowercase_exact=True)]))
"""


def evalscope_verdicts(python: str, review: Path) -> dict[str, str | None]:
    """Each sample's verdict as EvalScope's aggregate_scores computes it (its own function, run in
    its venv on its saved review), keyed by question."""
    out = subprocess.run([python, "-c", _PROBE, str(review)], capture_output=True, text=True, env=offline_env())
    if out.returncode != 0:
        sys.exit(f"reading EvalScope's reviews failed: {out.stderr.strip()[-2000:]}")
    return {last_question(prompt): verdict for prompt, verdict in map(json.loads, out.stdout.splitlines())}


def connections(trace: Path) -> str:
    """Where EvalScope connected, from strace: loopback only, or the other addresses."""
    addresses = re.findall(r"inet_(?:pton|addr)\((?:AF_INET6?, )?\"([^\"]+)\"", trace.read_text())
    foreign = sorted({a for a in addresses if not (a.startswith("127.") or a in ("::1", "::ffff:127.0.0.1"))})
    if foreign:
        return f"NON-LOOPBACK connections: {', '.join(foreign)}"
    return f"{len(addresses)} connect() calls, all to loopback (strace)"


def evalscope_metrics(report: dict[str, Any]) -> dict[str, float]:
    """The five scores of EvalScope's report (schema 2: its report names f1_score `f1`)."""
    scores = {m["identity"]["name"]: float(m["score"]) for m in report["metrics"]}
    return {name: scores[name if name in scores else name.removesuffix("_score")] for name in METRICS}


def finish(tmp: Path, keep: bool) -> None:
    if keep:
        print(f"kept: {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evalscope", metavar="BIN", help="evalscope executable (1.14.1) in its own venv")
    parser.add_argument("--count", type=int, default=600, help="questions (default 600)")
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--wrong", type=float, default=0.2, help="share of wrong answers")
    parser.add_argument("--reasoning", type=float, default=0.15, help="share of replies with a reasoning field")
    parser.add_argument("--errors", type=int, default=6, help="questions that always get HTTP 500")
    parser.add_argument("--keep", action="store_true", help="keep the data and both run directories")
    options = parser.parse_args()

    import coinflip

    print(f"coinflip {coinflip.__version__}, Python {platform.python_version()}, {platform.platform()}")
    tmp = Path(tempfile.mkdtemp(prefix="coinflip-parity-"))
    sample = write_data(tmp / "data", options.count, options.seed)
    failing = {r["question"] for r in random.Random(options.seed + 1).sample(sample, options.errors)}
    replies = Replies(options.seed, options.wrong, options.reasoning, failing)
    server = Server(replies)
    try:
        ours, our_verdicts, strict = run_coinflip(server.url, tmp / "data", tmp / "coinflip")
        styles = dict(replies.styles)
        theirs = run_evalscope(options.evalscope, server.url, tmp / "data", tmp / "es") if options.evalscope else None
    finally:
        server.stop()

    mix = ", ".join(f"{name} {n}" for name, n in sorted(styles.items(), key=lambda kv: (-kv[1], kv[0])))
    print(f"{len(sample)} questions, seed {options.seed}, {len(failing)} always failing; reply styles: {mix}")
    counts = ours["counts"]
    print(
        f"coinflip --metric-compat evalscope: TP {counts['tp']} FP {counts['fp']} TN {counts['tn']} "
        f"FN {counts['fn']}, no verdict {counts['invalid']}, errored {counts['errors']} (excluded)"
    )
    reasons = ", ".join(f"{name} {n}" for name, n in sorted(strict["reasons"].items(), key=lambda kv: (-kv[1], kv[0])))
    print(f"strict rule (default): {strict['counts']['invalid']} invalid answers: {reasons}")
    if theirs is None:
        print(f"{'metric':<10} {'coinflip':>9} {'strict':>7}")
        for name in METRICS:
            print(f"{name:<10} {ours['metrics'][name]:>9.4f} {strict['metrics'][name]:>7.4f}")
        print("(run with --evalscope /path/to/venv/bin/evalscope for the side-by-side comparison)")
        finish(tmp, options.keep)
        return
    report, es_verdicts, network = theirs
    es = evalscope_metrics(report)
    print(f"{'metric':<10} {'EvalScope 1.14.1':>17} {'coinflip':>9} {'same':>5}   {'coinflip strict (default)':>25}")
    same = True
    for name in METRICS:
        ok = es[name] == round(ours["metrics"][name], 4)  # EvalScope's report keeps 4 digits
        same &= ok
        row = f"{name:<10} {es[name]:>17.4f} {ours['metrics'][name]:>9.4f} {'yes' if ok else 'NO':>5}"
        print(f"{row}   {strict['metrics'][name]:>25.4f}")
    shared = our_verdicts.keys() & es_verdicts.keys()
    agree = sum(our_verdicts[q] == es_verdicts[q] for q in shared)
    print(f"five metrics identical: {'yes' if same else 'NO'}")
    print(f"per-sample predictions agree: {agree} of {len(shared)} (EvalScope scored {len(es_verdicts)} samples)")
    print(f"EvalScope network: {network}")
    finish(tmp, options.keep)
    if not same or agree != len(shared):
        sys.exit(1)


if __name__ == "__main__":
    main()
