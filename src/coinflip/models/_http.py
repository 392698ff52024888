"""A lean HTTP/1.1 client for one job: POST a JSON body, read the whole answer, keep the connection.

Why not aiohttp: with 128 requests in flight every reply is on the critical path, and aiohttp's
per-request machinery (and its 0.2-0.4 s import) made the harness, not the server, what a run
waited for. This speaks just what OpenAI-compatible servers and the proxies in front of them
send back: Content-Length, chunked or close-delimited bodies, 1xx interim answers, keep-alive,
TLS, and gzip/deflate from a proxy that compresses although asked not to; it goes through an
http:// proxy when the environment names one (`_proxy.py`). Connections are pooled per origin;
a reused connection that the server had already closed is retried once on a fresh one, as
browsers and urllib3 do.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import zlib
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..errors import FatalAPIError
from ._proxy import Proxy, proxy_for

MAX_HEAD = 64 * 1024
FIRST_OPENINGS = 8  # connections opened at once at the start; each one that opens lets one more start


class ProtocolError(ConnectionError):
    """The peer sent something that is not HTTP/1.x."""


class ProxyError(ConnectionError):
    """The proxy would not open a tunnel to the server."""


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]  # lower-case names; a repeated header keeps its last value
    body: bytes


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
            raise ValueError(f"not an http(s) URL: {url}")
        tls = parts.scheme == "https"
        port = parts.port or (443 if tls else 80)
        netloc = parts.netloc.rpartition("@")[2]
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        lines = [f"POST {path} HTTP/1.1", f"Host: {netloc}", *(f"{k}: {v}" for k, v in headers.items())]
        if proxy is not None and not tls:
            lines[0] = f"POST http://{netloc}{path} HTTP/1.1"
            if proxy.authorization:
                lines.append(f"Proxy-Authorization: {proxy.authorization}")
        return cls(parts.hostname, port, tls, ("\r\n".join(lines) + "\r\n").encode("latin-1"), proxy)

    @property
    def tunnel_request(self) -> bytes:
        authority = f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
        lines = [f"CONNECT {authority} HTTP/1.1", f"Host: {authority}"]
        if self.proxy is not None and self.proxy.authorization:
            lines.append(f"Proxy-Authorization: {self.proxy.authorization}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class _Connection(asyncio.Protocol):
    """One keep-alive connection; parses one response at a time into `waiter`."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future[Response] | None = None
        self._reset()

    def _reset(self, tunnel: bool = False) -> None:
        self.received = False  # any byte of the current response yet
        self.tunnel = tunnel  # the current request is a CONNECT: a 2xx answer has no body
        self.status = 0
        self.headers: dict[str, str] = {}
        self.mode = ""  # "", "length", "chunked", "close"
        self.remaining = 0
        self.body = bytearray()
        self.keep_alive = True

    # asyncio callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.waiter is None:  # nothing was asked: the stream is out of step, drop it
            self.close()
            return
        self.received = True
        self.buffer += data
        try:
            self._parse()
        except ProtocolError as exc:
            self._fail(exc)

    def eof_received(self) -> bool | None:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.mode == "close":
            self._finish(keep_alive=False)
        else:
            self._fail(ConnectionResetError("the server closed the connection before the reply was complete"))

    # the parser
    def _parse(self) -> None:
        while self.waiter is not None:
            if not self.mode and not self._parse_head():
                return
            if self.mode == "length":
                if len(self.buffer) < self.remaining:
                    return
                self.body += self.buffer[: self.remaining]
                del self.buffer[: self.remaining]
                self._finish(self.keep_alive)
            elif self.mode == "chunked":
                if not self._parse_chunks():
                    return
                self._finish(self.keep_alive)
            else:  # close-delimited: everything until the server hangs up
                self.body += self.buffer
                self.buffer.clear()
                return

    def _parse_head(self) -> bool:
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buffer) > MAX_HEAD:
                raise ProtocolError("response headers too large")
            return False
        lines = bytes(self.buffer[:end]).decode("latin-1").split("\r\n")
        del self.buffer[: end + 4]
        version, _, rest = lines[0].partition(" ")
        if not version.startswith("HTTP/1.") or not rest[:3].isdigit():
            raise ProtocolError(f"not an HTTP/1.x response: {lines[0][:80]!r}")
        status = int(rest[:3])
        if 100 <= status < 200:  # interim answer (100 Continue, 103 Early Hints): the real one follows
            return False if not self.buffer else self._parse_head()
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        connection = headers.get("connection", "").lower()
        self.status, self.headers = status, headers
        self.keep_alive = "close" not in connection and (version != "HTTP/1.0" or "keep-alive" in connection)
        if self.tunnel and 200 <= status < 300:
            self.mode, self.remaining = "length", 0
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self.mode = "chunked"
        elif "content-length" in headers:
            try:
                self.mode, self.remaining = "length", int(headers["content-length"])
            except ValueError:
                raise ProtocolError("bad Content-Length") from None
        elif status in (204, 304):
            self.mode, self.remaining = "length", 0
        else:
            self.mode, self.keep_alive = "close", False
        return True

    def _parse_chunks(self) -> bool:
        """Consume whole chunks from the buffer; True once the last chunk and trailers are in."""
        while True:
            if self.remaining:  # inside a chunk's data, plus its trailing CRLF
                if len(self.buffer) < self.remaining + 2:
                    return False
                self.body += self.buffer[: self.remaining]
                del self.buffer[: self.remaining + 2]
                self.remaining = 0
            line_end = self.buffer.find(b"\r\n")
            if line_end < 0:
                return False
            size_text = bytes(self.buffer[:line_end]).split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise ProtocolError(f"bad chunk size {size_text[:20]!r}") from None
            if size:
                del self.buffer[: line_end + 2]
                self.remaining = size
                continue
            trailers_end = self.buffer.find(b"\r\n\r\n", line_end)
            if self.buffer[line_end : line_end + 4] == b"\r\n\r\n":
                trailers_end = line_end
            if trailers_end < 0:
                return False
            del self.buffer[: trailers_end + 4]
            return True

    def _finish(self, keep_alive: bool) -> None:
        waiter, body = self.waiter, bytes(self.body)
        response = Response(self.status, self.headers, _decode(body, self.headers.get("content-encoding", "")))
        self.keep_alive = keep_alive and not self.buffer  # stray bytes: the stream can't be trusted
        self.waiter = None
        self.mode = ""
        if waiter is not None and not waiter.done():
            waiter.set_result(response)

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

    def send(self, data: bytes, tunnel: bool = False) -> asyncio.Future[Response]:
        assert self.transport is not None
        self._reset(tunnel)
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        return self.waiter

    def expire(self, timeout: float) -> None:
        self._fail(TimeoutError(f"no complete reply within {timeout:g} s"))

    def close(self) -> None:
        self.keep_alive = False
        if self.transport is not None:
            self.transport.close()


