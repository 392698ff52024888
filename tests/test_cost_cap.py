"""--max-cost against real servers on 127.0.0.1: cheap replies finish the run or spend most of
the cap; with max_tokens a run never passes it; without, it passes it by at most what was in
flight and says by how much; batch mode keeps the same promise; every price is checked first."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from coinflip.testing.server import FakeOpenAIServer

from .answer_server import AnswerServer, Seen, answer, chat
from .conftest import only_run_dir, read_jsonl, run_cli, wait_for

MINI = ("--price-input", "0.15", "--price-output", "0.60")  # gpt-4o-mini's prices
FAST = ("--batch-poll-s", "0.05")


def _cost(work: Path) -> float:
    report = json.loads((only_run_dir(work) / "reports/m/coin_flip.json").read_text())
    return float(report["cost"]["total"])


def _answered(work: Path) -> int:
    return len(read_jsonl(only_run_dir(work) / "predictions/m/coin_flip.jsonl"))


@pytest.mark.parametrize(("limit", "cap"), [(200, 0.01), (40, 0.001)])
def test_cheap_replies_finish_the_run_or_spend_most_of_the_cap(tmp_path: Path, limit: int, cap: float) -> None:
    """The first wave's estimates (prompt + 512 tokens for each of 32 in flight) ended these runs
    after 30 samples at 0.0008 of 0.01: the answers' real costs were never used."""
    with FakeOpenAIServer("mixed") as srv:
        args = ("eval", "--model", "m", "--limit", str(limit), "--api-url", srv.url, *MINI, "--max-cost", f"{cap}")
        result = run_cli(*args, "--work-dir", str(tmp_path))
    cost = _cost(tmp_path)
    if limit == 200:  # 200 answers cost about half the cap
        assert result.returncode == 0 and _answered(tmp_path) == 200 and cost <= cap, result.stderr
    elif cost <= cap:
        assert result.returncode == 1 and cost >= 0.9 * cap, (cost, result.stderr)
        assert f"stopped before passing --max-cost {cap:g}: the run has cost {cost:.4f}" in result.stderr
    else:  # held at the answers' mean, the replies in flight may pass it a little, and the run says so
        assert result.returncode == 1 and cost <= 1.05 * cap, (cost, result.stderr)
        assert f"passed --max-cost {cap:g} by {cost - cap:.4g}" in result.stderr


@pytest.mark.parametrize("how", ["online", "online, max_tokens", "batch, max_tokens"])
def test_long_replies_do_not_pass_the_cap(tmp_path: Path, how: str) -> None:
    """4,000-token replies, a cap of 0.05 (about 20 of them): the first 32 in flight were each
    guessed at 512 tokens, and the run spent 0.077; a batch submitted everything."""
    args: tuple[str, ...] = ("--generation-config", "max_tokens=4096") if "max_tokens" in how else ()
    args += ("--batch", *FAST) if "batch" in how else ()
    with FakeOpenAIServer("mixed", reply_tokens=4000) as srv:
        base = ("eval", "--model", "m", "--limit", "40", "--api-url", srv.url, *MINI, "--max-cost", "0.05")
        result = run_cli(*base, *args, "--work-dir", str(tmp_path))
    cost = _cost(tmp_path)
    assert 0.04 <= cost <= 0.05 and "passed --max-cost" not in result.stderr, (cost, result.stderr)
    if "batch" in how:  # met in parts: a batch more once answers settle what the last cost, all 40 may fit
        assert result.returncode == 0 or "stopped before passing --max-cost 0.05" in result.stderr
    else:
        assert result.returncode == 1 and "stopped before passing --max-cost 0.05" in result.stderr


def test_batch_mode_with_a_cap_needs_max_tokens(tmp_path: Path) -> None:
    with FakeOpenAIServer("mixed", reply_tokens=4000) as srv:
        args = ("eval", "--model", "m", "--limit", "40", "--api-url", srv.url, *MINI, "--batch", *FAST)
        result = run_cli(*args, "--max-cost", "0.2", "--work-dir", str(tmp_path))
        asked = sum(srv.state.requests.values()) + srv.state.batches.created
    assert result.returncode == 2 and "needs max_tokens" in result.stderr and asked == 0, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not list(tmp_path.iterdir())


def _dearer_later(seen: Seen) -> bytes:
    """Three cheap answers (10 tokens), then dear ones (4,000 tokens), each cut at max_tokens."""
    tokens = min(10 if seen.index < 3 else 4000, seen.body.get("max_tokens") or 4000)
    return answer(chat("ANSWER: YES", usage={"prompt_tokens": 0, "completion_tokens": tokens, "total_tokens": tokens}))


