"""What a run will ask, worked out before anything touches the disk or the network: a bad setting
(model, template, data, few-shot pool) ends in one line with no run directory left behind."""

from __future__ import annotations

import platform
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .. import __version__
from ..config import TaskConfig
from ..data import prompts
from ..data.load import Dataset, Record, digest, load_dataset
from ..errors import ConfigError, DataError
from ..models import Request, check_model, weights
from ..scoring.cost import check_costs
from ..secrets import redacted_generation

COMPLETIONS_STOP = ["\nQ:"]  # a completion model goes on to invent the next "Q:" block
FORCE_MAX_TOKENS = 16


def effective_generation(config: TaskConfig) -> dict[str, Any]:
    """The user's, plus a default stop for plain completions (given stop sequences, even none, replace it).
    `logprobs=5` or `logprobs=true,top_logprobs=5` alike: chat takes a flag and a count, completions a number."""
    generation = dict(config.generation_config)
    completions = config.api_mode == "completions"
    if completions and "stop" not in generation:
        generation["stop"] = list(COMPLETIONS_STOP)
    wanted, top = generation.get("logprobs"), generation.get("top_logprobs")
    if wanted is None or wanted is False:
        return generation
    count = top if isinstance(top, int) and not isinstance(top, bool) else wanted if type(wanted) is int else 5
    if completions:
        generation.pop("top_logprobs", None)
        generation["logprobs"] = count
    else:
        generation["logprobs"], generation["top_logprobs"] = True, count
    return generation


def wrapped(seed: int) -> int:
    """A repeat's seed, past the 64 bits a server takes, wrapped round (seed=2**63-1 with repeats was refused)."""
    return (seed + 2**63) % 2**64 - 2**63


class RequestBuilder:
    """Turns records into requests: few-shot candidates are drawn once, so every question sees the same ones."""

    def __init__(self, config: TaskConfig, pool: Sequence[Record], generation: dict[str, Any]) -> None:
        self.count = config.few_shot_num
        self.system_prompt = config.system_prompt
        self.style = prompts.template(config.prompt_template)
        self.candidates = prompts.choose_examples(pool, self.count, config.few_shot_seed, config.few_shot_random)
        for r in self.candidates if self.style.reasoning else ():  # worked from its story, which may not parse
            if (worked := prompts.answer(r).rsplit(" ", 1)[-1]) != r.answer:
                raise DataError(
                    f"validation row {r.id + 1}: its worked example ends in {worked}, but its answer is {r.answer} "
                    "(a mislabelled row, or a story coinflip cannot read); fix it, or use --prompt-template direct"
                )
        self.seed = generation.get("seed")
        self.choices = int(generation.get("n") or 1)
        self.completions = config.api_mode == "completions"
        self.short = "max_tokens" in generation  # cap a forced answer only where the user set max_tokens

    def __call__(self, record: Record, draw: int = 0) -> Request:
        """The draw-th request (repeats draw*n .. draw*n + n - 1)."""
        examples = [r for r in self.candidates if r.question != record.question][: self.count]
        messages = prompts.build_messages(record.question, examples, self.style, self.system_prompt)
        prompt = messages[-1]["content"]
        first = draw * self.choices
        params = {"seed": wrapped(self.seed + first)} if isinstance(self.seed, int) and draw else {}
        return Request(record.id, prompt, record.question, messages, first, params)

    def forced(self, request: Request, reply: str, repeat: int) -> Request:
        """The follow-up asking for only the answer line: a fixed turn (chat) or cue (completions) after the reply."""
        params: dict[str, Any] = {"n": 1}
        if self.short:  # a reasoning model may refuse max_tokens, so it is never added unasked
            params["max_tokens"] = FORCE_MAX_TOKENS
        if self.completions:
            text = "\n\n".join(m["content"] for m in request.messages) + reply + prompts.FORCE_CUE
            messages = [{"role": "user", "content": text}]  # sent as the prompt itself
        else:
            turns = [{"role": "assistant", "content": reply}, {"role": "user", "content": prompts.FORCE_PROMPT}]
            messages = [*request.messages, *turns]
        return Request(request.id, request.prompt, request.question, messages, repeat, params, forced=True)


@dataclass
class Plan:
    config: TaskConfig
    dataset: Dataset  # the selected questions, and how they were drawn (`subset`)
    build: RequestBuilder
    generation: dict[str, Any]
    fingerprint: dict[str, Any]

    @property
    def samples(self) -> int:
        return self.dataset.count * self.config.repeats * self.build.choices


def prepare(config: TaskConfig) -> Plan:
    check_model(config)
    generation = effective_generation(config)  # repeats x n was checked against REPEATS_MAX with the config
    check_costs(config, generation)
    dataset = load_dataset(config.split, config.dataset_path, config.dataset_hub, config.dataset_id, config.dataset_dir)
    selected = dataset.take(config.limit, config.limit_mode, config.seed)
    build = RequestBuilder(config, few_shot_pool(config), generation)
    return Plan(config, selected, build, generation, make_fingerprint(config, dataset, build, generation))


def few_shot_pool(config: TaskConfig) -> list[Record]:
    if config.few_shot_num == 0:
        return []
    if config.dataset_path and not Path(config.dataset_path).expanduser().is_dir():
        raise ConfigError(
            "few-shot examples come from a validation split: give --dataset-path a directory holding "
            "test.* and validation.*, or use --few-shot-num 0"
        )
    where = (config.dataset_path, config.dataset_hub, config.dataset_id, config.dataset_dir)
    pool = list(load_dataset("validation", *where))
    if len(pool) <= config.few_shot_num:
        raise ConfigError(f"few_shot_num {config.few_shot_num} needs more than {len(pool)} validation rows")
    return pool


def make_fingerprint(
    config: TaskConfig, dataset: Dataset, build: RequestBuilder, generation: dict[str, Any]
) -> dict[str, Any]:
    """What must match for saved predictions to be reused (the data, prompts, model, generation)."""
    fields = ("model", "model_id", "few_shot_num", "few_shot_seed", "few_shot_random", "system_prompt")
    return {
        "dataset": dataset.source,
        **{name: getattr(config, name) for name in (*fields, "api_mode", "repeats", "force_answer")},
        "template": build.style.describe(),
        "few_shot_examples": digest(build.candidates)[0],  # the validation rows drawn: a seed on new data differs
        "generation_config": redacted_generation(generation),
        "subset": {"mode": config.limit_mode, "seed": config.seed},
        **({"weights": found} if (found := weights(config)) else {}),
    }


def provenance() -> dict[str, str]:
    return {
        "coinflip_version": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "executable": Path(sys.executable).name,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
    }
