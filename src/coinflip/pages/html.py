"""Every HTML page is a Jinja2 template rendered with autoescape on: a value from a run directory
(a model name, a reply, a config value someone edited) reaches the page as text unless a template
says otherwise, and no template does. Python computes what to show (numbers, chart geometry,
labels); the templates under `templates/` only lay it out.

Jinja2 is imported on first use, so `import coinflip` and `coinflip --help` do not pay for it.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jinja2 import Environment


def number(value: Any) -> float | None:
    """A finite number, or None for anything else (a string where a count should be, NaN, a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        value = float(value)
    except OverflowError:  # a whole number past a float's range
        return None
    return value if math.isfinite(value) else None


def fmt(value: Any, spec: str = ".4f", missing: str = "undefined") -> str:
    """A number in `spec`; whatever else a report holds there is shown as it is (and escaped)."""
    if value is None:
        return missing
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if number(value) is None:  # NaN, an infinity, or a whole number of 400 digits (format() would raise)
        return str(value)
    if spec == "d":
        return str(int(value)) if float(value).is_integer() else f"{value:g}"
    return format(value, spec)


def ends(pair: list[float] | None) -> tuple[float | None, float | None]:
    """An interval's two ends as finite numbers (None where it is not two of them)."""
    return (number(pair[0]), number(pair[1])) if pair and len(pair) == 2 else (None, None)


def span(pair: list[float] | None) -> str:
    """An interval as "low - high", or "-" where it has no two finite ends."""
    lo, hi = ends(pair)
    return "-" if lo is None or hi is None else f"{lo:.3f} - {hi:.3f}"


@functools.cache
def environment() -> Environment:
    """The one template environment: autoescape everywhere, undefined names fail loudly."""
    from jinja2 import Environment, PackageLoader, StrictUndefined

    env = Environment(
        loader=PackageLoader("coinflip.pages", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["fmt"] = fmt
    # tojson escapes <, >, & and ' so the JSON cannot end its <script> element; keep key order
    env.policies["json.dumps_kwargs"] = {"ensure_ascii": False, "separators": (",", ":"), "allow_nan": False}
    return env


def render_template(name: str, **context: Any) -> str:
    return environment().get_template(name).render(**context)
