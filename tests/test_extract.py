"""Extraction rules, table-driven, with the messy replies real models give."""

from __future__ import annotations

import pytest

from coinflip import extract_answer
from coinflip.scoring.extract import REASONS, invalid_reason, read_answer

CASES: list[tuple[str, str | None]] = [
    # plain and case
    ("ANSWER: YES", "YES"),
    ("ANSWER: NO", "NO"),
    ("answer: yes", "YES"),
    ("Answer: No", "NO"),
    ("ANSWER:YES", "YES"),
    ("ANSWER :   NO", "NO"),
    ("Reasoning...\nANSWER: YES\n", "YES"),
    # words before the marker
    ("Final Answer: YES", "YES"),
    ("The final answer: no", "NO"),
    ("So my FINAL ANSWER: Yes.", "YES"),
    # full-width colon and Chinese punctuation
    ("ANSWER：YES", "YES"),
    ("答案如下。ANSWER：NO。", "NO"),
    ("ANSWER： 是", None),
    ("ANSWER: YES！", "YES"),
    # markdown, quotes, brackets, latex
    ("**ANSWER: YES**", "YES"),
    ("**Answer:** No", "NO"),
    ("**Answer**: yes", "YES"),
    ("ANSWER: *NO*", "NO"),
    ("ANSWER: __YES__", "YES"),
    ("ANSWER: `NO`", "NO"),
    ('ANSWER: "YES"', "YES"),
    ("ANSWER: 'no'", "NO"),
    ("ANSWER: “YES”", "YES"),
    ("ANSWER: [YES]", "YES"),
    ("ANSWER: (NO)", "NO"),
    ("ANSWER: $\\boxed{YES}$", "YES"),
    ("ANSWER: \\boxed{\\text{NO}}", "NO"),
    ("### ANSWER: YES", "YES"),
    ("ANSWER: YES.", "YES"),
    ("ANSWER: No, the coin is tails up.", "NO"),
    ("ANSWER: Yes, it is still heads up!", "YES"),
    ("ANSWER: Yes it is still heads up", "YES"),  # after a marker the first word is the verdict
    ("ANSWER: no the coin is tails up", "NO"),  # (only a forced reply's bare word must stand alone)
    # value on the next line
    ("ANSWER:\nYES", "YES"),
    ("ANSWER:\n\n  **NO**", "NO"),
    ("**ANSWER:**\n- YES", "YES"),
    ("ANSWER:\n\n", None),
    ("ANSWER:", None),
    # the last marker counts, even when invalid
    ("ANSWER: YES\nWait, let me recheck.\nANSWER: NO", "NO"),
    ("ANSWER: NO ... ANSWER: YES", "YES"),
    ("ANSWER: YES\nANSWER: [ANSWER]", None),
    ("ANSWER: YES\nANSWER: maybe", None),
    ("ANSWER: YES\nANSWER: YES\nANSWER: YES", "YES"),
    # reasoning models
    ("<think>The answer: NO. ANSWER: NO</think>\nANSWER: YES", "YES"),
    ("<think>\nANSWER: YES\n</think>\n\nANSWER: NO", "NO"),
    ("<think>still thinking... ANSWER: YES", None),
    ("<think>a</think> text <think>ANSWER: NO", None),
    ("flip flip flop</think>\n\nANSWER: NO", "NO"),
    ("<think>ANSWER: YES</think>", None),
    # not an answer
    ("YES", None),
    ("The coin is heads up, so yes.", None),
    ("ANSWERS: YES", None),
    ("MYANSWER: YES", None),
    ("ANSWER YES", None),
    ("ANSWER - YES", None),
    ("ANSWER: NOT heads up", None),
    ("ANSWER: Nope", None),
    ("ANSWER: Yesterday", None),
    ("ANSWER: heads", None),
    ("ANSWER: YES or NO", None),
    ("ANSWER: YES/NO", None),
    ("ANSWER: yes, no", None),
    ("ANSWER: [ANSWER]", None),
    ('"ANSWER: [ANSWER]" (without quotes)', None),
    ("ANSWER: 1", None),
    ("ANSWER: The coin is heads up, so YES", None),
    ("", None),
    ("   \n  ", None),
]


