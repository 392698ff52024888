"""The run directory: config, predictions (appended and flushed one by one), reviews, reports, log.

Predictions survive any crash: each line is flushed as its sample finishes, a half-written last
line is dropped on reopen, and a resumed run appends only what was missing.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from .config import BENCHMARK, safe_name
from .errors import ConfigError

CONFIG_FILE = "configs/task_config.yaml"


@dataclass(frozen=True)
class RunDir:
    root: Path
    model: str

    @property
    def _m(self) -> str:
        return safe_name(self.model)

    @property
    def config_file(self) -> Path:
        return self.root / CONFIG_FILE

    @property
    def predictions(self) -> Path:
        return self.root / "predictions" / self._m / f"{BENCHMARK}.jsonl"

    @property
    def reviews(self) -> Path:
        return self.root / "reviews" / self._m / f"{BENCHMARK}.jsonl"

    @property
    def report_json(self) -> Path:
        return self.root / "reports" / self._m / f"{BENCHMARK}.json"

    @property
    def report_html(self) -> Path:
        return self.root / "reports" / self._m / f"{BENCHMARK}.html"

    @property
    def log(self) -> Path:
        return self.root / "logs" / "eval_log.log"

    @property
    def server_log(self) -> Path:
        return self.root / "logs" / "llama_server.log"

    @classmethod
    def create(cls, work_dir: Path, model: str) -> RunDir:
        stamp = datetime.now().strftime("%Y%m%d_%H%M%S")
        for n in range(1000):
            root = work_dir / (stamp if n == 0 else f"{stamp}_{n}")
            try:
                root.mkdir(parents=True)
                break
            except FileExistsError:
                continue
            except OSError as exc:
                raise ConfigError(f"cannot create run directory in {work_dir}: {exc.strerror}") from None
        return cls(root, model)

    @classmethod
    def open(cls, path: str | Path) -> RunDir:
        root = Path(path).expanduser()
        saved = load_saved_config(root)
        return cls(root, str(saved["config"]["model"]))

    def save_config(self, config: dict[str, Any], fingerprint: dict[str, Any], samples: int) -> None:
        """`samples` is how many the run asks for, so a report can say what never ran."""
        import yaml

        data = {"config": config, "fingerprint": fingerprint, "samples": samples}
        text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
        _atomic_write(self.config_file, text)


def load_saved_config(root: Path) -> dict[str, Any]:
    import yaml

    path = root / CONFIG_FILE
    if not path.is_file():
        raise ConfigError(f"{root} is not a coinflip run directory (no {CONFIG_FILE})")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError:
        raise ConfigError(f"{path}: not valid YAML") from None
    if not isinstance(data, dict) or "config" not in data or "fingerprint" not in data:
        raise ConfigError(f"{path}: not a coinflip task config")
    return data


def read_predictions(path: Path, repair: bool = False) -> dict[int, dict[str, Any]]:
    """Predictions by sample id; a later line for an id wins unless it is an error and the earlier is not."""
    if not path.exists():
        return {}
    data = path.read_bytes()
    complete = data[: data.rfind(b"\n") + 1]
    if repair and len(complete) != len(data):  # a crash left half a line: cut it before appending
        with path.open("r+b") as handle:
            handle.truncate(len(complete))
    found: dict[int, dict[str, Any]] = {}
    for line in complete.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        old = found.get(row.get("id"))
        if old is None or row.get("error") is None or old.get("error") is not None:
            found[row["id"]] = row
    return found


class PredictionWriter:
    """Appends one JSON line per finished sample and flushes it to the OS at once."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._handle: TextIO = path.open("a", encoding="utf-8")

    def write(self, row: dict[str, Any]) -> None:
        self._handle.write(json.dumps(row, ensure_ascii=False) + "\n")
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    _atomic_write(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