@pytest.mark.parametrize("max_tokens", [None, 4096])
def test_replies_dearer_than_those_before_pass_the_cap_only_without_max_tokens(
    tmp_path: Path, max_tokens: int | None
) -> None:
    """At 1,000 per million output tokens a dear reply costs 4: a cap of 5. Without max_tokens the
    4 in flight at the cheap answers' mean pass it by at most their cost, and the run says by how
    much (it passed it silently); with max_tokens it never passes it."""
    generation = ("--generation-config", f"max_tokens={max_tokens}") if max_tokens else ()
    with AnswerServer(_dearer_later) as srv:
        args = ("eval", "--model", "m", "--limit", "30", "--api-url", srv.url, "--eval-batch-size", "4", *generation)
        prices = ("--price-input", "0", "--price-output", "1000", "--max-cost", "5")
        result = run_cli(*args, *prices, "--work-dir", str(tmp_path))
    cost = _cost(tmp_path)
    assert result.returncode == 1, result.stderr
    if max_tokens:
        assert cost <= 5 and "stopped before passing --max-cost 5" in result.stderr, (cost, result.stderr)
    else:
        assert 5 < cost <= 5 + 4 * 4.0, cost
        assert f"passed --max-cost 5 by {cost - 5:.4g}: the run has cost {cost:.4f}" in result.stderr


def test_a_server_billing_past_max_tokens_stops_a_capped_run_before_it_passes_the_cap(tmp_path: Path) -> None:
    """max_tokens=50, yet each answer reports 6,000 completion tokens (6 at 1,000 per million): the cap, which
    holds each request at its worst case, cannot bound what the next costs. The run went on, one request at a
    time, passed a cap of 20 by 4 and blamed the replies in flight, saying max_tokens would bound them."""

    def billed(seen: Seen) -> bytes:
        return answer(chat("ANSWER: YES", usage={"prompt_tokens": 0, "completion_tokens": 6000}))

    with AnswerServer(billed) as srv:
        args = ("eval", "--model", "m", "--limit", "10", "--api-url", srv.url, "--eval-batch-size", "1")
        prices = ("--price-input", "0", "--price-output", "1000", "--max-cost", "20")
        generation = ("--generation-config", "max_tokens=50")
        result = run_cli(*args, *prices, *generation, "--work-dir", str(tmp_path))
    assert result.returncode == 1 and _cost(tmp_path) <= 20, result.stderr
    assert "1 answer(s) reported more tokens than max_tokens allows" in result.stderr, result.stderr


def test_a_refusal_that_reports_usage_is_no_billing_past_max_tokens(tmp_path: Path) -> None:
    """Each question's first answer is a 200 naming a rate limit that reports the worst case's tokens, then the
    answer: the reply's usage holds both attempts, within the worst case of each, so the run goes on to the end."""
    asked: set[str] = set()
    usage = {"prompt_tokens": 0, "completion_tokens": 50}

    def respond(seen: Seen) -> bytes:
        question = json.dumps(seen.body.get("messages"))
        first, _ = question not in asked, asked.add(question)
        limited = {"error": {"message": "slow down", "code": 429}, "usage": usage}
        return answer(limited, 200, "Retry-After: 0") if first else answer(chat("ANSWER: YES", usage=usage))

    with AnswerServer(respond) as srv:
        args = ("eval", "--model", "m", "--limit", "5", "--api-url", srv.url, "--eval-batch-size", "1")
        prices = ("--price-input", "0", "--price-output", "1000", "--max-cost", "100")
        result = run_cli(*args, *prices, "--generation-config", "max_tokens=50", "--work-dir", str(tmp_path))
    assert result.returncode == 0 and _answered(tmp_path) == 5 and _cost(tmp_path) == 0.5, result.stderr


def _pricing(tmp_path: Path, entry: str) -> tuple[str, ...]:
    (tmp_path / "prices.yaml").write_text(f"m: {entry}\n")
    return ("--pricing-file", str(tmp_path / "prices.yaml"))


BAD_PRICES: list[tuple[Any, str]] = [
    (lambda p: _pricing(p, "{input: 1, output: 2, batch_discount: 7}"), "batch_discount must be in (0, 1], got 7"),
    (lambda p: _pricing(p, "{input: 1, output: 2, batch_discount: 0}"), "batch_discount must be in (0, 1], got 0"),
    (lambda p: _pricing(p, "[1, 2]"), "m must map to {input: X, output: Y}, got [1, 2]"),
    (lambda p: _pricing(p, "{input: " + "9" * 5000 + ", output: 1}"), "not valid YAML (Exceeds the limit"),
    (lambda p: ("--price-input", "1e308", "--price-output", "1"), "price_input must be a number from 0 to 1e9"),
    (lambda p: _pricing(p, "{input: 1, output: 2, batch_discont: 1.0}"), "unknown batch_discont; it takes input"),
    (lambda p: _pricing(p, "{input: 1, output: 2, cached_input: 0.5}"), "unknown cached_input; it takes input"),
]


