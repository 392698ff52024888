"""Progress: a rich bar with rate and ETA on a terminal, plain lines otherwise. Below one sample a second
the rate is in seconds per sample; the ETA is the mean rate's finish time, smoothed, counting down."""

from __future__ import annotations

import sys
import time
from typing import Any

from .._terminal import printable

SMOOTHING = 0.2  # weight of each new estimate of the finish time


def rate_text(done: int, elapsed: float) -> str:
    if done <= 0 or elapsed <= 0:
        return ""
    rate = done / elapsed
    return f"{rate:.1f}/s" if rate >= 1 else f"{elapsed / done:.1f} s/sample"


def clock(seconds: float | None) -> str:
    if seconds is None:
        return "-:--:--"
    whole = max(0, round(seconds))
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


class Estimate:
    def __init__(self) -> None:
        self.finish: float | None = None
        self.updates = 0

    def update(self, done: int, total: int, elapsed: float, now: float) -> None:
        if done <= 0 or elapsed <= 0:
            return
        predicted = now + (total - done) * elapsed / done
        self.updates += 1
        weight = max(SMOOTHING, 1 / self.updates)  # the first few: their plain mean
        self.finish = predicted if self.finish is None else self.finish + weight * (predicted - self.finish)

    def remaining(self, now: float, done: int, total: int) -> float | None:
        return 0.0 if done >= total else None if self.finish is None else max(0.0, self.finish - now)


class Progress:
    def __init__(self, total: int, label: str, enabled: bool | None = None) -> None:
        self.total = total
        self.done = 0
        self.label = printable(label)  # the model's name: from the command line, or a saved run's config
        self.start = time.perf_counter()
        self.estimate = Estimate()
        tty = sys.stderr.isatty() if enabled is None else enabled
        self._bar: Any = None
        self._plain = enabled is None and not tty
        self._next_line = 5.0  # plain lines only for work that takes a while
        self._printed = False
        if tty and total:
            from rich import progress as bar
            from rich.text import Text

            estimate, progress = self.estimate, self

            class Remaining(bar.ProgressColumn):
                def render(self, task: Any) -> Text:
                    left = estimate.remaining(time.perf_counter(), progress.done, progress.total)
                    return Text(f"eta {clock(left)}", style="progress.remaining")

            name = bar.TextColumn("{task.description}", markup=False)  # a model named [/] is a name, not markup
            done = (bar.BarColumn(), bar.MofNCompleteColumn(), bar.TaskProgressColumn())
            rate = bar.TextColumn("{task.fields[rate]}")
            self._bar = bar.Progress(name, *done, rate, bar.TimeElapsedColumn(), Remaining())
            self._bar.start()
            self._task = self._bar.add_task(self.label, total=total, rate="")

    def restart(self) -> None:
        """The rate is the model's, not the time a local server took to start."""
        self.start = time.perf_counter()

    def advance(self, n: int = 1) -> None:
        self.done += n
        now = time.perf_counter()
        elapsed = now - self.start
        self.estimate.update(self.done, self.total, elapsed, now)
        rate = rate_text(self.done, elapsed)
        if self._bar is not None:
            self._bar.update(self._task, advance=n, rate=rate)
        elif self._plain and (elapsed >= self._next_line or (self.done == self.total and self._printed)):
            left = clock(self.estimate.remaining(now, self.done, self.total))
            done = f"{self.done}/{self.total} ({self.done / self.total:.0%})"
            print(f"{self.label}: {done} {rate or '-'} eta {left}", file=sys.stderr, flush=True)
            self._next_line = elapsed + 5.0
            self._printed = True

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