def _decode(body: bytes, encoding: str) -> bytes:
    encoding = encoding.strip().lower()
    try:
        if encoding in ("gzip", "x-gzip"):
            return zlib.decompress(body, 16 + zlib.MAX_WBITS)
        if encoding == "deflate":
            try:
                return zlib.decompress(body)
            except zlib.error:
                return zlib.decompress(body, -zlib.MAX_WBITS)
    except zlib.error:
        raise ProtocolError(f"the body does not decode as {encoding}") from None
    return body


def _check_tunnel(answer: Response, target: Target) -> None:
    if 200 <= answer.status < 300:
        return
    assert target.proxy is not None
    where = f"proxy {target.proxy.host}:{target.proxy.port}"
    if answer.status == 407:
        raise FatalAPIError(
            f"{where} wants credentials (407): put them in the proxy URL, http://user:password@host:port"
        )
    raise ProxyError(f"{where} answered {answer.status} to CONNECT {target.host}:{target.port}")


class ConnectionPool:
    """Keep-alive connections per origin, opened on demand: as many as requests in flight."""

    def __init__(
        self,
        headers: dict[str, str],
        timeout: float,
        proxy: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        """`proxy` sends everything through that proxy; without it, the environment's
        HTTP(S)_PROXY and NO_PROXY decide per URL."""
        self.headers = {"Accept": "application/json", "Accept-Encoding": "identity", **headers}
        self.timeout = timeout
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

    async def post(self, url: str, body: bytes) -> Response:
        """The whole answer within `timeout` seconds; OSError (TimeoutError included) otherwise."""
        target = self.target(url)
        data = target.head + b"Content-Length: %d\r\n\r\n" % len(body) + body
        deadline = asyncio.get_running_loop().time() + self.timeout
        idle = self._idle.setdefault((target.host, target.port, target.tls, target.proxy), deque())
        while idle:
            conn = idle.pop()
            if not conn.usable:
                continue
            try:
                return await self._exchange(conn, data, idle, deadline)
            except ConnectionResetError:
                if conn.received:  # the server did answer something: a real failure, not a stale socket
                    raise
        return await self._exchange(await self._connect(target, deadline), data, idle, deadline)

    async def _exchange(self, conn: _Connection, data: bytes, idle: deque[_Connection], deadline: float) -> Response:
        """A timer, not a wrapping task, enforces the deadline: one hop less per reply."""
        timer = asyncio.get_running_loop().call_at(deadline, conn.expire, self.timeout)
        clean = False
        try:
            response = await conn.send(data)
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
            raise TimeoutError(f"no connection to {target.host}:{target.port} within {self.timeout:g} s") from None

    async def _handshake(self, target: Target) -> _Connection:
        loop = asyncio.get_running_loop()
        context = self._ssl_context() if target.tls else None
        if target.proxy is None:
            _, conn = await loop.create_connection(
                _Connection, target.host, target.port, ssl=context, server_hostname=target.host if context else None
            )
            return conn
        _, conn = await loop.create_connection(_Connection, target.proxy.host, target.proxy.port)
        if context is None:
            return conn
        try:
            answer = await conn.send(target.tunnel_request, tunnel=True)
            _check_tunnel(answer, target)
            assert conn.transport is not None and not conn.buffer
            conn.transport = await loop.start_tls(conn.transport, conn, context, server_hostname=target.host)
            conn.keep_alive = True
        except BaseException:
            conn.close()
            raise
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
