"""What a declaration cannot say: JSON and key=value text, URLs, headers, the limit's two forms, generation
settings, values that could not be sent, saved or read back. Pure: no file or environment is read."""

from __future__ import annotations

import ast
import json
import math
import os
import re
from dataclasses import fields
from typing import Any
from urllib.parse import urlsplit

from .._files import KeyTwice, Underflow, exact_float, unique_keys
from .._terminal import one_line
from ..errors import ConfigError, short
from ..secrets import GATEWAY_KEYS, masked, shown_url, slip

GENERATION_KEYS = (  # sent with every request as given (extra_body, extra_headers, extra_query: to a gateway)
    "temperature", "max_tokens", "max_completion_tokens", "top_p", "top_k", "seed", "stop", "n", "presence_penalty",
    "frequency_penalty", "repetition_penalty", "logit_bias", "reasoning_effort", "logprobs", "top_logprobs",
    "chat_template_kwargs", "extra_body", "extra_headers", "extra_query",
)  # fmt: skip
OWN_BODY_KEYS = ("model", "messages", "prompt", "stream", "stream_options", "n")
MAX_NESTING = 64  # levels of objects and lists in a setting: deeper JSON or YAML is a mistake or an attack
MAX_PARTS = 100_000  # items in all of a setting's objects and lists together
MAX_WHOLE = 2**63  # whole numbers in settings stay within 64 bits (what servers and numpy take)
NAME_MAX = 255  # bytes in one path component on Linux, macOS and Windows
PATH_MAX = os.pathconf("/", "PC_PATH_MAX") if hasattr(os, "pathconf") else 260  # bytes in a whole path, its NUL too
NUMBERS = ("temperature", "top_p", "presence_penalty", "frequency_penalty", "repetition_penalty")
WHOLES = ("max_tokens", "max_completion_tokens", "n", "top_logprobs", "top_k", "seed")
OBJECTS = ("extra_body", "extra_query", "extra_headers", "chat_template_kwargs", "logit_bias")
TYPED = (((int, float), "a number", NUMBERS), (int, "a whole number", WHOLES), (dict, "an object", OBJECTS))
_NOT_TOKEN = re.compile(r"[^!#$%&'*+\-.^_`|~0-9A-Za-z]")  # what RFC 9110's token (a header's name) may not hold


def check_url(url: Any) -> None:
    """An http(s) URL with a host and a valid port, and no credentials (they would be saved and printed)."""
    example = "e.g. http://127.0.0.1:8000/v1"
    if not isinstance(url, str) or not url.lower().startswith(("http://", "https://")):  # HTTP:// too (RFC 3986)
        raise ConfigError(f"api_url {_shown(url)!r} is not an http(s) URL, {example}")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        bad_port = "port" in str(exc).lower()  # never Python's text: it quotes the "port" of http://user:PASSWORD
        reason = "its port is no number from 1 to 65535" if bad_port else "its host is malformed"
        raise ConfigError(f"api_url {_shown(url)!r} is not a valid URL ({reason}), {example}") from None
    if parts.username is not None or parts.password is not None:
        raise ConfigError(
            f"api_url {_shown(url)!r} carries credentials; pass the key with --api-key or $COINFLIP_API_KEY "
            "(or a header with generation_config extra_headers)"
        )
    if not parts.hostname or any(c.isspace() for c in parts.netloc) or (port is not None and not 0 < port < 65536):
        raise ConfigError(f"api_url {_shown(url)!r} has no valid host and port, {example}")
    if any(c.isspace() for c in url):
        raise ConfigError(f"api_url {_shown(url)!r} holds a space or a line break: remove it (in a path: %20)")
    if not url.isascii() or any(ord(c) < 32 or ord(c) == 127 for c in url):
        raise ConfigError(f"api_url {_shown(url)!r} holds characters a URL cannot carry: percent-encode them")


