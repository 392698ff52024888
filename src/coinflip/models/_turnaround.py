"""A batch's turnaround, from the dates its server gives (a batch answer's latency)."""

from __future__ import annotations

import contextlib
from typing import Any

from .batch_api import ENDED

TURNAROUND_MAX = 1e9  # seconds from a batch's creation to its end that a server's dates may say (31 years)


def turnaround(info: dict[str, Any]) -> float:
    """Seconds from the batch's creation to its end, as the server dates them."""
    start = info.get("created_at")
    ends = [info.get(f"{s}_at") for s in ENDED]
    end = max((e for e in ends if isinstance(e, int | float) and not isinstance(e, bool)), default=None)
    if isinstance(start, int | float) and end is not None:
        with contextlib.suppress(OverflowError):  # dates past any float (400 digits) tell nothing
            seconds = float(end - start)
            return seconds if 0 <= seconds <= TURNAROUND_MAX else 0.0  # past it: dates in mixed units
    return 0.0
