"""The question grammar: every form it writes reads back to its sequence, answers follow the
sequence, the official form is untouched, and the test server's probe policies behave as named."""

from __future__ import annotations

import io
import random
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from coinflip.data.generate import PeopleRange, generate_file, iter_questions, iter_sequences, names, write_jsonl
from coinflip.data.grammar import (
    FLIP,
    IDLE,
    KEEP,
    LANGUAGES,
    PHRASINGS,
    SIDES,
    Sequence,
    Style,
    Surface,
    apply,
    parse,
    script_names,
    solve,
)
from coinflip.data.load import load_file
from coinflip.data.prompts import BUILT_IN, reasoning
from coinflip.scoring.extract import extract_answer
from coinflip.testing.policy import Policy, truth

person = st.sampled_from(names()[:500] + script_names())
surfaces = st.builds(
    Surface, st.sampled_from(SIDES), st.sampled_from(SIDES), st.sampled_from(PHRASINGS), st.sampled_from(LANGUAGES)
)
styles = st.builds(Style, surfaces, st.sampled_from([0.0, 0.5, 1.0]), st.sampled_from(["pool", "scripts"]))


@st.composite
def sequences(draw: st.DrawFn) -> Sequence:
    people = draw(st.lists(person, min_size=1, max_size=12, unique=True))
    actions = draw(st.lists(st.sampled_from([FLIP, KEEP]), min_size=len(people), max_size=len(people)))
    return Sequence(tuple(zip(people, actions, strict=True)))


@settings(max_examples=300, deadline=None)
@given(sequences(), styles, st.integers(0, 2**32))
def test_every_form_reads_back_to_its_sequence_and_its_answer(sequence: Sequence, style: Style, seed: int) -> None:
    question, answer = apply(sequence, style, random.Random(seed))
    parsed = parse(question)
    assert parsed is not None, question
    assert parsed.surface == style.surface
    acts = [a for _, a in parsed.sequence.steps if a != IDLE]
    assert acts == [a for _, a in sequence.steps]  # the same actions, whatever the wording
    flips = acts.count(FLIP)
    final = style.surface.start if flips % 2 == 0 else ({"heads": "tails", "tails": "heads"}[style.surface.start])
    assert answer == ("YES" if final == style.surface.asked else "NO") == solve(question) == truth(question)
    assert reasoning(question).endswith(f"ANSWER: {answer}")  # the oracle and worked examples
    if style.idle == 0.0:
        assert IDLE not in {a for _, a in parsed.sequence.steps}
    if style.names == "scripts":
        assert {p for p, _ in parsed.sequence.steps} <= set(script_names())


def test_the_official_form_is_unchanged_and_every_style_writes_the_same_sequences() -> None:
    people = PeopleRange(2, 6)
    official = list(iter_questions(people, 500, 9))
    assert list(iter_questions(people, 500, 9, Style())) == official
    actions = [[a for _, a in s.steps] for s in iter_sequences(people, 500, 9)]
    for style in (
        Style(Surface(start="tails")),
        Style(Surface(phrasing="rephrased"), idle=0.5),
        Style(names="scripts"),
    ):
        rows = list(iter_questions(people, 500, 9, style))
        assert rows != official and rows == list(iter_questions(people, 500, 9, style))  # seeded
        for (question, answer), acts in zip(rows, actions, strict=True):
            parsed = parse(question)
            assert parsed is not None and answer == solve(question)
            assert [a for _, a in parsed.sequence.steps if a != IDLE] == acts


def test_a_styled_file_is_what_the_iterator_yields_and_the_loader_counts_its_people(tmp_path: Path) -> None:
    style = Style(Surface(start="tails", asked="heads", phrasing="rephrased", language="zh"), idle=0.5)
    path = tmp_path / "zh.jsonl"
    generate_file(path, PeopleRange(3, 5), 300, 4, style)
    expected = io.StringIO()
    write_jsonl(iter_questions(PeopleRange(3, 5), 300, 4, style), expected)
    assert path.read_text(encoding="utf-8") == expected.getvalue()
    for record, sequence in zip(load_file(path), iter_sequences(PeopleRange(3, 5), 300, 4), strict=True):
        assert (record.people, record.flips) == (len(sequence.steps), sequence.flips)


def test_the_chinese_templates_ask_for_the_answer_markers_the_scorer_reads() -> None:
    question = next(iter_questions(PeopleRange(2, 2), 1, 0, Style(Surface(language="zh"))))[0]
    for name in ("zh", "direct-zh"):
        prompt = BUILT_IN[name].zero_shot.format(question=question)
        assert question in prompt and '"ANSWER: [ANSWER]"' in prompt and "YES" in prompt and "NO" in prompt
    assert extract_answer("硬币翻转了两次，所以仍然正面朝上。\nANSWER: YES") == "YES"


def test_the_shortcut_policy_counts_the_phrase_and_the_contaminated_one_knows_the_bundled_set() -> None:
    shortcut, contaminated = Policy("shortcut"), Policy("contaminated")
    sequence = Sequence((("ann", FLIP), ("bob", KEEP), ("cy", FLIP), ("dee", FLIP)))
    rng = random.Random(0)
    plain = apply(sequence, Style(), rng)
    assert shortcut.expected(plain[0]) == plain[1] == "NO"
    inverted = apply(sequence, Style(Surface(asked="tails")), rng)
    assert shortcut.expected(inverted[0]) == inverted[1] == "YES"  # it reads the side asked about
    tails = apply(sequence, Style(Surface(start="tails")), rng)
    assert shortcut.expected(tails[0]) != tails[1]
    rephrased = apply(sequence, Style(Surface(phrasing="rephrased")), rng)
    assert shortcut.expected(rephrased[0]) == "YES" != rephrased[1]  # no phrase counted: heads
    bundled = load_file(Path(__file__).resolve().parents[1] / "src/coinflip/_data/test.jsonl")[:300]
    assert all(contaminated.expected(r.question) == r.answer for r in bundled)
    fresh = list(iter_questions(PeopleRange(2, 4), 2000, 77))
    right = sum(contaminated.expected(q) == a for q, a in fresh) / len(fresh)
    assert 0.56 <= right <= 0.64