def one_url(value: Any) -> str | None:
    """One endpoint: several (replicas of one model) belong behind a load balancer."""
    if value is None or value == [] or value == "":
        return None
    if not isinstance(value, (str, list, tuple)):
        raise ConfigError(f"api_url must be a URL or a list of URLs, got {short(masked(value))}")
    urls = [value] if isinstance(value, str) else list(value)
    for url in urls:
        check_url(url)
    if len(urls) > 1:
        raise ConfigError(
            f"give one --api-url, not {len(urls)}: put replicas of a model behind a load balancer (nginx, "
            "LiteLLM) or use vLLM's data parallelism (--data-parallel-size), and give its URL"
        )
    return str(urls[0])


def _shown(url: Any) -> Any:
    return shown_url(url) if isinstance(url, str) else masked(url)  # {"url": "...?key=KEY"}: no text shown


def check_limit(value: Any) -> int | float | None:
    """None or 0: everything (EvalScope's `limit: 0`); a whole number: a count; below 1: a fraction."""
    message = f"limit must be a count (10) or a fraction (0.1), got {value!r}"
    if isinstance(value, str):
        try:
            value = exact_float(value) if any(c in value for c in ".eE") else int(value)
        except Underflow:  # 1e-400, read as 0: every question
            raise ConfigError(f"limit {value} is too small a fraction for a float: it reads as 0") from None
        except ValueError:
            raise ConfigError(message) from None
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ConfigError(message)
    if isinstance(value, float) and not value.is_integer():
        if value > 1:
            raise ConfigError(f"a fractional limit must be in (0, 1], got {value}; use a whole number for a count")
        return value
    return int(value) or None


def check_values(config: Any) -> None:
    """Every value can be sent, saved and read back (see `odd_value`), and is held as a plain one (`plain`)."""
    for f in (f for f in fields(config) if f.metadata):  # not `given`, the names set
        if problem := odd_value(getattr(config, f.name)):
            raise ConfigError(f"{f.name} {problem}")
        setattr(config, f.name, plain(getattr(config, f.name)))  # a StrEnum model is saved as its text


_SURROGATE = re.compile("[\ud800-\udfff]")


def odd_value(value: Any) -> str | None:
    """Why `value` cannot be a setting's (bytes not UTF-8, too deep or large, a shared part: a YAML
    alias bomb, a key not a text, a number past 64 bits), or None; its own stack, so any depth is safe."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    seen: set[int] = set()
    parts = 0
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return "holds bytes that are not UTF-8 text: give it as UTF-8"
        elif isinstance(item, int):  # True and False too: within 64 bits
            if not -MAX_WHOLE <= item < MAX_WHOLE:
                return f"holds {short(item)}: whole numbers must fit in 64 bits"
        elif isinstance(item, float):
            if depth and not math.isfinite(item):  # a setting that is a number says so in its own words
                return f"holds {item}: not a finite number (NaN and Infinity are not JSON)"
        elif isinstance(item, (dict, list, tuple)):
            if depth >= MAX_NESTING:
                return f"is nested more than {MAX_NESTING} levels deep"
            if id(item) in seen:
                return "uses a part twice (YAML anchors and aliases are not supported in settings)"
            seen.add(id(item))
            parts += len(item)
            if parts > MAX_PARTS:
                return f"holds more than {MAX_PARTS} items"
            if isinstance(item, dict):
                if bad := [k for k in item if not isinstance(k, str)][:1]:  # None (YAML's ~) too
                    return f"has a key {short(bad[0])} that is not a text: quote it"
                item = [*item, *item.values()]  # its keys are texts to check too
            stack += [(v, depth + 1) for v in item]
        elif depth == 0 and isinstance(item, os.PathLike):  # run_task(work_dir=tmp_path): its text
            stack.append((os.fspath(item), 1))
        elif item is not None:  # never its value: it may be a secret
            return f"holds a {type(item).__name__}: settings are texts, numbers, true/false, lists, objects"
    return None


def plain(value: Any) -> Any:
    """The value with each text and number of its base type and each list a list (a StrEnum, numpy's str_, a float
    subclass, a tuple; a Path its text): what is saved and sent. After `odd_value`: no depth to fear."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    for kind in (bool, str, int, float):  # bool first: a bool is an int
        if isinstance(value, kind):
            return value if type(value) is kind else kind.__str__(value) if kind is str else kind(value)
    return value


