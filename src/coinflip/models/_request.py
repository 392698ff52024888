"""An OpenAI-compatible request apart from sending it: its URL and body, where a redirect may lead,
a web page where the API was due, and how many requests a server says it serves at once."""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import urlencode, urljoin, urlsplit, urlunsplit

import aiohttp

from ..config.declare import ENDPOINTS, named_mode
from ..errors import EndpointError
from ..secrets import GATEWAY_KEYS, shown_url
from ._http import PROBE_BYTES, ConnectionPool, Response
from ._replies import BadReply, load_json
from ._wire import read_at_most
from .base import Request

PROBE_S = 2.0  # seconds the capacity probe at the start may take


def endpoint_url(url: str, mode: str = "chat", query: dict[str, Any] | None = None) -> str:
    """A base URL (…/v1), a server root or the full endpoint; its query string stays, `query` added."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    known = named_mode(url)
    path = path[: -len(ENDPOINTS[known])] if known else path or "/v1"
    extra = urlencode({k: v if isinstance(v, str) else json.dumps(v) for k, v in (query or {}).items()})
    joined = "&".join(q for q in (parts.query, extra) if q)
    return urlunsplit((parts.scheme, parts.netloc, path + ENDPOINTS[mode], joined, ""))


def request_body(
    model: str, mode: str, generation: dict[str, Any], request: Request, stream: bool, extra_body: dict[str, Any]
) -> dict[str, Any]:
    """One request's body, online or in a batch file: `generation` as `split_generation` gives it."""
    body: dict[str, Any] = {"model": model}
    if mode == "chat":
        body["messages"] = request.messages
    else:  # a plain completion gets the same text: system prompt, blank line, prompt
        body["prompt"] = "\n\n".join(m["content"] for m in request.messages)
    body.update(generation)
    body.update(request.params)
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    body.update(extra_body)
    return body


def split_generation(generation: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    return {k: v for k, v in generation.items() if k not in GATEWAY_KEYS}, dict(generation.get("extra_body") or {})


def web_page(response: Response) -> bool:
    """An HTML page (a web UI, a login or captive portal) where JSON or a stream was due; JSON labelled text/html
    (a Flask app returning json.dumps) is an answer."""
    kind, start = response.headers.get("content-type", "").lower(), response.body.lstrip()[:1]
    return response.events is None and (start == b"<" or ("text/html" in kind and start not in (b"{", b"[")))


def _origin(url: str) -> tuple[str, str, int | None, bool]:
    parts = urlsplit(url)  # credentials in a Location: aiohttp would refuse them beside the key's Authorization
    return parts.scheme, (parts.hostname or ""), parts.port, "@" in parts.netloc  # ValueError: a port not a number


def redirect(url: str, response: Response, follow: bool) -> str:
    """Where a 307/308 leads (if `follow`) when it keeps the scheme, host and port; any other is refused."""
    location = response.headers.get("location", "")
    try:
        location = urljoin(url, location.strip()) if location else ""
        if follow and response.status in (307, 308) and location != url and _origin(location) == _origin(url):
            return location
    except ValueError:  # a Location that is no URL (`http://[::1/x`): shown as sent
        location = location.strip()
    raise EndpointError(
        f"{shown_url(url)} redirects ({response.status}) to {shown_url(location) or '(no Location)'}; "
        "give the final URL as --api-url"
    )


async def published_slots(pool: ConnectionPool, url: str) -> int | None:
    """How many requests the server serves at once where it says so (llama.cpp's /props, or the Python
    llama.cpp server, one at a time, by its /v1/models); None: the limits learn it by watching."""
    target = pool.target(url)
    if target.proxy is not None:
        return None
    path = target.url.path
    root = path.split("/v1/")[0] if "/v1/" in path else ""
    props, models = await asyncio.gather(
        _get_json(pool, target, root + "/props"), _get_json(pool, target, root + "/v1/models")
    )
    slots = props.get("total_slots") if isinstance(props, dict) else None  # llama.cpp's
    if isinstance(slots, int) and not isinstance(slots, bool) and 1 <= slots <= 4096:
        return slots
    listed = models.get("data") if isinstance(models, dict) else None
    if listed and isinstance(listed, list) and all(isinstance(m, dict) and m.get("owned_by") == "me" for m in listed):
        return 1  # the Python llama.cpp server, which owns every model as "me"
    return None


async def _get_json(pool: ConnectionPool, target: Any, path: str) -> Any:
    options = {k: v for k, v in target.options.items() if k in ("headers", "ssl")}
    try:
        url, timeout = target.url.with_path(path).with_query(None), aiohttp.ClientTimeout(total=PROBE_S)
        async with pool.session.get(url, allow_redirects=False, timeout=timeout, **options) as answer:
            pool.heard(target)
            if answer.status != 200:
                return None
            return load_json(await read_at_most(answer.content, PROBE_BYTES))  # as every reply is read
    except (TimeoutError, OSError, BadReply, aiohttp.ClientError):  # ReplyTooLarge is an OSError
        return None
