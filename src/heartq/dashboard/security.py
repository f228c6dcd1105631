"""Who may act through the dashboard, and proof that a form came from the dashboard.

Read-only unless started with `allow_actions` or a `token`:

- with a token, an action must carry it: `Authorization: Bearer TOKEN` (scripts), or
  the session cookie `POST /login` sets once the token was typed (browsers). The cookie
  holds an HMAC of the token, never the token itself; HttpOnly, SameSite=Strict.
- with `allow_actions` alone, whoever reaches the port may act (it binds to 127.0.0.1
  unless told otherwise).

Forms are CSRF-safe by a double submit: every page sets a random `heartq_csrf` cookie
(SameSite=Strict, HttpOnly) and puts the same value in each form's hidden `_csrf`
field; a POST whose field does not match its cookie is refused, as is one whose
`Origin` names another site. A request with a bearer token needs neither: a browser
never adds an `Authorization` header on its own.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from enum import Enum
from urllib.parse import urlsplit

from starlette.requests import Request

CSRF_COOKIE = "heartq_csrf"
CSRF_FIELD = "_csrf"
SESSION_COOKIE = "heartq_session"
TOKEN_ENV = "HEARTQ_DASHBOARD_TOKEN"


class ActionMode(Enum):
    READ_ONLY = "read-only"
    OPEN = "actions allowed"
    TOKEN = "actions need the token"


class Refused(Exception):
    """An action request the dashboard turns down: `status` and one line saying why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Guard:
    allow_actions: bool = False
    token: str | None = None

    @property
    def mode(self) -> ActionMode:
        if self.token:
            return ActionMode.TOKEN
        return ActionMode.OPEN if self.allow_actions else ActionMode.READ_ONLY

    def session_value(self) -> str:
        """What the session cookie holds once the token was typed: an HMAC of the token
        (a stolen cookie does not give away the token)."""
        assert self.token
        key = self.token.encode()
        return hmac.new(key, b"heartq-dashboard-session", hashlib.sha256).hexdigest()

    def token_matches(self, typed: str) -> bool:
        return bool(self.token) and hmac.compare_digest(typed.encode(), (self.token or "").encode())

    def _bearer(self, request: Request) -> str | None:
        scheme, _, value = request.headers.get("authorization", "").partition(" ")
        return value.strip() if scheme.lower() == "bearer" and value.strip() else None

    def may_act(self, request: Request) -> bool:
        """Whether this request's sender may act (what the pages show it)."""
        if self.mode is ActionMode.READ_ONLY:
            return False
        if self.mode is ActionMode.OPEN:
            return True
        bearer = self._bearer(request)
        if bearer is not None:
            return self.token_matches(bearer)
        cookie = request.cookies.get(SESSION_COOKIE, "")
        return hmac.compare_digest(cookie.encode(), self.session_value().encode())

    def check_action(self, request: Request, form_csrf: str | None) -> None:
        """Raise `Refused` unless this POST may act: allowed, authenticated, and sent by
        a dashboard page (CSRF) unless it carries a bearer token."""
        if self.mode is ActionMode.READ_ONLY:
            raise Refused(
                403,
                "this dashboard is read-only: start it with --allow-actions or --token "
                f"(or {TOKEN_ENV}) to act on jobs",
            )
        check_same_origin(request)
        if self._bearer(request) is None:
            check_csrf(request, form_csrf)
        if not self.may_act(request):
            raise Refused(403, "actions need the dashboard's token: sign in with it first")

    def check_sign_in(self, request: Request, form_csrf: str | None) -> None:
        """Raise `Refused` unless a sign-in (or sign-out) form may be checked at all."""
        if self.token is None:
            raise Refused(404, "this dashboard has no token to sign in with")
        check_same_origin(request)
        check_csrf(request, form_csrf)


def check_same_origin(request: Request) -> None:
    """A POST whose `Origin` header names another site is refused."""
    origin = request.headers.get("origin")
    if origin is None:  # not sent by older browsers on same-origin posts
        return
    host = request.headers.get("host", "")
    if urlsplit(origin).netloc != host:
        raise Refused(403, "refused: the request came from another site (Origin)")


def check_csrf(request: Request, form_csrf: str | None) -> None:
    cookie = request.cookies.get(CSRF_COOKIE)
    sent = form_csrf or request.headers.get("x-csrf-token")
    if not cookie or not sent or not hmac.compare_digest(cookie.encode(), sent.encode()):
        raise Refused(
            403, "refused: the form's CSRF token is missing or expired (reload the page and retry)"
        )


def csrf_token(request: Request) -> tuple[str, bool]:
    """The CSRF value of this browser (its cookie's) and whether the response must set
    the cookie (a first visit)."""
    existing = request.cookies.get(CSRF_COOKIE)
    if existing and len(existing) >= 32:
        return existing, False
    return secrets.token_urlsafe(32), True
