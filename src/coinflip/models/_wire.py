"""Where a request goes (`Target`, its proxy as aiohttp reads the environment) and what went wrong on the
way in words a user can act on; what a reply may cost (`Limits`) and how it may be framed."""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
import ssl
from dataclasses import dataclass, field
from typing import Any
from urllib.request import getproxies, proxy_bypass

import aiohttp
from aiohttp import http_exceptions
from aiohttp.helpers import get_env_proxy_for_url, strip_auth_from_url
from yarl import URL

from ..errors import ConfigError, EndpointError
from ..secrets import auth_secrets, shown_url

DECODED = ("identity", "gzip", "deflate", "br", "zstd")  # what aiohttp undoes (br, zstd: with a package installed)
_UNDECODED = re.compile(r"Can not decode content-encoding: .*?\((\w+)\)")  # aiohttp's word when that package is not
BYTES_PER_EVENT = 32  # a real event of a streamed reply is 50-300 bytes; `data: {}` is 10
FREE_EVENTS = 256  # events allowed before their size is looked at
BYTES_PER_NODE = 16  # a JSON value of a real reply takes 7 bytes or more; `{},` builds 64 bytes from 3
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_HINT = "; raise max_reply_mb to keep such replies"


class ProtocolError(ConnectionError):
    """Not valid HTTP/1.1, or a body that does not decode."""


class ProxyError(ConnectionError):
    """The proxy is unreachable or would not open a tunnel to the server."""


class ReplyTooLarge(ProtocolError):
    """The reply passed a limit on its size or cost; an error for its sample, not worth a retry."""


class UnknownCoding(ProtocolError):
    """A Content-Encoding coinflip does not undo, despite `Accept-Encoding: identity`: not retried."""

    def __init__(self, coding: str) -> None:
        super().__init__(
            f"the reply is encoded as {coding[:40]!r}, which coinflip does not decode "
            "(it asks for none: Accept-Encoding: identity)"
        )


def undecoded(exc: BaseException) -> UnknownCoding | None:
    """aiohttp's refusal of a br or zstd body (its package not installed) as ours; else None."""
    found = _UNDECODED.search(str(getattr(exc, "message", "")))
    return UnknownCoding(found.group(1)) if isinstance(exc, aiohttp.ClientResponseError) and found else None


def _mb(size: int) -> str:
    return f"{size / 1024 / 1024:g} MB"


def json_values(text: bytes) -> int:
    """At most how many values a JSON text holds: each but a container's first follows a comma."""
    return text.count(b"{") + text.count(b"[") + text.count(b",") + 1


