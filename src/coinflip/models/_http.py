"""POST a JSON body to an OpenAI-compatible server and read the whole answer, on aiohttp.

aiohttp does the HTTP: keep-alive connections per origin (as many as requests in flight),
the framing of answers, Content-Encoding (gzip, deflate), TLS, 1xx interim answers, and
proxies (absolute-form requests for http, a CONNECT tunnel for https). What stays here is what
an evaluation needs on top of any client:

- one line saying what is wrong with an endpoint (`check` opens the first connection before a
  run, within CONNECT_S; a wrong scheme either way is told apart by trying the other), and our
  own exceptions instead of aiohttp's (`_wire.py`, with the proxy a URL goes through);
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
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

import aiohttp
from aiohttp import http_exceptions

from ..errors import ConfigError, EndpointError
from ._sse import SSEDecoder
from ._wire import (
    Limits,
    Target,
    describe_connect_error,
    no_http,
    opens,
    refuse_invalid,
    tls_record,
    translated,
    within,
)

# what the Batch API's client (batch_api.py) takes from here too
from ._wire import ReplyTooLarge as ReplyTooLarge
from ._wire import UnknownCoding as UnknownCoding
from ._wire import check_framing as check_framing
from ._wire import read_at_most as read_at_most
from ._wire import tls_like as tls_like
from ._wire import undecoded as undecoded

DEFAULT_MAX_BODY = 16 * 1024 * 1024
CONNECT_S = 10.0  # the longest the first connection before a run may take (TCP, proxy, TLS): real ones take <1 s
PROBE_BYTES = 1 << 20  # the most of an answer to a probe before the run read (llama.cpp's /props is KBs)
DONE_GRACE = 0.5  # seconds to let a stream end its HTTP message after [DONE] and keep the connection
_FRAMING_HEADERS = ("host", "content-length", "transfer-encoding", "connection")  # ours to set, not a user's


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


def megabytes(mb: float) -> int:
    """--max-reply-mb in bytes: the cap on every reply a run reads, online or from the Batch API."""
    return int(mb * 1024 * 1024)


@dataclass
class _Progress:
    """How far one attempt got: whether its answer's head came, how many events."""

    head: bool = False
    events: int = 0


class ConnectionPool:
    """One aiohttp session: keep-alive connections per origin, opened on demand."""

    def __init__(
        self,
        headers: dict[str, str],
        timeout: float,
        proxy: str | None = None,
        max_body: int = DEFAULT_MAX_BODY,
        sink: Callable[[], EventSink] = EventList,
    ) -> None:
        """`proxy` sends everything through that proxy (else the environment decides per URL);
        `sink` makes what takes each stream's events."""
        defaults = {"Accept": "application/json", "Accept-Encoding": "identity"}
        self.headers = {k: v for k, v in merge_headers(defaults, headers).items() if k.lower() not in _FRAMING_HEADERS}
        self.timeout = timeout
        self.limits = Limits(max_body)
        self.sink = sink
        self._proxy = proxy
        self._targets: dict[str, Target] = {}
        self._session: aiohttp.ClientSession | None = None
        self._ssl: ssl.SSLContext | None = None
        self._heard: set[str] = set()  # servers (host:port) that have sent an HTTP head: their scheme is right

    def target(self, url: str) -> Target:
        """Where `url` points; its `options` are the arguments of every aiohttp request sent there."""
        target = self._targets.get(url)
        if target is None:
            target = self._targets[url] = Target.parse(url, self.headers, self._proxy)
            if target.tls:  # SSL_CERT_FILE as it is when the first request goes
                self._ssl = self._ssl or ssl.create_default_context()
                target.options["ssl"] = self._ssl
        return target

    def proxy_secrets(self, urls: list[str]) -> list[str]:
        """The credentials of the proxies `urls` go through, for the redactor (secrets.run_secrets
        holds the run's own); a proxy URL that cannot be read adds none (the check says why)."""
        found = []
        for url in urls:
            with contextlib.suppress(ConfigError, ValueError):
                found += self.target(url).secrets
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
            proxy=options["proxy"],
            proxy_headers=options["proxy_headers"],
        )
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
            reason = translated(exc, target, limit)
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
                    raise EndpointError(describe_connect_error(translated(exc, target, 0), target, 0)) from None
                failure = exc
            except aiohttp.ClientHttpProxyError as exc:  # a proxy's refusal of a new tunnel: the proxy's line
                raise EndpointError(describe_connect_error(translated(exc, target, 0), target, 0)) from None
            except (aiohttp.ClientError, http_exceptions.HttpProcessingError) as exc:
                if undecoded(exc) is not None:  # an HTTP head, in a coding aiohttp refused: the run's replies decide
                    self.heard(target)
                    return
                failure = exc
                break
        assert failure is not None
        raise await self.wrong_scheme(target) or EndpointError(no_http(failure, target)) from None

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
        refuse_invalid(target)
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
                raise await self._failure(exc, target, not progress.head and tls_record(exc)) from None
        raise AssertionError("unreachable")

    async def _failure(self, exc: BaseException, target: Target, suspect: bool) -> BaseException:
        """aiohttp's exception as ours; and where a plain http:// server that has not answered yet
        answers like a TLS one (hangs up twice with no head, or sends a TLS record) and takes a TLS
        handshake, the wrong scheme."""
        wrong = await self.wrong_scheme(target) if suspect else None
        return wrong or translated(exc, target, self.timeout)

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
        return await opens(target, context, min(self.timeout, 5.0))

    async def _exchange(self, target: Target, body: bytes, stream: bool, progress: _Progress) -> Response:
        loop = asyncio.get_running_loop()
        sent = loop.time()
        async with self.session.post(target.url, data=body, allow_redirects=False, **target.options) as resp:
            progress.head = True
            self.heard(target)
            check_framing(resp.headers)
            length = resp.content_length
            self.limits.length(length)
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
