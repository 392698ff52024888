"""Endpoints at their limits, against real servers on 127.0.0.1 (issues 18, 20, 21): a rate
limit with and without Retry-After, an in-flight limit, an endpoint that stays limited past the
run's patience, a one-slot server started outside coinflip, and a server that dies mid-run.
Nothing is lost: every sample ends with a reply, or the run stops resumably."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coinflip.testing.limited import Limits
from coinflip.testing.server import FakeOpenAIServer

from .answer_server import QuietHandler, serving
from .conftest import only_run_dir, read_jsonl, run_cli, spawn_cli

BUDGET = 240.0  # seconds for a run that should take a few: generous, for a loaded 2-core machine


def run_eval(url: str, tmp: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], Path | None]:
    result = run_cli("eval", "--model", "m", "--api-url", url, "--work-dir", str(tmp), *extra, timeout=BUDGET)
    runs = [p for p in tmp.iterdir() if p.is_dir()] if tmp.exists() else []
    return result, runs[0] if len(runs) == 1 else None


def report_of(run: Path) -> dict[str, Any]:
    return json.loads(next(run.glob("reports/*/coin_flip.json")).read_text())


def predictions(run: Path) -> list[dict[str, Any]]:
    return read_jsonl(run / "predictions/m/coin_flip.jsonl")


@pytest.mark.parametrize(
    ("limits", "latency"),
    [
        (Limits(rate=20, burst=5), 0.2),  # 429 with Retry-After
        (Limits(rate=20, burst=5, retry_after=False), 0.2),  # a gateway that drops it
        (Limits(rate=20, burst=5), 0.0),  # instant replies: only a pace helps
        (Limits(max_in_flight=4), 0.1),  # 429 without Retry-After
    ],
    ids=["rate-retry-after", "rate-no-retry-after", "rate-instant", "in-flight"],
)
def test_a_limited_endpoint_loses_no_sample_and_is_refused_a_bounded_number_of_times(
    limits: Limits, latency: float, tmp_path: Path
) -> None:
    samples = 80
    with FakeOpenAIServer("correct", latency=latency, limits=limits) as srv:
        result, run = run_eval(srv.url, tmp_path, "--limit", str(samples), "--retries", "1")
        refused = srv.gate.refused
    assert result.returncode == 0, result.stderr
    assert run is not None
    rows = predictions(run)
    assert len(rows) == samples and all(r["error"] is None for r in rows)
    assert refused > 0  # the limit was met...
    assert refused <= 32 + 0.25 * samples  # ...the first wave of 32 aside, a 429 for at most a quarter of the samples
    requests = report_of(run)["requests"]
    assert requests["refused"] == refused and requests["sent"] == samples + refused
    assert f"{refused} refused (429/overloaded)" in result.stdout
    if limits.max_in_flight:
        assert requests["in_flight_lowest_limit"] <= limits.max_in_flight


def test_an_endpoint_limited_past_the_patience_stops_the_run_resumably(tmp_path: Path) -> None:
    """One request a quarter-hour: the run waits out its patience, says what the server said, and resumes."""
    with FakeOpenAIServer("correct", limits=Limits(rate=1 / 900, burst=1)) as srv:
        started = time.monotonic()
        result, run = run_eval(srv.url, tmp_path, "--limit", "20", "--patience", "2", "--retries", "0")
        elapsed = time.monotonic() - started
        refused = srv.gate.refused
    assert result.returncode == 1, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert "patience" in line and "rate limit reached for requests" in line and "coinflip eval --use-cache" in line
    assert elapsed < BUDGET and refused <= 64  # the Retry-After pause held every request back: no storm
    assert run is not None
    rows = predictions(run)
    assert 1 <= len(rows) < 20 and all(r["error"] is None for r in rows)  # kept what came; no sample failed
    with FakeOpenAIServer("correct") as good:
        again = run_cli("eval", "--use-cache", str(run), "--api-url", good.url, timeout=BUDGET)
    assert again.returncode == 0, again.stderr
    assert len(predictions(run)) == 20


class _Failing(QuietHandler):
    """A gateway whose model is down: 500 to every request, with a request id that differs each time."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.reply(404, {"error": {"message": "no such route"}})

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.reply(500, {"error": {"message": f"upstream unavailable (request {threading.get_ident():x})"}})


