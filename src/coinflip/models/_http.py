"""POST a JSON body to an OpenAI-compatible server and read the whole answer, on aiohttp.

aiohttp does the HTTP: keep-alive connections per origin (as many as requests in flight),
the framing of answers, Content-Encoding (gzip, deflate), TLS, 1xx interim answers, and
proxies (absolute-form requests for http, a CONNECT tunnel for https). What stays here is what
an evaluation needs on top of any client:

- which proxy a URL goes through, read from the environment by `_proxy.py` (never aiohttp's
  `trust_env`: loopback is never proxied, lower case wins, NO_PROXY takes CIDR blocks);
- one line saying what is wrong with an endpoint (`check` opens the first connection before a
  run, within CONNECT_S; `describe_connect_error`; a wrong scheme either way is told apart by
  trying the other), and our own exceptions instead of aiohttp's, so callers see OSError,
  TimeoutError, ProtocolError, ProxyError, ReplyTooLarge or UnknownCoding;
- the cost of a reply bounded, not only its bytes: a body or stream over `max_body` bytes, a
  JSON document of more than one value per 16 bytes of `max_body`, or a stream whose events
  average under 32 bytes fails with ReplyTooLarge as soon as it is seen; a stream's events go
  to a sink as they arrive (`StreamReply` keeps only the text), so `--eval-batch-size` replies
  in flight cost at most a small multiple of the cap in memory;
- server-sent events split as they arrive (`_sse.py`), each with its arrival time; `data:
  [DONE]` completes the reply, whether or not the server then ends its HTTP message;
- what aiohttp would read in a way of its own fails the attempt instead (`check_framing`: a
  Transfer-Encoding other than chunked, a Content-Encoding in layers);
- a reused connection the server had already closed is retried once at once, as browsers do.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp
from aiohttp import http_exceptions
from yarl import URL

from ..config import shown_url
from ..errors import ConfigError, EndpointError
from ._proxy import Proxy, proxy_for
from ._sse import SSEDecoder

DEFAULT_MAX_BODY = 16 * 1024 * 1024
BYTES_PER_EVENT = 32  # a real event of a streamed reply is 50-300 bytes; `data: {}` is 10
FREE_EVENTS = 256  # events allowed before their size is looked at
BYTES_PER_NODE = 16  # a JSON value of a real reply takes 7 bytes or more; `{},` builds 64 bytes from 3
CONNECT_S = 10.0  # the longest the first connection before a run may take (TCP, proxy, TLS): real ones take <1 s
PROBE_BYTES = 1 << 20  # the most of an answer to a probe before the run read (llama.cpp's /props is KBs)
DONE_GRACE = 0.5  # seconds to let a stream end its HTTP message after [DONE] and keep the connection
_FRAMING_HEADERS = ("host", "content-length", "transfer-encoding", "connection")  # ours to set, not a user's


class ProtocolError(ConnectionError):
    """The peer sent something that is not valid HTTP/1.1, or a body that does not decode."""


class ProxyError(ConnectionError):
    """The proxy is unreachable or would not open a tunnel to the server."""


class ReplyTooLarge(ProtocolError):
    """The reply passed a limit on its size or cost; an error for its sample, not worth a retry."""


class UnknownCoding(ProtocolError):
    """The body is in a Content-Encoding coinflip does not undo (br, zstd): the server ignored our
    `Accept-Encoding: identity` and would again, so an error for its sample, not worth a retry."""


DECODED = ("identity", "gzip", "deflate", "br", "zstd")  # what aiohttp undoes (br, zstd: with a package installed)
_UNDECODED = re.compile(r"Can not decode content-encoding: .*?\((\w+)\)")  # aiohttp's word when that package is not


def unknown_coding(coding: str) -> UnknownCoding:
    return UnknownCoding(
        f"the reply is encoded as {coding[:40]!r}, which coinflip does not decode "
        "(it asks for none: Accept-Encoding: identity)"
    )


def undecoded(exc: BaseException) -> UnknownCoding | None:
    """aiohttp's refusal of a br or zstd body it could decode with a package that is not installed,
    as ours; None for any other error."""
    found = _UNDECODED.search(str(getattr(exc, "message", "")))
    return unknown_coding(found.group(1)) if isinstance(exc, aiohttp.ClientResponseError) and found else None


Event = tuple[float, str, str]  # arrival (loop time), event type, data


class EventSink(Protocol):
    """Where a stream's events go as they arrive, so that no list of them need be kept."""

    def add(self, at: float, kind: str, data: str) -> bool:
        """Take one event; True when no more is needed (the reply is complete, or failed)."""
        ...