@pytest.mark.parametrize(("reply", "expected"), CASES, ids=[f"{i:02d}" for i in range(len(CASES))])
def test_extraction_rules(reply: str, expected: str | None) -> None:
    assert extract_answer(reply) == expected


def test_table_is_large_and_covers_both_answers_and_failures() -> None:
    assert len(CASES) >= 50
    kinds = {e for _, e in CASES}
    assert kinds == {"YES", "NO", None}


def test_none_reply_is_no_answer() -> None:
    assert extract_answer(None) is None


# reply, finish_reason, why it has no answer (None: it has one)
REASON_CASES: list[tuple[str | None, str | None, str | None]] = [
    ("ANSWER: YES", "stop", None),
    ("Reasoning.\n**ANSWER:** no", "stop", None),
    ("ANSWER: NO", "length", None),  # cut off after the answer: still an answer
    (None, "stop", "empty"),
    ("", "stop", "empty"),
    ("  \n\t ", None, "empty"),
    ("<think>the coin ends heads up</think>\n", "stop", "empty"),  # nothing outside the reasoning
    ("The coin is heads up, so yes.", "stop", "no_marker"),
    ("YES", "stop", "no_marker"),
    ("ANSWER YES", "stop", "no_marker"),
    ("ANSWERS: YES", "stop", "no_marker"),
    ("<think>ANSWER: YES</think> I cannot say.", "stop", "no_marker"),
    ("ANSWER: maybe", "stop", "no_verdict"),
    ("ANSWER:", "stop", "no_verdict"),
    ("ANSWER: [ANSWER]", "stop", "no_verdict"),
    ("ANSWER: NOT heads up", "stop", "no_verdict"),
    ("ANSWER: The coin is heads up, so YES", "stop", "no_verdict"),
    ("ANSWER: YES\nANSWER: heads", "stop", "no_verdict"),  # the last marker counts
    ("ANSWER: YES/NO", "stop", "both"),
    ("ANSWER: yes, no", "stop", "both"),
    ("ANSWER: [YES or NO]", "stop", "both"),
    ("ANSWER: maybe yes, maybe no", "stop", "both"),
    ("<think>still counting... ANSWER: YES", "stop", "unclosed_think"),
    ("<think>a</think> b <think>c", None, "unclosed_think"),
    ("<think>still counting... ANSWER: YES", "length", "cut_off"),  # length explains the rest
    ("Person one flips, person two", "length", "cut_off"),
    ("", "length", "cut_off"),
    ("ANSWER: YES/NO", "length", "cut_off"),
]


@pytest.mark.parametrize(("reply", "finish", "reason"), REASON_CASES, ids=range(len(REASON_CASES)))
def test_every_invalid_answer_has_its_reason(reply: str | None, finish: str | None, reason: str | None) -> None:
    assert invalid_reason(reply, finish) == reason
    answer, why = read_answer(reply, finish)
    assert (answer is None) == (why is not None) and answer == extract_answer(reply)


def test_invalid_reason_counts_on_a_fixed_set() -> None:
    counts = dict.fromkeys(REASONS, 0)
    for reply, finish, _ in REASON_CASES:
        reason = invalid_reason(reply, finish)
        if reason is not None:
            counts[reason] += 1
    assert counts == {"empty": 4, "no_marker": 5, "no_verdict": 6, "both": 4, "unclosed_think": 2, "cut_off": 4}


@pytest.mark.parametrize(("reply", "expected"), CASES, ids=[f"{i:02d}" for i in range(len(CASES))])
def test_a_reason_exactly_when_there_is_no_answer(reply: str, expected: str | None) -> None:
    answer, reason = read_answer(reply)
    assert answer == expected and (reason is None) == (expected is not None) and reason in (None, *REASONS)
