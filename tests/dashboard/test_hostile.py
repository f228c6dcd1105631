"""Job arguments, errors, ids, names and progress are anyone's text: every page shows
them escaped, whole and well formed, however long or hostile; and no page shows the
database's password."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from urllib.parse import quote

import pytest
from starlette.testclient import TestClient

from heartq.dashboard import create_app
from heartq.model import Progress, Renewal
from heartq.store import Store
from tests import pg_harness
from tests.conformance.support import enqueue_one, register
from tests.dashboard.support import (
    SECRET,
    Dashboard,
    alert,
    claim,
    csrf,
    dead_job,
    located,
    notice,
    page,
    rows,
    succeeded_job,
    with_password,
)

SCRIPT = "<script>alert(1)</script>"
HOSTILE = SCRIPT + "\"'<img src=x onerror=alert(2)>&amp;"
ESCAPED = (
    "&lt;script&gt;alert(1)&lt;/script&gt;&#34;&#39;&lt;img src=x onerror=alert(2)&gt;&amp;amp;"
)
BIG = "A" * 100_000


class Tags(HTMLParser):
    """Every tag of a page, its attributes, and the text inside its script elements."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.script_text = ""
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.script_text += data


def harmless(text: str) -> str:
    """The page holds the hostile text only as text: no tag, attribute or script of it."""
    assert SCRIPT not in text and "<img" not in text
    parsed = Tags()
    parsed.feed(text)
    parsed.close()
    assert parsed.script_text.strip() == ""
    for tag, attrs in parsed.tags:
        assert tag != "img", attrs
        assert not [name for name in attrs if name.startswith("on")], (tag, attrs)
        if tag == "script":
            assert re.fullmatch(r"/static/[\w.]+", attrs.get("src") or ""), attrs
    return text


@pytest.fixture
def hostile(store: Store) -> dict[str, str]:
    """A queue whose every free text is hostile (a job's id cannot be: it is a UUID), and
    the ids of its jobs: a dead, a running and a succeeded one, and a queued one with
    100 KB arguments."""
    now = store.clock()
    register(store, "w-" + HOSTILE, now, name=HOSTILE, hostname=HOSTILE, queues=(HOSTILE,))
    names = {"task": HOSTILE, "queue": HOSTILE}
    dead = dead_job(
        store, now - 5, args={HOSTILE: [HOSTILE]},
        error="Traceback (most recent call last):\n" + BIG + "\nValueError: " + HOSTILE,
        **names,
    )  # fmt: skip
    running = enqueue_one(store, now - 4, **names)
    job = claim(store, running, now - 4, "w-" + HOSTILE, lease=3600.0)
    progress = Progress(0.5, HOSTILE, HOSTILE + BIG)
    store.heartbeat("w-" + HOSTILE, [Renewal(job.lease, progress)], 3600.0, now=now - 3)
    store.save_checkpoint(job.lease, json.dumps({"at": HOSTILE}), now=now - 3)
    done = succeeded_job(store, now - 2, {"said": HOSTILE}, **names)
    big = enqueue_one(
        store, now - 1, args={"text": BIG + HOSTILE},
        unique_key=HOSTILE, concurrency_key=HOSTILE, concurrency_limit=2, **names,
    )  # fmt: skip
    return {"dead": dead, "run": running, "done": done, "big": big}


def job_path(job_id: str) -> str:
    return "/jobs/" + quote(job_id, safe="")


def test_hostile_text_renders_escaped_on_every_page(
    hostile: dict[str, str], dashboard: Dashboard
) -> None:
    client = dashboard()
    listed = [
        "/",
        "/jobs",
        f"/jobs?task={quote(HOSTILE)}&queue={quote(HOSTILE)}",
        "/dlq",
        "/workers",
        "/workers?all=1",
    ]
    for path in listed:
        text = harmless(page(client.get(path)))
        assert ESCAPED in text, path
        assert len(text) < 100_000, (path, len(text))  # tables cut long text
    text = page(client.get("/jobs"))
    assert rows(text) == sorted(hostile.values(), reverse=True)  # newest first
    assert rows(page(client.get("/dlq"))) == [hostile["dead"]]

    for job_id in hostile.values():
        text = harmless(page(client.get(job_path(job_id))))
        assert f'data-testid="job-id">{job_id}</span>' in text
    # a job's own page shows its text whole (escaped)
    big = page(client.get(job_path(hostile["big"])))
    assert "&#34;text&#34;: &#34;" + BIG + "&lt;script&gt;alert(1)" in big
    dead = page(client.get(job_path(hostile["dead"])))
    assert "A" * 5_000 in dead  # as much of the error as the worker kept (16,000 characters)
    assert "\nValueError: " + ESCAPED + "</pre>" in dead
    running = page(client.get(job_path(hostile["run"])))
    assert "&#34;at&#34;: &#34;&lt;script&gt;alert(1)" in running  # the checkpoint
    assert ESCAPED + BIG in running  # the progress message
    done = page(client.get(job_path(hostile["done"])))
    assert "&#34;said&#34;: &#34;&lt;script&gt;alert(1)" in done


