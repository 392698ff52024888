"""Tokens and cost of every saved answer, forced ones included, at the prices given per million tokens (a
Batch API's at `batch_discount` of them; reasoning tokens are completion tokens); `Budget`: --max-cost."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import check_prices
from ..errors import ConfigError, short
from ..records import by_batch, token_count
from .schema import Cost, Report, Tokens

if TYPE_CHECKING:
    from ..config import TaskConfig
    from ..models.base import Reply, Request
    from .scorer import Usage

MILLION = 1_000_000


def money(value: float) -> str:
    """An amount as a person writes it: what a probe's earlier runs leave of its --max-cost read 8.5e-05."""
    text = f"{value:.10f}".rstrip("0").rstrip(".")
    return text if text.strip("-0") or value == 0 else f"{value:g}"


def check_costs(config: TaskConfig, generation: dict[str, Any]) -> None:
    """Checked where the run is planned (settings read no file); a pricing file's prices become the run's."""
    if config.pricing_file:
        _apply_pricing_file(config, Path(str(config.pricing_file)).expanduser())
    if config.max_cost is None:
        return
    if config.price_input is None or config.price_output is None:
        raise ConfigError("max_cost needs prices: give --price-input and --price-output, or --pricing-file")
    if config.batch and worst_tokens(generation) is None:
        raise ConfigError(
            "--batch with --max-cost needs max_tokens (--generation-config max_tokens=N): a batch is paid for "
            "once submitted, and only max_tokens bounds what its replies may cost"
        )


def _apply_pricing_file(config: TaskConfig, path: Path) -> None:
    from .._files import read_settings

    try:  # a plain file of at most 16 MB, without YAML aliases
        table = read_settings(path)
    except FileNotFoundError as exc:
        raise ConfigError(f"pricing file {path}: cannot read ({exc.strerror})") from None
    except ConfigError as exc:
        raise ConfigError(f"pricing file {exc}") from None
    if not isinstance(table, dict):
        raise ConfigError(f"pricing file {path}: not a mapping of model names to prices")
    name = config.model if config.model in table else config.name
    if name not in table:
        known = ", ".join(sorted(map(str, table))[:10]) or "none"
        raise ConfigError(f"pricing file {path} has no prices for {config.model!r} (it has: {known})")
    entry = table[name]
    if not isinstance(entry, dict):
        raise ConfigError(f"pricing file {path}: {name} must map to {{input: X, output: Y}}, got {short(entry)}")
    fields = {"input": "price_input", "output": "price_output", "batch_discount": "batch_discount"}
    if unknown := sorted(map(str, set(entry) - set(fields))):  # a typo (batch_discont) would price at the default
        raise ConfigError(f"pricing file {path}: {name}: unknown {', '.join(unknown)}; it takes {', '.join(fields)}")
    for key, field in fields.items():
        if (value := entry.get(key)) is None or field in config.given:
            continue
        if not _number(value):
            raise ConfigError(f"pricing file {path}: {name} {key} must be a number >= 0, got {short(value)}")
        setattr(config, field, float(value))
    try:
        check_prices(config)
    except ConfigError as exc:
        raise ConfigError(f"pricing file {path}: {name}: {exc}") from None
    if config.price_input is None or config.price_output is None:
        raise ConfigError(f"pricing file {path}: {name} needs both input and output prices")


def prices_of(config: dict[str, Any]) -> dict[str, float] | None:
    """The prices of settings read through TaskConfig (check_prices); None where not both were given."""
    given, output, discount = config.get("price_input"), config.get("price_output"), config.get("batch_discount")
    if given is None or output is None:
        return None
    return {"input": float(given), "output": float(output), "batch_discount": float(discount or 0.5)}


