"""The predictions file: which line counts for a sample, repair after a crash, compaction."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coinflip._files import replacing
from coinflip.errors import StorageError
from coinflip.jsonl import (
    PredictionWriter,
    compact_predictions,
    index_predictions,
    iter_predictions,
)
from coinflip.records import dumps, loads, sample_key

ROWS = [
    {"id": 2, "target": "YES", "reply": "b", "error": None},
    {"id": 0, "target": "YES", "reply": None, "error": "HTTP 500"},
    {"id": 1, "target": "YES", "reply": "c", "error": None},
    {"id": 0, "target": "YES", "reply": "a", "error": None},  # a retry that worked replaces the error
    {"id": 1, "target": "YES", "reply": None, "error": "late"},  # an error never replaces a reply
]


def _write(path: Path, tail: str = "") -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS) + tail)


def test_the_line_that_counts_and_a_garbage_line(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    _write(path, "not json\n")
    index = index_predictions(path)
    keys = [sample_key(i) for i in (0, 1, 2)]
    assert sorted(index.where) == keys and all(index.replied(k) for k in keys) and not index.pending
    assert index.lines == 6 and index.unreadable == 1  # counted and skipped, never fatal


def test_compaction_keeps_one_line_per_sample_in_order(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    _write(path, "not json\n")
    index = compact_predictions(path)
    rows = list(iter_predictions(path))
    assert [(r["id"], r["reply"]) for r in rows] == [(0, "a"), (1, "c"), (2, "b")]
    assert index == index_predictions(path)
    before = path.read_bytes()
    compact_predictions(path)  # already compact: left as it is
    assert path.read_bytes() == before


def test_repair_cuts_a_half_written_last_line(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    _write(path, '{"id": 3, "reply": "hal')
    index = index_predictions(path, repair=True)
    assert sample_key(3) not in index.where
    assert path.read_text().endswith('"error": "late"}\n')


def test_a_reply_with_half_a_surrogate_pair_is_written_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    writer = PredictionWriter(path)
    writer.write({"id": 0, "target": "YES", "reply": "caf\u00e9 \ud83d ANSWER: YES", "error": None})
    writer.write({"id": 1, "target": "YES", "reply": "caf\u00e9", "error": None})
    writer.close()
    assert [r["reply"] for r in iter_predictions(path)] == ["caf\u00e9 \ud83d ANSWER: YES", "caf\u00e9"]
    assert "café" in path.read_text(encoding="utf-8")  # plain text stays readable


BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029\ud800"  # every str.splitlines() break, and half a pair


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(st.sampled_from(BREAKS) | st.characters(exclude_categories=())), min_size=1, max_size=4))
def test_any_reply_is_one_line_of_its_file_and_reads_back(replies: list[str]) -> None:
    """Whatever text a server sends (line breaks of every kind, lone surrogates, controls), its
    row is one line by any reader's idea of a line, and reads back equal."""
    rows = [{"id": i, "target": "YES", "reply": r, "error": None} for i, r in enumerate(replies)]
    text = b"".join(dumps(row) for row in rows).decode()  # type: ignore[arg-type]
    lines = text.splitlines()
    assert len(lines) == len(replies) and [loads(line)["reply"] for line in lines] == replies


def _written(path: Path, ids: list[int], error_at: int | None = None) -> PredictionWriter:
    writer = PredictionWriter(path)
    for key in ids:
        row = {"id": key, "target": "YES", "reply": f"r{key}" * (key % 7), "error": "late" if key == error_at else None}
        writer.write(row)  # type: ignore[arg-type]
    writer.close()
    return writer


def test_a_writer_knows_whether_its_file_needs_compaction(tmp_path: Path) -> None:
    ids = list(range(500))
    assert _written(tmp_path / "a.jsonl", ids, error_at=7).in_order  # a fresh file, each sample once, in order
    random.Random(4).shuffle(ids)
    path = tmp_path / "b.jsonl"
    assert not _written(path, ids, error_at=7).in_order
    compact_predictions(path)
    assert path.read_bytes() == (tmp_path / "a.jsonl").read_bytes()
    assert [r["id"] for r in iter_predictions(path)] == list(range(500))
    assert not _written(tmp_path / "c.jsonl", [0, 1, 1, 2]).in_order  # a sample written twice (a forced answer)
    assert not _written(tmp_path / "a.jsonl", [500, 501]).in_order  # appending to a file: no longer known


