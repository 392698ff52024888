"""A lean HTTP/1.1 client for one job: POST a JSON body, read the answer, keep the connection.

Why not aiohttp: with 128 requests in flight every reply is on the critical path, and aiohttp's
per-request machinery (and its 0.2-0.4 s import) made the harness, not the server, what a run
waited for. This keeps the lean part (a pool of keep-alive connections on asyncio protocols,
opened in a slow-start ramp, a timer instead of a task per request) and leaves the framing of
answers to h11, the parser httpx uses: what h11 rejects fails the attempt at once with a clear
error, what it accepts (bare LF line endings, `Content-Length: n, n`, chunk extensions and
trailers, 1xx interim answers, close-delimited bodies) works. Request heads are built once per
URL; h11 is told only the method, which is all it needs to frame the answer.

Bodies are decoded (gzip, deflate, in the order a proxy stacked them) and, for streaming,
split into server-sent events as the bytes arrive. A body larger than `max_body` after or
before decoding fails with ReplyTooLarge, so a runaway reply costs at most that much memory.
It goes through an http:// proxy when the environment names one (`_proxy.py`), CONNECT-tunnelled
for https. A reused connection that the server had already closed is retried once on a fresh
one, as browsers and urllib3 do. `check` opens the first connection to an endpoint before a run
and turns what went wrong (refused, unknown host, TLS, proxy) into one EndpointError line.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import ssl
import zlib
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import h11

from ..errors import EndpointError, FatalAPIError
from ._proxy import Proxy, proxy_for, shown_url
from ._sse import SSEDecoder

MAX_HEAD = 64 * 1024  # bytes of status line and headers, interim answers included
FIRST_OPENINGS = 8  # connections opened at once at the start; each one that opens lets one more start
DEFAULT_MAX_BODY = 16 * 1024 * 1024
# h11 frames the answer by the request's method; the head we send is our own, built once per URL
_POST = h11.Request(method="POST", target="/", headers=[("Host", "h"), ("Content-Length", "0")])
_CONNECT = h11.Request(method="CONNECT", target="h:1", headers=[("Host", "h:1")])
_END = h11.EndOfMessage()
_FRAMING_HEADERS = ("host", "content-length", "transfer-encoding", "connection")  # ours to set, not a user's


class ProtocolError(ConnectionError):
    """The peer sent something that is not valid HTTP/1.1, or a body that does not decode."""


class ProxyError(ConnectionError):
    """The proxy is unreachable or would not open a tunnel to the server."""


class ReplyTooLarge(ProtocolError):
    """The body passed the size limit; an error for its sample, not worth a retry."""


Event = tuple[float, str, str]  # arrival (loop time), event type, data


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]  # lower-case names; a repeated header's values joined with ", "
    body: bytes  # empty when the answer was a stream of events
    events: list[Event] | None = None  # server-sent events, when streaming was asked and answered
    sent: float = 0.0  # loop time the request was written


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
    """Where a URL points, how to get there, and the start of every request head sent there."""

    host: str
    port: int
    tls: bool
    head: bytes  # request line and fixed headers, up to (not including) Content-Length
    proxy: Proxy | None = None  # https goes through it in a CONNECT tunnel, http in absolute form

    @classmethod
    def parse(cls, url: str, headers: dict[str, str], proxy: Proxy | None = None) -> Target:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {shown_url(url)}")
        tls = parts.scheme == "https"
        port = parts.port or (443 if tls else 80)
        netloc = parts.netloc.rpartition("@")[2]
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        fixed = (f"{k}: {v}" for k, v in headers.items() if k.lower() not in _FRAMING_HEADERS)
        lines = [f"POST {path} HTTP/1.1", f"Host: {netloc}", *fixed]
        if proxy is not None and not tls:
            lines[0] = f"POST http://{netloc}{path} HTTP/1.1"
            if proxy.authorization:
                lines.append(f"Proxy-Authorization: {proxy.authorization}")
        return cls(parts.hostname, port, tls, ("\r\n".join(lines) + "\r\n").encode("latin-1"), proxy)

    @property
    def key(self) -> tuple[str, int, bool, Proxy | None]:
        return self.host, self.port, self.tls, self.proxy

    @property
    def authority(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def tunnel_request(self) -> bytes:
        lines = [f"CONNECT {self.authority} HTTP/1.1", f"Host: {self.authority}"]
        if self.proxy is not None and self.proxy.authorization:
            lines.append(f"Proxy-Authorization: {self.proxy.authorization}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class _Inflate:
    """One content coding undone incrementally; `room` bounds the output of each call."""

    def __init__(self, coding: str) -> None:
        if coding in ("gzip", "x-gzip"):
            self._wbits = 16 + zlib.MAX_WBITS
        elif coding == "deflate":  # zlib-wrapped as the RFC says, or raw as some servers send it
            self._wbits = zlib.MAX_WBITS
        else:
            raise ProtocolError(f"the body is encoded as {coding!r}, which coinflip cannot decode")
        self.coding = coding
        self._z = zlib.decompressobj(self._wbits)
        self._started = False

    def feed(self, data: bytes, room: int) -> bytes:
        try:
            out = self._z.decompress(data, room + 1)
        except zlib.error:
            if self._started or self._wbits != zlib.MAX_WBITS:
                raise ProtocolError(f"the body does not decode as {self.coding}") from None
            self._wbits = -zlib.MAX_WBITS  # raw deflate, as httpx falls back to
            self._z = zlib.decompressobj(self._wbits)
            return self.feed(data, room)
        self._started = True
        if len(out) > room:
            raise ReplyTooLarge(f"the reply is larger than {_mb(room)} once decoded")
        return out

    def flush(self) -> bytes:
        if self._started and not self._z.eof:
            raise ProtocolError(f"the body ends before its {self.coding} data does")
        return self._z.flush()


class _Decoder:
    """Content-Encoding, undone as the body arrives (`gzip, gzip` twice, as httpx does)."""

    def __init__(self, header: str) -> None:
        codings = [c.strip().lower() for c in header.split(",")]
        self._steps = [_Inflate(c) for c in reversed(codings) if c and c != "identity"]

    def feed(self, data: bytes, room: int) -> bytes:
        for step in self._steps:
            data = step.feed(data, room)
        return data

    def flush(self, room: int) -> bytes:
        data = b""
        for step in self._steps:
            data = step.feed(data, room) if data else b""
            data += step.flush()
        return data


def _mb(size: int) -> str:
    return f"{size / 1024 / 1024:g} MB"


class _Connection(asyncio.Protocol):
    """One keep-alive connection; h11 frames one answer at a time into `waiter`."""

    def __init__(self, max_body: int = DEFAULT_MAX_BODY) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
        self.max_body = max_body
        self.waiter: asyncio.Future[Response] | None = None
        self.keep_alive = True
        self._reset()

    def _reset(self, stream: bool = False, tunnel: bool = False) -> None:
        self.received = False  # any byte of the current answer yet
        self.stream = stream  # split a text/event-stream answer into events
        self.tunnel = tunnel  # the current request is a CONNECT: a 2xx answer has no body
        self.fed = 0  # bytes of the current answer so far
        self.status = 0
        self.headers: dict[str, str] = {}
        self.body = bytearray()
        self.raw_size = 0
        self.size = 0
        self.decoder: _Decoder | None = None
        self.sse: SSEDecoder | None = None
        self.events: list[Event] | None = None
        self.sent = 0.0

    # asyncio callbacks: they never raise; whatever goes wrong fails the waiter
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.waiter is None:  # nothing was asked: the stream is out of step, drop it
            self.close()
            return
        self.received = True
        self.fed += len(data)
        try:
            self.parser.receive_data(data)
            self._pump()
            if self.sse is not None and self.body:
                self._split_events()
        except Exception as exc:
            self._fail(_framing_error(exc))

    def eof_received(self) -> bool | None:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.waiter is None:
            return
        try:
            self.parser.receive_data(b"")
            self._pump()  # a close-delimited body ends here
        except h11.RemoteProtocolError:
            pass
        except Exception as error:
            self._fail(_framing_error(error))
            return
        self._fail(ConnectionResetError("the server closed the connection before the reply was complete"))

    # the events h11 finds
    def _pump(self) -> None:
        while self.waiter is not None:
            event = self.parser.next_event()
            kind = type(event)
            if kind is h11.Data:
                self._take(event.data)  # type: ignore[union-attr]
            elif kind is h11.Response:
                self._head(event)  # type: ignore[arg-type]
            elif kind is h11.EndOfMessage:
                self._finish()
            elif kind is not h11.InformationalResponse:  # NEED_DATA, PAUSED
                return

    def _head(self, event: h11.Response) -> None:
        if self.fed > MAX_HEAD and self.fed - len(self.parser.trailing_data[0]) > MAX_HEAD:
            raise ProtocolError(f"the response headers are larger than {MAX_HEAD // 1024} KiB")
        headers: dict[str, str] = {}
        for name, value in event.headers:
            key, text = name.decode("latin-1"), value.decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        self.status, self.headers = event.status_code, headers
        if self.tunnel and 200 <= event.status_code < 300:
            self._finish()
            return
        length = headers.get("content-length")
        if length is not None and int(length) > self.max_body:
            raise ReplyTooLarge(f"the reply is {int(length)} bytes, larger than {_mb(self.max_body)}")
        if "content-encoding" in headers:
            self.decoder = _Decoder(headers["content-encoding"])
        if self.stream and event.status_code == 200 and "text/event-stream" in headers.get("content-type", ""):
            self.sse, self.events = SSEDecoder(), []

    def _take(self, data: bytes) -> None:
        self.raw_size += len(data)
        if self.raw_size > self.max_body:
            raise ReplyTooLarge(f"the reply is larger than {_mb(self.max_body)}")
        if self.decoder is not None:
            self._deliver(self.decoder.feed(data, self.max_body - self.size))
        else:
            self.size = self.raw_size
            self.body += data

    def _deliver(self, data: bytes) -> None:
        self.size += len(data)
        if self.size > self.max_body:
            raise ReplyTooLarge(f"the reply is larger than {_mb(self.max_body)}")
        self.body += data  # a stream's bytes wait here until the read is parsed: one split per read

    def _split_events(self) -> None:
        assert self.sse is not None and self.events is not None
        now = asyncio.get_running_loop().time()
        self.events.extend((now, kind, text) for kind, text in self.sse.feed(bytes(self.body)))
        self.body.clear()

    def _finish(self) -> None:
        if self.decoder is not None:
            self._deliver(self.decoder.flush(self.max_body - self.size))
        if self.sse is not None and self.body:
            self._split_events()
        waiter, self.waiter = self.waiter, None
        parser = self.parser
        if parser.their_state is h11.DONE and parser.our_state is h11.DONE and not parser.trailing_data[0]:
            parser.start_next_cycle()
        elif not self.tunnel:  # the server will close, or sent stray bytes: the stream can't be trusted
            self.keep_alive = False
        if waiter is not None and not waiter.done():
            waiter.set_result(Response(self.status, self.headers, bytes(self.body), self.events, self.sent))

    def _fail(self, exc: Exception) -> None:
        self.keep_alive = False
        if self.transport is not None:
            self.transport.close()
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc)
        self.waiter = None

    # used by the pool
    @property
    def usable(self) -> bool:
        return self.transport is not None and not self.transport.is_closing() and self.keep_alive

    def send(self, data: bytes, stream: bool = False, tunnel: bool = False) -> asyncio.Future[Response]:
        assert self.transport is not None
        self._reset(stream, tunnel)
        try:
            self.parser.send(_CONNECT if tunnel else _POST)
            self.parser.send(_END)
        except h11.LocalProtocolError as exc:  # the connection is out of step: never reuse it
            self.close()
            raise ProtocolError(f"the connection cannot carry another request ({exc})") from None
        loop = asyncio.get_running_loop()
        self.waiter = loop.create_future()
        self.sent = loop.time()
        self.transport.write(data)
        return self.waiter

    def tunnelled(self) -> None:
        """The proxy opened the tunnel: what follows is a new HTTP conversation with the server."""
        self.parser = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
        self.keep_alive = True

    def expire(self, timeout: float) -> None:
        got = f" ({len(self.events)} events received)" if self.events else ""
        self._fail(TimeoutError(f"no complete reply within {timeout:g} s{got}"))

    def close(self) -> None:
        self.keep_alive = False
        if self.transport is not None:
            self.transport.close()


def _framing_error(exc: Exception) -> Exception:
    if isinstance(exc, ProtocolError):
        return exc
    if isinstance(exc, h11.RemoteProtocolError):
        detail = re.sub(r"bytearray\((b['\"].*?['\"])\)", r"\1", str(exc))
        return ProtocolError(f"the reply is not valid HTTP/1.1 ({detail[:200]})")
    return ProtocolError(f"the reply could not be read ({type(exc).__name__}: {exc})")


def _check_tunnel(answer: Response, target: Target) -> None:
    if 200 <= answer.status < 300:
        return
    assert target.proxy is not None
    where = f"proxy {target.proxy.host}:{target.proxy.port}"
    if answer.status == 407:
        raise EndpointError(
            f"{where} wants credentials (407): put them in the proxy URL, http://user:password@host:port"
        )
    raise ProxyError(f"{where} answered {answer.status} to CONNECT {target.authority}")


def _never_resolves(host: str) -> bool:
    """RFC 6761: `.invalid` names are never looked up; a resolver answers no at once."""
    return host.lower().rstrip(".").endswith(".invalid") or host.lower() == "invalid"


class ConnectionPool:
    """Keep-alive connections per origin, opened on demand: as many as requests in flight."""

    def __init__(
        self,
        headers: dict[str, str],
        timeout: float,
        proxy: str | None = None,
        environ: Mapping[str, str] | None = None,
        max_body: int = DEFAULT_MAX_BODY,
    ) -> None:
        """`proxy` sends everything through that proxy; without it, the environment's
        HTTP(S)_PROXY and NO_PROXY decide per URL."""
        self.headers = merge_headers({"Accept": "application/json", "Accept-Encoding": "identity"}, headers)
        self.timeout = timeout
        self.max_body = max_body
        self._proxy = Proxy.parse(proxy) if proxy else None
        self._environ = os.environ if environ is None else environ
        self._targets: dict[str, Target] = {}
        self._idle: dict[tuple[str, int, bool, Proxy | None], deque[_Connection]] = {}
        self._ssl: ssl.SSLContext | None = None
        self._opening: asyncio.Semaphore | None = None

    def target(self, url: str) -> Target:
        target = self._targets.get(url)
        if target is None:
            proxy = self._proxy or proxy_for(url, self._environ)
            target = self._targets[url] = Target.parse(url, self.headers, proxy)
        return target

    async def check(self, url: str) -> None:
        """Open the first connection to `url` now and keep it for the first request; EndpointError
        (one line saying what is wrong) when it cannot be opened."""
        target = self.target(url)
        deadline = asyncio.get_running_loop().time() + self.timeout
        try:
            conn = await self._open(target, deadline)
        except FatalAPIError:
            raise
        except (OSError, asyncio.TimeoutError) as exc:
            raise EndpointError(describe_connect_error(exc, target, self.timeout)) from None
        self._idle.setdefault(target.key, deque()).append(conn)

    async def post(self, url: str, body: bytes, stream: bool = False) -> Response:
        """The whole answer within `timeout` seconds; OSError (TimeoutError included) otherwise."""
        target = self.target(url)
        data = target.head + b"Content-Length: %d\r\n\r\n" % len(body) + body
        deadline = asyncio.get_running_loop().time() + self.timeout
        idle = self._idle.setdefault(target.key, deque())
        while idle:
            conn = idle.pop()
            if not conn.usable:
                continue
            try:
                return await self._exchange(conn, data, idle, deadline, stream)
            except ConnectionResetError:
                if conn.received:  # the server did answer something: a real failure, not a stale socket
                    raise
        return await self._exchange(await self._connect(target, deadline), data, idle, deadline, stream)

    async def _exchange(
        self, conn: _Connection, data: bytes, idle: deque[_Connection], deadline: float, stream: bool
    ) -> Response:
        """A timer, not a wrapping task, enforces the deadline: one hop less per reply."""
        timer = asyncio.get_running_loop().call_at(deadline, conn.expire, self.timeout)
        clean = False
        try:
            response = await conn.send(data, stream)
            clean = True
        finally:
            timer.cancel()
            if clean and conn.usable:
                idle.append(conn)
            else:
                conn.close()
        return response

    async def _connect(self, target: Target, deadline: float) -> _Connection:
        """Opens ramp up like TCP slow start (8, 16, 32, ...): opening 128 at once would hold every
        first request back until the last handshake is done, and a run ends a fixed number of
        round trips after its earliest requests start."""
        if self._opening is None:
            self._opening = asyncio.Semaphore(FIRST_OPENINGS)
        async with self._opening:
            conn = await self._open(target, deadline)
        self._opening.release()
        return conn

    async def _open(self, target: Target, deadline: float) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            return await asyncio.wait_for(self._handshake(target), max(0.0, deadline - loop.time()))
        except asyncio.TimeoutError:
            raise TimeoutError(f"no connection to {target.authority} within {self.timeout:g} s") from None

    def _new(self) -> _Connection:
        return _Connection(self.max_body)

    async def _handshake(self, target: Target) -> _Connection:
        loop = asyncio.get_running_loop()
        context = self._ssl_context() if target.tls else None
        if target.proxy is None:
            if _never_resolves(target.host):
                raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
            _, conn = await loop.create_connection(
                self._new, target.host, target.port, ssl=context, server_hostname=target.host if context else None
            )
            return conn
        conn = await self._reach_proxy(target.proxy)
        if context is None:
            return conn
        try:
            answer = await conn.send(target.tunnel_request, tunnel=True)
            _check_tunnel(answer, target)
            assert conn.transport is not None
            conn.transport = await loop.start_tls(conn.transport, conn, context, server_hostname=target.host)
            conn.tunnelled()
        except BaseException:
            conn.close()
            raise
        return conn

    async def _reach_proxy(self, proxy: Proxy) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            if _never_resolves(proxy.host):
                raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
            _, conn = await loop.create_connection(self._new, proxy.host, proxy.port)
        except OSError as exc:
            raise ProxyError(f"proxy {proxy.host}:{proxy.port} is unreachable ({_reason(exc)})") from None
        return conn

    def _ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context()
        return self._ssl

    async def aclose(self) -> None:
        for idle in self._idle.values():
            while idle:
                idle.pop().close()
        await asyncio.sleep(0)  # let transports finish closing


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, socket.gaierror):
        return f"unknown host: {exc.strerror or exc}"
    text = getattr(exc, "strerror", None) or str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def describe_connect_error(exc: BaseException, target: Target, timeout: float) -> str:
    """One line for a connection that could not be opened before the run."""
    where = f"{'https' if target.tls else 'http'}://{target.authority}"
    if isinstance(exc, ProxyError):
        return f"{exc} - check HTTP_PROXY / HTTPS_PROXY / NO_PROXY"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return (
            f"{where}: TLS certificate verification failed ({exc.verify_message}); "
            "for a private CA set SSL_CERT_FILE=/path/to/ca.pem"
        )
    if isinstance(exc, ssl.SSLError):
        return f"{where}: TLS handshake failed ({exc.reason or exc}); is it an https:// server? - check --api-url"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve host {target.host!r} ({exc.strerror or exc}) - check --api-url"
    if isinstance(exc, ConnectionRefusedError):
        return f"nothing is listening at {where} (connection refused) - check --api-url"
    if isinstance(exc, TimeoutError | asyncio.TimeoutError):
        return f"no connection to {where} within {timeout:g} s - check --api-url"
    return f"cannot connect to {where} ({_reason(exc)}) - check --api-url"
