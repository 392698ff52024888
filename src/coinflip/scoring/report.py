"""The report of a run: its saved settings, what the scorer gathered, and the warnings a reader must not miss."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .. import __version__
from ..config import BENCHMARK, TaskConfig, in_process
from ..records import FORCED_ANSWERS, whole
from .calibration import calibration
from .cost import cost_line, cost_report, tokens
from .evalscope import EXTRACTION as EVALSCOPE_EXTRACTION
from .metrics import Outcomes, number, rates, summarize
from .reducers import answers_per_question, reduce
from .schema import Calibration, Counts, FewShot, Forced, Numbers, Report, Subset, Template
from .scorer import Scorer

EXTRACTION = "coinflip.extract_answer/1"
IMPOSSIBLE_LOGPROBS = "the server's log probabilities at the answer were impossible (above 0, NaN or infinite)"
NO_LOGPROBS = (
    "no log probabilities in the replies: ask for them with --generation-config logprobs=5 "
    "(OpenAI, vLLM and llama.cpp servers return them)"
)


def build_report(saved: dict[str, Any], run_name: str, scorer: Scorer, compat: str) -> Report:
    """`saved` is the run's task_config.yaml content (config, fingerprint, samples, ...)."""
    if scorer.compat != compat:
        raise ValueError(f"the reviews follow {scorer.compat!r} rules, the report was asked for {compat!r}")
    config, fingerprint = saved["config"], saved["fingerprint"]
    seed = int(config.get("seed") or 0)
    outcomes = scorer.outcomes()
    scores = summarize(outcomes, compat, seed)
    counts = scores["counts"]
    expected = int(saved.get("samples") or len(outcomes))
    spends = not in_process(config["model"], config.get("eval_type"))  # a baseline's answers cost nothing
    used = tokens(scorer.usage, scorer.forced_usage, scorer.outside, spends=spends)  # every saved one was paid for
    batched = any(u.batch_answers for u in (scorer.usage, scorer.forced_usage, scorer.outside))  # any session's rows
    report: Report = {
        "benchmark": BENCHMARK,
        "model": config.get("model_id") or config["model"],
        "served_model": config["model"],
        "run": run_name,
        "complete": counts["errors"] == 0 and expected <= len(outcomes),
        "warnings": [],
        "notes": [],
        **scores,
        "baselines": baselines(scores["counts"], compat),
        "invalid_reasons": {reason: n for reason, n in scorer.reasons.items() if n},
        "errors_top": scorer.usage.top_errors(),
        "dataset": _section(fingerprint.get("dataset")),
        "subset": saved.get("subset") or Subset(mode="all", count=expected, of=expected),
        "template": fingerprint.get("template") or Template(name="default"),
        "few_shot_num": config.get("few_shot_num", 0),
        "repeats": answers_per_question(fingerprint),
        "api_mode": config.get("api_mode", "chat"),
        "generation_config": _section(fingerprint.get("generation_config", config.get("generation_config"))),
        "extraction": EVALSCOPE_EXTRACTION if compat == "evalscope" else EXTRACTION,
        "usage": scorer.usage.result(),
        "tokens": used,
        "provenance": {**_section(saved.get("provenance")), "scored_by": __version__},  # a rescore's own version
        "batch": bool(config.get("batch") or config.get("batch_results") or batched),
        "cost": cost_report(config, used),
    }
    if (shown := _few_shot(config, fingerprint)) is not None:
        report["few_shot"] = shown
    repeated = report["repeats"] > 1 or bool(len(outcomes) and int(outcomes.repeat.max()) > 0)
    if repeated:
        report["repeat_metrics"] = reduce(outcomes, compat)
    if config.get("force_answer"):
        report["forced"] = _forced(scorer, outcomes, compat, seed, repeated)
    report["calibration"] = _calibration(scorer, outcomes) or {
        "available": False,
        "reason": IMPOSSIBLE_LOGPROBS if scorer.impossible_logprobs else _no_probabilities(report),
    }
    if scorer.impossible_logprobs:  # samples left without P(YES), rather than given a clamped one
        report["calibration"]["impossible_logprobs"] = scorer.impossible_logprobs
    report["errors_ignored"] = bool(config.get("ignore_errors")) and counts["errors"] > 0 and expected <= len(outcomes)
    if scorer.unreadable:  # counted where the saved lines are read (jsonl.py)
        report["unreadable_rows"] = scorer.unreadable
    if scorer.corrected:  # held to the run's data (run/finish.py Truth)
        report["corrected_rows"] = scorer.corrected
    report["warnings"] = warnings(report, expected, len(outcomes))
    report["notes"] = notes(report, config)
    return report


def _section(value: Any) -> Any:
    """A mapping of the saved fingerprint; anything else a hand edit left there is unknown (empty)."""
    return value if isinstance(value, dict) else {}


