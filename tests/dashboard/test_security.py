"""Who may act, and proof that a form came from the dashboard: read-only by default;
with `allow_actions` a POST needs the CSRF field matching its cookie and no foreign
`Origin`; with a token, a session (signed in with the token) or a bearer token. Every
page carries the security headers, and none holds inline script or style."""

from __future__ import annotations

import re

import pytest
from starlette.testclient import TestClient

from heartq.dashboard.security import CSRF_COOKIE, SESSION_COOKIE, Guard
from heartq.store import Store
from tests.conformance.support import enqueue_one
from tests.dashboard.support import Dashboard, alert, csrf, dead_job, located, notice, page

TOKEN = "tok-9f8e7d6c5b4a"
READ_ONLY = (
    "this dashboard is read-only: start it with --allow-actions or --token "
    "(or HEARTQ_DASHBOARD_TOKEN) to act on jobs"
)
STALE_CSRF = "refused: the form's CSRF token is missing or expired (reload the page and retry)"
FOREIGN = "refused: the request came from another site (Origin)"
NEEDS_TOKEN = "actions need the dashboard's token: sign in with it first"


@pytest.fixture
def queued(store: Store) -> str:
    return enqueue_one(store, store.clock())


def cancel(client: TestClient, job_id: str, form: str | None, **headers: str) -> int:
    data = {} if form is None else {"_csrf": form}
    return client.post(f"/jobs/{job_id}/cancel", data=data, headers=headers).status_code


def test_read_only_by_default(store: Store, dashboard: Dashboard, queued: str) -> None:
    buried = dead_job(store, store.clock())
    client = dashboard()
    for path in ("/", "/jobs", f"/jobs/{queued}", "/dlq", "/workers"):
        text = page(client.get(path))
        assert "read-only" in text
        assert 'method="post"' not in text and 'type="checkbox"' not in text, path
    form = client.cookies[CSRF_COOKIE]

    for path, data in [
        (f"/jobs/{queued}/cancel", {}),
        ("/dlq/replay", {"job_id": buried}),
        ("/dlq/replay", {"one": buried}),
        ("/dlq/purge", {}),
    ]:
        response = client.post(path, data={"_csrf": form, **data})
        assert alert(page(response, 403)) == READ_ONLY
        response = client.post(path, data=data, headers={"authorization": f"Bearer {TOKEN}"})
        assert alert(page(response, 403)) == READ_ONLY
    assert store.get_job(queued)["status"] == "queued"
    assert store.get_job(buried)["status"] == "dead"


def test_an_action_needs_the_csrf_field_matching_its_cookie(
    store: Store, dashboard: Dashboard, queued: str
) -> None:
    client = dashboard(allow_actions=True)
    text = page(client.get(f"/jobs/{queued}"))
    form = csrf(text)
    assert form == client.cookies[CSRF_COOKIE]

    for sent in (None, "", "x" * 43, form[:-1]):
        data = {} if sent is None else {"_csrf": sent}
        assert alert(page(client.post(f"/jobs/{queued}/cancel", data=data), 403)) == STALE_CSRF
    # the right field, but no cookie: a page of another browser
    stranger = dashboard(allow_actions=True)
    assert cancel(stranger, queued, form) == 403
    assert store.get_job(queued)["status"] == "queued"

    assert cancel(client, queued, form) == 303
    assert store.get_job(queued)["status"] == "cancelled"


def test_the_csrf_value_may_come_in_a_header(
    store: Store, dashboard: Dashboard, queued: str
) -> None:
    client = dashboard(allow_actions=True)
    page(client.get("/"))
    assert cancel(client, queued, None, **{"x-csrf-token": "wrong" * 9}) == 403
    assert cancel(client, queued, None, **{"x-csrf-token": client.cookies[CSRF_COOKIE]}) == 303


def test_the_csrf_cookie_is_set_once_httponly_and_strict(
    store: Store, dashboard: Dashboard
) -> None:
    client = dashboard(allow_actions=True)
    first = client.get("/")
    cookie = first.headers["set-cookie"]
    assert cookie.startswith(f"{CSRF_COOKIE}=")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    assert "set-cookie" not in client.get("/jobs").headers  # the browser keeps its value


def test_a_foreign_origin_is_refused(store: Store, dashboard: Dashboard, queued: str) -> None:
    client = dashboard(allow_actions=True)
    form = csrf(page(client.get(f"/jobs/{queued}")))
    for origin in ("https://evil.example", "http://testserver.evil.example", "null"):
        response = client.post(
            f"/jobs/{queued}/cancel", data={"_csrf": form}, headers={"origin": origin}
        )
        assert alert(page(response, 403)) == FOREIGN
    assert store.get_job(queued)["status"] == "queued"
    assert cancel(client, queued, form, origin="http://testserver") == 303


