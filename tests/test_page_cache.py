"""Compiled templates are kept between processes (Jinja's bytecode cache, in its own folder under the temp
directory). Whatever that folder holds or lacks, a page is written, and the same page: a cache is never a
reason for a page to fail or to change."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import jinja2
import pytest
from jinja2 import Environment, FileSystemBytecodeCache, PackageLoader
from jinja2.bccache import bc_magic

from coinflip.pages import html
from coinflip.run.runner import rescore

from .conftest import only_run_dir, run_cli

PAGE = "reports/oracle/coin_flip.html"


def cache_dir(temp: Path) -> Path:
    return temp / f"_jinja2-cache-{os.getuid()}"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    """A run made with an empty temp directory, and its page."""
    work, temp = tmp_path_factory.mktemp("work"), tmp_path_factory.mktemp("temp")
    made = run_cli("eval", "--model", "oracle", "--limit", "3", "--work-dir", str(work), env={"TMPDIR": str(temp)})
    assert made.returncode == 0, made.stderr
    assert any(cache_dir(temp).iterdir())  # the templates it compiled are kept
    root = only_run_dir(work)
    return root, (root / PAGE).read_bytes()


def rescored(root: Path, temp: Path) -> bytes:
    """The page written again from the saved run, in a fresh process with `temp` as its temp directory."""
    (root / PAGE).unlink(missing_ok=True)  # a test before may have failed to write it
    done = run_cli("rescore", str(root), env={"TMPDIR": str(temp)})
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return (root / PAGE).read_bytes()


def test_a_cache_of_garbage_or_cut_short_is_compiled_afresh(run: tuple[Path, bytes], tmp_path: Path) -> None:
    root, page = run
    assert rescored(root, tmp_path) == page  # the cache filled
    files = sorted(cache_dir(tmp_path).iterdir())
    for number, path in enumerate(files):
        whole, magic = path.read_bytes(), len(bc_magic)
        # cut inside the checksum (a pickle), inside the code (marshal); not a pickle after the magic; nothing
        wrong = [whole[: magic + 3], whole[: len(whole) // 2], bc_magic + b"\xff not a pickle", b""]
        path.write_bytes(wrong[number % 4])
    assert rescored(root, tmp_path) == page


def test_a_cache_folder_that_is_not_the_users_own_is_no_cache(run: tuple[Path, bytes], tmp_path: Path) -> None:
    """A link where the folder should be (someone else's folder, say): Jinja refuses it, the page is written."""
    root, page = run
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "temp").mkdir()
    cache_dir(tmp_path / "temp").symlink_to(elsewhere)
    assert rescored(root, tmp_path / "temp") == page
    assert not any(elsewhere.iterdir())


@pytest.fixture
def fresh_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    html.environment.cache_clear()
    try:
        yield
    finally:
        html.environment.cache_clear()  # the next test's pages use the usual temp directory


@pytest.mark.usefixtures("fresh_environment")
def test_a_cache_folder_cleared_away_mid_run_is_no_cache(run: tuple[Path, bytes], tmp_path: Path) -> None:
    """A temp cleaner that removes the folder after it was made: nothing can be written there, the page is."""
    root, page = run
    html.environment()  # the folder made
    shutil.rmtree(cache_dir(tmp_path))
    (root / PAGE).unlink(missing_ok=True)  # a test before may have failed to write it
    rescore(root, show=False)
    assert (root / PAGE).read_bytes() == page
    assert not cache_dir(tmp_path).exists()


@pytest.mark.usefixtures("fresh_environment")
@pytest.mark.parametrize("jinja", [jinja2.__version__, "3.0.0"])
def test_templates_compiled_by_another_coinflip_or_jinja_are_not_used(
    run: tuple[Path, bytes], jinja: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same template files compiled with other options (an older coinflip's, in the shared folder under
    Jinja's key of name and path) or by another Jinja: the page is this coinflip's, not theirs."""
    root, page = run
    with monkeypatch.context() as patched:
        patched.setattr(jinja2, "__version__", jinja)
        cache = html._bytecode_cache() if jinja != jinja2.__version__ else FileSystemBytecodeCache()
        other = Environment(loader=PackageLoader("coinflip.pages", "templates"), bytecode_cache=cache)
        other.filters.update(fmt=html.fmt, link=html.link, span=html.span)
        for name in other.list_templates():  # no trim_blocks, no autoescape: another page
            other.get_template(name)
    (root / PAGE).unlink(missing_ok=True)
    rescore(root, show=False)
    assert (root / PAGE).read_bytes() == page


@pytest.mark.usefixtures("fresh_environment")
def test_no_cache_is_left_in_the_current_folder(
    run: tuple[Path, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No temp folder writable (a read-only /tmp): Python's temp directory is then the current folder, the
    user's work directory say, where a cache folder would stand among the runs."""
    root, page = run
    monkeypatch.chdir(tmp_path)  # the fixture made it the temp directory
    (root / PAGE).unlink(missing_ok=True)
    rescore(root, show=False)
    assert (root / PAGE).read_bytes() == page
    assert list(tmp_path.iterdir()) == []


@pytest.mark.usefixtures("fresh_environment")
def test_a_current_folder_removed_under_the_command_still_gets_the_page(
    run: tuple[Path, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shell left in a folder someone deleted: where the temp directory is asked about, the page is still made."""
    root, page = run
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    (root / PAGE).unlink()
    rescore(root, show=False)
    assert (root / PAGE).read_bytes() == page