def baselines(counts: Counts, compat: str) -> dict[str, Numbers]:
    """always-yes and always-no on the same targets (EvalScope's: without the errored samples, as its metrics):
    the floor a metric must clear to mean anything."""
    out = (counts["errors_on_yes"], counts["errors_on_no"]) if compat == "evalscope" else (0, 0)
    yes, no = counts["target_yes"] - out[0], counts["samples"] - counts["target_yes"] - out[1]
    cells = {"always-yes": [yes, 0, 0, no, 0, 0], "always-no": [0, yes, 0, 0, no, 0]}
    return {name: {k: number(v) for k, v in rates(c, compat).items()} for name, c in cells.items()}


def _forced(scorer: Scorer, strict: Outcomes, compat: str, seed: int, repeated: bool) -> Forced:
    """The forced view (strict answer where valid, the forced one where not) and what forcing recovered."""
    outcomes = scorer.outcomes(forced=True)
    forced_view = summarize(outcomes, compat, seed)
    invalid = (strict.cell % 3 == 2) & (strict.error == 0)  # no strict answer (CELLS 2 and 5)
    recovered = invalid & (outcomes.cell % 3 != 2)  # the forced answer said YES or NO
    right = (outcomes.cell == 0) | (outcomes.cell == 4)
    out: Forced = {
        "metrics": forced_view["metrics"],
        "intervals": forced_view["intervals"],
        "counts": forced_view["counts"],
        "by_people": forced_view["by_people"],
        "invalid_strict": int(invalid.sum()),
        "asked": int((invalid & (scorer.column("forced") != FORCED_ANSWERS.index(None))).sum()),
        "recovered_correct": int((recovered & right).sum()),
        "recovered_wrong": int((recovered & ~right).sum()),
        "still_invalid": int((invalid & ~recovered).sum()),
        "usage": scorer.forced_usage.result(),
    }
    if repeated:
        out["repeat_metrics"] = reduce(outcomes, compat)
    return out


def _few_shot(config: dict[str, Any], fingerprint: dict[str, Any]) -> FewShot | None:
    """Which validation rows the prompts showed: how they were drawn, and the hash of those shown."""
    shots, examples = config.get("few_shot_num"), fingerprint.get("few_shot_examples")
    if not (whole(shots) and shots > 0 and isinstance(examples, str)):
        return None
    drawn, seed = config.get("few_shot_random") is not False, config.get("few_shot_seed")  # not drawn: the first rows
    seed = int(seed) if whole(seed) else TaskConfig.few_shot_seed  # left out of the settings: its default
    return {"seed": seed if drawn else None, "random": drawn, "examples_sha256": examples}


def _no_probabilities(report: Report) -> str:
    generation = report["generation_config"]
    if not (generation.get("logprobs") or generation.get("top_logprobs")):
        return NO_LOGPROBS
    c, forced = report["counts"], report.get("forced")
    answered = c["samples"] - c["invalid"] - c["errors"]
    recovered = forced["recovered_correct"] + forced["recovered_wrong"] if forced else 0
    if answered + recovered == 0:
        what = "forced answer" if forced else "reply"
        return (
            f"log probabilities were asked for, but no {what} gave a YES or NO answer to read them at "
            f"({c['invalid']} invalid, {c['errors']} errors of {c['samples']}): P(YES) is read at the answer"
        )
    return (
        f"log probabilities were asked for, but none came back at the {answered + recovered} YES or NO answers: "
        "the server did not return them (check that it supports logprobs, also when streaming)"
    )


def _calibration(scorer: Scorer, outcomes: Outcomes) -> Calibration | None:
    import numpy as np

    p = scorer.column("p_yes")
    known = np.isfinite(p)
    if not known.any():
        return None
    order = scorer.order()  # sums in key order: a live run and its rescore give the same floats
    if order is not None:
        p, known, outcomes = p[order], known[order], outcomes.where(order)
    result = calibration(p[known], (outcomes.cell[known] < 3).astype(np.float64))
    return {"available": True, "coverage": float(known.mean()), **result}