def test_repeats_are_samples_of_their_own_and_a_forced_answer_owed_is_remembered(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    rows = [
        {"id": 4, "repeat": 0, "target": "YES", "reply": "ANSWER: YES", "error": None},
        {"id": 4, "repeat": 1, "target": "YES", "reply": "hmm", "forced": {"pending": True}, "error": None},
        {"id": 4, "repeat": 2, "target": "YES", "reply": "hmm", "forced": {"pending": True}, "error": None},
        {"id": 4, "repeat": 2, "target": "YES", "reply": "hmm", "forced": {"reply": "ANSWER: NO", "error": None}},
        {"id": 5, "repeat": 0, "target": "YES", "reply": "hmm", "forced": {"reply": None, "error": "HTTP 500"}},
        {"id": 5, "repeat": 0, "target": "YES", "reply": None, "error": "late"},  # an error never replaces a reply
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    index = index_predictions(path)
    assert all(index.replied(k) and k not in index.pending for k in (sample_key(4, 0), sample_key(4, 2)))
    assert index.pending == {sample_key(4, 1), sample_key(5, 0)}  # a forced answer still pending
    assert all(index.replied(k) for k in (sample_key(4, 1), sample_key(5, 0)))
    compact_predictions(path)
    kept = [(r["id"], r["repeat"], r.get("forced")) for r in iter_predictions(path)]
    assert kept == [
        (4, 0, None),
        (4, 1, {"pending": True}),
        (4, 2, {"reply": "ANSWER: NO", "error": None}),
        (5, 0, {"reply": None, "error": "HTTP 500"}),
    ]


def test_lines_are_read_by_their_fields_not_their_key_order(tmp_path: Path) -> None:
    """A line written with its keys in another order (another tool, a hand edit) reads the same;
    a line that is not a record (no whole id, a repeat out of range, not JSON, NaN) is skipped."""
    from coinflip.jsonl import iter_reviews
    from coinflip.pages.catalog import _questions
    from coinflip.records import read_review

    row = {"id": 7, "repeat": 2, "target": "NO", "question": "Q?", "reply": "ANSWER: NO", "error": None}
    lines = [
        json.dumps(dict(reversed(list(row.items())))),
        '{"id": "8", "question": "Q8"}',
        '{"id": 9, "repeat": 4096, "question": "Q9"}',
        '{"id": 10, "question": "Q10", "latency_s": NaN}',
        "[1, 2]",
    ]
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(lines) + "\n")
    index = index_predictions(path)
    assert list(index.where) == [sample_key(7, 2)] and index.unreadable == 4
    assert [r["reply"] for r in iter_predictions(path)] == ["ANSWER: NO"]
    assert _questions(path) == ({7: "Q?"}, {7: 0})
    review = {"p_yes": None, "correct": True, "target": "NO", "repeat": 2, "id": 7}
    reviews = tmp_path / "r.jsonl"
    reviews.write_text(json.dumps(review) + "\n" + '{"id": -1}\n')
    assert list(iter_reviews(reviews)) == [review] and read_review('{"id": true}') is None


@pytest.mark.parametrize("left", ["fifo", "link"])
def test_a_file_written_whole_never_waits_on_or_writes_through_what_lies_at_its_temporary_name(
    tmp_path: Path, left: str
) -> None:
    """Every report, page, review file and batch state is written through `replacing`: a FIFO left
    at its temporary name would hang the open, a link there would carry the write elsewhere."""
    victim, path = tmp_path / "victim", tmp_path / "run" / "report.json"
    victim.write_text("precious")
    path.parent.mkdir()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    if left == "fifo":
        os.mkfifo(tmp)
    else:
        tmp.symlink_to(victim)
    with replacing(path) as out:
        out.write(b"{}")
    assert path.read_bytes() == b"{}" and victim.read_text() == "precious"
    assert sorted(p.name for p in path.parent.iterdir()) == ["report.json"]  # nothing left behind


def test_a_file_written_whole_names_itself_not_its_draft_when_it_cannot_take_its_place(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    (path / "inside").mkdir(parents=True)  # a folder where the file goes: the rename fails
    with pytest.raises(StorageError) as caught, replacing(path) as out:
        out.write(b"{}")
    message = str(caught.value)
    assert message.startswith(f"cannot write {path}:") and ".tmp" not in message, message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]  # no draft left behind