@pytest.mark.parametrize(("prices", "said"), BAD_PRICES)
def test_every_price_is_checked_before_the_first_request(tmp_path: Path, prices: Any, said: str) -> None:
    """A batch_discount of 7 or 0 sent every request, then no rescore or resume could read the run;
    a list said "has no prices for 'm' (it has: m)"; 5,000 digits were a traceback; 1e308 wrote
    "total": Infinity into the report, which is not JSON."""
    with FakeOpenAIServer("mixed") as srv:
        args = ("eval", "--model", "m", "--limit", "4", "--api-url", srv.url, *prices(tmp_path))
        result = run_cli(*args, "--work-dir", str(tmp_path / "work"))
        asked = sum(srv.state.requests.values())
    assert result.returncode == 2 and said in result.stderr and asked == 0, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "work").exists()


@pytest.mark.parametrize("prices", [MINI, ("--price-input", "0", "--price-output", "0")])
def test_a_cap_of_0_sends_nothing_and_the_run_resumes(tmp_path: Path, prices: tuple[str, ...]) -> None:
    """At prices of 0 every request fitted a cap of 0, and all were sent."""
    with FakeOpenAIServer("mixed") as srv:
        args = ("eval", "--model", "m", "--limit", "4", "--api-url", srv.url, *prices, "--work-dir", str(tmp_path))
        capped = run_cli(*args, "--max-cost", "0")
        asked = sum(srv.state.requests.values())
        resumed = run_cli("eval", "--use-cache", str(only_run_dir(tmp_path)), "--max-cost", "1")
    assert capped.returncode == 1 and asked == 0, capped.stderr
    assert "stopped before passing --max-cost 0: the run has cost 0.0000" in capped.stderr
    assert "resume with: coinflip eval --use-cache" in capped.stderr and "Traceback" not in capped.stderr
    assert resumed.returncode == 0 and _answered(tmp_path) == 4, resumed.stderr


def test_the_resume_hint_and_the_401_say_how_to_give_the_key_again(tmp_path: Path) -> None:
    """The printed resume command failed with a bare '401 Incorrect API key' where the key came
    from the environment: a run never saves it. Neither line shows the key."""
    key = "sk-resume-secret-4321"
    with FakeOpenAIServer("mixed", api_key=key) as srv:
        args = ("eval", "--model", "m", "--limit", "40", "--api-url", srv.url, *MINI, "--max-cost", "0.001")
        stopped = run_cli(*args, "--work-dir", str(tmp_path), env={"OPENAI_API_KEY": key})
        resumed = run_cli("eval", "--use-cache", str(only_run_dir(tmp_path)), "--max-cost", "1")
    hint = next(line for line in stopped.stderr.splitlines() if line.startswith("resume with: "))
    assert stopped.returncode == 1 and "give the API key with --api-key" in hint and key not in stopped.stderr
    assert resumed.returncode == 2 and "401" in resumed.stderr, resumed.stderr
    assert "no API key was sent: give the API key with --api-key, $COINFLIP_API_KEY" in resumed.stderr


def _vllm_tokens(seen: Seen) -> int:
    """4,000-token replies, cut as vLLM cuts them: at max_completion_tokens, else max_tokens, as the body says."""
    return int(min(4000, seen.body.get("max_completion_tokens") or seen.body.get("max_tokens") or 4000))


def _cut_as_vllm(seen: Seen) -> bytes:
    tokens = _vllm_tokens(seen)
    return answer(chat("ANSWER: YES", usage={"prompt_tokens": 0, "completion_tokens": tokens, "total_tokens": tokens}))


@pytest.mark.parametrize(
    "generation",
    ['{"max_tokens": 16, "extra_body": {"max_tokens": 4000}}', '{"max_tokens": 16, "max_completion_tokens": 4000}'],
)
def test_the_worst_case_is_the_bound_the_server_is_sent(tmp_path: Path, generation: str) -> None:
    """Each request was held at 16 tokens out while its body let the server write 4,000 (extra_body
    goes last into the body; vLLM takes max_completion_tokens first): a cap of 5 was passed by 15."""
    with AnswerServer(_cut_as_vllm) as srv:
        args = ("eval", "--model", "m", "--limit", "30", "--api-url", srv.url, "--eval-batch-size", "4")
        prices = ("--price-input", "0", "--price-output", "1000", "--max-cost", "5")
        result = run_cli(*args, "--generation-config", generation, *prices, "--work-dir", str(tmp_path))
        spent = sum(_vllm_tokens(seen) for seen in srv.seen) * 1000 / 1e6  # as the server's usage says
    assert result.returncode == 1 and "stopped before passing --max-cost 5" in result.stderr, result.stderr
    assert spent <= 5 and _cost(tmp_path) <= 5, (spent, result.stderr)


