"""The runner's order of things: the config reaches the disk before any prediction does."""

from __future__ import annotations

from pathlib import Path

import pytest

from coinflip.config import TaskConfig
from coinflip.data import load_dataset
from coinflip.errors import FatalAPIError
from coinflip.runner import RequestBuilder, finish, generate, make_fingerprint, open_run
from coinflip.testing.server import FakeOpenAIServer


@pytest.mark.parametrize("model", ["oracle", "served"])
def test_the_config_is_written_before_the_first_prediction(tmp_path: Path, model: str) -> None:
    with FakeOpenAIServer("mixed") as srv:
        url = None if model == "oracle" else srv.url
        config = TaskConfig(model=model, api_url=url, work_dir=str(tmp_path), limit=30, quiet=True)
        dataset = load_dataset("test")
        selected = dataset.take(30)
        run, save = open_run(config, make_fingerprint(config, dataset), len(selected))
        calls: list[int] = []

        def save_and_check() -> None:
            size = run.predictions.stat().st_size if run.predictions.exists() else 0
            calls.append(size)
            save()

        live = generate(config, run, selected, RequestBuilder(config, []), save_and_check)
    assert calls and calls[0] == 0  # nothing was written before the config
    assert (run.root / "configs/task_config.yaml").is_file()
    report = finish(run, "coinflip", show=False, live=live)
    assert report["counts"]["samples"] == 30


def test_a_run_with_no_reply_still_gets_its_config(tmp_path: Path) -> None:
    with FakeOpenAIServer("correct", api_key="right") as srv:
        config = TaskConfig(model="m", api_url=srv.url, api_key="wrong", work_dir=str(tmp_path), limit=3, quiet=True)
        dataset = load_dataset("test")
        selected = dataset.take(3)
        run, save = open_run(config, make_fingerprint(config, dataset), len(selected))
        with pytest.raises(FatalAPIError, match="401"):
            generate(config, run, selected, RequestBuilder(config, []), save)
    assert (run.root / "configs/task_config.yaml").is_file()
