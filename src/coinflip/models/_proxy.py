"""Which proxy a request goes through: HTTP_PROXY, HTTPS_PROXY, ALL_PROXY and NO_PROXY, read the
way curl, requests and Go read them (lower case wins over upper case).

Loopback hosts never go through a proxy, as in Go's net/http: a proxy cannot reach this
machine's 127.0.0.1, where local servers (llama.cpp, a vLLM on the same box) listen.
"""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

from ..errors import ConfigError
from ..secrets import basic_secrets, shown_url


@dataclass(frozen=True)
class Proxy:
    host: str
    port: int
    authorization: str | None = field(default=None, repr=False)  # "Basic ..." from user:password in the URL

    @property
    def secrets(self) -> list[str]:
        """What of the proxy URL's credentials a proxy may send back (echoing a request it refused,
        or in its own error): the password, and the Basic token user and password travel as."""
        return basic_secrets(self.authorization) if self.authorization else []

    @classmethod
    def parse(cls, url: str) -> Proxy:
        shown = shown_url(url)
        try:
            parts = urlsplit(url if "://" in url else f"http://{url}")
        except ValueError as exc:  # http://[::1
            raise ConfigError(f"proxy {shown!r} is not a URL ({exc})") from None
        if parts.scheme != "http" or not parts.hostname:
            raise ConfigError(f"proxy {shown!r}: give an http:// proxy URL, e.g. http://proxy.example:3128")
        try:
            port = parts.port or 80
        except ValueError:
            raise ConfigError(f"proxy {shown!r}: the port is not a number") from None
        if not all(c.isalnum() or c in ".-_:%" for c in parts.hostname):  # a space, a control character
            raise ConfigError(f"proxy {shown!r}: {parts.hostname!r} is not a host name")
        authorization = None
        if parts.username is not None:
            pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
            authorization = "Basic " + base64.b64encode(pair.encode()).decode()
        return cls(parts.hostname, port, authorization)


def proxy_for(url: str, environ: Mapping[str, str]) -> Proxy | None:
    """The proxy the environment names for `url`, or None to connect directly."""
    env = {k.lower(): v for k, v in environ.items() if k.isupper() and k.endswith("_PROXY")}
    env.update({k: v for k, v in environ.items() if k.islower() and k.endswith("_proxy")})
    if not env:
        return None
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    port = parts.port or (443 if parts.scheme == "https" else 80)
    value = env.get(f"{parts.scheme}_proxy") or env.get("all_proxy")
    if not value or _loopback(host) or _excluded(host, port, env.get("no_proxy", "")):
        return None
    return Proxy.parse(value)


def _loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _excluded(host: str, port: int, no_proxy: str) -> bool:
    """NO_PROXY: `*`, host names (a leading dot or `*.` optional; subdomains match), IPs, CIDR
    blocks, each optionally with :port."""
    for entry in (e.strip().lower() for e in no_proxy.split(",")):
        if not entry:
            continue
        if entry == "*":
            return True
        name, _, entry_port = entry.rpartition(":") if _has_port(entry) else (entry, "", "")
        if entry_port and entry_port != str(port):
            continue
        name = name.strip("[]").removeprefix("*.").lstrip(".")
        if host == name or host.endswith("." + name) or _in_network(host, name):
            return True
    return False


def _has_port(entry: str) -> bool:
    head, sep, tail = entry.rpartition(":")
    return bool(sep) and tail.isdigit() and (head.startswith("[") or ":" not in head)


def _in_network(host: str, block: str) -> bool:
    if "/" not in block:
        return False
    try:
        return ipaddress.ip_address(host) in ipaddress.ip_network(block, strict=False)
    except ValueError:
        return False
