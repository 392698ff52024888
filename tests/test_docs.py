"""The docs' settings tables are what the settings' declarations make: docs and code cannot drift."""

from __future__ import annotations

import re
import sys

from coinflip.config import TaskConfig, settings

from .conftest import REPO, run_cli

sys.path.insert(0, str(REPO / "scripts"))
import first_screen  # noqa: E402  (scripts/ is not a package)
from settings_docs import PAGE, evalscope_table, rewrite, settings_table  # noqa: E402


def test_the_settings_page_holds_the_generated_tables() -> None:
    page = (REPO / PAGE).read_text(encoding="utf-8")
    assert rewrite(page) == page, "run: python scripts/settings_docs.py"
    assert settings_table() in page and evalscope_table() in page


def test_every_setting_is_on_the_cli_in_the_python_api_and_in_the_docs() -> None:
    table = settings_table()
    help_text = run_cli("eval", "--help").stdout
    for s in settings():
        assert s.name in TaskConfig.field_names()
        if not s.unused:
            assert f"`{s.name}`" in table
        if s.flag and not s.unused:
            assert s.flag.split("/")[0] in help_text, s.name
    probe_help = run_cli("probe", "--help").stdout
    for flag in ("--few-shot-num", "--prompt-template", "--generation-config", "--repeats", "--stream"):
        assert flag in probe_help


def test_the_readme_is_a_front_door_and_its_links_lead_somewhere() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    links = re.findall(r"\]\((docs/[^)#]+)", readme)
    assert links and all((REPO / link).is_file() for link in links), links
    assert first_screen.BEGIN in readme and first_screen.END in readme
    assert first_screen.readme_command(readme)[:3] == ["eval", "--model", "smollm2"]


def test_the_first_screen_keeps_what_a_run_prints_and_drops_only_what_varies() -> None:
    """scripts/first_screen.py on a baseline (the README's block is SmolLM2's, checked by .ci/run):
    two runs give the same screen, with the table, the notes and where the run landed."""
    args = ["eval", "--model", "oracle", "--limit", "20"]
    screen = first_screen.first_screen(args)
    assert screen == first_screen.first_screen(args)
    assert "f1_score (primary)" in screen and "covered 20 of 3333 questions (stratified, seed 42)" in screen
    assert "run directory: outputs/<timestamp>" in screen and "WARNING" not in screen
    assert not re.search(r"\d{8}_\d{6}", screen)
    readme = "intro\n" + first_screen.BEGIN + "\nold\n" + first_screen.END + "\nrest\n"
    written = first_screen.with_screen(readme, args, screen)
    assert written.startswith("intro\n") and written.endswith(first_screen.END + "\nrest\n")
    assert "$ coinflip eval --model oracle --limit 20\n" + screen in written


def test_the_house_names_every_module_and_no_module_that_is_gone() -> None:
    """The development page's house is one line per module: a module added or removed without it drifts."""
    page = (REPO / "docs" / "development.md").read_text(encoding="utf-8")
    house = page[page.index("<!-- BEGIN the house") : page.index("<!-- END the house")]
    package = REPO / "src" / "coinflip"
    modules = {p.relative_to(package).as_posix() for p in package.rglob("*.py")}
    named = {m for m in modules if f"`{m.rsplit('/', 1)[-1]}`" in house or f"`{m}`" in house}
    assert modules - {"__init__.py"} - named == set(), "modules the house does not name"
    files = set(re.findall(r"`([a-z_]+\.py)`", house))
    assert files - {m.rsplit("/", 1)[-1] for m in modules} == set(), "names in the house that no module has"
