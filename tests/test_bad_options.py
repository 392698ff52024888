"""Options that cannot be used end in one line and exit 2, never a traceback; in-flight work never
exceeds the work there is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coinflip.cli import main
from coinflip.config import settings as declared
from coinflip.rundir import CONFIG_FILE
from coinflip.testing.server import FakeOpenAIServer

from .conftest import only_run_dir, read_jsonl, run_cli

DEEP = "[" * 3000 + "]" * 3000
DIGITS = "9" * 5000


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--generation-config", '{"extra_body": {"x": ' + DEEP + "}}"], "nested more than 64 levels"),
        (["--generation-config", "stop=" + DEEP], "too deep or too long"),
        (["--dataset-args", '{"coin_flip": {"x": ' + DEEP + "}}"], "nested more than 64 levels"),
        (["--generation-config", f"seed={DIGITS}"], "too deep or too long"),
        (["--generation-config", f'{{"seed": {DIGITS}}}'], "generation_config is not usable JSON"),
        (["--generation-config", '{"seed": 99999999999999999999999}'], "must fit in 64 bits"),
        (["--seed", DIGITS], "--seed"),
        (["--max-reply-mb", "1e308"], "max_reply_mb must be at most"),
        (["--timeout", "1e308"], "timeout must be at most"),
        (["--work-dir", "w/" + "x" * 256], "work_dir has a folder or file name of 256 bytes"),
        (["--work-dir", "w/" + "\u00e9" * 128], "work_dir has a folder or file name of 256 bytes"),
        (["--dataset-path", "d/" + "x" * 300], "dataset_path has a folder or file name of 300 bytes"),
        (["--use-cache", "r/" + "x" * 300], "use_cache has a folder or file name of 300 bytes"),
        (["--dataset-id", "me/coin-flip-hard"], "add --dataset-hub"),  # not the bundled set, scored as if it were
        (["--dataset-args", '{"coin_flip": {"dataset_id": "me/coin-flip-hard"}}'], "add --dataset-hub"),
        (["--generation-config", "temperature=0,max_tokens=9,temperature=1"], "the key 'temperature' is given twice"),
        (["--generation-config", '{"extra_headers": {"X-A": "1", "X-A": "2"}}'], "the key 'X-A' is given twice"),
        (["--dataset-args", '{"coin_flip": {"few_shot_num": 1, "few_shot_num": 2}}'], "'few_shot_num' is given twice"),
        (["--generation-config", 'extra_body={"a": 1, "a": 2}'], "'extra_body': the key 'a' is given twice"),
        (["--generation-config", "extra_headers={'X-K': 'sk-1', 'X-K': 'sk-2'}"], "the key 'X-K' is given twice"),
        (["--generation-config", "seed=1,logit_bias={7: 1, 7: -1}"], "'logit_bias': the key 7 is given twice"),
        (["--generation-config", "extra_headers={'X-K': 'a', 'x-k': 'b'}"], "'x-k' is given twice (names ignore case)"),
        (["--generation-config", "extra_body={None: 1}"], "has a key None that is not a text"),
    ],
)
def test_unusable_options_are_one_line(tmp_path: Path, flags: list[str], message: str) -> None:
    result = run_cli("eval", "--model", "oracle", "--limit", "2", *flags, cwd=tmp_path)
    assert message in _one_line(result)
    assert [p.name for p in tmp_path.iterdir()] == []  # nothing was made


def test_bytes_that_are_not_utf8_are_one_line(tmp_path: Path) -> None:
    args = [sys.executable, "-m", "coinflip.cli", "eval", "--model", "oracle", "--model-id", b"caf\xe9"]
    env = {k: v for k, v in os.environ.items() if not k.endswith("API_KEY")}
    result = subprocess.run(args, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert "argument 5 (after --model-id) holds bytes that are not UTF-8" in _one_line(result)
    assert list(tmp_path.iterdir()) == []


FLAGS = sorted({f.split("/")[0] for s in declared() if s.flag for f in [s.flag]} - {"--html"})


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(FLAGS), st.binary(min_size=1, max_size=6).filter(lambda b: not _utf8(b)), st.text(max_size=4))
def test_bytes_that_are_not_utf8_in_any_option_are_one_line(flag: str, raw: bytes, text: str) -> None:
    value = text + raw.decode("utf-8", "surrogateescape")  # what Python makes of such bytes in argv
    errors: list[str] = []
    import click

    echo = click.echo
    click.echo = lambda message=None, **kw: errors.append(str(message))  # type: ignore[assignment]
    try:
        with pytest.raises(SystemExit) as ended:
            main(["eval", "--model", "oracle", flag, value])
    finally:
        click.echo = echo  # type: ignore[assignment]
    assert ended.value.code == 2 and len(errors) == 1 and "not UTF-8" in errors[0]


def _utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def test_a_huge_batch_size_costs_no_more_than_the_work(tmp_path: Path) -> None:
    with FakeOpenAIServer("correct") as srv:
        result = run_cli("eval", "--model", "m", "--api-url", srv.url, "--eval-batch-size", "1000000",
                         "--limit", "2", "--work-dir", str(tmp_path))  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(next(only_run_dir(tmp_path).glob("reports/*/coin_flip.json")).read_text())
    assert report["counts"]["samples"] == 2


@pytest.mark.parametrize("flag", [("--batch",), ("--batch-write", "requests.jsonl"), ("--batch-results", "out.jsonl")])
def test_a_probe_refuses_the_batch_modes_in_one_line(tmp_path: Path, flag: tuple[str, ...]) -> None:
    """A probe sends its variants online; --batch-write crashed it with a KeyError traceback."""
    args = [*flag[:1], *(str(tmp_path / f) for f in flag[1:])]
    done = subprocess.run(
        [sys.executable, "-m", "coinflip", "probe", "--model", "oracle", "--work-dir", str(tmp_path), *args],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and ("eval's" in done.stderr or flag == ("--batch",))
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8000/v1 ", "http://127.0.0.1:8000/my models/v1", "http://127.0.0.1:8000/v1\n"]
)
def test_a_space_in_the_api_url_is_named_not_blamed_on_its_host(url: str, tmp_path: Path) -> None:
    """A space copied after the URL, or one inside its path: the line said the URL 'has no valid host and
    port', though both were right, and left the user looking for a fault where there was none."""
    line = _one_line(run_cli("eval", "--model", "m", "--api-url", url, "--limit", "1", "--work-dir", str(tmp_path)))
    assert "holds a space or a line break" in line and "host and port" not in line, line


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("c.yaml", "model: oracle\nlimit: 3\nseed: 1\nlimit: 4\n", "the key 'limit' is given twice, again on line 4"),
        (
            "c.yml",
            "model: oracle\ngeneration_config:\n  seed: 1\n  n: 1\n  seed: 2\n",
            "'seed' is given twice, again on line 5",
        ),
        ("c.json", '{"model": "oracle", "limit": 3, "limit": 4}', "the key 'limit' is given twice"),
        ("c.yaml", "model: oracle\n<<: {limit: 3}\nlimit: 4\nlimit: 5\n", "a merge key (<<, line 2)"),  # hides twice
        (
            "c.json",
            '{"model": "oracle", "dataset_args": {"coin_flip": {"few_shot_num": 1, "few_shot_num": 0}}}',
            "'few_shot_num' is given twice",
        ),
    ],
)
def test_a_setting_given_twice_in_a_file_is_refused(tmp_path: Path, name: str, text: str, message: str) -> None:
    """YAML and JSON readers let the last of two equal keys win; a config would be half ignored without a word."""
    (tmp_path / name).write_text(text, encoding="utf-8")
    result = run_cli("eval", "--config", name, "--work-dir", "w", cwd=tmp_path)
    assert message in _one_line(result) and name in _one_line(result)
    assert not (tmp_path / "w").exists()