def test_a_job_of_hostile_text_links_finds_and_acts_like_any_other(
    store: Store, hostile: dict[str, str], dashboard: Dashboard
) -> None:
    client = dashboard(allow_actions=True)
    text = page(client.get("/jobs"))
    for job_id in hostile.values():
        # the link of its row leads to its page
        link = re.search(r'<a class="id" href="(/jobs/[^"]+)" title="[^"]*">' + job_id, text)
        assert link, job_id
        href = link.group(1).replace("&amp;", "&")
        assert ESCAPED in page(client.get(href))
        # the search finds it, whole or by its start
        assert located(client.get("/jobs", params={"id": job_id})) == job_path(job_id)

    target = hostile["big"]
    form = csrf(page(client.get(job_path(target))))
    back = located(client.post(job_path(target) + "/cancel", data={"_csrf": form}))
    assert back == job_path(target) + "?notice=cancelled"
    assert notice(harmless(page(client.get(back)))).startswith("Cancelled")
    assert store.get_job(target)["status"] == "cancelled"

    form = csrf(page(client.get("/dlq")))
    back = located(client.post("/dlq/replay", data={"_csrf": form, "one": hostile["dead"]}))
    assert back == "/dlq?notice=replayed&n=1"
    assert store.get_job(hostile["dead"])["status"] == "queued"


def test_hostile_text_typed_into_the_address_comes_back_escaped(
    store: Store, dashboard: Dashboard
) -> None:
    client = dashboard()
    text = harmless(page(client.get("/jobs", params={"id": HOSTILE}), 404))
    assert alert(text) == f"no job with id {HOSTILE!r}"
    text = harmless(page(client.get("/jobs", params={"status": HOSTILE}), 400))
    assert alert(text) == f"unknown status {HOSTILE!r}"
    text = harmless(page(client.get(job_path("x" + HOSTILE)), 404))
    assert alert(text) == f"no job with id {'x' + HOSTILE!r}"
    text = harmless(page(client.get("/jobs", params={"task": HOSTILE})))
    assert f'name="task" value="{ESCAPED}"' in text
    text = harmless(page(client.get("/jobs", params={"before": HOSTILE}), 400))
    assert alert(text) == f"a page starts before a job id, not {HOSTILE!r}"


def test_nul_typed_into_the_address_is_a_400(store: Store, dashboard: Dashboard) -> None:
    client = dashboard()
    for path in ("/jobs?id=%00abcdefgh", "/jobs?queue=%00", "/jobs?task=a%00",
                 "/jobs?before=%00", "/jobs/%00abcdefgh"):  # fmt: skip
        assert alert(page(client.get(path), 400)).endswith("cannot contain NUL characters")


@pytest.fixture
def password_url(pg_server_url: str) -> Iterator[str]:
    """A fresh PostgreSQL schema, its URL with a password."""
    with pg_harness.schema_url(pg_server_url) as url:
        yield with_password(url)


def test_no_page_shows_the_database_password(password_url: str) -> None:
    client = TestClient(create_app(password_url, token="tok"), follow_redirects=False)
    store = client.app.state.store  # type: ignore[attr-defined]
    try:
        now = store.clock()
        job_id = dead_job(store, now)
        seen = []
        for path in ("/", "/jobs", job_path(job_id), "/dlq", "/workers?all=1", "/login",
                     "/jobs?status=nope", "/jobs?id=nothing-like-it"):  # fmt: skip
            response = client.get(path)
            seen.append(response.text + str(response.headers))
        header = re.search(r'data-testid="mode">([^<]*)', seen[0])
        assert header and "postgresql://postgres:***@" in header.group(1)
        for text in seen:
            assert SECRET not in text
    finally:
        client.close()
        store.link.close()
