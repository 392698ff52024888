"""The run directory: its settings, predictions, reviews, reports and logs, where each lives, and
how a new one is made (under a hidden name, renamed when filled) and locked."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._files import (
    LOCKS,
    UnreadableFile,
    flock,
    inside,
    open_regular,
    read_regular,
    read_settings,
    replacing,
    special,
)
from ._terminal import one_line
from .config import BENCHMARK, KEY_AGAIN, SETTINGS_VERSION, TaskConfig, safe_name, saved_settings
from .errors import ConfigError, reason, storage_error
from .records import REPEATS_MAX, loads, whole

CONFIG_FILE = "configs/task_config.yaml"
SUBSET_FILE = "configs/subset.json"
CONFIG_LIMIT = 16 << 20  # bytes of task_config.yaml read (long prompts fit many times over)
MAX_ID = 1 << 48  # question ids beyond this are not ids coinflip wrote
DRAFT = re.compile(r"\.\d{8}_\d{6}\.[a-z0-9_]{8}\.new")  # a run being made: `create`'s mkdtemp name, exactly
DRAFT_GRACE_S = 60.0  # a draft this much older than its last change, and unlocked, has lost its maker
DRAFT_UNLOCKED_S = 86400.0  # without advisory locks (Windows, some NFS): only the age tells, so a day


class _File:
    """A run's file: `pattern` under its root, {model} the model's folder, {stem} the arithmetic's name."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern

    def __get__(self, run: RunDir, owner: type | None = None) -> Path:
        stem = f"{BENCHMARK}.{run.arithmetic}" if run.arithmetic else BENCHMARK
        return run.root / self.pattern.format(model=safe_name(run.model), stem=stem, benchmark=BENCHMARK)