class EventList(list[Event]):
    """The plain sink: every event kept, up to [DONE]."""

    def add(self, at: float, kind: str, data: str) -> bool:
        self.append((at, kind, data))
        return data.strip() == "[DONE]"


@dataclass(frozen=True)
class Response:
    status: int
    headers: Mapping[str, str]  # looked up whatever the case of the name
    body: bytes  # empty when the answer was a stream of events
    events: EventSink | None = None  # what took the server-sent events, when streaming was asked and answered
    sent: float = 0.0  # loop time the request was sent


def merge_headers(*layers: Mapping[str, str]) -> dict[str, str]:
    """Later layers win, whatever the case of the names."""
    merged: dict[str, str] = {}
    for layer in layers:
        for name, value in layer.items():
            for old in [k for k in merged if k.lower() == name.lower()]:
                del merged[old]
            merged[name] = value
    return merged


@dataclass(frozen=True)
class Target:
    """Where a URL points and how to get there: the arguments of every request sent there."""

    url: URL
    host: str
    port: int
    tls: bool
    proxy: Proxy | None = None
    options: dict[str, Any] = field(default_factory=dict)  # headers, proxy and TLS arguments for aiohttp

    @classmethod
    def parse(cls, url: str, headers: dict[str, str], proxy: Proxy | None = None) -> Target:
        """The headers go with each request, never as the session's defaults: aiohttp would add those
        to a CONNECT, handing the proxy the API key (as Proxy-Authorization, even)."""
        parsed = URL(url, encoded=True)
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise ValueError(f"not an http(s) URL: {shown_url(url)}")
        tls = parsed.scheme == "https"
        options: dict[str, Any] = {"headers": headers}
        if proxy is not None:
            options["proxy"] = URL.build(scheme="http", host=proxy.host, port=proxy.port)
            if proxy.authorization and tls:  # on the CONNECT
                options["proxy_headers"] = {"Proxy-Authorization": proxy.authorization}
            elif proxy.authorization:  # on each request, which the proxy forwards
                options["headers"] = {**headers, "Proxy-Authorization": proxy.authorization}
        return cls(parsed, parsed.host, parsed.port or (443 if tls else 80), tls, proxy, options)

    @property
    def authority(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def megabytes(mb: float) -> int:
    """--max-reply-mb in bytes: the cap on every reply a run reads, online or from the Batch API."""
    return int(mb * 1024 * 1024)


def _mb(size: int) -> str:
    return f"{size / 1024 / 1024:g} MB"


_BYTES_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_TEXT_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)


def json_values(text: bytes | str) -> int:
    """At most how many values a JSON text holds: each but a container's first follows a comma."""
    if isinstance(text, bytes):
        return text.count(b"{") + text.count(b"[") + text.count(b",") + 1
    return text.count("{") + text.count("[") + text.count(",") + 1


def _without_strings(text: bytes | str) -> bytes | str:
    """The text with each JSON string emptied, so that braces and commas inside them do not count."""
    if isinstance(text, bytes):
        return _BYTES_STRING.sub(b'""', text)
    return _TEXT_STRING.sub('""', text)


_HINT = "; raise max_reply_mb to keep such replies"


