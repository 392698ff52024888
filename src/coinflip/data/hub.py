"""Official data: download `extraordinarylab/coin-flip` once into a local cache, then read the cache."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from .._files import flock
from ..errors import DataError

DATASET_ID = "extraordinarylab/coin-flip"
MARKER = ".coinflip-complete"
PATTERNS = ["*.parquet", "*.json", "*.jsonl", "*.csv", "**/*.parquet", "**/*.json", "**/*.jsonl", "**/*.csv"]


def cache_dir(hub: str, dataset_id: str, root: str | Path | None = None) -> Path:
    base = Path(root or os.environ.get("COINFLIP_CACHE") or Path.home() / ".cache" / "coinflip").expanduser()
    return base / hub / dataset_id.replace("/", "___")


def fetch(hub: str, dataset_id: str = DATASET_ID, root: str | Path | None = None) -> Path:
    """The cached snapshot, downloaded first when the cache is empty; `root` is the cache folder
    (EvalScope's dataset_dir), by default $COINFLIP_CACHE or ~/.cache/coinflip."""
    target = cache_dir(hub, dataset_id, root)
    if (target / MARKER).exists():
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        lock = open(target.with_name(target.name + ".lock"), "a")  # noqa: SIM115 (closed below)
    except OSError as exc:
        raise DataError(f"{target.parent}: cannot write the cache ({exc.strerror}); see --dataset-dir") from None
    with lock:
        with contextlib.suppress(OSError):  # first runs started together: one downloads, the others read its copy
            flock(lock, wait=True)
        if (target / MARKER).exists():
            return target
        partial = target.with_name(target.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        try:
            _download(hub, dataset_id, partial)
        except DataError:
            raise
        except Exception as exc:  # network and hub client errors come in many types
            shutil.rmtree(partial, ignore_errors=True)
            raise DataError(
                f"cannot download {dataset_id} from {hub} ({type(exc).__name__}) and it is not cached at {target}; "
                "offline, use the bundled data (leave out --dataset-hub), --dataset-path FILE_OR_DIR, "
                f"or put the hub's files in {target} with an empty {MARKER} file"
            ) from None
        (partial / MARKER).touch()
        shutil.rmtree(target, ignore_errors=True)
        partial.rename(target)
    return target


def _download(hub: str, dataset_id: str, into: Path) -> None:
    if hub == "huggingface":
        try:
            from huggingface_hub import snapshot_download
        except ImportError:
            raise DataError(
                "--dataset-hub huggingface needs huggingface_hub: pip install huggingface_hub pyarrow (the hub extra)"
            ) from None
        snapshot_download(repo_id=dataset_id, repo_type="dataset", local_dir=into, allow_patterns=PATTERNS)
    elif hub == "modelscope":
        try:
            from modelscope import dataset_snapshot_download
        except ImportError:
            raise DataError(
                "--dataset-hub modelscope needs modelscope: pip install modelscope pyarrow (the modelscope extra)"
            ) from None
        dataset_snapshot_download(dataset_id, local_dir=str(into), allow_patterns=PATTERNS)
    else:
        raise DataError(f"unknown dataset hub {hub!r}: use huggingface or modelscope")