@dataclass(frozen=True)
class RunDir:
    root: Path
    model: str
    made_work_dir: bool = False  # the work directory did not exist before this run
    arithmetic: str = ""  # a rescore in another arithmetic: its reviews and report sit beside the run's own
    draft: bool = False  # made by `create` under a hidden name; `publish` gives it its timestamp
    held: Any = field(default=None, compare=False, repr=False)  # a draft's lock, held until it is published

    config_file = _File(CONFIG_FILE)
    predictions = _File("predictions/{model}/{benchmark}.jsonl")
    reviews = _File("reviews/{model}/{stem}.jsonl")
    report_json = _File("reports/{model}/{stem}.json")
    report_html = _File("reports/{model}/{stem}.html")
    log = _File("logs/eval_log.log")
    requests = _File("logs/requests.json")
    server_log = _File("logs/llama_server.log")

    @classmethod
    def create(cls, work_dir: Path, model: str, no_timestamp: bool = False) -> RunDir:
        """A new run directory; `no_timestamp`: `work_dir` itself (EvalScope's no_timestamp)."""
        if no_timestamp and (work_dir / CONFIG_FILE).exists():
            raise ConfigError(
                f"{work_dir} already holds a run; resume it with --use-cache {work_dir} or choose another --work-dir"
            )
        stamp = time.strftime("%Y%m%d_%H%M%S")
        try:  # filled under a hidden name, then renamed: a kill never leaves a half-made run
            made = not work_dir.exists()  # exists() raises for a path the system cannot take
            work_dir.mkdir(parents=True, exist_ok=True)
            if no_timestamp:
                return cls(work_dir, model)
            clear_lost_drafts(work_dir)
            draft = Path(tempfile.mkdtemp(prefix=f".{stamp}.", suffix=".new", dir=work_dir))
            held = _lock_draft(draft)
        except OSError as exc:
            where = work_dir if no_timestamp else f"in {work_dir}"
            raise ConfigError(f"cannot create run directory {where}: {reason(exc)}") from None
        return cls(draft, model, made, draft=True, held=held)

    def publish(self) -> RunDir:
        """A filled draft under its timestamp: the first free one of `STAMP`, `STAMP_1`, ..."""
        if not self.draft:
            return self
        stamp = self.root.name[1:].split(".")[0]
        for n in range(1000):
            root = self.root.parent / (stamp if n == 0 else f"{stamp}_{n}")
            if root.exists():
                continue
            try:
                os.rename(self.root, root)
            except OSError as exc:
                if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                    continue
                raise storage_error(root, exc) from None
            self.discard()  # only its lock: the folder is the run now
            return RunDir(root, self.model, self.made_work_dir)
        raise ConfigError(f"{self.root.parent} holds a thousand runs started in the same second")

    def discard(self, folder: bool = False) -> None:
        """Let go of a draft's lock (`folder`: and of the draft itself, a run that never started)."""
        if self.held is not None:
            self.held.close()
        if folder and self.draft:
            shutil.rmtree(self.root, ignore_errors=True)

    def resume_hint(self, keyed: bool = False, flags: tuple[str, ...] = (), unsaved: tuple[str, ...] = ()) -> str:
        """The resume command, shell-quoted, a folder name's escapes shown as U+FFFD; `keyed`: give the API key
        again; `flags`: to give again (what a run does not save); `unsaved`: options whose texts were masked."""
        given = "".join(f" {shlex.quote(flag)}" for flag in flags)
        again = f", and {KEY_AGAIN}" if keyed else ""
        if unsaved:
            again += (
                f", and give {' and '.join(unsaved)} again (the texts they held are not saved: any may be a secret)"
            )
        return one_line(f"resume with: coinflip eval --use-cache {shlex.quote(str(self.root))}{given}{again}")

    def own_folders(self, *files: Path) -> None:
        """Each folder from the root down to `files` a real one, and no link, FIFO or device at a file itself
        (the log is appended to): reports and logs are written in the run, never through a link to elsewhere."""
        for file in files:
            parts = file.relative_to(self.root).parts
            for depth in range(1, len(parts) + 1):
                path = self.root.joinpath(*parts[:depth])
                try:
                    _clear_for_own(path)
                    if depth < len(parts):
                        path.mkdir(exist_ok=True)
                except OSError as exc:
                    raise storage_error(path, exc) from None

    def refuse_links_out(self) -> None:
        """The predictions are compacted and appended to in place, so never through a link out of the run."""
        if not inside(self.predictions, self.root):
            raise ConfigError(
                f"{self.predictions}: a link to outside {self.root}; coinflip reads only files inside the run"
            )

    @classmethod
    def open(cls, path: str | Path) -> RunDir:
        root = Path(path).expanduser()
        config = load_saved_config(root)["config"]
        run = cls(root, str(config.get("model_id") or config["model"]))
        run.refuse_links_out()
        return run

    def save_config(self, data: dict[str, Any]) -> None:
        """Atomically, as YAML (PyYAML escapes what is not printable, so every value reads back)."""
        import yaml

        class Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
            def ignore_aliases(self, data: Any) -> bool:  # never an alias: the reader refuses them
                return True

        with replacing(self.config_file) as out:
            out.write(yaml.dump(data, Dumper=Dumper, sort_keys=False, allow_unicode=True).encode("utf-8"))

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """One process per run directory (a resume of a live run would send its work twice)."""
        lock = self.root / "configs" / "run.lock"
        try:
            _clear_for_own(lock)  # opening a FIFO left there would wait forever; a link would lock its target
            handle = lock.open("a")
        except OSError:  # a read-only run directory: nothing will be written into it anyway
            yield
            return
        with handle:
            for _ in range(40):  # a view's `in_use` holds a free lock for a moment: tried for 2 s
                if flock(handle) is not False:
                    break
                time.sleep(0.05)
            else:
                raise busy(self.root)
            yield

    def save_subset(self, ids: tuple[int, ...] | None) -> None:
        self.put(self.root / SUBSET_FILE, None if ids is None else json.dumps(list(ids)).encode("utf-8"))

    @staticmethod
    def put(path: Path, data: bytes | None) -> None:
        """Atomically, or None: no such file."""
        try:
            if data is None:
                path.unlink(missing_ok=True)
            else:
                with replacing(path) as out:
                    out.write(data)
        except OSError as exc:
            raise storage_error(path, exc) from None

    def subset(self) -> frozenset[int] | None:
        """The question ids a run with a drawn subset asked; None: the first `samples` questions."""
        path = self.root / SUBSET_FILE
        try:
            ids = loads(read_regular(path, CONFIG_LIMIT * 4, within=self.root))
        except FileNotFoundError:
            return None
        except (UnreadableFile, OSError, ValueError, RecursionError) as exc:
            raise ConfigError(f"{path}: not a list of question ids ({exc})") from None
        if not isinstance(ids, list) or not all(type(i) is int and 0 <= i < MAX_ID for i in ids):
            raise ConfigError(f"{path}: not a list of question ids")
        return frozenset(ids)

    def asks(self, saved: Mapping[str, Any]) -> Callable[[int], bool]:
        """Whether the run asks question `id` now (`saved`: its task_config.yaml): its drawn subset, else its
        first `subset.count` questions (none saved: every one); a smaller --limit leaves the rest saved."""
        subset, count = self.subset(), int((saved.get("subset") or {}).get("count") or 0)
        return subset.__contains__ if subset is not None else lambda id_: not count or id_ < count


def run_holding(path: Path) -> Path | None:
    """The run directory `path` lies in, through any links (its files, under any name, are the run's); a loop of
    links lies in none (writing there fails, in one line)."""
    try:
        real = path.resolve()
    except (RuntimeError, OSError):  # Python 3.11 says a loop with RuntimeError, later ones with OSError
        return None
    return next((run for run in real.parents if (run / CONFIG_FILE).is_file()), None)


def busy(folder: Path) -> ConfigError:
    """The refusal of a run or probe another process holds (`RunDir.locked`, `held`, `in_use`)."""
    return ConfigError(f"{folder} is in use by another coinflip process; let it finish or stop it")


def in_use(root: Path) -> bool:
    """Whether a live coinflip process holds the run's lock (`RunDir.locked`), asked without waiting, creating a
    file, or holding the lock past the asking (a free lock is let go at once)."""
    try:
        with open_regular(root / "configs" / "run.lock", within=root) as handle:
            return flock(handle) is False
    except (OSError, UnreadableFile):
        return False