def test_a_resume_keeps_the_cost_of_choices_answered_before(tmp_path: Path) -> None:
    """n=2 from a server that sent one choice: the resume asked both again and wrote both rows anew,
    so the first session's reply, paid for, left the report and the cap (it said 4 of 8 spent)."""
    choices = [1]

    def respond(seen: Seen) -> bytes:
        body = chat("ANSWER: YES", usage={"prompt_tokens": 0, "completion_tokens": 1000, "total_tokens": 1000})
        body["choices"] = [{**body["choices"][0], "index": i} for i in range(choices[0])]
        return answer(body)

    with AnswerServer(respond) as srv:
        args = ("eval", "--model", "m", "--limit", "4", "--api-url", srv.url, "--generation-config", "n=2")
        prices = ("--price-input", "0", "--price-output", "1000")
        first = run_cli(*args, *prices, "--retries", "0", "--work-dir", str(tmp_path))
        choices[0] = 2
        resumed = run_cli("eval", "--use-cache", str(only_run_dir(tmp_path)), "--max-cost", "100")
        spent = len(srv.seen) * 1.0  # each reply's usage: 1,000 tokens out at 1,000 per million
    assert first.returncode == 1 and resumed.returncode == 0, resumed.stderr
    assert spent == 8 and _cost(tmp_path) == spent and _answered(tmp_path) == 8


def test_failed_attempts_that_report_usage_count_and_are_held_to_the_cap(tmp_path: Path) -> None:
    """Each question's first answer is a 200 with no choices that reports 4,000 tokens (4 at these
    prices), retried: the run counted only the last attempt, reported 8 and spent 16 of a cap of 10.
    A resume asks the failed samples again: what their rows reported stays in the run's cost."""
    asked: set[str] = set()
    usage = {"prompt_tokens": 0, "completion_tokens": 4000, "total_tokens": 4000}

    def respond(seen: Seen) -> bytes:
        question = json.dumps(seen.body.get("messages"))
        first, _ = question not in asked, asked.add(question)
        return answer({"choices": [], "usage": usage} if first else chat("ANSWER: YES", usage=usage))

    with AnswerServer(respond) as srv:
        args = ("eval", "--model", "m", "--limit", "10", "--api-url", srv.url, "--eval-batch-size", "2")
        prices = ("--price-input", "0", "--price-output", "1000", "--max-cost", "10")
        result = run_cli(*args, "--generation-config", "max_tokens=4000", *prices, "--work-dir", str(tmp_path))
        spent = len(srv.seen) * 4.0  # as each answer's usage says, retries' included
        capped = _cost(tmp_path)
        resumed = run_cli("eval", "--use-cache", str(only_run_dir(tmp_path)), "--max-cost", "100")
        spent_in_all = len(srv.seen) * 4.0
    assert result.returncode == 1 and "stopped before passing --max-cost 10" in result.stderr, result.stderr
    assert spent <= 10 and capped == spent, (spent, capped)
    assert resumed.returncode == 0 and _cost(tmp_path) == spent_in_all, (spent_in_all, _cost(tmp_path))


@pytest.mark.parametrize(
    ("usage", "said"),
    [
        (None, "1 answer(s) came without token usage, so --max-cost 5 cannot count"),
        ({"completion_tokens": 4000}, "1 answer(s) came without token usage, so --max-cost 5 cannot count"),
        ({"prompt_tokens": 0, "total_tokens": 4000}, "stopped before passing --max-cost 5"),
    ],
)
def test_answers_without_usage_stop_a_capped_run(tmp_path: Path, usage: dict[str, int] | None, said: str) -> None:
    """A server that reports no usage (a stream where stream_options is not known) cost nothing by the
    cap's count: a cap of 5 let all 50 requests go, each of which may cost 4, and the run said nothing.
    Completion tokens left out but for the total counted as none."""
    reply = answer(chat("ANSWER: YES", **({"usage": usage} if usage else {})))
    with AnswerServer(lambda seen: reply) as srv:
        args = ("eval", "--model", "m", "--limit", "50", "--api-url", srv.url, "--generation-config", "max_tokens=4000")
        prices = ("--price-input", "0", "--price-output", "1000", "--max-cost", "5")
        result = run_cli(*args, *prices, "--work-dir", str(tmp_path))
        asked = len(srv.seen)
    assert result.returncode == 1 and asked * 4 <= 5 and said in result.stderr, (asked, result.stderr)