class Limits:
    """What one reply may cost; ReplyTooLarge as soon as it passes."""

    def __init__(self, max_body: int) -> None:
        self.max_body = max_body
        self.max_values = max(1, max_body // BYTES_PER_NODE)

    def json(self, text: bytes | str) -> None:
        if len(text) < self.max_values:  # at most one value per character (plus one): nothing to count
            return
        raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
        if json_values(raw) > self.max_values and json_values(_STRING.sub(b'""', raw)) > self.max_values:
            raise ReplyTooLarge(
                f"the reply holds more than {self.max_values} JSON values (one per {BYTES_PER_NODE} bytes of "
                f"{_mb(self.max_body)}){_HINT}"
            )

    def length(self, length: int | None) -> None:
        if length is not None and length > self.max_body:
            raise ReplyTooLarge(f"the reply is {length} bytes, larger than {_mb(self.max_body)}{_HINT}")

    def events(self, count: int, size: int) -> None:
        if count > FREE_EVENTS + size // BYTES_PER_EVENT:
            raise ReplyTooLarge(
                f"the stream sent {count} events in {size} bytes; real streams' events average over "
                f"{BYTES_PER_EVENT} bytes"
            )


async def read_at_most(content: aiohttp.StreamReader, limit: int, already: int = 0) -> bytes:
    """The rest of a body; ReplyTooLarge as soon as `already` bytes and these pass `limit`."""
    body = bytearray()
    async for piece in content.iter_any():
        body += piece
        within(already + len(body), limit)
    return bytes(body)


def within(size: int, limit: int) -> None:
    if size > limit:
        raise ReplyTooLarge(f"the reply is larger than {_mb(limit)}{_HINT}")


def check_framing(headers: Any) -> None:
    """What aiohttp would read its own way fails instead: a Transfer-Encoding other than chunked, a
    Content-Encoding in layers or unknown (handed over still encoded)."""
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
            raise UnknownCoding(codings[0])


@dataclass(frozen=True)
class Target:
    url: URL
    host: str
    port: int
    tls: bool
    proxy: URL | None = None
    options: dict[str, Any] = field(default_factory=dict)  # headers, proxy and TLS arguments for aiohttp

    @classmethod
    def parse(cls, url: str, headers: dict[str, str], proxy: str | None = None) -> Target:
        """`proxy` or the environment's. Headers go per request: aiohttp adds session defaults to a CONNECT."""
        parsed = URL(url, encoded=True)
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise ValueError(f"not an http(s) URL: {shown_url(url)}")
        tls = parsed.scheme == "https"
        via, auth = strip_auth_from_url(URL(proxy)) if proxy else proxy_for(parsed)
        options: dict[str, Any] = {"headers": headers, "proxy": via, "proxy_headers": None}
        if auth is not None and tls:  # on the CONNECT
            options["proxy_headers"] = {"Proxy-Authorization": auth.encode()}
        elif auth is not None:  # on each request, which the proxy forwards
            options["headers"] = {**headers, "Proxy-Authorization": auth.encode()}
        return cls(parsed, parsed.host, parsed.port or (443 if tls else 80), tls, via, options)

    @property
    def authority(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def secrets(self) -> list[str]:
        """What a proxy may echo of its credentials: the password, and the Basic token."""
        sent = {**self.options["headers"], **(self.options["proxy_headers"] or {})}.get("Proxy-Authorization")
        return auth_secrets(sent) if sent else []


def proxy_for(url: URL) -> tuple[URL | None, aiohttp.BasicAuth | None]:
    named, host = getproxies().get(url.scheme), url.host or ""
    if not named or _loopback(host) or proxy_bypass(host):  # NO_PROXY, as aiohttp reads it
        return None, None
    shown = shown_url(named)
    if not named.lower().startswith("http://"):
        raise ConfigError(f"proxy {shown!r}: give an http:// proxy URL, e.g. http://proxy.example:3128")
    try:
        proxy, auth = get_env_proxy_for_url(url)
        if auth is not None:
            auth.encode()  # a ':' in the user name (`us%3Aer`): no Basic credential, a ValueError
    except LookupError:
        return None, None
    except ValueError as exc:  # http://[::1
        raise ConfigError(f"proxy {shown!r} is not a URL ({exc})") from None
    if not all(c.isalnum() or c in ".-_:%" for c in proxy.host or ""):  # a space, a control character
        raise ConfigError(f"proxy {shown!r}: {proxy.host!r} is not a host name")
    return proxy, auth


def _loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _never_resolves(host: str) -> bool:
    """RFC 6761: `.invalid` names are never looked up."""
    return host.lower().rstrip(".").endswith(".invalid") or host.lower() == "invalid"


async def opens(target: Target, tls: ssl.SSLContext | None = None, limit: float = 2.0) -> bool:
    """Whether a connection (with `tls`: a handshake too) opens: a wrong scheme, or a server down."""
    try:
        opened = asyncio.open_connection(
            target.host, target.port, ssl=tls, server_hostname=target.host if tls else None
        )
        _, writer = await asyncio.wait_for(opened, limit)
    except (TimeoutError, OSError):  # ssl.SSLError is an OSError
        return False
    writer.transport.abort()
    return True


def refuse_invalid(target: Target) -> None:
    unknown = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    if target.proxy is not None and _never_resolves(target.proxy.host or ""):
        raise _unreachable(target, unknown)
    if target.proxy is None and _never_resolves(target.host):
        raise unknown


def _unreachable(target: Target, reason: BaseException) -> ProxyError:
    assert target.proxy is not None
    return ProxyError(f"proxy {target.proxy.host}:{target.proxy.port} is unreachable ({_reason(reason)})")


def translated(exc: BaseException, target: Target) -> BaseException:
    if isinstance(exc, ProtocolError | ProxyError | socket.gaierror | TimeoutError):  # a timeout: the caller's words
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
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):  # before aiohttp 3.13.4 it has no os_error
        return exc.certificate_error
    if isinstance(exc, aiohttp.ClientConnectorError):
        return exc.os_error
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
    """Failed as a plain request to a TLS server does: closed or reset (not refused), or a TLS record."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        return False
    return isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientOSError) or tls_record(exc)


def tls_record(exc: BaseException) -> bool:
    """What came instead of a status line starts as a TLS record (alert or handshake)."""
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


def no_http(exc: BaseException, target: Target, waited: float = 0.0) -> str:
    where, hint = _where(target)
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientOSError):
        how = "resets" if isinstance(exc, aiohttp.ClientOSError) else "closes"  # RST, or FIN
        return f"{where} takes connections but {how} each one with no HTTP answer: is it an HTTP server? - {hint}"
    if isinstance(exc, TimeoutError):
        why = "a hung server, or a dead one behind a load balancer or port-forward?"
        return (
            f"{where} takes connections but answered no HTTP request, a GET included, in {waited:g} s ({why}) - {hint}"
        )
    return f"{where} answers with something that is not HTTP ({_detail(exc.__cause__ or exc)}) - {hint}"


def _where(target: Target) -> tuple[str, str]:
    where, hint = f"{'https' if target.tls else 'http'}://{target.authority}", "check --api-url"
    if target.proxy is not None:  # the proxy may be what failed: name it
        where += f" through proxy {target.proxy.host}:{target.proxy.port}"
        hint += " and HTTP_PROXY / HTTPS_PROXY / NO_PROXY"
    return where, hint


def connect_failure(exc: BaseException, target: Target, timeout: float) -> EndpointError:
    exc, (where, hint) = translated(exc, target), _where(target)
    if isinstance(exc, EndpointError):
        return exc
    if isinstance(exc, ProxyError):
        message = f"{exc} - check HTTP_PROXY / HTTPS_PROXY / NO_PROXY"
    elif isinstance(exc, ssl.SSLCertVerificationError):
        message = (
            f"{where}: TLS certificate verification failed ({exc.verify_message}); "
            "for a private CA set SSL_CERT_FILE=/path/to/ca.pem"
        )
    elif isinstance(exc, ssl.SSLError):
        message = f"{where}: TLS handshake failed ({exc.reason or exc}); is it an https:// server? - {hint}"
    elif isinstance(exc, socket.gaierror):
        message = f"cannot resolve host {target.host!r} ({exc.strerror or exc}) - {hint}"
    elif isinstance(exc, ConnectionRefusedError):
        message = f"nothing is listening at {where} (connection refused) - {hint}"
    elif isinstance(exc, TimeoutError):
        message = f"no connection to {where} within {timeout:g} s - {hint}"
    else:
        message = f"cannot connect to {where} ({_reason(exc)}) - {hint}"
    return EndpointError(message)
