"""Tokens and cost: what a run used, and what it costs at the prices given.

Prices are per million tokens, input (prompt) and output (completion; a reasoning model's
reasoning tokens are part of its completion tokens, as OpenAI bills them), from the command line
or a pricing file keyed by model. An answer a Batch API gave pays `batch_discount` of the price
(OpenAI: half); one sent online pays it all, also in a run that used both.
The cost covers every request the run's saved predictions hold, forced answers included: a
resumed or rescored run shows what the whole run costs, not only its last part.
`Budget` stops sending before a run would pass --max-cost.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import ConfigError
from ..records import by_batch, token_count
from .schema import Cost, Report, Tokens

if TYPE_CHECKING:
    from ..config import TaskConfig
    from ..models.base import Reply, Request
    from .scorer import Usage

T = TypeVar("T")
MILLION = 1_000_000
GUESS_OUTPUT_TOKENS = 512  # a request's output before any reply says better (unless max_tokens is set)


def apply_pricing_file(config: TaskConfig) -> None:
    """Take the model's prices from the pricing file where the command line gave none."""
    if config.model is None:  # a resume: checked again once the saved model is known
        return
    table = _read_table(Path(str(config.pricing_file)).expanduser())
    entry = table.get(config.model, table.get(config.name))
    if not isinstance(entry, dict):
        known = ", ".join(sorted(map(str, table))[:10]) or "none"
        raise ConfigError(f"pricing file {config.pricing_file} has no prices for {config.model!r} (it has: {known})")
    for key, field in (("input", "price_input"), ("output", "price_output"), ("batch_discount", "batch_discount")):
        value = entry.get(key)
        if value is None or field in config.given:
            continue
        if not _number(value):
            raise ConfigError(f"pricing file {config.pricing_file}: {config.model} {key} must be a number >= 0")
        setattr(config, field, float(value))
    if config.price_input is None or config.price_output is None:
        raise ConfigError(f"pricing file {config.pricing_file}: {config.model} needs both input and output prices")


def _read_table(path: Path) -> dict[str, Any]:
    import yaml

    from .._files import UnreadableFile, read_regular
    from ..rundir import parse_yaml

    try:  # a plain file of at most 16 MB, without YAML aliases
        data = parse_yaml(read_regular(path, 16 << 20).decode("utf-8"))
    except UnreadableFile as exc:
        raise ConfigError(f"pricing file {exc}") from None
    except OSError as exc:
        raise ConfigError(f"pricing file {path}: cannot read ({exc.strerror})") from None
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError):
        raise ConfigError(f"pricing file {path}: not valid YAML or JSON") from None
    if not isinstance(data, dict):
        raise ConfigError(f"pricing file {path}: not a mapping of model names to prices")
    return data


def prices_of(config: dict[str, Any]) -> dict[str, float] | None:
    """The run's prices from its saved settings (None: none given)."""
    given = {k: config.get(f"price_{k}") for k in ("input", "output")}
    if any(not _number(v) for v in given.values()):
        return None
    discount = config.get("batch_discount")
    return {**{k: _count(v) for k, v in given.items()}, "batch_discount": _count(discount) if discount else 0.5}


