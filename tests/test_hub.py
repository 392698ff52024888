"""Official data from a hub: downloaded once into a local cache, read from the cache afterwards.

The hubs are unreachable here, so the tests lay out files exactly as the hub serves them
(Parquet shards under data/) and check the loading code against those.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from coinflip.data import hub
from coinflip.data.generate import PeopleRange, iter_questions
from coinflip.data.load import load_dataset
from coinflip.errors import DataError

from .conftest import PATIENCE_S, only_run_dir, run_cli, wait_for


def _hub_files(root: Path) -> dict[str, list[tuple[str, str]]]:
    """The layout of extraordinarylab/coin-flip on the hub: data/<split>-00000-of-00001.parquet."""
    splits = {
        "test": list(iter_questions(PeopleRange(4, 4), 40, 1)),
        "validation": list(iter_questions(PeopleRange(2, 2), 12, 2)),
    }
    (root / "data").mkdir(parents=True)
    for split, rows in splits.items():
        table = pa.Table.from_pylist([{"question": q, "answer": a} for q, a in rows])
        pq.write_table(table, root / "data" / f"{split}-00000-of-00001.parquet")
    (root / "README.md").write_text("---\nconfigs: ...\n---\n")
    return splits


def test_cached_hub_snapshot_is_used_without_network(tmp_path: Path) -> None:
    target = tmp_path / "cache" / "huggingface" / "extraordinarylab___coin-flip"
    splits = _hub_files(target)
    (target / hub.MARKER).touch()
    env = {"COINFLIP_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
    result = run_cli("eval", "--model", "oracle", "--dataset-hub", "huggingface", "--few-shot-num", "2",
                     "--work-dir", str(tmp_path / "out"), env=env)  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads((only_run_dir(tmp_path / "out") / "reports/oracle/coin_flip.json").read_text())
    assert report["dataset"]["source"] == "huggingface" and report["dataset"]["id"] == "extraordinarylab/coin-flip"
    assert report["counts"]["samples"] == len(splits["test"]) == 40
    assert report["metrics"]["accuracy"] == 1.0


def test_first_use_downloads_into_the_cache_then_reads_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COINFLIP_CACHE", str(tmp_path / "cache"))
    calls: list[tuple[str, str]] = []

    def download(name: str, dataset_id: str, into: Path) -> None:  # what the hub client leaves on disk
        calls.append((name, dataset_id))
        _hub_files(into)

    monkeypatch.setattr(hub, "_download", download)
    first = load_dataset("test", hub="modelscope")
    second = load_dataset("validation", hub="modelscope")
    assert calls == [("modelscope", "extraordinarylab/coin-flip")]
    assert len(first) == 40 and len(second) == 12
    assert (hub.cache_dir("modelscope", "extraordinarylab/coin-flip") / hub.MARKER).exists()


def test_failed_download_leaves_no_half_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COINFLIP_CACHE", str(tmp_path / "cache"))

    def broken(name: str, dataset_id: str, into: Path) -> None:
        (into / "data").mkdir(parents=True)
        (into / "data" / "test-00000-of-00001.parquet").write_bytes(b"partial")
        raise ConnectionError("connection reset")

    monkeypatch.setattr(hub, "_download", broken)
    with pytest.raises(DataError, match="cannot download extraordinarylab/coin-flip from huggingface"):
        load_dataset("test", hub="huggingface")
    assert not any((tmp_path / "cache").rglob("*.parquet"))


def test_no_network_and_no_cache_says_so_and_names_the_offline_choices(tmp_path: Path) -> None:
    env = {"COINFLIP_CACHE": str(tmp_path / "empty"), "HF_HUB_OFFLINE": "1"}
    result = run_cli("eval", "--model", "oracle", "--dataset-hub", "huggingface", "--work-dir", str(tmp_path), env=env)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert "not cached" in lines[0] and "bundled data" in lines[0] and "--dataset-path" in lines[0]


def test_huggingface_download_through_the_real_client_then_offline(tmp_path: Path) -> None:
    """huggingface_hub itself downloads from a local stand-in of the Hub; the second run needs no Hub."""
    from .fake_hub import FakeHub

    repo = tmp_path / "repo"
    splits = _hub_files(repo)
    cache = tmp_path / "cache"
    with FakeHub(repo, "extraordinarylab/coin-flip") as fake:
        env = {"HF_ENDPOINT": fake.url, "HF_HOME": str(tmp_path / "hf"), "COINFLIP_CACHE": str(cache)}
        first = run_cli(
            "eval", "--model", "oracle", "--dataset-hub", "huggingface", "--work-dir", str(tmp_path / "a"), env=env
        )
        hits = list(fake.hits)
    assert first.returncode == 0, first.stderr
    assert ("info", "/api/datasets/extraordinarylab/coin-flip/revision/main") in hits
    assert ("GET", "data/test-00000-of-00001.parquet") in hits and (
        "GET",
        "data/validation-00000-of-00001.parquet",
    ) in hits
    assert (cache / "huggingface" / "extraordinarylab___coin-flip" / "data" / "test-00000-of-00001.parquet").is_file()
    report = json.loads((only_run_dir(tmp_path / "a") / "reports/oracle/coin_flip.json").read_text())
    assert report["counts"]["samples"] == len(splits["test"])
    # the Hub is gone now: the cache answers
    env["HF_ENDPOINT"] = "http://127.0.0.1:9"
    second = run_cli(
        "eval", "--model", "oracle", "--dataset-hub", "huggingface", "--work-dir", str(tmp_path / "b"), env=env
    )
    assert second.returncode == 0, second.stderr
    again = json.loads((only_run_dir(tmp_path / "b") / "reports/oracle/coin_flip.json").read_text())
    assert again["dataset"]["sha256"] == report["dataset"]["sha256"]


def test_first_runs_started_together_download_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every first run cleared the one .partial folder, the others' download in progress too, and renamed its own
    over a finished copy: runs started together on first use could leave part of the files marked complete."""
    monkeypatch.setenv("COINFLIP_CACHE", str(tmp_path / "cache"))
    calls: list[Path] = []
    go = threading.Event()

    def download(name: str, dataset_id: str, into: Path) -> None:
        calls.append(into)
        if len(calls) == 1:
            go.wait(PATIENCE_S)  # the first download is under way while the second run starts
        _hub_files(into)

    def waiting(lock: Path) -> bool:  # a lock someone waits for: '->' lines of /proc/locks, by device:inode
        inode = f":{lock.stat().st_ino}" if lock.exists() else "-"
        return any("->" in line and any(f.endswith(inode) for f in line.split()) for line in open("/proc/locks"))

    monkeypatch.setattr(hub, "_download", download)
    target = hub.cache_dir("huggingface", hub.DATASET_ID)
    found: list[Path] = []
    runs = [threading.Thread(target=lambda: found.append(hub.fetch("huggingface"))) for _ in range(2)]
    runs[0].start()
    wait_for(lambda: calls, "the first download")
    runs[1].start()
    wait_for(lambda: len(calls) > 1 or waiting(target.with_name(target.name + ".lock")), "the second run")
    go.set()
    for run in runs:
        run.join()
    assert len(calls) == 1 and found == [target, target]
    assert len(load_dataset("validation", hub="huggingface")) == 12


