"""P(YES) at the answer word, where the server returns log probabilities (an impossible one, above 0, NaN or
infinite, leaves none), and how well it is calibrated: AUROC, Brier, and ECE over 10 equal bins."""

from __future__ import annotations

import bisect
import itertools
import math
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from .extract import _MARKER
from .schema import Bin, Calibration

WINDOW = 8  # tokens kept after the token holding the last marker
FLOAT_MAX = sys.float_info.max  # below -FLOAT_MAX (-inf, or an integer of 400 digits) no float can say it
ROUNDING = 1e-4  # a log probability up to this far above 0 is float rounding of a certain token
BINS = 10
_FILLER = r"\s*_`#>\"'“”‘’«»\[\](){}$\\"  # spaces, markdown, quotes and brackets before the answer
_LEAD = re.compile(f"[{_FILLER}]*")
_LETTERS = re.compile(r"[A-Za-z]*")


def answer_window(logprobs: Sequence[dict[str, Any]] | None, bare: bool = False) -> list[dict[str, Any]] | None:
    """The token entries from the last ANSWER marker on (`bare`: or the start): a run keeps these, not thousands."""
    if not logprobs:
        return None
    tokens = [str(entry.get("token", "")) for entry in logprobs]
    markers = list(_MARKER.finditer("".join(tokens)))
    if not markers:
        return [dict(e) for e in logprobs[: WINDOW + 1]] if bare else None
    first = _token_at(tokens, markers[-1].start())
    return [dict(e) for e in logprobs[first : first + WINDOW + 1]]


def _token_at(tokens: list[str], position: int) -> int:
    """The index of the token that holds character `position` of the tokens joined."""
    return bisect.bisect_right(list(itertools.accumulate(map(len, tokens))), position)


def p_yes(window: Sequence[dict[str, Any]] | None, bare: bool = False) -> float | None:
    """None when the word at the answer is not yes or no, or no possible probability was sent for either."""
    entry = _answer_entry(window, bare)
    return None if entry is None or _impossible(entry) else _normalised(entry)


def impossible(window: Sequence[dict[str, Any]] | None, bare: bool = False) -> bool:
    entry = _answer_entry(window, bare)
    return entry is not None and _impossible(entry)


def impossible_in(prediction: Mapping[str, Any]) -> bool:
    forced = prediction.get("forced")
    again = forced.get("answer_logprobs") if isinstance(forced, dict) else None
    return impossible(prediction.get("answer_logprobs")) or impossible(again, bare=True)


def _impossible(entry: dict[str, Any]) -> bool:
    top = entry.get("top")
    values = [entry.get("logprob"), *(top.values() if isinstance(top, dict) else ())]
    return any(
        v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not -FLOAT_MAX <= v <= ROUNDING)
        for v in values
    )


def _answer_entry(window: Sequence[dict[str, Any]] | None, bare: bool) -> dict[str, Any] | None:
    """The entry of the token where the answer word starts, read across tokens (SmolLM2 writes " Y" + "ES")."""
    if not isinstance(window, list) or not window or not all(isinstance(e, dict) for e in window):
        return None  # nothing, or not what a run writes (a hand-edited file)
    tokens = [str(e.get("token", "")) for e in window]
    text = "".join(tokens)
    markers = list(_MARKER.finditer(text))
    if not markers and not bare:
        return None
    start = _LEAD.match(text, markers[-1].end() if markers else 0).end()  # type: ignore[union-attr]
    if _LETTERS.match(text, start).group().lower() not in ("yes", "no"):  # type: ignore[union-attr]
        return None
    return dict(window[_token_at(tokens, start)])


def _normalised(entry: dict[str, Any]) -> float | None:
    top = entry.get("top")
    options = dict(top) if isinstance(top, dict) else {}
    options.setdefault(str(entry.get("token", "")), entry.get("logprob"))
    mass = {"yes": 0.0, "no": 0.0}
    for token, logprob in options.items():
        letters = re.sub(r"[^a-z]", "", str(token).lower())
        side = next((word for word in mass if letters and word.startswith(letters)), None)  # "Y", "ye", "N"
        if side is not None and isinstance(logprob, (int, float)):  # possible values only (see _impossible)
            mass[side] += math.exp(min(logprob, 0.0))
    total = mass["yes"] + mass["no"]
    return mass["yes"] / total if total > 0 else None


def calibration(probabilities: Any, targets: Any) -> Calibration:
    import numpy as np

    p = np.asarray(probabilities, dtype=np.float64)
    y = np.asarray(targets, dtype=np.float64)
    if not len(p):
        return {"samples": 0}
    which = np.clip((p * BINS).astype(np.int64), 0, BINS - 1)  # bin b holds [b/10, (b+1)/10); 1.0 the last
    bins: list[Bin] = []
    ece = 0.0
    for b in range(BINS):
        mask = which == b
        n = int(mask.sum())
        mean_p, share = (float(p[mask].mean()), float(y[mask].mean())) if n else (None, None)
        if mean_p is not None and share is not None:
            ece += n / len(p) * abs(mean_p - share)
        bins.append({"lo": b / BINS, "hi": (b + 1) / BINS, "samples": n, "mean_p_yes": mean_p, "yes_share": share})
    return {"samples": len(p), "auroc": auroc(p, y), "brier": float(np.mean((p - y) ** 2)), "ece": ece, "bins": bins}


def auroc(p: Any, y: Any) -> float | None:
    """Mann-Whitney: the chance a YES target gets a higher P(YES) than a NO target, ties half."""
    import numpy as np

    p, y = np.asarray(p, dtype=np.float64), np.asarray(y, dtype=np.float64)
    positives, negatives = int(np.sum(y == 1)), int(np.sum(y == 0))
    if not positives or not negatives:
        return None
    order = np.argsort(p, kind="mergesort")
    ranks = np.empty(len(p))
    _, first, counts = np.unique(p[order], return_index=True, return_counts=True)
    ranks[order] = np.repeat(first + (counts + 1) / 2.0, counts)  # average ranks over ties
    u = float(ranks[y == 1].sum()) - positives * (positives + 1) / 2
    return u / (positives * negatives)
