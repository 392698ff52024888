"""The predictions file: which line counts for a sample, repair after a crash, compaction."""

from __future__ import annotations

import json
import random
from array import array
from pathlib import Path

from coinflip.rundir import (
    PredictionWriter,
    compact_predictions,
    compact_written,
    index_predictions,
    iter_predictions,
    sample_key,
)

ROWS = [
    {"id": 2, "reply": "b", "error": None},
    {"id": 0, "reply": None, "error": "HTTP 500"},
    {"id": 1, "reply": "c", "error": None},
    {"id": 0, "reply": "a", "error": None},  # a retry that worked replaces the error
    {"id": 1, "reply": None, "error": "late"},  # an error never replaces a reply
]


def _write(path: Path, tail: str = "") -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS) + tail)


def test_the_line_that_counts_and_a_garbage_line(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    _write(path, "not json\n")
    index = index_predictions(path)
    keys = [sample_key(i) for i in (0, 1, 2)]
    assert sorted(index.where) == keys and all(index.ok(k) for k in keys)
    assert index.lines == 6


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
    writer.write({"id": 0, "reply": "caf\u00e9 \ud83d ANSWER: YES", "error": None})
    writer.write({"id": 1, "reply": "caf\u00e9", "error": None})
    writer.close()
    assert [r["reply"] for r in iter_predictions(path)] == ["caf\u00e9 \ud83d ANSWER: YES", "caf\u00e9"]
    assert "café" in path.read_text(encoding="utf-8")  # plain text stays readable


def _written(path: Path, ids: list[int], error_at: int | None = None) -> tuple[array, array]:
    writer = PredictionWriter(path)
    for key in ids:
        writer.write({"id": key, "reply": f"r{key}" * (key % 7), "error": "late" if key == error_at else None})
    writer.close()
    return array("q", [sample_key(i) for i in ids]), writer.offsets


def test_a_fresh_file_is_put_in_order_from_what_its_writer_recorded(tmp_path: Path) -> None:
    ids = list(range(500))
    random.Random(4).shuffle(ids)
    path, reference = tmp_path / "p.jsonl", tmp_path / "ref.jsonl"
    keys, offsets = _written(path, ids, error_at=7)
    _written(reference, ids, error_at=7)
    compact_written(path, keys, offsets)
    compact_predictions(reference)
    assert path.read_bytes() == reference.read_bytes()
    assert [r["id"] for r in iter_predictions(path)] == list(range(500))


def test_an_ordered_file_is_left_alone_and_offsets_count_from_the_end(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_bytes(b"")
    keys, offsets = _written(path, [0, 1, 2])
    before = path.read_bytes()
    compact_written(path, keys, offsets)
    assert path.read_bytes() == before
    more = PredictionWriter(path)  # appending: offsets start where the file ends
    more.write({"id": 3, "reply": "x", "error": None})
    more.close()
    assert more.offsets[0] == len(before)
    with path.open("rb") as handle:
        handle.seek(more.offsets[0])
        assert json.loads(handle.readline())["id"] == 3


def test_repeated_ids_fall_back_to_the_full_compaction(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    keys, offsets = _written(path, [2, 0, 2, 1])
    compact_written(path, keys, offsets)
    assert [r["id"] for r in iter_predictions(path)] == [0, 1, 2]


def test_repeats_are_samples_of_their_own_and_a_forced_answer_owed_is_remembered(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    rows = [
        {"id": 4, "repeat": 0, "reply": "ANSWER: YES", "error": None},
        {"id": 4, "repeat": 1, "reply": "hmm", "forced": {"pending": True}, "error": None},
        {"id": 4, "repeat": 2, "reply": "hmm", "forced": {"pending": True}, "error": None},
        {"id": 4, "repeat": 2, "reply": "hmm", "forced": {"reply": "ANSWER: NO", "error": None}, "error": None},
        {"id": 5, "repeat": 0, "reply": "hmm", "forced": {"reply": None, "error": "HTTP 500"}, "error": None},
        {"id": 5, "repeat": 0, "reply": None, "error": "late"},  # an error never replaces a reply
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    index = index_predictions(path)
    assert index.ok(sample_key(4, 0)) and index.ok(sample_key(4, 2))
    assert index.waiting == {sample_key(4, 1), sample_key(5, 0)}  # still owed a forced answer
    assert all(index.replied(k) for k in (sample_key(4, 1), sample_key(5, 0)))
    compact_predictions(path)
    kept = [(r["id"], r["repeat"], r.get("forced")) for r in iter_predictions(path)]
    assert kept == [
        (4, 0, None),
        (4, 1, {"pending": True}),
        (4, 2, {"reply": "ANSWER: NO", "error": None}),
        (5, 0, {"reply": None, "error": "HTTP 500"}),
    ]