def _number(value: Any) -> bool:
    """A non-negative number that float() takes (not 400 digits a hand edit left)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= sys.float_info.max


def price(prompt: float, completion: float, prices: dict[str, float], batch: bool) -> float:
    full = (prompt * prices["input"] + completion * prices["output"]) / MILLION
    return full * prices["batch_discount"] if batch else full


def tokens(*usages: Usage, spends: bool = True) -> Tokens:
    """The tokens the saved answers reported; `unreported` counts those that left counts out (none at all: not
    a baseline's, which `spends` nothing)."""
    prompt = sum(u.prompt_tokens for u in usages)
    completion = int(sum(sum(u.completion) for u in usages))
    reasoning = int(sum(sum(u.reasoning) for u in usages))
    answers = {"prompt": sum(u.prompt_answers for u in usages), "completion": sum(len(u.completion) for u in usages)}
    answers["reasoning"] = answers["completion"]  # reasoning tokens are completion tokens: 0 where none were said
    totals = {"prompt": prompt, "completion": completion, "reasoning": reasoning}
    return {
        "requests": sum(u.usage_answers for u in usages),
        "prompt": prompt,
        "completion": completion,
        "reasoning": reasoning,  # each average over the answers that gave its count (a retry's cost counts in them)
        "per_request": {k: round(v / answers[k], 2) if answers[k] else None for k, v in totals.items()},
        "batch_prompt": sum(u.batch_tokens[0] for u in usages),
        "batch_completion": sum(u.batch_tokens[1] for u in usages),
        **({"unreported": unreported} if (unreported := sum(u.unreported + spends * u.silent for u in usages)) else {}),
    }


def cost_report(config: dict[str, Any], found: Tokens) -> Cost | None:
    """Each answer priced by how it came: a Batch API's at the discount, the rest at the full price."""
    prices = prices_of(config)
    if prices is None:
        return None
    batch = (found.get("batch_prompt", 0), found.get("batch_completion", 0))
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
        line += f"; cost {cost['total']:.4f} at {money(cost['input'])}/{money(cost['output'])} per million in/out{how}"
    if unreported := t.get("unreported"):
        line += f"; the server did not report the usage of {unreported:,} answer(s) in full: these sums leave it out"
    return line


def worst_tokens(generation: Mapping[str, Any], params: Mapping[str, Any] | None = None) -> int | None:
    """The most output tokens a request may use, for each of its n choices, as its body says (extra_body goes
    last); the larger of max_tokens and max_completion_tokens, as servers differ on which wins. None: unbounded."""
    extra = generation.get("extra_body")
    sent = {**generation, **(params or {}), **(extra if isinstance(extra, dict) else {})}
    bounds = [sent[key] for key in ("max_tokens", "max_completion_tokens") if sent.get(key) is not None]
    n = sent.get("n") or 1
    if not bounds or any(type(b) is not int or b <= 0 for b in bounds) or type(n) is not int or n <= 0:
        return None
    return int(max(bounds)) * n


def prompt_bound(request: Request) -> int:
    """At most a prompt token per byte, and a few per message for the chat format."""
    return sum(len(str(m.get("content", "")).encode("utf-8", "replace")) + 8 for m in request.messages)


class Budget:
    """--max-cost: a request goes when the cost so far, the holds of those in flight and its own fit, held at its
    worst case where max_tokens bounds it, else at the answers' mean; else it waits, or with none in flight stops."""

    def __init__(self, limit: float, prices: dict[str, float], batch: bool, generation: dict[str, Any]) -> None:
        self.limit = limit
        self.prices = prices
        self.batch = batch
        self.generation = generation
        self.spent = 0.0  # by replies of this session
        self.saved = 0.0  # by the predictions already on disk
        self.answered = 0
        self.held: dict[int, float] = {}  # what each request in flight may cost, by id()
        self.prepaid: dict[int, float] = {}  # what its failed attempts reported they cost, counted in `spent`
        self.billed: set[int] = set()  # requests in a batch an earlier session sent: held, never refused
        self.billed_before = 0.0  # what their answers cost, counted in `spent`
        self.settled = asyncio.Event()
        self.stopped = False
        self.blind = 0  # answers whose usage left out their prompt or completion tokens: the cap cannot count them
        self.over = 0  # answers that reported more tokens than their max_tokens allows: they stop the run too
        self.extra = 0.0  # the most prompt tokens an answer reported past its bytes (a provider's own system prompt)
        self.heard = False  # a reply came back: until then one request goes online (what its prompt costs is unknown)

    def add_saved(self, rows: Iterable[Mapping[str, Any]]) -> None:
        for row in rows:
            forced = row.get("forced")
            for answer in (row, forced if isinstance(forced, dict) else {}):
                usage = answer.get("usage")
                prompt, completion = token_count(usage, "prompt_tokens"), token_count(usage, "completion_tokens")
                self.saved += price(prompt or 0, completion or 0, self.prices, by_batch(answer))

    def cost(self, request: Request, batch: bool) -> float | None:
        """What `request` may cost (None: nothing tells yet)."""
        most = worst_tokens(self.generation, request.params)
        if most is not None:
            return price(prompt_bound(request) + self.extra, most, self.prices, batch)
        return self.spent / self.answered if self.answered else None

    async def admit(self, request: Request, batch: bool | None = None) -> bool:
        """Wait until `request` fits beside what is held; False once it never will (the run stops)."""
        batch = self.batch if batch is None else batch
        while not self.stopped:
            cost = self.cost(request, batch)
            if cost is None and not self.held:  # the first request: it costs its prompt at least
                cost = price(prompt_bound(request), 0, self.prices, batch)
            so_far = self.saved + self.spent + sum(self.held.values())
            told = batch or self.heard or not self.held  # online, the first reply tells what a prompt costs here
            if told and cost is not None and so_far + cost <= self.limit and self.limit > 0:  # a cap of 0: nothing
                self.held[id(request)] = cost
                return True
            if not self.held:
                self.stopped = True
                break
            self.settled.clear()
            await self.settled.wait()
        return False

    def hold(self, request: Request) -> None:
        """A request already paid for (a batch an earlier session sent bills it anyway): held, never refused, so
        the room left is what the rest may take."""
        self.held[id(request)] = self.cost(request, self.batch) or 0.0
        self.billed.add(id(request))

    def settle(self, request: Request, reply: Reply | None) -> None:
        """From now its real cost counts, priced by how it came, not what it was held at (None: unanswered)."""
        held = self.held.pop(id(request), None)
        self.settled.set()
        billed = id(request) in self.billed  # not once it went online (--batch-rest-online settles it first)
        self.billed.discard(id(request))
        if reply is None:
            return
        usage, self.heard = reply.usage or {}, True
        if reply.error is None and not {"prompt_tokens", "completion_tokens"} <= set(usage):
            self.blind += 1
            self.stopped = True  # what the rest would cost is unknown: none of them goes
        prepaid = self.prepaid.pop(id(request), 0.0)  # the reply's usage counts its failed attempts too
        cost = self._priced(usage, reply.batch) - prepaid
        most = worst_tokens(self.generation, request.params) if held is not None else None  # held at its worst case
        if most is not None:  # a provider's own system prompt: the next requests are held with it
            self.extra = max(self.extra, usage.get("prompt_tokens", 0) / max(reply.attempts, 1) - prompt_bound(request))
        if most is not None and usage.get("completion_tokens", 0) > most * reply.attempts:
            self.over += 1  # billed past max_tokens on each attempt: the cap cannot bound what the rest cost
            self.stopped = True  # (a longer prompt than held, a provider's own system prompt, is not: it is counted)
        self.spent += cost
        self.billed_before += cost if billed else 0.0
        self.answered += reply.error is None

    def again(self, request: Request, usage: Mapping[str, int] | None) -> bool:
        """Before a retry: the failed attempt's reported cost counts, and the request's hold must still fit."""
        cost = self._priced(usage or {}, False)
        self.spent += cost
        self.prepaid[id(request)] = self.prepaid.get(id(request), 0.0) + cost
        if self.saved + self.spent + sum(self.held.values()) <= self.limit:
            return True
        self.stopped = True
        return False

    def _priced(self, usage: Mapping[str, int], batch: bool) -> float:
        """What a reply's (or a failed attempt's) usage says it cost."""
        return price(usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0), self.prices, batch)

    async def admit_online(self, request: Request, billed: Mapping[str, int] | None = None) -> bool:
        """--batch-rest-online: a request a batch left gives up its hold at the batch's price and waits anew, what its
        batch line was `billed` counted first (its online row holds that at the full price; its failed row, not)."""
        self.settle(request, None)
        if billed:
            self.again(request, billed)  # past the cap: the run stops
        return await self.admit(request, batch=False)

    def note(self) -> str | None:
        """One line where the run passed the limit, or stopped for it."""
        spent, cap = self.saved + self.spent, f"--max-cost {money(self.limit)}"
        if self.blind:
            return (
                f"stopped: {self.blind} answer(s) came without token usage, so {cap} cannot "
                f"count what the run spends (it has cost {spent:.4f} by the usage reported); run without --max-cost "
                "to go on"
            )
        if self.over:
            return (
                f"stopped: {self.over} answer(s) reported more tokens than max_tokens allows, so {cap} cannot "
                f"bound what the rest would cost (the run has cost {spent:.4f}); what finished "
                "is kept"
            )
        if spent > self.limit >= self.saved:  # passed by this session's replies
            why = (
                f"{self.billed_before:.4f} of it for answers a batch sent before this session held (billed whatever "
                "the run does)"
                if self.billed_before
                else "answers reported more prompt tokens than their requests held, which max_tokens does not bound"
                if self.extra > 0
                else "the replies in flight were dearer than the answers before them (max_tokens bounds each one)"
            )
            return f"passed {cap} by {spent - self.limit:.4g}: the run has cost {spent:.4f}; {why}"
        if not self.stopped:
            return None
        said = f"stopped before passing {cap}: the run has cost {spent:.4f}"
        if self.saved > self.limit:  # the answers saved before alone pass it
            now = f" ({spent:.4f} now)" if self.spent else ""
            said = f"{cap} was passed before this session: the run had cost {self.saved:.4f}{now}"
        return f"{said}; what finished is kept (raise --max-cost to go on)"


def budget_for(config: TaskConfig, generation: dict[str, Any], predictions: Path) -> Budget | None:
    """--max-cost's, a batch's at its price; None without one, or where nothing is spent here (a file of the
    requests, or of answers made and paid elsewhere, which the next session's cap counts as saved; a baseline's,
    which costs nothing: held to its prompts' price, it stopped at 0.0000)."""
    from ..jsonl import read_predictions
    from ..models import backend

    if config.max_cost is None or config.batch_results or backend(config) in ("elsewhere", "baseline"):
        return None
    prices = prices_of(vars(config))
    assert prices is not None  # checked when the run was planned (check_costs)
    budget = Budget(config.max_cost, prices, bool(config.batch), generation)
    budget.add_saved(read_predictions(predictions).values())
    return budget
