"""What the command line takes beyond click's own checks: no empty path, and each option that holds
several settings at most once."""

from __future__ import annotations

from typing import Any

import click


class WholeOption(click.Option):
    """An option whose one value holds several settings (a file, JSON or key=value pairs). Given twice, the second
    replaced the first whole (`--generation-config temperature=0 --generation-config max_tokens=9` dropped the
    temperature), where the user meant both: refused. An option of one value follows the convention, the last wins."""


class OnceCommand(click.Command):
    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not ctx.resilient_parsing:
            _, _, order = self.make_parser(ctx).parse_args(args=list(args))
            whole = [p for p in order if isinstance(p, WholeOption)]
            twice = next((p for n, p in enumerate(whole) if any(q is p for q in whole[:n])), None)
            if twice is not None:
                raise click.UsageError(
                    f"{' / '.join(twice.opts)} given twice: give its settings in one (the second would replace the "
                    "first whole)",
                    ctx,
                )
        return super().parse_args(ctx, args)


class OnceGroup(click.Group):
    command_class = OnceCommand


class PathText(click.Path):
    """click's Path, refusing an empty one: `''` (an unset shell variable) read as the current folder."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value.strip():
            self.fail("an empty path: give one", param, ctx)
        return super().convert(value, param, ctx)