class _Limits:
    """What one reply may cost; ReplyTooLarge as soon as it passes."""

    def __init__(self, max_body: int) -> None:
        self.max_body = max_body
        self.max_values = max(1, max_body // BYTES_PER_NODE)

    def json(self, text: bytes | str) -> None:
        if len(text) < self.max_values:  # at most one value per character (plus one): nothing to count
            return
        if json_values(text) > self.max_values and json_values(_without_strings(text)) > self.max_values:
            raise ReplyTooLarge(
                f"the reply holds more than {self.max_values} JSON values (one per {BYTES_PER_NODE} bytes of "
                f"{_mb(self.max_body)}){_HINT}"
            )

    def events(self, count: int, size: int) -> None:
        """Each event costs the same whatever its size: tiny ones are the costly kind of stream."""
        if count > FREE_EVENTS + size // BYTES_PER_EVENT:
            raise ReplyTooLarge(
                f"the stream sent {count} events in {size} bytes; real streams' events average over "
                f"{BYTES_PER_EVENT} bytes"
            )


async def read_at_most(content: aiohttp.StreamReader, limit: int, already: int = 0) -> bytes:
    """The rest of a body, in as many reads as it arrives in (one read gives what has come, not
    all); ReplyTooLarge as soon as `already` bytes and these pass `limit`."""
    body = bytearray()
    async for piece in content.iter_any():
        body += piece
        _within(already + len(body), limit)
    return bytes(body)


def _within(size: int, limit: int) -> None:
    if size > limit:
        raise ReplyTooLarge(f"the reply is larger than {_mb(limit)}{_HINT}")


@dataclass
class _Progress:
    """How far one attempt got: whether its answer's head came, how many events."""

    head: bool = False
    events: int = 0


def check_framing(headers: Any) -> None:
    """What aiohttp would read some way of its own fails the attempt instead: a Transfer-Encoding
    other than chunked (read as if it ended the body), and a Content-Encoding of more than one
    coding or of one it does not know (it would hand over the body still encoded)."""
    if "Transfer-Encoding" in headers:
        transfer = ",".join(headers.getall("Transfer-Encoding"))
        if transfer.strip().lower() != "chunked":
            raise ProtocolError(f"the reply's Transfer-Encoding is {transfer!r}; only chunked is read")
    values = [v for v in headers.getall("Content-Encoding", []) if v.strip()]  # an empty one names no coding
    if values:
        codings = [c.strip() for v in values for c in v.split(",")]
        if len(codings) > 1:
            raise ProtocolError(f"the body is encoded in layers ({', '.join(codings)}); coinflip undoes one coding")
        if codings[0].lower() not in DECODED:  # aiohttp would hand it over as sent
            raise unknown_coding(codings[0])


def _never_resolves(host: str) -> bool:
    """RFC 6761: `.invalid` names are never looked up; a resolver answers no at once."""
    return host.lower().rstrip(".").endswith(".invalid") or host.lower() == "invalid"


async def _opens(target: Target, tls: ssl.SSLContext | None = None, limit: float = 2.0) -> bool:
    """Whether a connection to the target, plain or (with `tls`) with a TLS handshake, opens within
    `limit` seconds: the test that tells a wrong scheme from a server that is down."""
    try:
        opened = asyncio.open_connection(
            target.host, target.port, ssl=tls, server_hostname=target.host if tls else None
        )
        _, writer = await asyncio.wait_for(opened, limit)
    except (TimeoutError, OSError):  # ssl.SSLError is an OSError
        return False
    writer.transport.abort()
    return True


def _refuse_invalid(target: Target) -> None:
    """No look-up for a `.invalid` name, the server's or (when there is one) the proxy's."""
    unknown = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    if target.proxy is not None and _never_resolves(target.proxy.host):
        raise _unreachable(target, unknown)
    if target.proxy is None and _never_resolves(target.host):
        raise unknown


def _unreachable(target: Target, reason: BaseException) -> ProxyError:
    assert target.proxy is not None
    return ProxyError(f"proxy {target.proxy.host}:{target.proxy.port} is unreachable ({_reason(reason)})")


class ConnectionPool:
    """One aiohttp session: keep-alive connections per origin, opened on demand."""

    def __init__(
        self,
        headers: dict[str, str],
        timeout: float,
        proxy: str | None = None,
        environ: Mapping[str, str] | None = None,
        max_body: int = DEFAULT_MAX_BODY,
        sink: Callable[[], EventSink] = EventList,
    ) -> None:
        """`proxy` sends everything through that proxy; without it, the environment's
        HTTP(S)_PROXY and NO_PROXY decide per URL. `sink` makes what takes each stream's events."""
        defaults = {"Accept": "application/json", "Accept-Encoding": "identity"}
        self.headers = {k: v for k, v in merge_headers(defaults, headers).items() if k.lower() not in _FRAMING_HEADERS}
        self.timeout = timeout
        self.limits = _Limits(max_body)
        self.sink = sink
        self._proxy = Proxy.parse(proxy) if proxy else None
        self._environ = os.environ if environ is None else environ
        self._targets: dict[str, Target] = {}
        self._session: aiohttp.ClientSession | None = None
        self._ssl: ssl.SSLContext | None = None
        self._heard: set[str] = set()  # servers (host:port) that have sent an HTTP head: their scheme is right

    def target(self, url: str) -> Target:
        """Where `url` points; its `options` are the arguments of every aiohttp request sent there."""
        target = self._targets.get(url)
        if target is None:
            proxy = self._proxy or proxy_for(url, self._environ)
            target = self._targets[url] = Target.parse(url, self.headers, proxy)
            if target.tls:  # SSL_CERT_FILE as it is when the first request goes
                self._ssl = self._ssl or ssl.create_default_context()
                target.options["ssl"] = self._ssl
        return target

    def proxy_secrets(self, urls: list[str]) -> list[str]:
        """The credentials of the proxies `urls` go through, for the redactor (config.run_secrets
        holds the run's own); a proxy URL that cannot be read adds none (the check says why)."""
        found = []
        for url in urls:
            try:
                proxy = self._proxy or proxy_for(url, self._environ)
            except (ConfigError, ValueError):
                continue
            found += proxy.secrets if proxy is not None else []
        return found

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0),
                skip_auto_headers=("User-Agent",),
                timeout=aiohttp.ClientTimeout(total=self.timeout),
                auto_decompress=True,
                trust_env=False,
                cookie_jar=aiohttp.DummyCookieJar(),
            )
        return self._session

    async def check(self, url: str) -> None:
        """Open the first connection to `url` now and keep it for the first request; EndpointError
        (one line saying what is wrong) when it cannot be opened. A connection reset as it opened
        was taken (a refused one is refused): `answers`, which follows, tries fresh ones and says so."""
        target = self.target(url)
        session = self.session
        options = target.options
        request = aiohttp.ClientRequest(
            "POST",
            target.url,
            loop=asyncio.get_running_loop(),
            ssl=options.get("ssl", True),
            proxy=options.get("proxy"),
            proxy_headers=options.get("proxy_headers"),
        )
        limit = min(self.timeout, CONNECT_S)
        try:
            _refuse_invalid(target)
            assert session.connector is not None
            connection = await asyncio.wait_for(session.connector.connect(request, [], session.timeout), limit)
        except (TimeoutError, OSError, aiohttp.ClientError) as exc:
            if isinstance(exc, aiohttp.ClientConnectorError) and isinstance(exc.os_error, ConnectionResetError):
                return  # taken, then reset before a loaded client saw the connect succeed: `answers` tells it
            if isinstance(exc, asyncio.TimeoutError) and target.tls and target.proxy is None and await _opens(target):
                raise EndpointError(
                    f"https://{target.authority} takes a connection but no TLS handshake within {limit:g} s; is it "
                    "an https:// server? - check --api-url"
                ) from None
            reason = _translated(exc, target, limit)
            raise EndpointError(describe_connect_error(reason, target, limit)) from None
        connection.release()

    async def answers(self, url: str) -> None:
        """After `check`, before a run: EndpointError when what listens at `url` has never sent an
        HTTP head and, asked with a GET of `url`, closes or resets the connection twice without one,
        or sends something that is not HTTP (a wrong port or host; a proxy that speaks something
        else). Any status will do, in any coding (one aiohttp refuses, br or zstd, came in an HTTP
        head: the run's replies decide), and a server heard from before (by the probes of its capacity)
        is not asked again; one that is only slow to answer is left to the run's --timeout."""
        target = self.target(url)
        failure: BaseException | None = None
        for _ in (1, 2):  # the second on a fresh connection: the first may be one the server had closed
            if target.authority in self._heard:
                return
            try:
                await self._head(target)
            except TimeoutError:
                return
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                if isinstance(exc, aiohttp.ClientConnectorError) and not isinstance(exc.os_error, ConnectionResetError):
                    raise EndpointError(describe_connect_error(_translated(exc, target, 0), target, 0)) from None
                failure = exc
            except aiohttp.ClientHttpProxyError as exc:  # a proxy's refusal of a new tunnel: the proxy's line
                raise EndpointError(describe_connect_error(_translated(exc, target, 0), target, 0)) from None
            except (aiohttp.ClientError, http_exceptions.HttpProcessingError) as exc:
                if undecoded(exc) is not None:  # an HTTP head, in a coding aiohttp refused: the run's replies decide
                    self.heard(target)
                    return
                failure = exc
                break
        assert failure is not None
        raise await self.wrong_scheme(target) or EndpointError(_no_http(failure, target)) from None

    async def _head(self, target: Target) -> None:
        """A GET of the target until its answer's head (its body read up to PROBE_BYTES, so that the
        connection is kept for the run); the server is then heard."""
        limit = aiohttp.ClientTimeout(total=min(self.timeout, CONNECT_S))
        async with self.session.get(target.url, allow_redirects=False, timeout=limit, **target.options) as answer:
            self.heard(target)
            with contextlib.suppress(OSError, asyncio.TimeoutError, aiohttp.ClientError):
                await read_at_most(answer.content, PROBE_BYTES)

    async def post(self, url: str, body: bytes, stream: bool = False) -> Response:
        """The whole answer within `timeout` seconds; OSError (TimeoutError included) otherwise."""
        target = self.target(url)
        _refuse_invalid(target)
        for attempt in (1, 2):
            progress = _Progress()
            try:
                return await self._exchange(target, body, stream, progress)
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                stale = not progress.head and not isinstance(exc, aiohttp.ClientConnectorError)
                if attempt == 2 or not stale:  # a kept connection the server had closed: once more
                    raise await self._failure(exc, target, stale) from None
            except TimeoutError:
                got = f" ({progress.events} events received)" if progress.events else ""
                raise TimeoutError(f"no complete reply within {self.timeout:g} s{got}") from None
            except (aiohttp.ClientError, http_exceptions.HttpProcessingError) as exc:
                raise await self._failure(exc, target, not progress.head and _tls_record(exc)) from None
        raise AssertionError("unreachable")

    async def _failure(self, exc: BaseException, target: Target, suspect: bool) -> BaseException:
        """aiohttp's exception as ours; and where a plain http:// server that has not answered yet
        answers like a TLS one (hangs up twice with no head, or sends a TLS record) and takes a TLS
        handshake, the wrong scheme."""
        wrong = await self.wrong_scheme(target) if suspect else None
        return wrong or _translated(exc, target, self.timeout)

    def heard(self, target: Target) -> None:
        """The server at `target` sent an HTTP head: its scheme is right, whatever fails later."""
        self._heard.add(target.authority)

    async def wrong_scheme(self, target: Target) -> EndpointError | None:
        """The wrong scheme where a plain http:// target that has given no HTTP answer yet speaks
        TLS (the online requests' and the Batch API's test); None otherwise."""
        if target.authority in self._heard or not await self._speaks_tls(target):
            return None
        return EndpointError(
            f"http://{target.authority} answers plain HTTP with no HTTP reply and speaks TLS: "
            f"use https://{target.authority} in --api-url"
        )

    async def _speaks_tls(self, target: Target) -> bool:
        """Whether a plain http:// server that gave no HTTP answer takes a TLS handshake: servers
        on OpenSSL (Python's, uvicorn's) hang up on plain HTTP, others send a TLS alert, where nginx
        and Go answer 400."""
        if target.tls or target.proxy is not None:
            return False
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # only: does it speak TLS
        return await _opens(target, context, min(self.timeout, 5.0))

    async def _exchange(self, target: Target, body: bytes, stream: bool, progress: _Progress) -> Response:
        loop = asyncio.get_running_loop()
        sent = loop.time()
        async with self.session.post(target.url, data=body, allow_redirects=False, **target.options) as resp:
            progress.head = True
            self.heard(target)
            check_framing(resp.headers)
            length = resp.content_length
            if length is not None and length > self.limits.max_body:
                raise ReplyTooLarge(f"the reply is {length} bytes, larger than {_mb(self.limits.max_body)}{_HINT}")
            if stream and resp.status == 200 and "text/event-stream" in resp.headers.get("Content-Type", ""):
                events = await self._events(resp, loop, progress)
                return Response(resp.status, resp.headers, b"", events, sent)
            if length is not None and "Content-Encoding" not in resp.headers:
                data = await resp.read()  # framed by its length: no larger than checked above
            else:
                data = await read_at_most(resp.content, self.limits.max_body)
            self.limits.json(data)
            return Response(resp.status, resp.headers, data, None, sent)

    async def _events(
        self, resp: aiohttp.ClientResponse, loop: asyncio.AbstractEventLoop, progress: _Progress
    ) -> EventSink:
        decoder, sink, size = SSEDecoder(), self.sink(), 0
        limits = self.limits
        async for chunk in resp.content.iter_any():
            size += len(chunk)
            _within(size, limits.max_body)
            now = loop.time()
            for kind, data in decoder.feed(chunk):
                limits.json(data)
                progress.events += 1
                if sink.add(now, kind, data):  # complete at [DONE], or failed: read no further
                    if data.strip() == "[DONE]":
                        await self._after_done(resp, size)
                    else:
                        resp.close()
                    return sink
            limits.events(progress.events, size)
        return sink

    async def _after_done(self, resp: aiohttp.ClientResponse, size: int) -> None:
        """[DONE] is the reply's end: let the message end too (the connection is then kept), or drop it."""
        if resp.content.at_eof():
            return
        try:
            await asyncio.wait_for(read_at_most(resp.content, self.limits.max_body, size), DONE_GRACE)
        except (TimeoutError, aiohttp.ClientError, ReplyTooLarge):
            resp.close()

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


