"""heartq's dashboard in a Django project's URLs, behind Django's own staff login:

    path("heartq/", include("heartq.contrib.django.urls")),   # the backend `default`
    path("queues/", include("heartq.contrib.django.urls"), {"backend": "elsewhere"}),

The dashboard is a Starlette (ASGI) app (`heartq.dashboard.create_app`); this view hands
it each request and returns its answer as Django's, so it mounts under WSGI and ASGI
alike, in the project's own URLs and sessions. Staff members (`is_staff`, active) see it,
read-only; superusers may also act (cancel, replay, purge), each action guarded by the
dashboard's own CSRF check (its cookie and field, and the request's `Origin`), so Django's
CSRF middleware leaves these requests to it. Anyone else is sent to `LOGIN_URL`.

Pages are rendered whole (the dashboard streams nothing), so the answer is collected,
then returned: a page is a few tens of kilobytes.
"""

from __future__ import annotations

import threading
from http.cookies import SimpleCookie
from typing import Any

from asgiref.sync import async_to_sync
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

_boards: dict[tuple[str, bool, int], Any] = {}
_boards_lock = threading.Lock()


@csrf_exempt  # type: ignore[untyped-decorator]  # Django is untyped
def dashboard(request: HttpRequest, subpath: str = "", backend: str = "default") -> HttpResponse:
    """The dashboard of the heartq backend `backend`, its page `subpath`."""
    user = getattr(request, "user", None)
    if user is None or not (user.is_active and user.is_staff):
        return redirect_to_login(request.get_full_path())
    board = _board(backend, may_act=bool(user.is_superuser))
    root = request.path[: len(request.path) - len(subpath)].rstrip("/")
    return _answer(async_to_sync(_call)(board, _scope(request, root), request.body))


def _board(alias: str, may_act: bool) -> Any:
    """The dashboard app over the backend's store, one read-only and one that may act."""
    from heartq.contrib.django.backend import HeartqBackend
    from heartq.contrib.django.compat import task_backends
    from heartq.dashboard import create_app

    backend = task_backends[alias]
    if not isinstance(backend, HeartqBackend):
        raise ValueError(f"TASKS[{alias!r}] is not a heartq backend")
    store = backend.queue.ready_app().store
    key = (alias, may_act, id(store))
    with _boards_lock:
        if key not in _boards:
            _boards[key] = create_app(store, allow_actions=may_act)
        return _boards[key]


def _scope(request: HttpRequest, root: str) -> dict[str, Any]:
    """The ASGI scope of Django's request, mounted at `root`."""
    host, _, port = request.get_host().partition(":")
    headers = [
        (name.lower().encode("latin-1"), str(value).encode("latin-1"))
        for name, value in request.headers.items()
        if name.lower() != "host"
    ]
    headers.append((b"host", request.get_host().encode("latin-1")))  # checked by Django
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.path.encode("utf-8"),
        "root_path": root,
        "query_string": request.META.get("QUERY_STRING", "").encode("latin-1"),
        "headers": headers,
        "client": (request.META.get("REMOTE_ADDR") or "unknown", 0),
        "server": (host, int(port or (443 if request.is_secure() else 80))),
    }


async def _call(app: Any, scope: dict[str, Any], body: bytes) -> list[dict[str, Any]]:
    """The messages the ASGI app sends for one request."""
    sent: list[dict[str, Any]] = []
    received = False

    async def receive() -> dict[str, Any]:
        nonlocal received
        if received:
            return {"type": "http.disconnect"}
        received = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


def _answer(messages: list[dict[str, Any]]) -> HttpResponse:
    """Django's response of the ASGI app's messages (each `Set-Cookie` kept: Django holds
    cookies apart from its other headers)."""
    start = next(m for m in messages if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")
    response = HttpResponse(body, status=start["status"])
    for raw_name, raw_value in start.get("headers", []):
        name, value = raw_name.decode("latin-1"), raw_value.decode("latin-1")
        if name.lower() == "set-cookie":
            cookie: SimpleCookie = SimpleCookie()
            cookie.load(value)
            for key, morsel in cookie.items():
                response.cookies[key] = morsel
        else:
            response[name] = value
    return response