@contextlib.contextmanager
def held(folder: Path) -> Iterator[None]:
    """One coinflip process at a time in `folder` (a probe's: a second would rewrite the questions its running runs
    ask), as `RunDir.locked` holds a run's: a lock on the folder itself."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # not made yet (a new probe into its --work-dir): nobody else's either
        yield
        return
    try:
        if flock(fd) is False:
            raise busy(folder)
        yield
    finally:
        os.close(fd)


def _clear_for_own(path: Path) -> None:
    """Remove a link, FIFO, socket or device at `path`, where the run's own file or folder goes."""
    if special(path):
        path.unlink()


def _lock_draft(draft: Path) -> Any:
    """The maker's lock on a draft until it is published: the kernel drops it when the maker dies."""
    (draft / "configs").mkdir()
    handle = (draft / "configs" / "run.lock").open("a")
    if flock(handle) is None:  # a new folder: nobody else has it, unless there are no locks here
        handle.close()
        return None
    return handle


def clear_lost_drafts(work_dir: Path) -> None:
    """Remove the drafts whose maker was killed: unlocked and unchanged for DRAFT_GRACE_S (the age
    covers the microseconds before the lock). Without advisory locks only the age tells: a day."""
    try:
        entries = [e for e in os.scandir(work_dir) if DRAFT.fullmatch(e.name) and e.is_dir(follow_symlinks=False)]
    except OSError:
        return
    for entry in entries:
        with contextlib.suppress(OSError):
            _clear_if_lost(Path(entry.path))


def _clear_if_lost(draft: Path) -> None:
    """Remove `draft` if it lost its maker, its lock taken first: a live maker never loses its folder."""
    age = time.time() - draft.lstat().st_mtime
    if age <= DRAFT_GRACE_S or (not LOCKS and age <= DRAFT_UNLOCKED_S):
        return
    if not LOCKS:
        shutil.rmtree(draft, ignore_errors=True)
        return
    try:  # never a FIFO's wait, never through a link
        fd = os.open(draft / "configs" / "run.lock", os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except FileNotFoundError:  # killed before its lock existed, if all it holds is what that leaves
        found = os.listdir(draft)  # a user's folder named like a draft holds more
        if not found or (found == ["configs"] and not os.listdir(draft / "configs")):
            shutil.rmtree(draft, ignore_errors=True)
        return
    try:  # an OSError: not a file coinflip locks, left alone (the caller suppresses it)
        taken = flock(fd)  # True: its maker is dead; None: no locks here, and only the age tells
        if taken or (taken is None and age > DRAFT_UNLOCKED_S):
            shutil.rmtree(draft, ignore_errors=True)
    finally:
        os.close(fd)


def load_saved_config(root: Path, check: bool = True) -> dict[str, Any]:
    """A run's saved settings, checked as strictly as typed ones; `check=False`: only to be shown."""
    path = root / CONFIG_FILE
    try:
        data = read_settings(path, CONFIG_LIMIT, within=root)
    except FileNotFoundError:
        raise ConfigError(f"{root} is not a coinflip run directory (no {CONFIG_FILE})") from None
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("config"), dict)
        or not isinstance(data.get("fingerprint"), dict)
        or not data["config"].get("model")
    ):
        raise ConfigError(f"{path}: not a coinflip task config")
    if check and not (whole(version := data["config"].get("version", 1)) and 1 <= version <= SETTINGS_VERSION):
        raise ConfigError(  # read as today's, a newer layout's settings would be misread, not refused
            f"{path}: settings version {version!r}; this coinflip reads 1 to {SETTINGS_VERSION} (a newer one wrote it?)"
        )
    data["config"] = saved_settings(data["config"])  # as this version reads them, whatever wrote them
    if "subset" not in data["fingerprint"]:  # saved before subsets were drawn: --limit took the first N
        data["config"].setdefault("limit_mode", "first")
        data["fingerprint"]["subset"] = {"mode": "first", "seed": data["config"].get("seed", 42)}
    if check:
        _check_saved(path, data)
    return data


def _check_saved(path: Path, data: dict[str, Any]) -> None:
    """TaskConfig's checks (fields a newer coinflip wrote are left alone); the counts are counts."""
    known = set(TaskConfig.field_names()) - {"dataset_args", "use_cache", "api_key", "pricing_file"}  # folded in
    try:
        TaskConfig(**{k: v for k, v in data["config"].items() if k in known}, api_key="")  # never $OPENAI_API_KEY's
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    samples, subset = data.get("samples"), data.get("subset")
    if samples is not None and not whole(samples, MAX_ID * REPEATS_MAX):  # more than a run can hold: a hand edit
        raise ConfigError(f"{path}: samples must be a whole number >= 0, below {MAX_ID * REPEATS_MAX}")
    if subset is not None and (
        not isinstance(subset, dict) or not all(whole(subset.get(k, 0), MAX_ID) for k in ("count", "of"))
    ):
        raise ConfigError(f"{path}: subset must hold whole numbers >= 0, below {MAX_ID}, as its count and of")