def _translated(exc: BaseException, target: Target, timeout: float) -> BaseException:
    """aiohttp's exceptions as ours: what went wrong, in words a user can act on."""
    if isinstance(exc, ProtocolError | ProxyError | socket.gaierror):
        return exc
    if isinstance(exc, aiohttp.ClientHttpProxyError):
        where = f"proxy {target.proxy.host}:{target.proxy.port}" if target.proxy else "the proxy"
        if exc.status == 407:
            return EndpointError(
                f"{where} wants credentials (407): put them in the proxy URL, http://user:password@host:port"
            )
        return ProxyError(f"{where} answered {exc.status} to CONNECT {target.authority}")
    if isinstance(exc, aiohttp.ClientProxyConnectionError) or (
        target.proxy is not None and isinstance(exc, aiohttp.ClientConnectorDNSError)  # a proxy looks up the server
    ):
        return _unreachable(target, exc.os_error)
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return exc.certificate_error
    if isinstance(exc, aiohttp.ClientConnectorError):
        return exc.os_error
    if isinstance(exc, asyncio.TimeoutError):
        return TimeoutError(f"no complete reply within {timeout:g} s")
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return ConnectionResetError("the server closed the connection before the reply was complete")
    if isinstance(exc, aiohttp.ClientPayloadError):
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, http_exceptions.ContentEncodingError | http_exceptions.DecompressSizeError):
            return ProtocolError(f"the body does not decode ({_detail(cause)})")
        if isinstance(cause, http_exceptions.ContentLengthError) or "not completed" in str(exc):
            return ConnectionResetError("the server closed the connection before the reply was complete")
        return ProtocolError(f"the reply is not valid HTTP/1.1 ({_detail(cause or exc)})")
    if isinstance(exc, aiohttp.ClientResponseError | http_exceptions.HttpProcessingError):
        return undecoded(exc) or ProtocolError(f"the reply is not valid HTTP/1.1 ({_detail(exc)})")
    if isinstance(exc, aiohttp.ClientOSError):
        return ConnectionResetError(str(exc) or "the connection failed")
    return ProtocolError(f"the reply could not be read ({type(exc).__name__}: {exc})")


