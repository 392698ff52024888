"""What the command line takes beyond click's own checks: each option once, and no empty path."""

from __future__ import annotations

from typing import Any

import click


class OnceCommand(click.Command):
    """A command whose single-valued options are each given once: a second `--generation-config` silently
    replaced the first (and a second `--config` the whole file), so the run was not the one asked for."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not ctx.resilient_parsing:
            _, _, order = self.make_parser(ctx).parse_args(args=list(args))
            single = [p for p in order if isinstance(p, click.Option) and not (p.multiple or p.count or p.is_eager)]
            twice = next((p for n, p in enumerate(single) if any(q is p for q in single[:n])), None)
            if twice is not None:
                raise click.UsageError(
                    f"{' / '.join(twice.opts + twice.secondary_opts)} given twice: give it once", ctx
                )
        return super().parse_args(ctx, args)


class PathText(click.Path):
    """click's Path, refusing an empty one: `''` (an unset shell variable) read as the current folder."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value.strip():
            self.fail("an empty path: give one", param, ctx)
        return super().convert(value, param, ctx)


class OnceGroup(click.Group):
    command_class = OnceCommand
