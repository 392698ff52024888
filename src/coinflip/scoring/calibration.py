"""Answer probabilities: how sure the model was, where the server returns log probabilities.

P(YES) is the probability of the YES token against the NO token at the answer position: the
first token after the last `ANSWER:` marker of the reply or of the forced answer (a forced
answer without a marker is a bare verdict: its first word), past spaces, markdown, quotes and
brackets. The word written there must be yes or no (in any case, across tokens: SmolLM2 writes
" Y" + "ES"); otherwise the sample has no P(YES). At that position, the chosen token and the top
alternatives the server sent are summed per side, every tokenisation counting (" YES", "YES",
"Yes", "yes", " Y", "N": any start of yes or no), then normalised: P(YES) / (P(YES) + P(NO)).

A log probability is a finite number not above 0 (up to rounding, `ROUNDING`): a sample whose
answer position holds any other value (+50, NaN, infinity: the reply parser keeps these by name)
has no P(YES), and is counted as such (`impossible`), rather than clamped into a confident one.

Over the samples that have one: AUROC of P(YES) against the target (YES positive; ties count
half), the Brier score, and the expected calibration error over 10 equal-width bins of P(YES)
(the gap between each bin's mean P(YES) and its observed share of YES targets, weighted by the
bin's share of samples), with the bins for a reliability diagram.
"""

from __future__ import annotations

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
_WORD = re.compile(r"[A-Za-z]+")
_FILLER = r"\s*_`#>\"'“”‘’«»\[\](){}$\\"  # spaces, markdown, quotes and brackets before the answer
_LEAD = re.compile(f"[{_FILLER}]*")
_LETTERS = re.compile(r"[A-Za-z]*")


def answer_window(logprobs: Sequence[dict[str, Any]] | None, bare: bool = False) -> list[dict[str, Any]] | None:
    """The few token entries from the last ANSWER marker on (with `bare`, from the start when
    there is no marker): all that P(YES) needs, so a run keeps a handful of tokens per reply
    instead of thousands."""
    if not logprobs:
        return None
    joined = "".join(str(entry.get("token", "")) for entry in logprobs)
    markers = list(_MARKER.finditer(joined))
    if not markers:
        return [dict(e) for e in logprobs[: WINDOW + 1]] if bare else None
    start = markers[-1].start()
    position = 0
    for i, entry in enumerate(logprobs):
        position += len(str(entry.get("token", "")))
        if position > start:
            return [dict(e) for e in logprobs[i : i + WINDOW + 1]]
    return None


def p_yes(window: Sequence[dict[str, Any]] | None, bare: bool = False) -> float | None:
    """P(YES) at the answer position of a window from `answer_window`; None when the word written
    there is not yes or no, the server sent no probability for either, or an impossible one."""
    entry = _answer_entry(window, bare)
    return None if entry is None or _impossible(entry) else _normalised(entry)


def impossible(window: Sequence[dict[str, Any]] | None, bare: bool = False) -> bool:
    """Whether the answer position holds a log probability that cannot be one (the sample then has no P(YES))."""
    entry = _answer_entry(window, bare)
    return entry is not None and _impossible(entry)


def impossible_in(prediction: Mapping[str, Any]) -> bool:
    """Whether a saved row's reply or forced answer holds an impossible log probability at its answer position."""
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
    """The token entry at the answer position, when the word written there is yes or no."""
    if not isinstance(window, list) or not window or not all(isinstance(e, dict) for e in window):
        return None  # nothing, or not what a run writes (a hand-edited file)
    tokens = [str(e.get("token", "")) for e in window]
    markers = list(_MARKER.finditer("".join(tokens)))
    if not markers and not bare:
        return None
    end, position = (markers[-1].end() if markers else 0), 0
    for i, token in enumerate(tokens):
        begins, position = position, position + len(token)
        rest = token[max(0, end - begins) :] if position > end else ""
        rest = rest[_LEAD.match(rest).end() :]  # type: ignore[union-attr]
        if not rest:
            continue  # still inside the marker, or only spaces, markdown, quotes
        if _word(rest, tokens[i + 1 :]).lower() not in ("yes", "no"):
            return None
        entry: dict[str, Any] = window[i]
        return entry
    return None


def _word(start: str, following: Sequence[str]) -> str:
    """The word that begins `start`, carried on through the following tokens while they are letters."""
    word = _LETTERS.match(start).group()  # type: ignore[union-attr]
    if word != start:
        return word
    for token in following:
        more = _LETTERS.match(token).group()  # type: ignore[union-attr]
        word += more
        if more != token:
            break
    return word


def _side(token: str) -> str | None:
    """yes or no for any start of either word (" Y", "Ye", "YES", "no"); None otherwise."""
    letters = re.sub(r"[^a-z]", "", token.lower())
    if not letters:
        return None
    return "yes" if "yes".startswith(letters) else "no" if "no".startswith(letters) else None


def _normalised(entry: dict[str, Any]) -> float | None:
    top = entry.get("top")
    options = dict(top) if isinstance(top, dict) else {}
    options.setdefault(str(entry.get("token", "")), entry.get("logprob"))
    mass = {"yes": 0.0, "no": 0.0}
    for token, logprob in options.items():
        side = _side(str(token))
        if side is not None and isinstance(logprob, (int, float)):  # possible values only (see _impossible)
            mass[side] += math.exp(min(logprob, 0.0))
    total = mass["yes"] + mass["no"]
    return mass["yes"] / total if total > 0 else None


def calibration(probabilities: Any, targets: Any) -> Calibration:
    """AUROC, Brier and ECE of P(YES) against the targets (1 for YES), with reliability bins."""
    import numpy as np

    p = np.asarray(probabilities, dtype=np.float64)
    y = np.asarray(targets, dtype=np.float64)
    if not len(p):
        return {"samples": 0}
    edges = np.linspace(0, 1, BINS + 1)
    which = np.clip((p * BINS).astype(np.int64), 0, BINS - 1)  # bin b holds [b/10, (b+1)/10); 1.0 the last
    bins: list[Bin] = []
    ece = 0.0
    for b in range(BINS):
        mask = which == b
        n = int(mask.sum())
        if n:
            gap = abs(float(p[mask].mean()) - float(y[mask].mean()))
            ece += n / len(p) * gap
        bins.append(
            {
                "lo": round(float(edges[b]), 2),
                "hi": round(float(edges[b + 1]), 2),
                "samples": n,
                "mean_p_yes": float(p[mask].mean()) if n else None,
                "yes_share": float(y[mask].mean()) if n else None,
            }
        )
    return {
        "samples": len(p),
        "auroc": auroc(p, y),
        "brier": float(np.mean((p - y) ** 2)),
        "ece": ece,
        "bins": bins,
    }


def auroc(p: Any, y: Any) -> float | None:
    """Mann-Whitney: the chance a YES target gets a higher P(YES) than a NO target, ties half."""
    import numpy as np

    p, y = np.asarray(p, dtype=np.float64), np.asarray(y, dtype=np.float64)
    positives, negatives = int(np.sum(y == 1)), int(np.sum(y == 0))
    if not positives or not negatives:
        return None
    order = np.argsort(p, kind="mergesort")
    ranks = np.empty(len(p))
    sorted_p = p[order]
    # average ranks over ties
    _, first, counts = np.unique(sorted_p, return_index=True, return_counts=True)
    average = first + (counts + 1) / 2.0
    ranks[order] = np.repeat(average, counts)
    u = float(ranks[y == 1].sum()) - positives * (positives + 1) / 2
    return u / (positives * negatives)