def check_path(name: str, value: Any) -> None:
    """A path the file system can take: no NUL, no component longer than it allows, not longer as a whole."""
    if not isinstance(value, str):
        return
    if not value.strip():  # `--batch-write ''` from an unset shell variable: was the same as no flag
        raise ConfigError(f"{name} is an empty path: give one, or leave it out")
    if "\0" in value:
        raise ConfigError(f"{name} holds a NUL character")
    longest = max((len(part.encode("utf-8")) for part in re.split(r"[/\\]", value)), default=0)
    if longest > NAME_MAX:
        raise ConfigError(f"{name} has a folder or file name of {longest} bytes; the file system takes {NAME_MAX}")
    whole = len(os.path.abspath(value).encode("utf-8", "surrogateescape"))
    if whole >= PATH_MAX:
        raise ConfigError(f"{name} is a path of {whole} bytes; the system takes {PATH_MAX - 1}: choose a shorter one")


def parse_json(name: str, text: str) -> Any:
    try:
        return json.loads(text, object_pairs_hook=unique_keys, parse_float=exact_float)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{name} is not valid JSON: {exc.msg} at column {exc.colno}") from None
    except RecursionError:
        raise ConfigError(f"{name} is nested more than {MAX_NESTING} levels deep") from None
    except ValueError as exc:  # a key given twice in one object, a whole number of more than 4,300 digits
        raise ConfigError(f"{name} is not usable JSON: {one_line(str(exc))[:120]}") from None


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(choices)}; got {value!r}")


def parse_pairs(value: Any) -> dict[str, Any]:
    """A dict, a JSON object, or `key=value,key=value` (values parsed as JSON when they can be)."""
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("{"):
            value = parse_json("generation_config", text)
        else:
            parts = _split_pairs(text)
            try:
                value = unique_keys([_parse_pair(part, n, len(parts)) for n, part in enumerate(parts, 1)])
            except KeyTwice as exc:  # temperature=0,temperature=1: which one was meant?
                raise ConfigError(f"generation_config: {exc}") from None
    if not isinstance(value, dict):
        raise ConfigError("generation_config must be a JSON object or key=value pairs")
    return dict(value)


def parse_generation_config(raw: Any) -> dict[str, Any]:
    value = parse_pairs(raw)
    unknown = sorted(set(value) - set(GENERATION_KEYS))
    if unknown:
        raise ConfigError(f"unknown generation_config key(s) {unknown}; known: {', '.join(GENERATION_KEYS)}")
    for kind, what, keys in TYPED:
        for key in keys:
            if key in value and (isinstance(value[key], bool) or not isinstance(value[key], kind)):
                got = f"a {type(value[key]).__name__}" if key in GATEWAY_KEYS else slip(value[key])  # may be a secret
                raise ConfigError(f"generation_config {key} must be {what}, got {got}")
    for key in ("max_tokens", "max_completion_tokens", "n"):
        if key in value and value[key] < 1:
            raise ConfigError(f"generation_config {key} must be at least 1, got {value[key]!r}")
    stop = value.get("stop")
    if isinstance(stop, str):  # "" too: checked as [""] below
        value["stop"] = [stop]
    stops = value.get("stop", [])
    if not (isinstance(stops, list) and all(isinstance(s, str) and s for s in stops)):
        raise ConfigError(
            f"generation_config stop must be a text or a list of texts, none empty (stop=[] sends none), got {stop!r}"
        )
    taken = sorted(set(value.get("extra_body", {})) & set(OWN_BODY_KEYS))
    if taken:
        raise ConfigError(
            f"generation_config extra_body {taken}: coinflip sets these itself "
            "(use --stream, n in --generation-config, --model, --api-mode)"
        )
    try:  # X-Key and x-key: one header, one value sent
        unique_keys([(str(key).lower(), None) for key in value.get("extra_headers", {})])
    except KeyTwice as exc:
        raise ConfigError(f"generation_config extra_headers: {exc} (names ignore case)") from None
    for key, item in value.get("extra_headers", {}).items():
        key = str(key)  # a Python literal's 1: refused as no text by check_values, after
        bad = _NOT_TOKEN.search(key)  # a ':' or a space would forge or break the request's head
        name = repr(key[: bad.start()] + "…" if bad else key)  # not `Authorization: Bearer KEY` whole
        if not isinstance(item, str) or any(c in f"{key}{item}" for c in "\r\n\0") or not key.strip():
            raise ConfigError(f"generation_config extra_headers {name}: a header is a name and a one-line text")
        if bad:
            raise ConfigError(f"generation_config extra_headers {name}: a header name is letters, digits and "
                              "!#$%&'*+-.^_`|~ (no ':' or space)")  # fmt: skip
        check_header(f"generation_config extra_headers {name}", f"{key}{item}")
    return value