def test_an_endpoint_failing_past_the_patience_stops_the_run_whatever_the_retries(tmp_path: Path) -> None:
    """--patience bounds an endpoint that fails every request, not only one that refuses them: with many
    retries a failing endpoint was retried for hours (1000 retries of up to 8 s each) despite --patience 1."""
    with serving(_Failing) as url:
        result, run = run_eval(url, tmp_path, "--limit", "8", "--eval-batch-size", "4", "--retries", "1000",
                               "--patience", "1")  # fmt: skip
    assert result.returncode == 1, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert "no request has succeeded for 1 s (patience)" in line and "upstream unavailable" in line
    assert "coinflip eval --use-cache" in line


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def outside_server(*flags: str) -> Iterator[str]:
    """The test server in its own process, as a user starts a server coinflip knows nothing about."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "coinflip.testing.server", "--port", str(port), *flags],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        for _ in range(600):
            with contextlib.suppress(OSError):
                urllib.request.urlopen(f"{url}/models", timeout=5).read()
                break
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


def stats(url: str) -> dict[str, Any]:
    root = url.rsplit("/v1", 1)[0]
    with urllib.request.urlopen(f"{root}/stats", timeout=30) as answer:
        return dict(json.loads(answer.read()))


@pytest.mark.parametrize(
    "says",
    [("--slots", "1"), ("--slots", "1", "--hide-slots", "--owned-by", "me")],
    ids=["llama.cpp-props", "python-llama-models"],
)
def test_the_quick_start_against_a_one_slot_server_queues_nothing(tmp_path: Path, says: tuple[str, ...]) -> None:
    """The specification's quick start, default settings, against a server that answers one request
    at a time: llama.cpp's server with one slot, which says so at /props, or the Python llama.cpp
    server, which publishes no capacity but names itself at /v1/models (owned_by "me")."""
    with outside_server(*says, "--latency", "0.2") as url:
        started = time.monotonic()
        result = run_cli(
            "eval", "--model", "M", "--api-url", url, "--api-key", "EMPTY_TOKEN", "--datasets", "coin_flip",
            "--limit", "10", "--work-dir", str(tmp_path), timeout=BUDGET,
        )  # fmt: skip
        elapsed = time.monotonic() - started
        seen = stats(url)
    assert result.returncode == 0, result.stderr
    run = only_run_dir(tmp_path)
    rows = read_jsonl(run / "predictions/M/coin_flip.jsonl")
    assert len(rows) == 10 and all(r["error"] is None and r["attempts"] == 1 for r in rows)
    requests = report_of(run)["requests"]
    assert requests["timeouts"] == 0 and requests["retries"] == 0 and requests["server_slots"] == 1
    assert seen["peak_in_flight"] <= 2  # one served, at most one waiting
    assert len(seen["latencies"]) == 10 and sum(seen["latencies"]) <= 2 * elapsed
    assert all(r["latency_s"] < 2.0 for r in rows)  # the model's time, not a queue's
    assert run_cli("rescore", str(run), timeout=BUDGET).returncode == 0
    assert report_of(run)["requests"] == requests  # kept with the run, for a rescore


def test_a_one_slot_server_that_publishes_nothing_is_found_by_its_first_replies(tmp_path: Path) -> None:
    """Ollama or LM Studio with one slot, 15 questions at 300 ms a reply: the first 4 replies come
    one after another, so the rest go one at a time. Asserted on what happened (how many the server
    held at once, the limit coinflip kept), and on sums that hold at any speed: the latencies are the
    model's time, not a queue's, and the server was kept busy."""
    with FakeOpenAIServer("correct", latency=0.3, limits=Limits(slots=1, publish_slots=False)) as srv:
        result, run = run_eval(srv.url, tmp_path, "--limit", "15")
        gate = srv.gate
    assert result.returncode == 0, result.stderr
    assert run is not None
    requests = report_of(run)["requests"]
    assert requests["timeouts"] == 0 and requests["retries"] == 0 and requests["server_slots"] is None
    assert gate.peak == requests["in_flight_max"] == 4 and requests["in_flight_lowest_limit"] == 1
    assert any("queued at the server" in hint for hint in requests["hints"])
    assert "holding requests back for the server's queue" in result.stdout  # a queue, not throttling
    latencies = [r["latency_s"] for r in predictions(run)]
    busy = gate.window[1] - gate.window[0]
    assert len(latencies) == 15 and sum(latencies) <= 2 * busy
    assert busy <= 1.5 * 15 * 0.3  # the ideal: one reply after another


def test_a_server_that_dies_mid_run_stops_the_run_early_and_it_resumes(tmp_path: Path) -> None:
    """Connection refused after 100 good replies: not 300 samples retried one by one."""
    with FakeOpenAIServer("correct", latency=0.01) as srv:
        proc = spawn_cli(
            "eval", "--model", "m", "--api-url", srv.url, "--limit", "400", "--eval-batch-size", "4", "--retries", "2",
            "--work-dir", str(tmp_path),
        )  # fmt: skip
        deadline = time.monotonic() + BUDGET
        while sum(srv.state.answered.values()) < 100 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.005)
        srv.kill()
        died = time.monotonic()
        _, err = proc.communicate(timeout=BUDGET)
        stopped = time.monotonic() - died
    assert proc.returncode == 1, err
    line = err.strip().splitlines()[-1]
    assert "the last 4 requests all failed the same way" in line and "coinflip eval --use-cache" in line
    assert "Connect" in line or "refused" in line  # the server's last word: nothing listens any more
    assert stopped < 60.0  # the retries of the requests in flight, not 300 samples' worth
    run = only_run_dir(tmp_path)
    rows = predictions(run)
    good = [r for r in rows if r["error"] is None]
    assert len(good) >= 100 and len(rows) - len(good) <= 8
    with FakeOpenAIServer("correct") as again_srv:
        again = run_cli("eval", "--use-cache", str(run), "--api-url", again_srv.url, timeout=BUDGET)
    assert again.returncode == 0, again.stderr
    assert len({r["id"] for r in predictions(run) if r["error"] is None}) == 400


YES = {"choices": [{"index": 0, "message": {"content": "ANSWER: YES"}, "finish_reason": "stop"}]}
NOT_FOUND = {"error": {"message": "not found"}}


class _AnswersPropsOnceModelsIsAsked(QuietHandler):
    """/props answers (one slot) only once /v1/models has been asked too: asked one after the
    other, /props waits out the client's probe time and says nothing; asked together, it answers.
    Each request takes SERVICE_S to serve, so two the client sends at once overlap in `peak`."""

    SERVICE_S = 0.02  # the model's time, as the test server's --latency: not a timing assertion
    models_asked = threading.Event()
    in_flight, peak = 0, 0
    lock = threading.Lock()

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if self.path.endswith("/models"):
            self.models_asked.set()
            self.reply(404, NOT_FOUND)
        elif self.path == "/props" and self.models_asked.wait(BUDGET):
            self.reply(200, {"total_slots": 1})
        else:
            self.reply(404, NOT_FOUND)

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        cls = type(self)
        with cls.lock:
            cls.in_flight += 1
            cls.peak = max(cls.peak, cls.in_flight)
        time.sleep(self.SERVICE_S)
        with cls.lock:  # done before the reply goes, so the client's next request cannot be counted first
            cls.in_flight -= 1
        self.reply(200, YES)


def test_the_two_capacity_questions_are_asked_together(tmp_path: Path) -> None:
    with serving(_AnswersPropsOnceModelsIsAsked) as url:
        result, run = run_eval(url, tmp_path, "--limit", "6")
    assert result.returncode == 0, result.stderr
    assert run is not None and report_of(run)["requests"]["server_slots"] == 1
    assert _AnswersPropsOnceModelsIsAsked.peak == 1  # the published slot was kept to


class _NestsItsCapacityDeep(QuietHandler):
    """/props or /v1/models (the class's `route`) answers JSON nested 100,000 deep: well under the
    probe's megabyte, and past Python's recursion limit when json.loads reads it."""

    route = "/props"

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if self.path.endswith(self.route):
            self.reply(200, b'{"data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
        else:
            self.reply(404, NOT_FOUND)

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.reply(200, YES)


@pytest.mark.parametrize("route", ["/props", "/models"])
def test_a_capacity_answer_nested_too_deep_is_no_answer(tmp_path: Path, route: str) -> None:
    """json.loads raised RecursionError, which the probe did not catch: the run ended in a traceback."""
    with serving(type("Handler", (_NestsItsCapacityDeep,), {"route": route})) as url:
        result, run = run_eval(url, tmp_path, "--limit", "3")
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert run is not None and report_of(run)["counts"]["samples"] == 3


class _PropsInTwoPieces(_AnswersPropsOnceModelsIsAsked):
    """/props (one slot, and a chat template of 20 kB, as llama.cpp publishes) sent in two writes,
    the second after a pause within the probe's time: the probe read once, so it parsed only the
    first piece and missed the slot."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if self.path != "/props":
            self.reply(404, NOT_FOUND)
            return
        body = json.dumps({"total_slots": 1, "chat_template": "{{ x }}" * 3000}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[:100])
        self.wfile.flush()
        time.sleep(0.3)  # not a timing assertion: only what makes the answer arrive in two pieces
        self.wfile.write(body[100:])


def test_a_capacity_answer_that_arrives_in_pieces_is_read_whole(tmp_path: Path) -> None:
    with serving(_PropsInTwoPieces) as url:
        result, run = run_eval(url, tmp_path, "--limit", "4")
    assert result.returncode == 0, result.stderr
    assert run is not None and report_of(run)["requests"]["server_slots"] == 1


@pytest.mark.parametrize("given", [False, True])
def test_an_eval_batch_size_the_user_gave_is_sent_at_once_without_a_first_wave(tmp_path: Path, given: bool) -> None:
    """The first wave of 4 (finding a one-slot server) costs one reply's time; a level the user set
    is their word on what the server serves, so all of it goes at once. The 2 s replies keep the
    16 requests in flight together at any machine speed."""
    with FakeOpenAIServer("correct", latency=2.0) as srv:
        result, _ = run_eval(srv.url, tmp_path, "--limit", "16", *(["--eval-batch-size", "16"] if given else []))
        peak = srv.gate.peak
    assert result.returncode == 0, result.stderr
    assert peak == 16 if given else peak < 16  # without: 4 first, the rest once one of them answered


def test_an_eval_batch_size_past_the_hard_limit_on_open_files_sends_what_fits(tmp_path: Path) -> None:
    """With a hard limit of 400 open files (RHEL's is 4,096) and --eval-batch-size 1000, the sockets ran
    out: every request failed with "Too many open files" and the run died importing a module, in one line
    naming scorer.py. Now fewer go at once, said in a note, and every sample gets its reply."""
    resource = pytest.importorskip("resource")
    with FakeOpenAIServer("correct", latency=0.3) as srv:
        result = subprocess.run(
            [sys.executable, "-m", "coinflip.cli", "eval", "--model", "m", "--api-url", srv.url, "--limit", "600",
             "--eval-batch-size", "1000", "--retries", "0", "--work-dir", str(tmp_path)],
            capture_output=True, text=True, timeout=BUDGET,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (400, 400)),
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "the limit on open files (400) allows 144 requests in flight" in result.stderr
    rows = predictions(only_run_dir(tmp_path))
    assert len(rows) == 600 and all(r["error"] is None for r in rows)


def test_the_test_server_on_a_taken_port_says_so_in_one_line() -> None:
    """Its usage (fifteen lines) before the error buried the one line that says what is wrong."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "coinflip.testing.server", "--port", str(port)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert f"--port {port}: " in result.stderr and "usage" not in result.stderr


def test_requests_held_back_wait_in_line_and_each_reply_wakes_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """40 requests for a server with one slot: each reply woke every waiting request, which looked at the limiter
    and went back to wait (40 x 40 looks, a run's CPU doubled where a limit held most requests back). Now each
    reply wakes the first in line, and they go in the order they came."""
    from coinflip.models.base import Request
    from coinflip.models.limits import Limiter
    from coinflip.models.openai_api import OpenAIClient

    looks = [0]
    delay = Limiter.delay

    def counted(self: Limiter, now: float) -> float:
        looks[0] += 1
        return delay(self, now)

    monkeypatch.setattr(Limiter, "delay", counted)
    sent: list[int] = []

    async def go(url: str) -> list[Any]:
        chat = OpenAIClient("m", url, retries=0, timeout=30, concurrency=40)
        send = chat._attempt

        async def noted(url: str, body: bytes) -> Any:
            sent.append(json.loads(body)["messages"][0]["content"])
            return await send(url, body)

        chat._attempt = noted  # type: ignore[method-assign]
        try:
            await chat.start()
            asks = [Request(i, "p", "q", [{"role": "user", "content": str(i)}]) for i in range(40)]
            return await asyncio.gather(*(chat.complete(r) for r in asks))
        finally:
            await chat.aclose()

    with FakeOpenAIServer("correct", limits=Limits(slots=1)) as srv:
        replies = asyncio.run(go(srv.url))
    assert all(r.error is None for r in replies) and sent == [str(i) for i in range(40)]
    assert looks[0] <= 6 * 40, looks[0]
