"""A stop signal during `coinflip probe`: one line that resumes the probe when it can be resumed,
and offers no resume that would be refused. Between its runs the probe said a bare 'stopped by
SIGTERM'; stopped before its base run existed, it offered `coinflip probe --use-cache`, which then
failed ('its base run never started').

The signal is sent from inside the step, by the process to itself: Python runs the handler at once,
so each test stops the probe at exactly that step, with no timing involved."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from coinflip.cli import main
from coinflip.probes import run as probe_run
from coinflip.run import runner


def command(*args: str) -> int:
    try:
        main(list(args))
    except SystemExit as ended:
        return int(ended.code or 0)
    return 0


def stop_in(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> None:
    """The first call of module.name sends SIGTERM to this process as it begins."""
    real: Callable[..., Any] = getattr(module, name)

    def signalled(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(module, name, real)
        os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, signalled)


def probed(work: Path) -> int:
    return command("probe", "--model", "oracle", "--limit", "10", "--variants", "tails", "--lengths", "0",
                   "--work-dir", str(work))  # fmt: skip


def test_a_stop_between_the_probes_runs_says_how_to_resume_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stop_in(monkeypatch, probe_run, "render")  # every run done, probe.html not yet written
    assert probed(tmp_path) == 1
    (root,) = tmp_path.glob("probe_*")
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == f"error: stopped by SIGTERM; resume with: coinflip probe --use-cache {root}", err
    assert command("probe", "--use-cache", str(root)) == 0
    assert (root / "probe.html").is_file()


@pytest.mark.parametrize(
    ("module", "name", "line"),
    [
        (probe_run, "_write_data", "error: stopped by SIGTERM before the probe started"),
        (runner, "prepare", "error: stopped by SIGTERM before the run started"),  # the base run's
    ],
    ids=["writing its data", "starting its base run"],
)
def test_a_stop_before_the_probes_base_run_offers_no_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], module: Any, name: str,
    line: str,
) -> None:  # fmt: skip
    stop_in(monkeypatch, module, name)
    assert probed(tmp_path) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == line, err