def test_a_narrower_limit_on_resume_still_costs_every_saved_answer(tmp_path: Path) -> None:
    """10 answered, then resumed with --limit 5: the report scores 5, and its cost covered only those 5
    (half what was spent), though the doc says the cost covers every saved prediction."""
    with FakeOpenAIServer("mixed") as srv:
        args = ("eval", "--model", "m", "--limit", "10", "--api-url", srv.url, "--work-dir", str(tmp_path))
        first = run_cli(*args, "--price-input", "1", "--price-output", "1")
    narrower = run_cli("eval", "--use-cache", str(only_run_dir(tmp_path)), "--limit", "5")
    rows = read_jsonl(only_run_dir(tmp_path) / "predictions/m/coin_flip.jsonl")
    paid = sum(r["usage"]["prompt_tokens"] + r["usage"]["completion_tokens"] for r in rows) / 1e6
    report = json.loads((only_run_dir(tmp_path) / "reports/m/coin_flip.json").read_text())
    assert first.returncode == 0 and narrower.returncode == 0, narrower.stderr
    assert len(rows) == 10 and report["counts"]["samples"] == 5 and report["cost"]["total"] == pytest.approx(paid)


def test_a_resume_under_a_cap_the_run_had_already_passed_says_so(tmp_path: Path) -> None:
    """Resumed with --max-cost below what the run had spent, it said 'stopped before passing --max-cost 0.0001:
    the run has cost 0.0005', a cost above the cap it claimed not to pass: the cap was passed before this session."""
    with FakeOpenAIServer("mixed") as srv:
        args = ("eval", "--model", "m", "--limit", "4", "--api-url", srv.url, "--work-dir", str(tmp_path))
        first = run_cli(*args, "--price-input", "1", "--price-output", "1")
        resumed = run_cli("eval", "--use-cache", str(only_run_dir(tmp_path)), "--limit", "8", "--max-cost", "0.0001")
        asked = sum(srv.state.requests.values())
    cost = _cost(tmp_path)
    assert first.returncode == 0 and resumed.returncode == 1 and asked == 4 and cost > 0.0001, resumed.stderr
    said = [line for line in resumed.stderr.splitlines() if "--max-cost" in line and "resume with" not in line]
    assert said == [f"note: --max-cost 0.0001 was passed before this session: the run had cost {cost:.4f}; "
                    "what finished is kept (raise --max-cost to go on)"], resumed.stderr  # fmt: skip


def test_a_prompt_longer_than_held_is_counted_not_taken_for_billing_past_max_tokens(tmp_path: Path) -> None:
    """A provider that adds its own system prompt reports more prompt tokens than the request's bytes: a capped
    run counts them and goes on (its completions keep within max_tokens); it is no server billing past them."""

    def provider(seen: Seen) -> bytes:
        return answer(chat("ANSWER: YES", usage={"prompt_tokens": 5000, "completion_tokens": 50}))

    with AnswerServer(provider) as srv:
        args = ("eval", "--model", "m", "--limit", "5", "--api-url", srv.url, "--eval-batch-size", "1")
        prices = ("--price-input", "100", "--price-output", "1000", "--max-cost", "100")
        result = run_cli(*args, *prices, "--generation-config", "max_tokens=50", "--work-dir", str(tmp_path))
    assert result.returncode == 0 and _answered(tmp_path) == 5 and _cost(tmp_path) == 2.75, result.stderr


def test_billed_refusals_count_against_the_cap_before_the_next_attempt(tmp_path: Path) -> None:
    """Each question refused 4 times by a 200 naming a rate limit that reports 4,000 tokens (4 at these prices),
    then answered: refusals were waited out without counting until the answer, and a cap of 10 was passed by 14.
    Each billed refusal counts before the next attempt, which goes only where its worst case still fits."""
    refused: dict[str, int] = {}
    usage = {"prompt_tokens": 0, "completion_tokens": 4000}

    def respond(seen: Seen) -> bytes:
        question = json.dumps(seen.body.get("messages"))
        refused[question] = refused.get(question, 0) + 1
        limited = {"error": {"message": "rate limit reached", "code": 429}, "usage": usage}
        if refused[question] <= 4:
            return answer(limited, 200, "retry-after-ms: 1")
        return answer(chat("ANSWER: YES", usage=usage))

    with AnswerServer(respond) as srv:
        args = ("eval", "--model", "m", "--limit", "3", "--api-url", srv.url, "--eval-batch-size", "1")
        prices = ("--price-input", "0", "--price-output", "1000", "--max-cost", "10")
        result = run_cli(*args, *prices, "--generation-config", "max_tokens=4000", "--work-dir", str(tmp_path))
        spent = len(srv.seen) * 4.0
    assert result.returncode == 1 and "stopped before passing --max-cost 10" in result.stderr, result.stderr
    assert spent <= 10 and _cost(tmp_path) == spent, (spent, result.stderr)


