"""Progress on long work: a rich bar with rate and ETA on a terminal, plain lines otherwise."""

from __future__ import annotations

import sys
import time
from typing import Any


class Progress:
    def __init__(self, total: int, label: str, enabled: bool | None = None) -> None:
        self.total = total
        self.done = 0
        self.label = label
        self.start = time.perf_counter()
        tty = sys.stderr.isatty() if enabled is None else enabled
        self._bar: Any = None
        self._plain = enabled is None and not tty
        self._next_line = 5.0  # plain lines only for work that takes a while
        self._printed = False
        if tty and total:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TaskProgressColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.progress import (
                Progress as Bar,
            )

            self._bar = Bar(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TaskProgressColumn(),
                TextColumn("{task.fields[rate]}"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                transient=False,
            )
            self._bar.start()
            self._task = self._bar.add_task(label, total=total, rate="")

    def advance(self, n: int = 1) -> None:
        self.done += n
        elapsed = time.perf_counter() - self.start
        rate = self.done / elapsed if elapsed > 0 else 0.0
        if self._bar is not None:
            self._bar.update(self._task, advance=n, rate=f"{rate:.1f}/s")
        elif self._plain and (elapsed >= self._next_line or (self.done == self.total and self._printed)):
            eta = (self.total - self.done) / rate if rate else 0.0
            print(
                f"{self.label}: {self.done}/{self.total} ({self.done / self.total:.0%}) {rate:.1f}/s eta {eta:.0f}s",
                file=sys.stderr,
                flush=True,
            )
            self._next_line = elapsed + 5.0
            self._printed = True

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