def _split_pairs(text: str) -> list[str]:
    """`a=1,stop=["x","y"],b=2`: a value that opens with a quote, bracket or brace runs to its
    close (commas inside do not split); any other value runs to the next comma."""
    parts: list[str] = []
    i = 0
    while i < len(text):
        eq, comma = text.find("=", i), text.find(",", i)
        after = i  # an item without "=": _parse_pair says so
        if eq >= 0 and not 0 <= comma < eq:
            after = len(text) - len(text[eq + 1 :].lstrip())
            if after < len(text) and text[after] in "[{\"'":
                after = _closing(text, after)
        comma = text.find(",", after)
        end = len(text) if comma < 0 else comma
        parts.append(text[i:end])
        i = end + 1
    return [p for p in parts if p.strip()]


_STRING = r'"(?:\\.?|[^\\"])*"?'  # to its closing quote (a backslash escapes), or the text's end
_QUOTED = {'"': re.compile(_STRING, re.DOTALL), "'": re.compile(_STRING.replace('"', "'"), re.DOTALL)}
_TOKENS = re.compile(rf"\\.?|{_STRING}|[][{{}}]", re.DOTALL)  # what counts in a bracketed value


def _closing(text: str, start: int) -> int:
    """Where the quoted, bracketed or braced value opened at `start` ends (or the text's end)."""
    if text[start] in _QUOTED:
        return next(_QUOTED[text[start]].finditer(text, start)).end()
    depth = 0
    for token in _TOKENS.finditer(text, start):
        if token[0] in "[]{}":
            depth += 1 if token[0] in "[{" else -1
            if depth == 0:
                return token.end()
    return len(text)


def _parse_pair(part: str, n: int, of: int) -> tuple[str, Any]:
    """Item `n` of `of`. Backslash escapes are read as in JSON strings (`stop=\\nQ:` is a newline); 'quoted'
    is a text."""
    key, sep, raw = part.partition("=")
    key, raw = key.strip(), raw.strip()
    if not sep or not key:  # the item never shown: it may be a gateway's secret (`api-key: sk-…`)
        raise ConfigError(f'generation_config item {n} of {of} is not key=value (text=1,key=["a"])')
    try:
        return key, _value(key, raw)
    except KeyTwice as exc:  # extra_headers={"X-Key": "a", "X-Key": "b"}, as JSON or as Python
        raise ConfigError(f"generation_config {key!r}: {exc}") from None