def test_a_providers_own_prompt_is_learnt_not_let_pass_the_cap(tmp_path: Path) -> None:
    """Each answer reports 5,000 prompt tokens (a provider's own system prompt; 5 at these prices) for a request
    held at its bytes (0.6): 8 went together and a cap of 12 with max_tokens was passed by 33. The first answer goes
    alone and tells what a prompt costs here; the holds count it from then on."""

    def provider(seen: Seen) -> bytes:
        return answer(chat("ANSWER: YES", usage={"prompt_tokens": 5000, "completion_tokens": 10}))

    with AnswerServer(provider) as srv:
        args = ("eval", "--model", "m", "--limit", "20", "--api-url", srv.url, "--eval-batch-size", "8")
        prices = ("--price-input", "1000", "--price-output", "0", "--max-cost", "12")
        result = run_cli(*args, *prices, "--generation-config", "max_tokens=10", "--work-dir", str(tmp_path))
    assert result.returncode == 1 and "stopped before passing --max-cost 12" in result.stderr, result.stderr
    assert _cost(tmp_path) == 10 and _answered(tmp_path) == 2, result.stderr


def test_a_cap_passed_by_prompts_longer_than_held_says_so_not_blames_max_tokens(tmp_path: Path) -> None:
    """The first answers report 10 prompt tokens, the rest 5,000 (5 at these prices): the wave in flight passes a
    cap of 5 that max_tokens cannot bound, and the note said "max_tokens bounds each one"."""
    told = [0]

    def growing(seen: Seen) -> bytes:
        told[0] += 1
        usage = {"prompt_tokens": 10 if told[0] <= 2 else 5000, "completion_tokens": 10}
        return answer(chat("ANSWER: YES", usage=usage))

    with AnswerServer(growing) as srv:
        args = ("eval", "--model", "m", "--limit", "20", "--api-url", srv.url, "--eval-batch-size", "8")
        prices = ("--price-input", "1000", "--price-output", "0", "--max-cost", "5")
        result = run_cli(*args, *prices, "--generation-config", "max_tokens=10", "--work-dir", str(tmp_path))
    said = "answers reported more prompt tokens than their requests held, which max_tokens does not bound"
    assert result.returncode == 1 and "passed --max-cost 5" in result.stderr and said in result.stderr, result.stderr


def test_a_plain_rate_limit_at_the_cap_waits_and_is_answered_never_a_failed_row(tmp_path: Path) -> None:
    """A 429 that reports no usage bills nothing: the request waits it out, as it would uncapped. After an answer
    with a provider's long prompt took the run near its cap, such a 429 ended its sample as a failed row, 'not
    retried: --max-cost leaves no room', a rate limit losing a sample."""

    def rows() -> int:
        found = list(tmp_path.glob("*/predictions/m/coin_flip.jsonl"))
        return len(found[0].read_text().splitlines()) if found else 0

    def respond(seen: Seen) -> bytes:
        if seen.index == 1:  # beside the third: the answer of a long prompt the cap had not held
            return answer(chat("ANSWER: YES", usage={"prompt_tokens": 2000, "completion_tokens": 50}))
        if seen.index == 2:  # once that answer is written (so counted), a plain rate limit
            wait_for(lambda: rows() >= 2, "the second answer's row")
            return answer({"error": {"message": "slow down"}}, 429, "Retry-After: 0")
        return answer(chat("ANSWER: YES", usage={"prompt_tokens": 100, "completion_tokens": 50}))

    with AnswerServer(respond) as srv:
        args = ("eval", "--model", "m", "--limit", "3", "--api-url", srv.url, "--eval-batch-size", "2")
        prices = ("--price-input", "100", "--price-output", "1000", "--max-cost", "0.3")
        result = run_cli(*args, *prices, "--generation-config", "max_tokens=50", "--work-dir", str(tmp_path))
    saved = read_jsonl(only_run_dir(tmp_path) / "predictions/m/coin_flip.jsonl")
    assert len(saved) == 3 and all(row["error"] is None for row in saved), (result.stderr, saved)


@pytest.mark.parametrize(
    ("value", "shown"), [(0.00001, "0.00001"), (8.5e-05, "0.000085"), (3.0, "3"), (0.1 + 0.2, "0.3"), (0.0, "0")]
)
def test_a_cap_is_shown_as_a_person_writes_it(value: float, shown: str) -> None:
    """What a probe's earlier runs left of its --max-cost read '--max-cost 8.5e-05' in its run's stop line."""
    from coinflip.scoring.cost import money

    assert money(value) == shown


