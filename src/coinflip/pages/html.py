"""Every page is a Jinja2 template under templates/, autoescaped, imported on first use; every value passes `shown`
(unshowable characters become U+FFFD, long values are cut), every link `link`."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
import re
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._terminal import UNSHOWABLE

if TYPE_CHECKING:
    from jinja2 import Environment
    from jinja2.bccache import BytecodeCache


_UNSHOWABLE = re.compile(f"[{UNSHOWABLE}]")  # the terminal's set (_terminal.py), carriage return kept
SHOWN_MAX = 20_000  # characters of one value on a page (replies are clipped shorter before, with a note)
_LINK = re.compile(r"(\./)?[A-Za-z0-9._~%/-]+|https?://[A-Za-z0-9._~%/?#&=+:@!$,;-]+")


def shown(value: Any) -> str:
    """As text, every unshowable character U+FFFD, at most SHOWN_MAX characters."""
    try:
        text = _UNSHOWABLE.sub("\ufffd", value if isinstance(value, str) else str(value))
    except ValueError:  # a whole number past Python's 4300 digits
        return "(a number too long to show)"
    if len(text) <= SHOWN_MAX:
        return text
    half = SHOWN_MAX // 2
    return f"{text[:half]} [... {len(text) - SHOWN_MAX:,} characters not shown ...] {text[-half:]}"


def _finalize(value: Any) -> Any:
    if hasattr(value, "__html__"):  # Markup, tojson's output or a macro's: replacing characters cannot make markup
        return type(value)(_UNSHOWABLE.sub("\ufffd", value))
    return shown(value)


def _plain(data: Any) -> Any:
    """For tojson: each string (keys too) `shown`, NaN and the infinities null (JSON has no such numbers)."""
    if isinstance(data, str):
        return shown(data)
    if isinstance(data, dict):
        return {_plain(str(k)): _plain(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_plain(v) for v in data]
    if isinstance(data, float) and not math.isfinite(data):
        return None
    return data


def text(value: Any, limit: int = 300) -> str:
    out = value if isinstance(value, str) else "" if value is None else str(value)
    return out if len(out) <= limit else out[: limit - 1] + "…"


def link(target: Any) -> str:
    """A relative path below the page's folder, or an http(s) URL; anything else (javascript:, ../) is "#"."""
    from urllib.parse import unquote

    text = target if isinstance(target, str) else ""
    if not _LINK.fullmatch(text) or text.startswith("/") or ".." in unquote(text).split("/"):
        return "#"
    return text if text.startswith(("./", "http://", "https://")) else "./" + text


def relative(path: str) -> str:
    """The href of a file below the page's folder, quoted: a name in any letters stays a link, not "#"."""
    from urllib.parse import quote

    return link("./" + quote(path, errors="surrogateescape"))  # a folder named in bytes that are not UTF-8: those bytes


def number(value: Any) -> float | None:
    """A finite number, or None (a string where a count should be, NaN, a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        value = float(value)
    except OverflowError:  # a whole number past a float's range
        return None
    return value if math.isfinite(value) else None


def fmt(value: Any, spec: str = ".4f", missing: str = "undefined") -> str:
    """A number in `spec`; anything else (NaN, 400 digits: format() would raise) as it is."""
    if value is None:
        return missing
    if number(value) is None:
        return str(value)
    if spec == "d":
        return str(int(value)) if float(value).is_integer() else f"{value:g}"
    return format(value, spec)


def ends(pair: list[float] | None) -> tuple[float | None, float | None]:
    """An interval's two finite ends, or (None, None): half an interval ([0.4, NaN]) is none."""
    lo, hi = (number(pair[0]), number(pair[1])) if isinstance(pair, list) and len(pair) == 2 else (None, None)
    return (lo, hi) if lo is not None and hi is not None else (None, None)


def span(pair: list[float] | None) -> str:
    lo, hi = ends(pair)
    return "-" if lo is None or hi is None else f"{lo:.3f} - {hi:.3f}"


def warning_label(report: Any, warning: Any) -> str:
    """INCOMPLETE for a warning about samples an incomplete run lacks (it says how to resume), else
    WARNING: one rule for the terminal and the page."""
    incomplete = isinstance(report, Mapping) and report.get("complete") is False and "resume" in str(warning)
    return "INCOMPLETE" if incomplete else "WARNING"


def _bytecode_cache() -> BytecodeCache | None:
    """Jinja's own cache of compiled templates, in its private folder under the temp directory: compiling the
    run page's templates was a tenth of a one-question run. A cache that cannot be made, read or written is no
    cache, never a page that fails."""
    import jinja2

    class Cache(jinja2.FileSystemBytecodeCache):
        def load_bytecode(self, bucket: Any) -> None:
            try:
                super().load_bytecode(bucket)
            except Exception:  # cut short, or not what Jinja wrote (its checksum is a pickle): compiled afresh
                bucket.reset()

        def dump_bytecode(self, bucket: Any) -> None:
            with contextlib.suppress(OSError):  # a full disk, the folder cleared away
                super().dump_bytecode(bucket)

    try:  # Jinja keys code by a template's name and path: named here by Jinja's version and the options below too
        if tempfile.gettempdir() == os.getcwd():  # Python's last resort where no temp folder is writable: the user's
            return None
        maker = hashlib.sha1(jinja2.__version__.encode() + Path(__file__).read_bytes()).hexdigest()[:16]
        return Cache(pattern=f"__coinflip_{maker}_%s.cache")
    except (OSError, RuntimeError, AttributeError):  # no temp or current folder, another user's, a Jinja unnamed
        return None


@functools.cache
def environment() -> Environment:
    from jinja2 import Environment, PackageLoader, StrictUndefined

    env = Environment(
        loader=PackageLoader("coinflip.pages", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        finalize=_finalize,
        bytecode_cache=_bytecode_cache(),
    )
    env.filters["fmt"] = fmt
    env.filters["link"] = link
    env.filters["span"] = span
    # tojson escapes <, >, & and ' so the JSON cannot end its <script> element; keep key order
    env.policies["json.dumps_function"] = lambda data, **kwargs: json.dumps(_plain(data), **kwargs)
    env.policies["json.dumps_kwargs"] = {"ensure_ascii": False, "separators": (",", ":"), "allow_nan": False}
    return env


def render_template(name: str, **context: Any) -> str:
    return "".join(stream_template(name, **context))


def stream_template(name: str, **context: Any) -> Iterator[str]:
    """The page in pieces of a couple of hundred template outputs: a run page of 3,333 samples is written as it
    is made, never held whole (a peak of 12 MB less)."""
    stream = environment().get_template(name).stream(**context)
    stream.enable_buffering(200)
    return iter(stream)
