"""What batch/state.json records of each batch a run sent (read back as declared: it is not trusted)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated, Any

import msgspec

from .._files import read_regular
from ..errors import ConfigError
from .batch_api import ENDED

STATE_LIMIT = 16 << 20  # bytes of state.json read: a record per batch, a few hundred bytes each
TURNAROUND_MAX = 1e9  # seconds from a batch's creation to its end that a server's dates may say (31 years)


class Submitted(msgspec.Struct):
    """One batch as the run directory records it (read back as declared: it is not trusted)."""

    ids: Annotated[str, msgspec.Meta(pattern=r"^batch/requests-\d+\.ids$")]  # its custom_ids, one a line
    count: int
    file_id: str | None = None
    batch_id: str | None = None
    status: str = "new"  # the server's last word: in_progress, completed, expired, failed, cancelled
    collected: bool = False  # its results are downloaded into the batch folder (or it has none)
    turnaround_s: Annotated[float, msgspec.Meta(ge=0, le=TURNAROUND_MAX)] = 0.0  # as dated: its answers' latency
    key: str = ""  # random, its own: each row read from it names it (`source`); "" in states saved before keys


class State(msgspec.Struct):
    batches: list[Submitted]


def saved_batches(folder: Path) -> list[Submitted]:
    """The batches `folder`/state.json records (none without one)."""
    state = folder / "state.json"
    if not state.exists():
        return []
    try:  # a plain file inside the run (a FIFO there would hang the resume)
        return msgspec.json.decode(read_regular(state, STATE_LIMIT, within=folder.parent), type=State).batches
    except (OSError, ValueError, msgspec.DecodeError) as exc:
        raise ConfigError(f"{state}: not a batch state file ({exc}); move it away to start over") from None


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