def tls_like(exc: BaseException) -> bool:
    """Whether a request that got no HTTP head failed as a plain request to a TLS server does: the
    connection closed or reset (not refused), or a TLS record where the status line should be."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        return False
    return isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientOSError) or _tls_record(exc)


def _tls_record(exc: BaseException) -> bool:
    """Whether what came instead of a status line starts as a TLS record does (alert or handshake)."""
    shown = _detail(exc.__cause__ or exc)
    return "b'\\x15\\x03" in shown or "b'\\x16\\x03" in shown


def _detail(exc: BaseException) -> str:
    text = getattr(exc, "message", None) or str(exc)
    return " ".join(str(text).split())[:200] or type(exc).__name__


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, socket.gaierror):
        return f"unknown host: {exc.strerror or exc}"
    text = getattr(exc, "strerror", None) or str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _no_http(exc: BaseException, target: Target) -> str:
    """One line for a target that takes connections but never answers HTTP over them."""
    where, hint = _where(target)
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientOSError):
        how = "resets" if isinstance(exc, aiohttp.ClientOSError) else "closes"  # RST, or FIN
        return f"{where} takes connections but {how} each one with no HTTP answer: is it an HTTP server? - {hint}"
    return f"{where} answers with something that is not HTTP ({_detail(exc.__cause__ or exc)}) - {hint}"


def _where(target: Target) -> tuple[str, str]:
    """How a target is named in a line about its endpoint, and what to check."""
    where, hint = f"{'https' if target.tls else 'http'}://{target.authority}", "check --api-url"
    if target.proxy is not None:  # the proxy may be what failed: name it
        where += f" through proxy {target.proxy.host}:{target.proxy.port}"
        hint += " and HTTP_PROXY / HTTPS_PROXY / NO_PROXY"
    return where, hint


def describe_connect_error(exc: BaseException, target: Target, timeout: float) -> str:
    """One line for a connection that could not be opened before the run."""
    where, hint = _where(target)
    if isinstance(exc, EndpointError):
        return str(exc)
    if isinstance(exc, ProxyError):
        return f"{exc} - check HTTP_PROXY / HTTPS_PROXY / NO_PROXY"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return (
            f"{where}: TLS certificate verification failed ({exc.verify_message}); "
            "for a private CA set SSL_CERT_FILE=/path/to/ca.pem"
        )
    if isinstance(exc, ssl.SSLError):
        return f"{where}: TLS handshake failed ({exc.reason or exc}); is it an https:// server? - {hint}"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve host {target.host!r} ({exc.strerror or exc}) - {hint}"
    if isinstance(exc, ConnectionRefusedError):
        return f"nothing is listening at {where} (connection refused) - {hint}"
    if isinstance(exc, TimeoutError | asyncio.TimeoutError):
        return f"no connection to {where} within {timeout:g} s - {hint}"
    return f"cannot connect to {where} ({_reason(exc)}) - {hint}"
