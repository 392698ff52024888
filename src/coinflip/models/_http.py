"""POST a JSON body and read the whole answer, on aiohttp. Added here: what is wrong with an endpoint in
one line, a reply's cost bounded, server-sent events read as they arrive, a stale connection retried once."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Mapping
from dataclasses import dataclass

import aiohttp
from aiohttp import http_exceptions

from ..errors import ConfigError, EndpointError
from ._replies import StreamReply
from ._sse import SSEDecoder
from ._wire import (
    Limits,
    ProtocolError,
    ReplyTooLarge,
    Target,
    check_framing,
    connect_failure,
    no_http,
    opens,
    read_at_most,
    refuse_invalid,
    tls_record,
    translated,
    undecoded,
    within,
)

DEFAULT_MAX_BODY = 16 * 1024 * 1024
STARTUP_S = 120.0  # the longest a server still starting up may take to answer a GET (a reply may take longer)
CONNECT_S = 10.0  # the longest the first connection before a run may take (TCP, proxy, TLS): real ones take <1 s
PROBE_BYTES = 1 << 20  # the most of an answer to a probe before the run read (llama.cpp's /props is KBs)
DONE_GRACE = 0.5  # seconds to let a stream end its HTTP message after [DONE] and keep the connection
_FRAMING_HEADERS = ("host", "content-length", "transfer-encoding", "connection")  # ours to set, not a user's


@dataclass(frozen=True)
class Response:
    status: int
    headers: Mapping[str, str]  # looked up whatever the case of the name
    body: bytes  # empty when the answer was a stream of events
    events: StreamReply | None = None  # what took the server-sent events, when streaming was asked and answered
    sent: float = 0.0  # loop time the request was sent


def merge_headers(*layers: Mapping[str, str]) -> dict[str, str]:
    merged: dict[str, str] = {}
    for name, value in (pair for layer in layers for pair in layer.items()):
        merged = {k: v for k, v in merged.items() if k.lower() != name.lower()} | {name: value}
    return merged


@dataclass
class _Progress:
    head: bool = False
    events: int = 0


class ConnectionPool:
    """One aiohttp session: keep-alive connections per origin, opened on demand."""

    def __init__(
        self, headers: dict[str, str], timeout: float, proxy: str | None = None, max_body: int = DEFAULT_MAX_BODY
    ) -> None:
        defaults = {"Accept": "application/json", "Accept-Encoding": "identity"}
        self.headers = {k: v for k, v in merge_headers(defaults, headers).items() if k.lower() not in _FRAMING_HEADERS}
        self.timeout = timeout
        self.limits = Limits(max_body)
        self._proxy = proxy
        self._targets: dict[str, Target] = {}
        self._session: aiohttp.ClientSession | None = None
        self._ssl: ssl.SSLContext | None = None
        self._heard: set[str] = set()  # servers (host:port) that have sent an HTTP head: their scheme is right

    def target(self, url: str) -> Target:
        target = self._targets.get(url)
        if target is None:
            target = self._targets[url] = Target.parse(url, self.headers, self._proxy)
            if target.tls:  # SSL_CERT_FILE as it is when the first request goes
                self._ssl = self._ssl or ssl.create_default_context()
                target.options["ssl"] = self._ssl
        return target

    def proxy_secrets(self, url: str) -> list[str]:
        """The credentials of the proxy `url` goes through, for the redactor."""
        with contextlib.suppress(ConfigError, ValueError):
            return self.target(url).secrets
        return []

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector, timeout = aiohttp.TCPConnector(limit=0), aiohttp.ClientTimeout(total=self.timeout)
            self._session = aiohttp.ClientSession(connector=connector, skip_auto_headers=("User-Agent",),
                timeout=timeout, trust_env=False, cookie_jar=aiohttp.DummyCookieJar())  # fmt: skip
        return self._session

    async def check(self, url: str) -> None:
        """Open the first connection to `url`, kept for the first request; else EndpointError. One reset as
        it opened was taken: `answers`, which follows, tries fresh ones."""
        target, session = self.target(url), self.session
        options = target.options
        request = aiohttp.ClientRequest("POST", target.url, loop=asyncio.get_running_loop(),
                                        ssl=options.get("ssl", True), proxy=options["proxy"],
                                        proxy_headers=options["proxy_headers"])  # fmt: skip
        limit = min(self.timeout, CONNECT_S)
        try:
            refuse_invalid(target)
            assert session.connector is not None
            connection = await asyncio.wait_for(session.connector.connect(request, [], session.timeout), limit)
        except (TimeoutError, OSError, aiohttp.ClientError) as exc:
            if isinstance(exc, aiohttp.ClientConnectorError) and isinstance(exc.os_error, ConnectionResetError):
                return  # taken, then reset before a loaded client saw the connect succeed: `answers` tells it
            if isinstance(exc, asyncio.TimeoutError) and target.tls and target.proxy is None and await opens(target):
                raise EndpointError(
                    f"https://{target.authority} takes a connection but no TLS handshake within {limit:g} s; is it "
                    "an https:// server? - check --api-url"
                ) from None
            raise connect_failure(exc, target, limit) from None
        connection.release()

    async def answers(self, url: str) -> None:
        """EndpointError when a server never heard from closes or resets a GET of `url` twice with no HTTP
        head, sends none within --timeout or STARTUP_S (a hung one: each request would wait, retried), or answers
        something that is not HTTP; any status or coding will do."""
        target = self.target(url)
        failure: BaseException | None = None
        waits = (min(self.timeout, CONNECT_S), min(self.timeout, STARTUP_S))
        for wait in waits:  # the second on a fresh connection: the first may be one the server had closed, or a
            if target.authority in self._heard:  # server still starting up (a scale-to-zero endpoint)
                return
            try:
                return await self._head(target, wait)  # heard: any status will do
            except TimeoutError as exc:  # nor did the probes, before it (a slow model is slow to reply, not to greet)
                failure = exc
                continue
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                if isinstance(exc, aiohttp.ClientConnectorError) and not isinstance(exc.os_error, ConnectionResetError):
                    raise connect_failure(exc, target, 0) from None
                failure = exc
            except aiohttp.ClientHttpProxyError as exc:  # a proxy's refusal of a new tunnel: the proxy's line
                raise connect_failure(exc, target, 0) from None
            except (aiohttp.ClientError, http_exceptions.HttpProcessingError) as exc:
                if undecoded(exc) is not None:  # an HTTP head, in a coding aiohttp refused: the run's replies decide
                    self.heard(target)
                    return
                failure = exc
                break
        assert failure is not None
        raise await self.wrong_scheme(target) or EndpointError(no_http(failure, target, sum(waits))) from None

    async def _head(self, target: Target, wait: float) -> None:
        """A GET of the target (its body read up to PROBE_BYTES, so that the connection is kept)."""
        limit = aiohttp.ClientTimeout(total=wait)
        async with self.session.get(target.url, allow_redirects=False, timeout=limit, **target.options) as answer:
            self.heard(target)
            with contextlib.suppress(OSError, asyncio.TimeoutError, aiohttp.ClientError):
                await read_at_most(answer.content, PROBE_BYTES)

    async def post(self, url: str, body: bytes, sink: StreamReply | None = None) -> Response:
        """The whole answer within `timeout` seconds (an event stream into `sink`); else OSError."""
        target = self.target(url)
        refuse_invalid(target)
        for attempt in (1, 2):
            progress = _Progress()
            try:
                return await self._exchange(target, body, sink, progress)
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                stale = not progress.head and not isinstance(exc, aiohttp.ClientConnectorError)
                if attempt == 2 or not stale:  # a kept connection the server had closed: once more
                    raise await self._failure(exc, target, stale) from None
            except TimeoutError:
                got = f" ({progress.events} events received)" if progress.events else ""
                raise TimeoutError(f"no complete reply within {self.timeout:g} s{got}") from None
            except (aiohttp.ClientError, http_exceptions.HttpProcessingError) as exc:
                raise await self._failure(exc, target, not progress.head and tls_record(exc)) from None
        raise AssertionError("unreachable")

    async def _failure(self, exc: BaseException, target: Target, suspect: bool) -> BaseException:
        """aiohttp's exception as ours, or the wrong scheme where `suspect` and a TLS handshake works."""
        wrong = await self.wrong_scheme(target) if suspect else None
        return wrong or translated(exc, target)

    def heard(self, target: Target) -> None:
        self._heard.add(target.authority)

    async def wrong_scheme(self, target: Target) -> EndpointError | None:
        """The wrong scheme where a plain http:// target never heard from takes a TLS handshake; else None."""
        if target.tls or target.proxy is not None or target.authority in self._heard:
            return None
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # only: does it speak TLS
        if not await opens(target, context, min(self.timeout, 5.0)):  # OpenSSL servers hang up on plain HTTP
            return None
        return EndpointError(
            f"http://{target.authority} answers plain HTTP with no HTTP reply and speaks TLS: "
            f"use https://{target.authority} in --api-url"
        )

    async def _exchange(self, target: Target, body: bytes, sink: StreamReply | None, progress: _Progress) -> Response:
        sent = asyncio.get_running_loop().time()
        async with self.session.post(target.url, data=body, allow_redirects=False, **target.options) as resp:
            progress.head = True
            self.heard(target)
            length = resp.content_length
            kind = resp.headers.get("Content-Type", "").lower()  # a media type is case-insensitive
            try:
                check_framing(resp.headers)
                # no type (FastAPI's StreamingResponse without one): a stream was asked for, as OpenAI's SDK reads it
                if sink is not None and resp.status == 200 and ("text/event-stream" in kind or not kind):
                    self.limits.length(length)
                    await self._events(resp, sink, progress)
                    return Response(resp.status, resp.headers, b"", sink, sent)
                self.limits.length(length)
                if length is not None and "Content-Encoding" not in resp.headers:
                    data = await resp.read()  # framed by its length: no larger than checked above
                else:
                    data = await read_at_most(resp.content, self.limits.max_body)
                self.limits.json(data)
            except (ProtocolError, aiohttp.ClientPayloadError, TimeoutError):  # a refusal's or failure's body is
                # only its words: past the limits, undecodable, cut short or endless, it is dropped: its status counts
                if 200 <= resp.status < 300:
                    raise
                resp.close()
                data = b""
            return Response(resp.status, resp.headers, data, None, sent)

    async def _events(self, resp: aiohttp.ClientResponse, sink: StreamReply, progress: _Progress) -> None:
        decoder, size, limits = SSEDecoder(), 0, self.limits
        loop = asyncio.get_running_loop()
        async for chunk in resp.content.iter_any():
            size += len(chunk)
            within(size, limits.max_body)
            now = loop.time()
            for kind, data in decoder.feed(chunk):
                limits.json(data)
                progress.events += 1
                if sink.add(now, kind, data):  # complete at [DONE], or failed: read no further
                    if data.strip() == "[DONE]":
                        await self._after_done(resp, size)
                    else:
                        resp.close()
                    return
            limits.events(progress.events, size)

    async def _after_done(self, resp: aiohttp.ClientResponse, size: int) -> None:
        """After [DONE], let the message end too (the connection is kept), or drop it."""
        if resp.content.at_eof():
            return
        try:
            await asyncio.wait_for(read_at_most(resp.content, self.limits.max_body, size), DONE_GRACE)
        except (TimeoutError, aiohttp.ClientError, ReplyTooLarge):
            resp.close()

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
