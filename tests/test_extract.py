"""Extraction rules, table-driven, with the messy replies real models give."""

from __future__ import annotations

import pytest

from coinflip import extract_answer

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