def test_with_a_token_actions_need_a_sign_in(
    store: Store, dashboard: Dashboard, queued: str
) -> None:
    client = dashboard(token=TOKEN)
    text = page(client.get(f"/jobs/{queued}"))
    assert "actions need the token" in text and 'href="/login"' in text
    assert "Cancel this job" not in text
    form = client.cookies[CSRF_COOKIE]
    response = client.post(f"/jobs/{queued}/cancel", data={"_csrf": form})
    assert alert(page(response, 403)) == NEEDS_TOKEN

    # the sign-in form, with the wrong token, then without its CSRF field
    login = page(client.get("/login"))
    assert 'type="password" name="token"' in login
    response = client.post("/login", data={"_csrf": csrf(login), "token": "wrong"})
    assert alert(page(response, 403)) == "wrong token"
    assert SESSION_COOKIE not in client.cookies
    response = client.post("/login", data={"token": TOKEN})
    assert alert(page(response, 403)) == STALE_CSRF
    response = client.post(
        "/login",
        data={"_csrf": csrf(login), "token": TOKEN},
        headers={"origin": "https://evil.example"},
    )
    assert alert(page(response, 403)) == FOREIGN
    assert store.get_job(queued)["status"] == "queued"

    # the right token: a session, whose cookie does not hold the token
    signed_in = client.post("/login", data={"_csrf": csrf(login), "token": TOKEN})
    assert located(signed_in) == "/?notice=signed_in"
    set_cookie = signed_in.headers["set-cookie"]
    assert set_cookie.startswith(f"{SESSION_COOKIE}=") and "HttpOnly" in set_cookie
    assert "SameSite=strict" in set_cookie and TOKEN not in set_cookie
    session = client.cookies[SESSION_COOKIE]
    assert session and TOKEN not in session
    assert notice(page(client.get("/?notice=signed_in"))) == "Signed in: actions are allowed."

    text = page(client.get(f"/jobs/{queued}"))
    assert "Cancel this job" in text and "Sign out" in text
    assert cancel(client, queued, csrf(text)) == 303
    assert store.get_job(queued)["status"] == "cancelled"
    # a session still needs the CSRF field
    other = enqueue_one(store, store.clock())
    assert cancel(client, other, None) == 403

    # signing out ends the session; another site cannot sign this browser out
    assert alert(page(client.post("/logout"), 403)) == STALE_CSRF
    response = client.post(
        "/logout", data={"_csrf": csrf(text)}, headers={"origin": "https://evil.example"}
    )
    assert alert(page(response, 403)) == FOREIGN
    assert client.cookies[SESSION_COOKIE] == session
    signed_out = client.post("/logout", data={"_csrf": csrf(text)})
    assert located(signed_out) == "/?notice=signed_out"
    assert SESSION_COOKIE not in client.cookies
    text = page(client.get("/?notice=signed_out"))
    assert notice(text) == "Signed out." and 'href="/login"' in text
    assert cancel(client, other, client.cookies[CSRF_COOKIE]) == 403
    assert store.get_job(other)["status"] == "queued"


def test_a_session_is_an_hmac_of_the_token_never_the_token(
    store: Store, dashboard: Dashboard, queued: str
) -> None:
    client = dashboard(token=TOKEN)
    form = csrf(page(client.get("/login")))
    for forged in ("x", TOKEN, Guard(token="another-token").session_value()):
        client.cookies.set(SESSION_COOKIE, forged)
        assert cancel(client, queued, form) == 403
    assert store.get_job(queued)["status"] == "queued"
    client.cookies.set(SESSION_COOKIE, Guard(token=TOKEN).session_value())
    assert cancel(client, queued, form) == 303


def test_a_bearer_token_acts_without_csrf(
    store: Store, dashboard: Dashboard, queued: str
) -> None:
    buried = dead_job(store, store.clock())
    client = dashboard(token=TOKEN)  # a script: no page visited, no cookie

    assert cancel(client, queued, None, authorization="Bearer not-the-token") == 403
    assert cancel(client, queued, None, authorization=TOKEN) == 403  # not a bearer
    assert store.get_job(queued)["status"] == "queued"
    assert cancel(client, queued, None, authorization=f"Bearer {TOKEN}") == 303
    assert store.get_job(queued)["status"] == "cancelled"
    response = client.post(
        "/dlq/replay", data={"one": buried}, headers={"authorization": f"bearer {TOKEN}"}
    )
    assert located(response) == "/dlq?notice=replayed&n=1"
    # a bearer token from another site's page is still refused
    response = client.post(
        "/dlq/purge",
        headers={"authorization": f"Bearer {TOKEN}", "origin": "https://evil.example"},
    )
    assert page(response, 403)


def test_allow_actions_with_a_token_still_needs_the_token(
    store: Store, dashboard: Dashboard, queued: str
) -> None:
    client = dashboard(allow_actions=True, token=TOKEN)
    text = page(client.get(f"/jobs/{queued}"))
    assert "Cancel this job" not in text
    assert cancel(client, queued, client.cookies[CSRF_COOKIE]) == 403


def test_every_page_carries_the_headers_and_no_inline_script_or_style(
    store: Store, dashboard: Dashboard, queued: str
) -> None:
    buried = dead_job(store, store.clock())
    client = dashboard(token=TOKEN)
    login = page(client.get("/login"))
    located(client.post("/login", data={"_csrf": csrf(login), "token": TOKEN}))
    pages = [
        page(client.get(path))
        for path in ("/", "/jobs", f"/jobs/{queued}", f"/jobs/{buried}", "/dlq", "/workers",
                     "/workers?all=1", "/login")
    ]  # fmt: skip
    pages += [
        page(client.get("/jobs?status=nope"), 400),
        page(client.get("/jobs/nothing-like-it"), 404),
        page(client.post("/dlq/replay", data={"_csrf": "x"}), 403),
    ]
    for text in pages:
        for tag in re.findall(r"<script[^>]*>", text):
            assert re.search(r' src="/static/[\w.]+"', tag), tag
        assert not re.search(r"<script[^>]*>[^<]", text)  # nothing between the tags
        assert " style=" not in text and "<style" not in text
        assert not re.search(r"\son[a-z]+=", text)  # no inline event handler
        assert "javascript:" not in text


def test_htmx_may_not_evaluate_what_it_swaps_in(store: Store, dashboard: Dashboard) -> None:
    text = page(dashboard().get("/"))
    assert '"allowEval": false' in text and '"allowScriptTags": false' in text
