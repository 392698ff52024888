"""The README's settings tables are what the settings' declarations make: docs and code cannot drift."""

from __future__ import annotations

from coinflip._docs import evalscope_table, rewrite, settings_table
from coinflip.config import TaskConfig, settings

from .conftest import REPO, run_cli


def test_the_readme_holds_the_generated_tables() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert rewrite(readme) == readme, "run: python -m coinflip._docs README.md"
    assert settings_table() in readme and evalscope_table() in readme


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