def test_prices_in_the_cost_line_are_shown_as_written() -> None:
    """The cost line's prices per million took `:g` as the caps did: 0.00002 read 2e-05, 2,500,000 read 2.5e+06."""
    from coinflip.scoring.cost import cost_line

    tokens = {"prompt": 10, "completion": 5, "reasoning": 0, "requests": 1}
    cost = {
        "input": 0.00002,
        "output": 2_500_000.0,
        "batch_discount": 0.5,
        "batch": False,
        "total": 12.5,
        "full_price": 12.5,
    }
    assert "at 0.00002/2500000 per million in/out" in (cost_line({"tokens": tokens, "cost": cost}) or "")  # type: ignore[typeddict-item]


def test_what_failed_attempts_were_billed_stays_in_the_cost_of_a_run_that_patience_ends(tmp_path: Path) -> None:
    """A 200 with no choices that reports usage, retried until --patience ends the run: what those attempts were
    billed was in no row, so the run's cost, and a capped resume's budget, counted none of it. Now the request's
    error row holds it (one request in flight: each attempt the server saw was read), and its answer on resume."""
    usage = {"prompt_tokens": 0, "completion_tokens": 1000, "total_tokens": 1000}
    broken = [True]

    def respond(seen: Seen) -> bytes:
        return answer({"choices": [], "usage": usage} if broken[0] else chat("ANSWER: YES", usage=usage))

    with AnswerServer(respond) as srv:
        args = ("--price-input", "0", "--price-output", "1000", "--work-dir", str(tmp_path))
        first = run_cli("eval", "--model", "m", "--limit", "4", "--api-url", srv.url, "--eval-batch-size", "1",
                        "--retries", "1000", "--patience", "1", "--ignore-errors", *args)  # fmt: skip
        billed = len(srv.seen)
        rows = read_jsonl(only_run_dir(tmp_path) / "predictions" / "m" / "coin_flip.jsonl")
        rescored = run_cli("rescore", str(only_run_dir(tmp_path)))  # errors ignored, but no sample was done
        stopped_cost = _cost(tmp_path)
        listed = run_cli("answers", str(only_run_dir(tmp_path)), "--out", str(tmp_path / "answers.csv"))
        broken[0] = False
        resumed = run_cli("eval", "--use-cache", str(only_run_dir(tmp_path)), "--api-url", srv.url)
        every = len(srv.seen)
    assert first.returncode == 1 and "(patience)" in first.stderr, first.stderr
    assert billed > 1 and sum(row["usage"]["completion_tokens"] for row in rows) == billed * 1000
    assert all(row["error"].startswith("the run stopped before an answer") and row["stopped"] for row in rows)
    assert resumed.returncode == 0 and _answered(tmp_path) == 4 and _cost(tmp_path) == every * 1.0, resumed.stderr
    assert rescored.returncode == 1 and "4 sample(s) were never run" in rescored.stdout, rescored.stdout
    assert stopped_cost == billed * 1.0  # what the stopped attempts were billed: in the cost, in no sample
    said = f"left out {len(rows)} requests a stop cut off between attempts (a resume asks them)"
    assert said in listed.stderr and "without a review" not in listed.stderr, listed.stderr


def test_a_resume_keeps_the_prices_its_pricing_file_gave(tmp_path: Path) -> None:
    """A resume read --pricing-file again, relative to where it was started: from another folder it failed (no such
    file), or read another file of that name and repriced every answer the run held."""
    first, other = tmp_path / "first", tmp_path / "other"
    for folder, price in ((first, 2), (other, 9999)):
        folder.mkdir()
        (folder / "prices.yaml").write_text(f"m: {{input: {price}, output: {price}}}\n")
    with FakeOpenAIServer("mixed") as srv:
        args = ("eval", "--model", "m", "--api-url", srv.url, "--work-dir", str(tmp_path / "w"))
        assert run_cli(*args, "--limit", "4", "--pricing-file", "prices.yaml", cwd=first).returncode == 0
        before = _cost(tmp_path / "w")
        resumed = run_cli("eval", "--use-cache", str(only_run_dir(tmp_path / "w")), "--limit", "8", cwd=other)
    rows = read_jsonl(only_run_dir(tmp_path / "w") / "predictions/m/coin_flip.jsonl")
    tokens = sum(row["usage"]["prompt_tokens"] + row["usage"]["completion_tokens"] for row in rows)
    assert resumed.returncode == 0 and len(rows) == 8, resumed.stderr
    assert 0 < before < _cost(tmp_path / "w") == pytest.approx(tokens * 2 / 1e6)


