"""Data stage: load splits (bundled, files, hub cache), generate fresh sets, build prompts."""

from __future__ import annotations

from .grammar import bundled_dir
from .load import (
    MANIFEST,
    Dataset,
    Record,
    dataset_stats,
    load_dataset,
    load_file,
    load_split,
    open_split,
    rows_sha256,
)

__all__ = [
    "MANIFEST",
    "Dataset",
    "Record",
    "bundled_dir",
    "dataset_stats",
    "load_dataset",
    "load_file",
    "load_split",
    "open_split",
    "rows_sha256",
]