def _number(value: Any) -> bool:
    """A finite, non-negative number that float() takes (not 400 digits a hand edit left)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= sys.float_info.max


def _count(value: Any) -> float:
    """A saved number as a float; anything else (a hand-edited file) as 0."""
    return float(value) if _number(value) else 0.0


def price(prompt: float, completion: float, prices: dict[str, float], batch: bool) -> float:
    full = (prompt * prices["input"] + completion * prices["output"]) / MILLION
    return full * prices["batch_discount"] if batch else full


def tokens(*usages: Usage) -> Tokens:
    """Token totals over first requests and forced ones, and the mean per request that reported usage."""
    requests = sum(len(u.completion) for u in usages)
    prompt = sum(u.prompt_tokens for u in usages)
    completion = int(sum(sum(u.completion) for u in usages))
    reasoning = int(sum(sum(u.reasoning) for u in usages))
    totals = {"prompt": prompt, "completion": completion, "reasoning": reasoning}
    mean = {k: round(v / requests, 2) if requests else None for k, v in totals.items()}
    return {
        "requests": requests,
        "prompt": prompt,
        "completion": completion,
        "reasoning": reasoning,
        "per_request": mean,
        "batch_prompt": sum(u.batch_tokens[0] for u in usages),
        "batch_completion": sum(u.batch_tokens[1] for u in usages),
    }


def cost_report(config: dict[str, Any], found: Tokens) -> Cost | None:
    """The cost section of a report, from the saved settings and the token totals (None: no prices).
    Each answer is priced by how it came: a Batch API's at the discount, the rest (sent online, or
    left by a batch and sent with --batch-rest-online) at the full price."""
    prices = prices_of(config)
    if prices is None:
        return None
    batch = (_count(found.get("batch_prompt")), _count(found.get("batch_completion")))
    online = (found["prompt"] - batch[0], found["completion"] - batch[1])
    return {
        "input": prices["input"],
        "output": prices["output"],
        "batch_discount": prices["batch_discount"],
        "batch": any(batch),
        "total": price(*online, prices, False) + price(*batch, prices, True),
        "full_price": price(found["prompt"], found["completion"], prices, False),
    }


def cost_line(report: Report) -> str | None:
    """One line for the terminal and the pages: tokens, and the cost where prices were given."""
    t = report.get("tokens")
    if not isinstance(t, dict) or not (t.get("requests") or report.get("cost")):  # a baseline uses none
        return None
    line = (
        f"tokens: {t['prompt']:,} prompt, {t['completion']:,} completion ({t['reasoning']:,} reasoning) "
        f"over {t['requests']:,} requests"
    )
    cost = report.get("cost")
    if isinstance(cost, dict):
        how = f" (batch answers at {cost['batch_discount']:g} of the price; all at full price {cost['full_price']:.4f})"
        how = how if cost.get("batch") else ""
        line += f"; cost {cost['total']:.4f} at {cost['input']:g}/{cost['output']:g} per million in/out{how}"
    return line


def estimate(request: Request, generation: dict[str, Any]) -> tuple[float, float]:
    """(prompt, completion) tokens a request may use before any reply says: 4 characters a token,
    and max_tokens (or a guess) out."""
    prompt = sum(len(str(m.get("content", ""))) for m in request.messages) / 4
    out = generation.get("max_tokens") or generation.get("max_completion_tokens") or GUESS_OUTPUT_TOKENS
    return prompt, float(out)


class Budget:
    """Stops handing out requests before the run would pass `limit`: what was spent (saved
    predictions included), plus the requests in flight at the mean cost of those answered."""

    def __init__(self, limit: float, prices: dict[str, float], batch: bool, generation: dict[str, Any]) -> None:
        self.limit = limit
        self.prices = prices
        self.batch = batch
        self.generation = generation
        self.spent = 0.0  # by replies of this session
        self.saved = 0.0  # by the predictions already on disk
        self.answered = 0
        self.sent = 0
        self.stopped = False
        self.online = [0, 0]  # requests a batch left that went online at the full price: admitted, answered

    def add(self, usage: dict[str, int] | None, batch: bool | None = None) -> None:
        usage, batch = usage or {}, self.batch if batch is None else batch
        self.spent += price(usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0), self.prices, batch)

    def add_saved(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """What the saved answers cost, each priced by how it came, as the report prices it."""
        for row in rows:
            forced = row.get("forced")
            for answer in (row, forced if isinstance(forced, dict) else {}):
                usage = answer.get("usage")
                prompt, completion = token_count(usage, "prompt_tokens"), token_count(usage, "completion_tokens")
                self.saved += price(prompt or 0, completion or 0, self.prices, by_batch(answer))

    def per_request(self, request: Request) -> float:
        if self.answered:
            return self.spent / self.answered
        return price(*estimate(request, self.generation), self.prices, self.batch)

    def fits(self, request: Request, in_flight: int = 0) -> bool:
        return self.saved + self.spent + (in_flight + 1) * self.per_request(request) <= self.limit

    def gate(self, work: Iterable[tuple[T, Request]]) -> Iterator[tuple[T, Request]]:
        """`work`, up to where the next request could pass the limit."""
        for item in work:
            if self.stopped or not self.fits(item[1], self.sent - self.answered):
                self.stopped = True
                return
            self.sent += 1
            yield item

    def follow(
        self, follow_up: Callable[[T, Request, Reply], list[tuple[T, Request]]]
    ) -> Callable[[T, Request, Reply], list[tuple[T, Request]]]:
        """`follow_up`, its requests (forced answers) held to the limit as `gate` holds the first
        ones, and counted as sent: `watch` counts their replies, so `gate` must see them leave. A
        forced answer left unasked keeps its sample pending, and a resume asks it."""

        def kept(item: T, request: Request, reply: Reply) -> list[tuple[T, Request]]:
            return list(self.gate(follow_up(item, request, reply)))

        return kept

    def watch(self, on_replies: Callable[[list[tuple[T, Request, Reply]]], None]) -> Callable[..., None]:
        def counted(landed: list[tuple[T, Request, Reply]]) -> None:
            for _, _, reply in landed:
                self.add(reply.usage, reply.batch)
                self.answered += 1
                self.online[1] += self.batch and not reply.batch and reply.error is None
            on_replies(landed)

        return counted

    def admit(self, request: Request) -> bool:
        """Whether a request a batch left (priced by `gate` at the batch's price) may go online at
        the full price (--batch-rest-online): what was spent, and what went online and is in flight,
        leave room for it at its estimate."""
        room = self.saved + self.spent + (self.online[0] - self.online[1] + 1) * price(
            *estimate(request, self.generation), self.prices, False
        )
        self.stopped |= room > self.limit
        self.online[0] += room <= self.limit
        return room <= self.limit

    def note(self) -> str:
        return (
            f"stopped before passing --max-cost {self.limit:g}: the run has cost {self.saved + self.spent:.4f}; "
            "what finished is kept (raise --max-cost to go on)"
        )


def budget_for(config: TaskConfig, generation: dict[str, Any], predictions: Path, batch: bool) -> Budget:
    """The --max-cost budget of a run, with what its saved predictions already cost."""
    from ..rundir import read_predictions

    prices = prices_of(vars(config))
    assert prices is not None and config.max_cost is not None  # both checked with the config
    budget = Budget(config.max_cost, prices, batch, generation)
    budget.add_saved(read_predictions(predictions).values())
    return budget