def test_a_key_given_twice_in_a_value_of_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text('model: oracle\ngeneration_config: \'extra_body={"a": 1, "a": 2}\'\n')
    result = run_cli("eval", "--config", "c.yaml", "--work-dir", "w", cwd=tmp_path)
    assert "generation_config 'extra_body': the key 'a' is given twice" in _one_line(result)


def test_equal_keys_in_different_objects_are_not_twice(tmp_path: Path) -> None:
    text = "model: oracle\nlimit: 2\nseed: 3\ngeneration_config: {seed: 3}\n"
    text += "dataset_args: {coin_flip: {few_shot_num: 0}, other: {few_shot_num: 1}}\n"
    (tmp_path / "c.yaml").write_text(text, encoding="utf-8")
    result = run_cli("eval", "--config", "c.yaml", "--work-dir", "w", "--no-html", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    saved = json.loads(next((tmp_path / "w").glob("*/reports/*/coin_flip.json")).read_text(encoding="utf-8"))
    assert saved["counts"]["samples"] == 2 and saved.get("few_shot_num", 0) == 0


def test_a_saved_config_given_a_key_twice_is_refused_on_rescore(tmp_path: Path) -> None:
    assert (
        run_cli("eval", "--model", "oracle", "--limit", "2", "--no-html", "--work-dir", "w", cwd=tmp_path).returncode
        == 0
    )
    run = only_run_dir(tmp_path / "w")
    config = run / CONFIG_FILE
    config.write_text(config.read_text(encoding="utf-8") + "config: {model: oracle}\n", encoding="utf-8")
    assert "the key 'config' is given twice" in _one_line(run_cli("rescore", str(run), cwd=tmp_path))


EMPTY_OR_TWICE = [
    *(["eval", "--model", "oracle", flag, ""] for flag in ("--batch-write", "--batch-results", "--use-cache")),
    *(["eval", "--model", "oracle", flag, " "] for flag in ("--pricing-file", "--model-path", "--dataset-dir")),
    *(["eval", "--model", "oracle", flag, ""] for flag in ("--config", "--dataset-path", "--work-dir")),
    *([command, ""] for command in ("rescore", "answers", "view", "stats")),
    ["compare", ".", ""],
    ["generate", "--out", ""],
    ["eval", "--model", "oracle", "--generation-config", "temperature=0", "--generation-config", "max_tokens=9"],
    ["eval", "--model", "oracle", "--dataset-args", "{}", "--limit", "5", "--dataset-args={}"],
    ["eval", "--config", "a.yaml", "--model", "oracle", "--config", "b.yaml"],
    ["probe", "--model", "oracle", "--model-args", "{}", "--model-args", "{}"],
]


@pytest.mark.parametrize("argv", EMPTY_OR_TWICE, ids=" ".join)
def test_an_empty_path_or_an_option_given_twice_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """An empty path (an unset shell variable) was the same as no flag, or the current folder; an option holding
    several settings given twice kept only the second's: either way the run was not the one asked for."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as ended:
        main(argv)
    said = capsys.readouterr().err.strip()
    assert ended.value.code == 2 and len(said.splitlines()) == 1, said
    assert ("empty path" in said) != ("given twice: give its settings in one" in said), said
    assert list(tmp_path.iterdir()) == []


def test_an_option_of_one_value_given_again_is_the_last_and_a_list_adds_up(tmp_path: Path) -> None:
    """The convention a wrapper script's defaults rely on (`coinflip eval --limit 10 "$@"`)."""
    args = ("--datasets", "coin_flip", "--datasets", "coin_flip", "--limit", "9", "--limit", "2", "--no-html")
    assert run_cli("eval", "--model", "oracle", *args, "--work-dir", str(tmp_path)).returncode == 0
    assert len(read_jsonl(only_run_dir(tmp_path) / "predictions/oracle/coin_flip.jsonl")) == 2
