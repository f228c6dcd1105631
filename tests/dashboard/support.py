"""What the dashboard tests check pages with, and the queue states they arrange
(through the store operations of tests/conformance/support.py)."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
from starlette.testclient import TestClient

from heartq.lifecycle.fate import failed, succeeded
from heartq.model import ClaimedJob, Outcome
from heartq.store import Store
from tests.conformance.support import LEASE, enqueue_one

CSRF_FIELD = re.compile(r'name="_csrf" value="([^"]*)"')
ALERT = re.compile(r'role="alert">([^<]*)</p>')
NOTICE = re.compile(r'class="notice" role="status">([^<]*)</div>')
ROW = re.compile(r'<tr data-job="([^"]*)"')
OLDER = re.compile(r'<a href="([^"]*)" data-testid="older">')
SECRET = "s3cret"
"""The password put in PostgreSQL URLs, that no output may show."""

Dashboard = Callable[..., TestClient]
"""The `dashboard` fixture: `dashboard(**create_app_options)` makes a client."""


def page(response: httpx.Response, status: int = 200) -> str:
    """A whole page of the dashboard with this status and its security headers: its
    HTML, ended by `</html>` (nothing cut it short)."""
    assert response.status_code == status, (response.status_code, response.text[:2000])
    assert response.headers["content-type"].startswith("text/html")
    csp = response.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["x-content-type-options"] == "nosniff"
    text = response.text
    assert text.startswith("<!doctype html>") and text.rstrip().endswith("</html>"), text[-500:]
    return text


def csrf(text: str) -> str:
    """The CSRF value of a page's forms (the same in each of them)."""
    values = set(CSRF_FIELD.findall(text))
    assert len(values) == 1, values
    return values.pop()


def alert(text: str) -> str:
    """An error page's one line, unescaped."""
    found = ALERT.search(text)
    assert found, text[-1500:]
    line = html.unescape(found.group(1))
    assert "\n" not in line, line
    return line


def notice(text: str) -> str:
    found = NOTICE.search(text)
    assert found, text[:3000]
    return html.unescape(found.group(1))


def rows(text: str) -> list[str]:
    """The job ids of a table's rows, top down."""
    return [html.unescape(job_id) for job_id in ROW.findall(text)]


def older(text: str) -> str | None:
    """The address of a jobs page's `Older »` link, if it has one."""
    found = OLDER.search(text)
    return html.unescape(found.group(1)) if found else None


def located(response: httpx.Response) -> str:
    """Where a 303 sends the browser."""
    assert response.status_code == 303, (response.status_code, response.text[-1500:])
    return str(response.headers["location"])


def dead_job(store: Store, now: float, error: str = "boom", **options: Any) -> str:
    """A job that failed its only attempt at `now`: in the dead-letter queue."""
    job_id = enqueue_one(store, now, max_retries=0, **options)
    job = claim(store, job_id, now)
    store.finish([failed(job, Outcome.FAILED, error)], now=now)
    return job_id


def succeeded_job(store: Store, now: float, result: Any, **options: Any) -> str:
    job_id = enqueue_one(store, now, **options)
    job = claim(store, job_id, now)
    store.finish([succeeded(job, json.dumps(result))], now=now)
    return job_id


def claim(
    store: Store, job_id: str, now: float, worker_id: str = "w-test", lease: float = LEASE
) -> ClaimedJob:
    """Claim this job, whatever else is queued."""
    (job,) = store.claim_ids(worker_id, [job_id], lease, now=now)
    return job


def with_password(url: str) -> str:
    """A PostgreSQL URL with the password `SECRET` (the test server trusts local
    connections: any password is let in); any other URL as it is."""
    parts = urlsplit(url)
    if not parts.scheme.startswith("postgres"):
        return url
    assert parts.password is None, "the test server's URL already has a password"
    netloc = f"{parts.username}:{SECRET}@{parts.hostname}:{parts.port or 5432}"
    return urlunsplit(parts._replace(netloc=netloc))