def test_a_cache_folder_that_cannot_be_made_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("COINFLIP_CACHE", str(tmp_path / "file" / "cache"))
    with pytest.raises(DataError, match=r"huggingface: cannot write the cache \(Not a directory\); see --dataset-dir"):
        load_dataset("test", hub="huggingface")


@pytest.mark.parametrize(
    "kept", [("00000-of-00002",), ("00000-of-00003", "00002-of-00003"), ("00000-of-00002-5d3a2e9e8c1b",)]
)
def test_a_cache_missing_some_shards_of_a_split_stops_in_one_line(tmp_path: Path, kept: tuple[str, ...]) -> None:
    """A snapshot copied in by hand (or a hub's files half-fetched) holding test-00000-of-00002.parquet
    but not its second shard: scoring the first half as the whole split would be a wrong score, silently."""
    target = tmp_path / "cache" / "huggingface" / "extraordinarylab___coin-flip"
    rows = _hub_files(target)["test"]
    (target / "data" / "test-00000-of-00001.parquet").unlink()
    for n, name in enumerate(kept):
        table = pa.Table.from_pylist([{"question": q, "answer": a} for q, a in rows[n * 10 : n * 10 + 10]])
        pq.write_table(table, target / "data" / f"test-{name}.parquet")
    (target / hub.MARKER).touch()
    env = {"COINFLIP_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
    result = run_cli("eval", "--model", "oracle", "--dataset-hub", "huggingface", "--work-dir", str(tmp_path / "out"),
                     env=env)  # fmt: skip
    assert result.returncode == 2, result.stdout
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "shard" in result.stderr and "missing" in result.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_shards_named_the_older_way_with_a_fingerprint_are_one_split(tmp_path: Path) -> None:
    """`datasets` once wrote data/test-00000-of-00002-<fingerprint>.parquet: both shards are the split."""
    rows = list(iter_questions(PeopleRange(3, 3), 20, 5))
    (tmp_path / "data").mkdir()
    for n, tag in enumerate(("5d3a2e9e8c1b", "0a7f3c21d9e4")):
        table = pa.Table.from_pylist([{"question": q, "answer": a} for q, a in rows[n * 10 : n * 10 + 10]])
        pq.write_table(table, tmp_path / "data" / f"test-0000{n}-of-00002-{tag}.parquet")
    assert [(r.question, r.answer) for r in load_dataset(path=tmp_path)] == rows


def test_a_rescore_holds_rows_to_a_cached_hub_split_and_never_downloads(tmp_path: Path) -> None:
    """A rescore read a run on hub data as saved: a hand-flipped target scored a wrong answer right. The hub's
    complete cache is read (no network); without one the rows are scored as saved, nothing downloaded."""
    target = tmp_path / "cache" / "huggingface" / "extraordinarylab___coin-flip"
    _hub_files(target)
    (target / hub.MARKER).touch()
    env = {"COINFLIP_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
    work = tmp_path / "out"
    args = ("eval", "--model", "oracle", "--dataset-hub", "huggingface", "--limit", "6", "--no-timestamp")
    assert run_cli(*args, "--work-dir", str(work), env=env).returncode == 0
    path = work / "predictions/oracle/coin_flip.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[0]["target"] = "NO" if rows[0]["target"] == "YES" else "YES"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    report = work / "reports/oracle/coin_flip.json"
    assert run_cli("rescore", str(work), env=env).returncode == 0
    held = json.loads(report.read_text())
    assert held["corrected_rows"] == 1 and held["metrics"]["accuracy"] == 1.0
    (target / hub.MARKER).unlink()  # no complete cache: no download, the rows as saved
    assert run_cli("rescore", str(work), env=env).returncode == 0 and not (target / hub.MARKER).exists()
    assert "corrected_rows" not in json.loads(report.read_text())


@pytest.mark.parametrize("where", ["--dataset-dir", "--dataset-path"])
def test_a_relative_data_folder_is_the_one_the_run_saw_when_resumed_or_rescored_elsewhere(
    tmp_path: Path, where: str
) -> None:
    """A relative --dataset-dir (a hub's cache) or --dataset-path was read again from the folder a resume or a
    rescore started in: offline, the resume failed ("cannot download"), and the rescore scored rows as saved."""
    start, other = tmp_path / "start", tmp_path / "elsewhere"
    other.mkdir()
    target = start / "cache" / "huggingface" / "extraordinarylab___coin-flip"
    _hub_files(target)
    (target / hub.MARKER).touch()
    data = ["--dataset-hub", "huggingface", "--dataset-dir", "cache"] if where == "--dataset-dir" else [
        "--dataset-path", "cache/huggingface/extraordinarylab___coin-flip"]  # fmt: skip
    env = {"COINFLIP_CACHE": str(tmp_path / "nowhere"), "HF_HUB_OFFLINE": "1"}
    first = run_cli("eval", "--model", "oracle", *data, "--limit", "6", "--no-timestamp", "--work-dir", "out",
                    cwd=start, env=env)  # fmt: skip
    assert first.returncode == 0, first.stderr
    work = start / "out"
    resumed = run_cli("eval", "--use-cache", str(work), "--limit", "10", cwd=other, env=env)
    assert resumed.returncode == 0, resumed.stderr
    report = work / "reports/oracle/coin_flip.json"
    assert json.loads(report.read_text())["counts"]["samples"] == 10
    path = work / "predictions/oracle/coin_flip.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[0]["target"] = "NO" if rows[0]["target"] == "YES" else "YES"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert run_cli("rescore", str(work), cwd=other, env=env).returncode == 0
    assert json.loads(report.read_text())["corrected_rows"] == 1


def test_a_resume_after_the_run_s_folder_moved_says_which_path_to_give_again(tmp_path: Path) -> None:
    """The data's path is saved as the run saw it (absolute): moved with its folder, a resume failed with "no such
    file" about a path the user never typed; it now names the flag to give again, and resumes with it."""
    first, moved = tmp_path / "first", tmp_path / "moved"
    first.mkdir()
    (first / "d.jsonl").write_text("".join(json.dumps({"question": q, "answer": a}) + "\n"
                                           for q, a in iter_questions(PeopleRange(3, 3), 12, 4)))  # fmt: skip
    args = ("eval", "--model", "oracle", "--limit", "4", "--no-timestamp", "--work-dir", "out")
    assert run_cli(*args, "--dataset-path", "d.jsonl", cwd=first).returncode == 0
    first.rename(moved)
    refused = run_cli("eval", "--use-cache", "out", "--limit", "8", cwd=moved)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "give --dataset-path again" in refused.stderr
    resumed = run_cli("eval", "--use-cache", "out", "--limit", "8", "--dataset-path", "d.jsonl", cwd=moved)
    assert resumed.returncode == 0, resumed.stderr


def test_a_dataset_dir_the_run_never_read_does_not_stop_its_resume(tmp_path: Path) -> None:
    """The bundled data reads no hub cache: a --dataset-dir never made refused the resume ("is not there")."""
    args = ("eval", "--model", "oracle", "--limit", "4", "--no-timestamp", "--work-dir", "out")
    assert run_cli(*args, "--dataset-dir", "never_made", cwd=tmp_path).returncode == 0
    resumed = run_cli("eval", "--use-cache", "out", "--limit", "6", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