def _value(key: str, raw: str) -> Any:
    """A value as JSON, a Python literal, or a text (`key` names it in an error)."""
    if len(raw) >= 2 and raw[0] == raw[-1] == "'":
        raw = raw[1:-1]
    else:
        try:
            return json.loads(raw, object_pairs_hook=unique_keys, parse_float=exact_float)
        except json.JSONDecodeError:
            pass
        except KeyTwice:  # a ValueError, named by _parse_pair
            raise
        except Underflow as exc:
            raise ConfigError(f"generation_config {key!r}: {exc}") from None
        except (RecursionError, ValueError):  # nested too deep, or a whole number of thousands of digits
            raise ConfigError(f"generation_config {key!r}: its value is nested too deep or too long") from None
        if (literal := _python_literal(raw)) is not _TEXT:  # EvalScope eval()s its values: False, ['a']
            return literal
    try:
        return json.loads('"' + raw.replace('"', '\\"') + '"')
    except json.JSONDecodeError:
        return raw


PYTHON_WORDS = {"True": True, "False": False, "None": None}


_TEXT = object()  # not a Python value: the text itself (stop=[INST] stays a text)


def _python_literal(raw: str) -> Any:
    """True, False, None, or a number, list or dict written as Python (EvalScope's --generation-config evaluates
    its values: .5, 1_000, 0x10): a literal only, never code; anything else is _TEXT."""
    if raw in PYTHON_WORDS:
        return PYTHON_WORDS[raw]
    if raw.lstrip("+-")[:1] not in ("[", "{", ".", *"0123456789"):
        return _TEXT
    try:
        tree = ast.parse(raw, mode="eval")
        value = ast.literal_eval(tree)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _TEXT
    for node in ast.walk(tree):  # {'a': 1, 'a': 2} evaluates to {'a': 2}: refused as JSON's would be
        if isinstance(node, ast.Dict):
            unique_keys([(ast.literal_eval(k), None) for k in node.keys if k is not None])
    return value if isinstance(value, (list, dict, int, float)) else _TEXT


def safe_name(name: str) -> str:
    """A model name usable as one path component ("org/model:7b" -> "org_model_7b"), at most 100 characters and
    200 bytes (of a file system's 255, room for a suffix and a draft's: letters of any script are kept)."""
    cleaned = "".join(c if c.isalnum() or c in "-_." else "_" for c in name).strip("._")
    if len(cleaned) > 100 or len(cleaned.encode()) > 200:
        import hashlib

        cut = cleaned[:88].encode()[:188].decode("utf-8", "ignore")
        cleaned = cut + "_" + hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:11]
    return cleaned or "model"


def check_header(name: str, value: str | None) -> None:
    """One line of ASCII: a key copied with a zero-width space or a line break would break the request, and a
    Latin-1 letter goes out as UTF-8, which a server echoes back (read as Latin-1) in a form no mask knows."""
    if value is None:
        return
    if not isinstance(value, str):  # a YAML `api_key: 12345`
        raise ConfigError(f"{name} must be a text, got {type(value).__name__}: quote it")
    if not value.isascii():
        raise ConfigError(
            f"{name} holds a character that cannot be sent in an HTTP header (not ASCII: a zero-width or no-break "
            "space, a typographic dash or quote, an accented letter?): copy it again"
        )
    if any(c in value for c in "\r\n\0"):
        raise ConfigError(f"{name} holds a line break: copy it again")
    if any(c < " " and c != "\t" or c == "\x7f" for c in value):  # aiohttp refuses them: a ValueError mid-run
        raise ConfigError(f"{name} holds a control character (an escape, a DEL?): copy it again")


def unknown_message(unknown: list[str], names: list[str]) -> str:
    """'did you mean' for each typo (as the CLI does for options); where none is close, where the settings are
    listed (all 80 names made a line no one reads)."""
    import difflib

    close = {name: found[0] for name in unknown if (found := difflib.get_close_matches(name, names, n=1))}
    if len(close) == len(unknown):
        return f"unknown TaskConfig field(s) {unknown}: did you mean {', '.join(map(repr, close.values()))}?"
    meant = f" (did you mean {', '.join(f'{v!r} for {k!r}' for k, v in close.items())}?)" if close else ""
    return f"unknown TaskConfig field(s) {unknown}{meant}; docs/settings.md lists them, as coinflip eval --help does"
