"""A dataset path that starts with ~ (a config file's `local_path: ~/data`) is the user's home, as --work-dir is."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from coinflip import run_task
from coinflip.data.load import bundled_dir


def test_local_path_with_a_tilde_is_read_from_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "data").mkdir()
    for split in ("test", "validation"):
        shutil.copy(bundled_dir() / f"{split}.jsonl", tmp_path / "data" / f"{split}.jsonl")
    config = {"model": "oracle", "limit": 3, "quiet": True, "html_report": False, "work_dir": str(tmp_path / "out")}
    report = run_task({**config, "dataset_args": {"coin_flip": {"local_path": "~/data", "few_shot_num": 1}}})
    assert report["dataset"]["path"] == str(tmp_path / "data") and report["few_shot_num"] == 1
