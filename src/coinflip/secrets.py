"""Every secret a run holds, and how each is masked in the files a run writes (settings, URLs) and
wherever a server may echo one back (models/_redact.py): one list of the places, one mask, one URL form."""

from __future__ import annotations

import base64
import re
from typing import Any
from urllib.parse import quote_plus, unquote_plus, urlsplit

REDACTED = "***"
GATEWAY_KEYS = ("extra_headers", "extra_query", "extra_body")  # what a gateway may read a secret from
# Keys (any case) whose values are settings, kept and shown; every other text in GATEWAY_KEYS is a secret
PLAIN_KEYS = frozenset({
    "api-version", "api_version", "anthropic-version", "openai-beta", "accept", "content-type", "user-agent",
    "guided_choice", "guided_regex", "guided_json", "guided_grammar", "response_format", "reasoning_effort",
})  # fmt: skip


def redacted_generation(generation: dict[str, Any]) -> dict[str, Any]:
    """Every text in GATEWAY_KEYS (nested too) masked but under PLAIN_KEYS; numbers, booleans, null stay."""
    return {key: masked(value) if key in GATEWAY_KEYS else value for key, value in generation.items()}


def masked(value: Any) -> Any:
    """Every text in `value` (nested too) masked but under PLAIN_KEYS."""
    if isinstance(value, dict):
        return {k: v if str(k).lower() in PLAIN_KEYS else masked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [masked(v) for v in value]
    if isinstance(value, str) and value:
        return REDACTED
    return value


def auth_secrets(authorization: str) -> list[str]:
    """What a `SCHEME TOKEN` credential (one word after the scheme, not a sentence) may be echoed as: the
    token (a Bearer's too); a Basic one's `user:password` and password as well."""
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if len(token.split()) != 1:
        return []
    if scheme.lower() != "basic":
        return [token]
    try:
        pair = base64.b64decode(token, validate=True).decode("utf-8", "replace")
    except ValueError:  # binascii.Error is one
        return [token]
    return [token, pair, pair.partition(":")[2]]


def secret_keys(value: Any) -> list[str]:
    """The keys of a gateway setting whose values hold a text `redacted_generation` masks."""
    if not isinstance(value, dict):
        return []
    return [str(k) for k, v in value.items() if str(k).lower() not in PLAIN_KEYS and any(_texts(v, True))]


def masked_somewhere(generation: dict[str, Any] | None) -> bool:
    """Whether saved generation settings had a secret masked (a resume must be given it again)."""
    if not isinstance(generation, dict):
        return False
    return any(REDACTED in _texts(generation.get(key), False) for key in GATEWAY_KEYS)


def _texts(value: Any, skip_plain: bool) -> list[str]:
    if isinstance(value, dict):
        kept = [v for k, v in value.items() if not (skip_plain and str(k).lower() in PLAIN_KEYS)]
        return [t for v in kept for t in _texts(v, skip_plain)]
    if isinstance(value, list):
        return [t for v in value for t in _texts(v, skip_plain)]
    return [value] if isinstance(value, str) else []


def redacted_url(url: Any) -> Any:
    """Every query value masked but under PLAIN_KEYS (a SAS token hides in `sig`), a bare item
    (`?TOKEN`) and a fragment whole."""
    if not isinstance(url, str) or ("?" not in url and "#" not in url):
        return url
    url, hashed, fragment = url.partition("#")
    tail = f"#{REDACTED}" if hashed and fragment else hashed
    if "?" not in url:
        return url + tail
    head, _, query = url.partition("?")
    shown = []
    for key, value in _query(query):
        if value is None:  # a bare item is a secret whole
            shown.append(REDACTED)
        else:
            shown.append(f"{quote_plus(key, '*')}={REDACTED if _secret_query(key, value) else quote_plus(value, '*')}")
    return f"{head}?{'&'.join(shown)}{tail}"


def _query(query: str) -> list[tuple[str, str | None]]:
    parts = [item.partition("=") for item in query.split("&") if item]  # a bare item (no `=`): value None
    return [(unquote_plus(key), unquote_plus(value) if sep else None) for key, sep, value in parts]


def _secret_query(key: str, value: str | None) -> bool:
    return value is None or (bool(value) and key.lower() not in PLAIN_KEYS)


def shown_url(url: str) -> str:
    """The one form of a URL every message, page and file shows: credentials removed (what stands
    before the last `@` ahead of the query; for a raw password holding `?` or `#`, before the first
    `@` a host and port follow), query and fragment masked as `redacted_url` masks them."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    query_at = min((i for i in (rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    if "@" in rest[:query_at]:
        rest = rest[:query_at].rpartition("@")[2] + rest[query_at:]
    elif "@" in rest and not _host_and_port(_authority(rest)):
        after = [rest[i + 1 :] for i, c in enumerate(rest) if c == "@"]
        rest = next((a for a in after if "@" not in _authority(a) and _host_and_port(_authority(a))), after[-1])
    authority = _authority(rest)
    host, colon, port = authority.rpartition(":")
    a_port = port.isascii() and port.isdigit() and len(port) <= 5 and int(port) < 65536
    if colon and port and not a_port and not authority.endswith("]"):  # `user:PASSWORD` with no @host: masked
        rest = f"{host}:{REDACTED}{rest[len(authority) :]}"
    return str(redacted_url(f"{scheme}{sep}{rest}"))


def _authority(rest: str) -> str:
    return re.split("[/?#]", rest, maxsplit=1)[0]


def _host_and_port(authority: str) -> bool:
    try:
        parts = urlsplit(f"//{authority}")
        return bool(parts.hostname) and (parts.port is None or parts.port >= 0)
    except ValueError:
        return False


def run_secrets(api_key: str | None, generation: dict[str, Any], url: str | None) -> list[str | None]:
    """Every secret a run holds (the key and the texts `redacted_generation` masks, the token of any
    `SCHEME TOKEN` among them and what a Basic one decodes to, the URL's query values): what the
    redactor masks wherever a server echoes them."""
    texts = [t for key in GATEWAY_KEYS for t in _texts(generation.get(key), True) if t and t != REDACTED]
    query = (url or "").partition("#")[0].partition("?")[2]  # the fragment is never sent
    in_url = [k if v is None else v for k, v in _query(query) if _secret_query(k, v)]
    return [api_key, *texts, *(s for t in [api_key or "", *texts] for s in auth_secrets(t)), *in_url]


def url_masked(url: Any) -> bool:
    """Whether a saved --api-url had query values masked (a resume must be given it again)."""
    return isinstance(url, str) and REDACTED in url.partition("?")[2]


def unsaved(saved: dict[str, Any]) -> tuple[str, ...]:
    """The options a resume of these saved settings is given again: the texts they held were masked."""
    held = {"--generation-config": masked_somewhere(saved.get("generation_config"))}
    held["--api-url"] = url_masked(saved.get("api_url"))
    return tuple(flag for flag, masked in held.items() if masked)


def slip(value: Any) -> str:
    """A wrong setting as an error shows it: itself, but a text that may hold a key (`temperature=0 sk-...`, a
    space typed for a comma) by its length alone; a short word such as `hot` is shown."""
    if isinstance(value, str) and (len(value) > 16 or any(c.isspace() for c in value)):
        return f"a text of {len(value)} characters (not shown: it may hold a key)"
    return repr(value)