def test_a_forced_turn_stopped_between_billed_attempts_stays_to_ask(tmp_path: Path) -> None:
    """A --force-answer follow-up cut off between billed failed attempts was saved as a failed forced answer: the
    sample counted as done (invalid), a rescore said complete, and a resume then changed the forced score."""
    usage = {"prompt_tokens": 0, "completion_tokens": 1000, "total_tokens": 1000}
    forced_turns: list[int] = []

    def respond(seen: Seen) -> bytes:
        if len(seen.body["messages"]) == 1:  # the first turn: reasoning with no answer line
            return answer(chat("The coin is probably up, I think.", usage={"prompt_tokens": 0, "completion_tokens": 0}))
        forced_turns.append(1)
        return answer({"choices": [], "usage": usage})

    with AnswerServer(respond) as srv:
        args = ("eval", "--model", "m", "--limit", "1", "--api-url", srv.url, "--force-answer", "--retries", "1000")
        prices = ("--price-input", "0", "--price-output", "1000", "--work-dir", str(tmp_path))
        stopped = run_cli(*args, "--patience", "1", "--ignore-errors", *prices)
    (row,) = read_jsonl(only_run_dir(tmp_path) / "predictions/m/coin_flip.jsonl")[-1:]
    rescored = run_cli("rescore", str(only_run_dir(tmp_path)))
    assert stopped.returncode == 1 and row["forced"]["pending"] is True, stopped.stderr
    assert row["forced"]["usage"]["completion_tokens"] == 1000 * len(forced_turns) > 1000
    assert rescored.returncode == 1 and _cost(tmp_path) == len(forced_turns) * 1.0, rescored.stdout


def test_stopped_rows_are_owed_in_answers_and_never_corrected_or_scored(tmp_path: Path) -> None:
    """A run whose error rows were reviewed, then resumed and stopped between billed attempts: answers wrote the
    stopped rows as errors from the old reviews, and a rescore counted a hand-edited stopped row as corrected."""
    usage = {"prompt_tokens": 0, "completion_tokens": 1000, "total_tokens": 1000}
    with AnswerServer(lambda seen: answer({"choices": [], "usage": usage})) as srv:
        args = ("eval", "--model", "m", "--limit", "2", "--api-url", srv.url, "--eval-batch-size", "1")  # 3 alike:
        assert (
            run_cli(*args, "--retries", "0", "--ignore-errors", "--work-dir", str(tmp_path)).returncode == 0
        )  # broken
        run = only_run_dir(tmp_path)
        resumed = run_cli("eval", "--use-cache", str(run), "--retries", "1000", "--patience", "1")
    path = run / "predictions/m/coin_flip.jsonl"
    rows = read_jsonl(path)
    assert resumed.returncode == 1 and rows[-1]["stopped"] is True, resumed.stderr
    listed = run_cli("answers", str(run), "--out", str(tmp_path / "a.csv"))
    assert listed.returncode == 0 and "left out 1 requests a stop cut off" in listed.stderr, listed.stderr
    rows[-1]["target"] = "NO" if rows[-1]["target"] == "YES" else "YES"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert run_cli("rescore", str(run)).returncode == 1
    report = json.loads((run / "reports/m/coin_flip.json").read_text())
    assert "corrected_rows" not in report and report["counts"]["samples"] == 1


@pytest.mark.parametrize("given", ["--price-input", "--price-output"])
def test_one_price_alone_says_that_no_cost_is_reported(tmp_path: Path, given: str) -> None:
    """--price-output alone was saved and dropped without a word: the run reported no cost, as if none was asked."""
    result = run_cli("eval", "--model", "oracle", "--limit", "2", given, "0.6", "--work-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    other = {"--price-input": "--price-output", "--price-output": "--price-input"}[given]
    assert f"not used without {other}: a cost needs both prices, so none is reported" in result.stderr
    report = json.loads((only_run_dir(tmp_path) / "reports/oracle/coin_flip.json").read_text())
    assert report.get("cost") is None


def test_a_baseline_which_spends_nothing_is_never_stopped_by_a_cap(tmp_path: Path) -> None:
    """The oracle's prompts were held at their price, so a cap below one prompt stopped it at cost 0.0000."""
    args = ("--limit", "5", "--price-input", "1", "--price-output", "1", "--max-cost", "0.0000001")
    result = run_cli("eval", "--model", "oracle", *args, "--work-dir", str(tmp_path))
    assert result.returncode == 0 and "stopped" not in result.stderr, result.stderr
    assert len(read_jsonl(only_run_dir(tmp_path) / "predictions/oracle/coin_flip.jsonl")) == 5