def warnings(report: Report, expected: int, scored: int) -> list[str]:
    c, out = report["counts"], []
    total = c["samples"] - (c["errors"] if report["metric_compat"] == "evalscope" else 0)  # the samples scored
    if c["errors"]:
        evalscope = report["metric_compat"] == "evalscope"
        counted = "are left out, as EvalScope's ignore_errors does" if evalscope else "are scored wrong"
        out.append(
            f"{c['errors']} sample(s) got no reply after retries and {counted}; resume to retry them"
            + (" (ignore_errors: the run still counts as done)" if report.get("errors_ignored") else "")
        )
    if expected > scored:
        out.append(f"{expected - scored} sample(s) were never run; resume to run them")
    if total and c["invalid"] * 2 > total:
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(report["invalid_reasons"].items(), key=lambda kv: -kv[1]))
        out.append(f"{c['invalid']} of {total} answers ({c['invalid'] / total:.0%}) are invalid ({reasons})")
        cut = report["invalid_reasons"].get("cut_off", 0)
        if cut * 2 > c["invalid"]:
            generation = report["generation_config"]
            limit = generation.get("max_tokens") or generation.get("max_completion_tokens")
            out.append(
                f"most invalid answers were cut off by the token limit (finish_reason length, {cut}); "
                f"raise max_tokens{f' above {limit}' if limit else ''} in --generation-config"
            )
    answered = c["answered_yes"] + c["answered_no"]
    if answered and (not c["answered_yes"] or not c["answered_no"]):
        never = "YES" if not c["answered_yes"] else "NO"
        out.append(f"the model never answered {never} (YES {c['answered_yes']}, NO {c['answered_no']}, of {total})")
    if total and (below := _below_baselines(report)):  # none scored: nothing to hold against a floor
        out.append("not above a trivial baseline on the same questions: " + "; ".join(below))
    for name in report.get("undefined", []):
        targets = "YES targets answered YES or NO" if report["metric_compat"] == "evalscope" else "YES targets"
        why = {"precision": "no YES answers", "recall": f"no {targets}", "f1_score": f"no YES answers or {targets}"}
        out.append(f"{name} is undefined ({why.get(name, 'no denominator')})")
    if impossible := report["calibration"].get("impossible_logprobs"):
        out.append(
            f"{impossible} sample(s) have no P(YES): the server sent log probabilities that cannot "
            "be (above 0, NaN or infinite) at the answer position"
        )
    bins = report["calibration"].get("bins")
    if bins and all(b.get("mean_p_yes") in (None, 0.0, 1.0) for b in bins):  # every P(YES) exactly 0 or 1
        out.append(
            "P(YES) is 0 or 1 at every answer, so calibration restates the answers: the other answer was never "
            "among the alternatives that came back (top_logprobs=5 asks for them; some servers ignore it)"
        )
    if corrected := report.get("corrected_rows"):
        out.append(
            f"{corrected} saved row(s) held a target, people or flips count other than the run's data (a hand "
            "edit?): they were scored by the data's"
        )
    if unread := report.get("unreadable_rows"):
        out.append(
            f"{unread} saved row(s) could not be read (not a row, or no YES or NO target): left out of the "
            "scores and moved aside (predictions/*/*.unreadable.txt); a resume (--use-cache) asks the questions "
            "no other row answers"
        )
    return out


def _below_baselines(report: Report) -> list[str]:
    found = []
    for name in ("f1_score", "accuracy"):
        known = [(b, floor) for b, v in report["baselines"].items() if (floor := v[name]) is not None]
        best, floor = max(known, key=lambda bv: bv[1], default=("", None))
        if (value := report["metrics"][name]) is not None and floor is not None and value <= floor + 1e-12:
            found.append(f"{name} {value:.4f} <= {best} {floor:.4f}")
    return found


ELSEWHERE = ("batch_write", "batch_results")  # the requests went to another tool
# What a bundled local model is expected to do, said under its results (benchmarks/smollm2.py measures it)
EXPECTED = {
    "smollm2": "expected of SmolLM2-135M, a tiny model: without worked examples it almost never writes the "
    "answer line (strict F1 0); with --few-shot-num 3 it does, but answers YES nearly always and its P(YES) "
    "does not tell YES from NO (AUROC near 0.5): it follows the format, it does not track the coin. A model "
    "that does clears the baselines",
}


def notes(report: Report, config: dict[str, Any]) -> list[str]:
    """What a reader should know but need not act on, such as a subset the user asked for (--limit)."""
    out = []
    if report["dataset"].get("source") == "bundled":
        out.append(
            "data: coinflip's bundled generated set, shaped like the official one but not it; "
            "for extraordinarylab/coin-flip use --dataset-hub huggingface (or modelscope)"
        )
    subset = report["subset"]
    if subset.get("count", 0) < subset.get("of", 0):
        how = subset.get("mode", "first")
        seed = f", seed {subset['seed']}" if how != "first" else ""
        out.append(f"covered {subset['count']} of {subset['of']} questions ({how}{seed})")
    if config["model"] in EXPECTED and not any(config.get(k) for k in ("api_url", "model_path", *ELSEWHERE)):
        out.append(EXPECTED[config["model"]])  # the bundled file answered, not a server of that name
    if report.get("batch"):
        timed = "latency is each batch's turnaround (creation to end), not a request's"
        if not report.get("usage", {}).get("latency_s"):
            timed = "no latency is known (answers read from a file, or batches the server left undated)"
        out.append(f"batch mode: time to first token does not exist there; {timed}")
    if spent := cost_line(report):  # tokens where a server reported them; the cost where prices were given
        out.append(spent)
    return out


def write_report(path: Path, report: Report) -> None:
    from .._files import replacing

    text = json.dumps(report, indent=2, ensure_ascii=False) + "\n"
    data = text.encode("utf-8", "backslashreplace")  # half a surrogate pair: its JSON escape, \\udc80
    with replacing(path) as handle:  # never written through a link or into a FIFO; an OSError: StorageError
        handle.write(data)
