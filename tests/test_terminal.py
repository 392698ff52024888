"""What the terminal shows: a progress rate that moves for slow models, an ETA that does not jump
about, and a summary header that tells runs apart."""

from __future__ import annotations

import random

from coinflip.pages.summary import lines, timing_line, title
from coinflip.run.progress import Estimate, clock, rate_text


def test_slow_rates_are_seconds_per_sample() -> None:
    assert rate_text(3, 20.0) == "6.7 s/sample"  # was '0.1/s', printed as 0.0/s at 0.04/s
    assert rate_text(1, 25.0) == "25.0 s/sample"
    assert rate_text(50, 10.0) == "5.0/s"
    assert rate_text(0, 10.0) == ""
    assert clock(462.4) == "0:07:42" and clock(None) == "-:--:--" and clock(-3) == "0:00:00"


def _etas(durations: list[float], smooth: bool) -> list[float]:
    """The ETA right after each sample of a run whose samples take `durations` seconds."""
    estimate, now, out = Estimate(), 0.0, []
    total = len(durations)
    for done, took in enumerate(durations, 1):
        now += took
        if smooth:
            estimate.update(done, total, now, now)
            left = estimate.remaining(now, done, total)
            assert left is not None
            out.append(left)
        else:  # what rich showed: the rate over the last few samples
            window = durations[max(0, done - 3) : done]
            out.append((total - done) * sum(window) / len(window))
    return out


def test_the_eta_of_a_slow_uneven_model_does_not_jump() -> None:
    rng = random.Random(7)
    durations = [rng.uniform(8, 30) for _ in range(40)]  # llama.cpp on a loaded machine: 8-30 s a sample
    smooth, window = _etas(durations, True), _etas(durations, False)
    assert smooth[-1] == 0
    # between two samples the ETA should fall by about the time that passed; count how far off it lands
    jumps = [abs((a - b) - took) for a, b, took in zip(smooth[4:], smooth[5:], durations[5:], strict=False)]
    rich_jumps = [abs((a - b) - took) for a, b, took in zip(window[4:], window[5:], durations[5:], strict=False)]
    assert max(jumps) < max(rich_jumps) / 3
    assert max(jumps) < 0.15 * max(smooth[4:])  # never more than a small part of what is left
    true_left = [sum(durations[i + 1 :]) for i in range(len(durations))]
    assert abs(smooth[10] - true_left[10]) < 0.25 * true_left[10]  # and it still says something true


def test_the_summary_header_tells_shots_and_timing_apart() -> None:
    report = {
        "model": "smollm2",
        "served_model": "smollm2",
        "few_shot_num": 3,
        "api_mode": "completions",
        "repeats": 1,
        "usage": {
            "latency_s": {"p50": 4.2, "p90": 9.8},
            "ttft_s": {"p50": 0.31, "p90": 0.52},
            "completion_tokens": {"p50": 12.0},
        },
    }
    assert title(report) == "coin_flip - smollm2  3-shot  completions"
    assert title({**report, "few_shot_num": 0}) != title(report)
    line = timing_line(report)
    assert line == (
        "latency median 4.20 s, p90 9.80 s  time to first token median 0.31 s, p90 0.52 s  reply tokens median 12"
    )
    assert timing_line({"usage": {}}) is None
    base = {
        "counts": {"samples": 1, "invalid": 0, "invalid_rate": 0.0, "errors": 0},
        "metrics": {},
        "metric_compat": "coinflip",
        "dataset": {"source": "bundled", "split": "test", "sha256": "0" * 64},
    }
    assert line in lines({**report, **base})
