"""The transport URL's servers: one, or a comma-separated list of a cluster's nodes
(`nats://n1:4222,n2:4222,n3:4222?...`), checked without nats-py so that a list heartq
cannot use is refused (`ConfigError`, one line) where it is given, not by the client
after the worker started (which then polled the database for good, silently: nats-py
takes a list, never a comma-separated string).

Each entry is `[nats|tls://][user:password@]host[:port]`: an entry without a scheme takes
the first one's, without a port NATS's 4222, without credentials the first one's (a
cluster's nodes share their accounts). Passwords never appear in what heartq prints:
`display` shows `user:***@host:port`.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from heartq.errors import ConfigError

SCHEMES = ("nats", "tls")
DEFAULT_PORT = 4222


@dataclass(frozen=True)
class Server:
    """One NATS server of the transport URL."""

    scheme: str
    host: str
    port: int
    userinfo: str = ""
    """`user` or `user:password` (percent-encoded as given), or empty."""

    @property
    def url(self) -> str:
        """The address nats-py connects to, credentials included."""
        auth = f"{self.userinfo}@" if self.userinfo else ""
        return f"{self.scheme}://{auth}{self.netloc}"

    @property
    def netloc(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def display(self) -> str:
        """The address as heartq prints it: any password replaced by `***`."""
        user, colon, _ = self.userinfo.partition(":")
        auth = f"{user}{':***' if colon else ''}@" if self.userinfo else ""
        return f"{self.scheme}://{auth}{self.netloc}"


def _redacted(entry: str) -> str:
    """An entry as it may be quoted in a refusal: its password replaced."""
    scheme, sep, rest = entry.rpartition("://")
    auth, at, host = rest.rpartition("@")
    if at and ":" in auth:
        auth = auth.split(":", 1)[0] + ":***"
    return f"{scheme}{sep}{auth}{at}{host}"


def parse_servers(head: str) -> tuple[Server, ...]:
    """The servers of a transport URL's part before `?` (module docstring)."""
    entries = [entry.strip() for entry in head.split(",")]
    first_scheme = head.partition("://")[0]
    if "://" not in head or first_scheme not in SCHEMES:
        raise ConfigError(f"transport must be a nats:// URL, got {_redacted(entries[0])!r}")
    servers: list[Server] = []
    for entry in entries:
        if not entry:
            raise ConfigError(
                "transport server list has an empty entry (two commas, or a trailing one)"
            )
        servers.append(_parse_one(entry if "://" in entry else f"{first_scheme}://{entry}"))
    first_auth = servers[0].userinfo
    return tuple(Server(s.scheme, s.host, s.port, s.userinfo or first_auth) for s in servers)


def _parse_one(entry: str) -> Server:
    shown = _redacted(entry)
    parts = urlsplit(entry)
    if parts.scheme not in SCHEMES:
        raise ConfigError(f"transport server {shown!r} must be nats:// or tls://")
    if parts.path not in ("", "/") or parts.fragment:
        raise ConfigError(f"transport server {shown!r} must be host:port, nothing after it")
    try:
        port = parts.port
    except ValueError:
        raise ConfigError(f"transport server {shown!r} has no valid port") from None
    if not parts.hostname:
        raise ConfigError(f"transport server {shown!r} has no host")
    userinfo = parts.netloc.rpartition("@")[0] if "@" in parts.netloc else ""
    return Server(parts.scheme, parts.hostname, port or DEFAULT_PORT, userinfo)
