"""The predictions file: which line counts for a sample, repair after a crash, compaction."""

from __future__ import annotations

import json
from pathlib import Path

from coinflip.rundir import PredictionWriter, compact_predictions, index_predictions, iter_predictions

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
    assert sorted(index.where) == [0, 1, 2] and all(index.ok(k) for k in (0, 1, 2))
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
    assert 3 not in index.where
    assert path.read_text().endswith('"error": "late"}\n')


def test_a_reply_with_half_a_surrogate_pair_is_written_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    writer = PredictionWriter(path)
    writer.write({"id": 0, "reply": "caf\u00e9 \ud83d ANSWER: YES", "error": None})
    writer.write({"id": 1, "reply": "caf\u00e9", "error": None})
    writer.close()
    assert [r["reply"] for r in iter_predictions(path)] == ["caf\u00e9 \ud83d ANSWER: YES", "caf\u00e9"]
    assert "café" in path.read_text(encoding="utf-8")  # plain text stays readable
