"""Secrets hidden wherever a queue URL or a connection string is printed or logged.

Its own module so that the backends, which quote URLs in their errors, need not import the
package that chooses among them (`heartq.store.open_store`).
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

SECRET_PARAMETERS = ("password", "sslpassword")
"""Connection parameters whose values are secrets (libpq's names), hidden wherever a URL
or connection string is printed or logged."""

_SECRET_PARAMETER = re.compile(
    r"(?P<key>(?<![\w.-])(?:" + "|".join(SECRET_PARAMETERS) + r"))\s*=\s*"
    r"(?P<value>'(?:[^'\\]|\\.)*'?|[^&#\s'\"]*)",
    re.IGNORECASE,
)
_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>`]*")
_NESTED_URL = re.compile(r"(?P<key>(?<![\w.-])direct_url)=(?P<value>[^&#\s'\"]*)", re.IGNORECASE)
"""A URL inside a queue URL's query (PostgreSQL's `direct_url=`, percent-encoded or not),
whose own password is hidden as any URL's."""


def _hide_parameters(text: str) -> str:
    return _SECRET_PARAMETER.sub(r"\g<key>=***", _NESTED_URL.sub(_hide_nested, text))


def _hide_nested(match: re.Match[str]) -> str:
    raw = match["value"]
    hidden = redact(unquote(raw))
    return f"{match['key']}={quote(hidden, safe='*') if '%' in raw else hidden}"


def redact(url: str) -> str:
    """The URL with every secret replaced by `***`, safe to print and log: the password
    of `user:password@host`, the `password=` and `sslpassword=` query parameters, and
    those of a URL given in the query (`direct_url=`).
    A URL without secrets comes back unchanged.

    The user information is what precedes the last `@` before the first `/` (libpq reads
    up to the first `@`, URL parsers up to the last: hiding up to the last covers both)."""
    scheme_end = url.find("://")
    if scheme_end < 0:
        return _hide_parameters(url)
    start = scheme_end + 3
    slash = url.find("/", start)
    end = slash if slash >= 0 else len(url)
    userinfo, at, host = url[start:end].rpartition("@")
    if at and ":" in userinfo:
        url = f"{url[:start]}{userinfo.split(':', 1)[0]}:***@{host}{url[end:]}"
    head, question, query = url.partition("?")
    return head + question + _hide_parameters(query) if question else url


def redact_text(text: str) -> str:
    """`text` with every URL in it redacted (`redact`), and any `password=...` outside
    URLs too (a libpq connection string, `host=h password=secret`, quoted in an error)."""
    return _hide_parameters(_URL.sub(lambda m: redact(m.group(0)), text))
