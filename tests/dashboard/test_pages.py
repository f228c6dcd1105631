"""Every page of the dashboard renders what the store holds: the overview, the job list
(filters, id search, keyset pages), a job's own page with its timeline, the workers, the
dead-letter queue, static files."""

from __future__ import annotations

import functools
import json
import re

import pytest
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from heartq.dashboard import create_app
from heartq.inspect.stats import collect_stats
from heartq.lifecycle import fate
from heartq.model import DetectedBy, JobStatus, Progress, Renewal
from heartq.store import Store
from tests.conformance.support import LEASE, claim_one, enqueue_one, new_job, register
from tests.conftest import on_every_backend
from tests.dashboard.support import (
    Dashboard,
    alert,
    claim,
    dead_job,
    located,
    older,
    page,
    rows,
    succeeded_job,
)

CARD = re.compile(r'data-testid="total-(\w+)"><a [^>]*><span class="n">(\d+)</span>')


def test_the_overview_counts_jobs_charts_their_ends_and_lists_live_workers(
    store: Store, dashboard: Dashboard
) -> None:
    now = store.clock()
    for _ in range(2):
        succeeded_job(store, now, {"ok": True}, queue="emails")
    dead_job(store, now, queue="emails")
    enqueue_one(store, now, queue="reports")
    register(store, "w-alive", now, name="alpha", queues=("emails", "reports"), concurrency=3)
    register(store, "w-stopped", now, name="omega")
    store.stop_worker("w-stopped")

    text = page(dashboard().get("/"))

    assert dict(CARD.findall(text)) == {
        "waiting": "0", "blocked": "0", "queued": "1", "claimed": "0", "running": "0",
        "succeeded": "2", "dead": "1", "cancelled": "0",
    }  # fmt: skip
    assert '<a href="/jobs?queue=emails">emails</a>' in text
    assert '<a href="/jobs?queue=reports">reports</a>' in text
    # the chart: the jobs that ended this minute (finished_per_minute), by status
    assert "■ succeeded 2" in text and "■ dead 1" in text and "■ cancelled 0" in text
    assert text.count('<rect class="bar-succeeded"') == 1
    assert "busiest minute 3" in text
    assert "alpha" in text and "omega" not in text  # workers alive only
    assert "0 / 3" in text  # slots busy


def test_the_overview_and_a_jobs_page_show_rate_limits(
    store: Store, dashboard: Dashboard
) -> None:
    now = store.clock()
    limited = new_job("call_api", rate_key="api:<b>", rate_limit=1, rate_period=60.0)
    first, *_ = store.enqueue([limited, limited, limited], now=now)
    assert len(store.claim("w-test", ["default"], 5, 30.0, now=now)) == 1
    client = dashboard()

    text = page(client.get("/"))
    table = text.split('data-testid="overview-rate-limits"', 1)[1].split("</table>", 1)[0]
    cells = re.findall(r"<td[^>]*>(.*?)</td>", table)
    assert cells[:3] == ["api:&lt;b&gt;", "1/m", "1"], cells  # started this period: 1
    assert cells[3].startswith("in ") and cells[4:] == ["2", "1"], cells  # 2 due, 1 running
    shown = page(client.get(f"/jobs/{first}"))
    assert "<dt>Rate limit</dt><dd>api:&lt;b&gt; (at most 1/m starts)</dd>" in shown


def test_the_overview_shows_the_concurrency_keys_heartq_stats_counts(
    store: Store, dashboard: Dashboard
) -> None:
    """Both read them through the read model (`heartq.inspect.limits`)."""
    now = store.clock()
    keyed = new_job("per_tenant", concurrency_key="tenant:<7>", concurrency_limit=1)
    store.enqueue([keyed, keyed, keyed], now=now)
    assert len(store.claim("w-test", ["default"], 5, 30.0, now=now)) == 1

    text = page(dashboard().get("/"))
    table = text.split('data-testid="overview-concurrency"', 1)[1].split("</table>", 1)[0]
    cells = re.findall(r"<td[^>]*>(.*?)</td>", table)
    assert cells == ["tenant:&lt;7&gt;", "1", "1", "2"], cells  # running, limit, queued
    counted = collect_stats(store)["concurrency"]
    assert (counted["keys"], counted["at_limit"], counted["queued"]) == (1, 1, 2)
    assert counted["busiest"] == [{"key": "tenant:<7>", "running": 1, "queued": 2, "limit": 1}]


def test_the_job_list_filters_by_status_queue_and_task(
    store: Store, dashboard: Dashboard
) -> None:
    now = store.clock()
    mailed = enqueue_one(store, now, task="mail", queue="emails")
    reported = enqueue_one(store, now, task="report", queue="reports")
    buried = dead_job(store, now, task="mail", queue="deadend")
    client = dashboard()

    assert rows(page(client.get("/jobs"))) == [buried, reported, mailed]
    assert rows(page(client.get("/jobs?status=queued"))) == [reported, mailed]
    assert rows(page(client.get("/jobs?status=dead"))) == [buried]
    assert rows(page(client.get("/jobs?queue=emails"))) == [mailed]
    assert rows(page(client.get("/jobs?task=mail"))) == [buried, mailed]
    assert rows(page(client.get("/jobs?task=mail&status=queued&queue=emails"))) == [mailed]
    text = page(client.get("/jobs?task=nothing"))
    assert rows(text) == [] and "No job matches." in text
    # the form shows the filters in force
    text = page(client.get("/jobs?status=dead&queue=deadend&task=mail"))
    assert '<option value="dead" selected>' in text
    assert 'name="queue" value="deadend"' in text and 'name="task" value="mail"' in text


def test_an_unknown_status_is_a_400(store: Store, dashboard: Dashboard) -> None:
    text = page(dashboard().get("/jobs?status=exploded"), 400)
    assert alert(text) == "unknown status 'exploded'"


def test_the_id_search_finds_a_job_by_its_id_its_start_or_its_end(
    store: Store, dashboard: Dashboard
) -> None:
    now = store.clock()
    job_id = enqueue_one(store, now)
    client = dashboard()

    assert located(client.get(f"/jobs?id={job_id}")) == f"/jobs/{job_id}"
    assert located(client.get(f"/jobs?id=+{job_id.upper()}+")) == f"/jobs/{job_id}"
    assert located(client.get(f"/jobs?id={job_id[:8]}")) == f"/jobs/{job_id}"
    assert located(client.get(f"/jobs/{job_id[:13]}")) == f"/jobs/{job_id}"
    # ids made together start alike: their last characters tell them apart
    other = enqueue_one(store, now)
    assert located(client.get(f"/jobs?id={other[-8:]}")) == f"/jobs/{other}"
    ambiguous = alert(page(client.get(f"/jobs?id={job_id[:8]}"), 404))
    assert "is ambiguous" in ambiguous and job_id in ambiguous and other in ambiguous
    # the redirect lands on the job's page
    assert 'data-testid="job-id">' + job_id in page(client.get(f"/jobs/{job_id}"))
    assert located(client.get("/jobs/")) == "/jobs"


@pytest.mark.parametrize("where", ["/jobs?id=", "/jobs/"])
def test_an_unknown_id_is_a_404_with_one_clear_line(
    store: Store, dashboard: Dashboard, where: str
) -> None:
    enqueue_one(store, store.clock())
    client = dashboard()
    missing = "0190aaaa-0000-7000-8000-000000000000"
    assert alert(page(client.get(where + missing), 404)) == f"no job with id {missing!r}"
    short = alert(page(client.get(where + "abc"), 404))
    assert short == "no job with id 'abc' (a shortened id needs at least 8 characters)"


def test_older_links_visit_every_job_once_newest_first(
    store: Store, dashboard: Dashboard
) -> None:
    ids = store.enqueue([new_job(task=f"t{i % 3}") for i in range(120)])
    assert ids == sorted(ids)  # time-ordered ids: the newest sorts last
    client = dashboard()

    seen: list[str] = []
    sizes: list[int] = []
    address: str | None = "/jobs"
    while address is not None:
        text = page(client.get(address))
        found = rows(text)
        seen += found
        sizes.append(len(found))
        if address != "/jobs":
            assert '<a href="/jobs" data-testid="newest">« Newest</a>' in text
        address = older(text)
        assert len(sizes) <= 5, "the pages do not end"

    assert seen == ids[::-1]
    assert sizes == [50, 50, 20]


def test_a_filtered_page_keeps_its_filters_on_older_pages(
    store: Store, dashboard: Dashboard
) -> None:
    ids = store.enqueue([new_job(task="even" if i % 2 == 0 else "odd") for i in range(120)])
    client = dashboard()
    seen: list[str] = []
    address: str | None = "/jobs?task=even"
    while address is not None:
        text = page(client.get(address))
        seen += rows(text)
        if address != "/jobs?task=even":
            assert '<a href="/jobs?task=even" data-testid="newest">' in text
        address = older(text)
        assert address is None or "task=even" in address
    assert seen == ids[::2][::-1]


def test_a_rare_filter_reaches_old_matches_a_bounded_window_at_a_time(
    store: Store, dashboard: Dashboard, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = store.enqueue(
        [new_job(task="rare" if i in (3, 100) else "common") for i in range(200)]
    )
    client = dashboard()
    board_store = client.app.state.store  # type: ignore[attr-defined]
    # Each page reads 51 jobs of the index (the least `browse_jobs` reads for 50)
    bounded = functools.partial(type(board_store).browse_jobs, board_store, scan=10)
    monkeypatch.setattr(board_store, "browse_jobs", bounded)

    seen: list[str] = []
    pages: list[str] = []
    address: str | None = "/jobs?task=rare"
    while address is not None:
        text = page(client.get(address))
        seen += rows(text)
        pages.append(text)
        address = older(text)
        assert len(pages) <= 6, "the pages do not end"

    assert seen == [ids[100], ids[3]]
    # windows of 51 jobs: 199-149 (none), 148-98 (#100), 97-47 (none), 46-0 (#3)
    assert [rows(text) for text in pages] == [[], [ids[100]], [], [ids[3]]]
    assert "No job matches, as far back as this page looked." in pages[0]
    assert older(pages[-1]) is None


@on_every_backend  # a store operation: each backend's SQL
def test_browse_jobs_reads_a_bounded_window_per_page(store: Store) -> None:
    ids = store.enqueue(
        [new_job(task="rare" if i in (1, 12) else "common", queue=f"q{i % 2}") for i in range(20)]
    )

    def walk(**filters: str) -> list[list[str]]:
        pages: list[list[str]] = []
        before = None
        while True:
            found = store.browse_jobs(before=before, limit=2, scan=5, **filters)
            pages.append([job["id"] for job in found.jobs])
            assert len(found.jobs) <= 2
            if found.next_before is None:
                return pages
            before = found.next_before
            assert len(pages) <= 20, "the pages do not end"

    everything = walk()
    assert [job_id for p in everything for job_id in p] == ids[::-1]
    assert all(len(p) == 2 for p in everything)
    # a rare task: pages of the window, most of them empty, reach both matches
    rare = walk(task="rare")
    assert [job_id for p in rare for job_id in p] == [ids[12], ids[1]]
    assert [] in rare  # a window with no match still says where to go on
    assert len(rare) <= 20 // 5 + 1
    by_queue = walk(queue="q1", status=JobStatus.QUEUED.value)
    assert [job_id for p in by_queue for job_id in p] == ids[1::2][::-1]
    # the default window answers a whole page
    page_one = store.browse_jobs(limit=7)
    assert [job["id"] for job in page_one.jobs] == ids[::-1][:7]
    assert page_one.next_before == ids[::-1][6]
    assert store.browse_jobs(limit=50).next_before is None
    assert store.browse_jobs(before=ids[0]).jobs == []


@on_every_backend  # a store operation: each backend's SQL
def test_finished_per_minute_counts_ends_by_minute_and_status(store: Store) -> None:
    now = float(int(store.clock() // 60) * 60)  # a minute's start
    succeeded_job(store, now + 1, None)
    succeeded_job(store, now + 2, None)
    dead_job(store, now - 59)
    succeeded_job(store, now - 600, None)
    succeeded_job(store, now - 3 * 3600, None)  # ended before the hour shown
    enqueue_one(store, now)  # not ended

    assert store.finished_per_minute(60, now=now + 5) == [
        (now - 600, "succeeded", 1),
        (now - 60, "dead", 1),
        (now, "succeeded", 2),
    ]
    assert store.finished_per_minute(5, now=now + 5) == [
        (now - 60, "dead", 1),
        (now, "succeeded", 2),
    ]


def test_a_jobs_page_shows_its_arguments_progress_checkpoint_and_crashed_attempt(
    store: Store, dashboard: Dashboard
) -> None:
    now = store.clock()
    register(store, "w-first", now - 100)
    job_id = enqueue_one(
        store, now - 100, task="resize", args={"image": "cat.png", "sizes": [64, 128]},
        retry_backoff=0.0,
    )  # fmt: skip
    claim(store, job_id, now - 100, "w-first")
    (reclaimed,) = store.reclaim_expired(DetectedBy.LEASE_EXPIRED, now=now - 60)
    assert reclaimed.status == JobStatus.QUEUED
    register(store, "w-second", now - 50)
    second = claim_one(store, "w-second", now - 50, lease=3600.0)
    store.heartbeat(
        "w-second", [Renewal(second.lease, Progress(0.42, "resizing", "3 of 7"))], 3600.0,
        now=now - 40,
    )  # fmt: skip
    store.save_checkpoint(second.lease, json.dumps({"done": [64]}), now=now - 40)

    text = page(dashboard().get(f"/jobs/{job_id}"))

    assert f'data-testid="job-id">{job_id}</span>' in text
    assert '<span class="status status-running">running</span>' in text
    assert '&#34;image&#34;: &#34;cat.png&#34;' in text and "128" in text  # the arguments
    assert 'data-value="0.42"' in text and "42%" in text
    assert "resizing" in text and "3 of 7" in text
    assert '<pre data-testid="checkpoint">{\n  &#34;done&#34;: [\n    64' in text
    assert "w-second" in text and "runs out in" in text
    # the timeline, latest attempt first: the running one, then the crashed one
    outcomes = re.findall(r'data-outcome="(\w+)"', text)
    assert outcomes == ["running", "crashed"]
    crash = text[text.index('data-outcome="crashed"') :]
    assert "<b>detected_by</b>: lease_expired" in crash
    assert "<b>worker_id</b>: w-first" in crash


def test_a_finished_jobs_page_shows_its_result_or_its_error(
    store: Store, dashboard: Dashboard
) -> None:
    now = store.clock()
    done = succeeded_job(store, now, {"answer": 42}, args={"question": "?"})
    buried = dead_job(store, now, error="Traceback ...\nValueError: no luck")
    client = dashboard()

    text = page(client.get(f"/jobs/{done}"))
    assert '<pre data-testid="result">{\n  &#34;answer&#34;: 42\n}</pre>' in text
    assert re.findall(r'data-outcome="(\w+)"', text) == ["succeeded"]
    text = page(client.get(f"/jobs/{buried}"))
    assert '<span class="status status-dead">dead</span>' in text
    assert "ValueError: no luck" in text and "Why dead" in text
    assert 'data-testid="result"' not in text
    lost = enqueue_one(store, now)  # succeeded in its task's transaction, its result lost
    with store.completing(claim(store, lost, now).lease):
        pass
    store.reclaim_expired(DetectedBy.LEASE_EXPIRED, now=now + 2 * LEASE)
    text = page(client.get(f"/jobs/{lost}"))
    assert '<span class="status status-succeeded">succeeded</span>' in text
    assert 'data-testid="result"' not in text
    assert '<pre data-testid="result-lost">its worker stopped after' in text


def test_a_snoozed_jobs_page_shows_its_snoozes(store: Store, dashboard: Dashboard) -> None:
    now = store.clock()
    job_id = enqueue_one(store, now)
    snoozed = fate.snoozed(claim(store, job_id, now), 30.0, "snoozed for 30 s: 429 from the API")
    assert store.finish([snoozed], now=now + 1) == []
    text = page(dashboard().get(f"/jobs/{job_id}"))
    assert '<span class="status status-queued">queued</span>' in text
    assert re.search(r'data-testid="snoozes">1, not counted as attempts', text)
    assert re.findall(r'data-outcome="(\w+)"', text) == ["snoozed"]
    assert '<span class="status status-snoozed">snoozed</span>' in text
    assert "snoozed for 30 s: 429 from the API" in text


def test_workers_shows_those_alive_and_with_all_the_stopped_ones_too(
    store: Store, dashboard: Dashboard
) -> None:
    now = store.clock()
    register(store, "w-alive", now, name="alpha", hostname="host-a", pid=1111)
    register(store, "w-stopped", now, name="omega", hostname="host-b", pid=2222)
    store.stop_worker("w-stopped")
    client = dashboard()

    text = page(client.get("/workers"))
    assert re.findall(r'data-worker="([^"]*)"', text) == ["w-alive"]
    assert "alpha" in text and "host-a" in text and "1111" in text
    assert "w-stopped" not in text and 'data-testid="show-all"' in text
    text = page(client.get("/workers?all=1"))
    assert sorted(re.findall(r'data-worker="([^"]*)"', text)) == ["w-alive", "w-stopped"]
    assert '<span class="status status-stopped">stopped</span>' in text


def test_workers_shows_how_many_attempts_each_worker_abandoned(
    store: Store, dashboard: Dashboard
) -> None:
    """Attempts whose end a worker decided while their code still runs (a timed-out
    thread), as its pulse recorded them."""
    now = store.clock()
    register(store, "w-stuck", now, name="stuck")
    register(store, "w-fine", now, name="fine")
    store.record_abandoned("w-stuck", 2)
    client = dashboard()
    text = page(client.get("/workers"))
    shown = dict(re.findall(r'data-worker="([^"]*)".*?data-abandoned="(\d+)"', text, re.S))
    assert shown == {"w-stuck": "2", "w-fine": "0"}
    assert "Abandoned" in text and "a thread cannot be stopped" in text


def test_jobs_claimed_ahead_show_as_claimed_not_running(
    store: Store, dashboard: Dashboard
) -> None:
    """A worker's buffer (`--prefetch`): its jobs are `running` in the database, not
    started; every page shows them `claimed`, filters them apart, and counts them apart
    from the started one (heartq.inspect.states)."""
    now = store.clock()
    register(store, "w-pre", now, concurrency=1)
    started, *ahead = [enqueue_one(store, now) for _ in range(3)]
    store.claim("w-pre", ["default"], 1, 60.0, now=now, ahead=2)
    client = dashboard(allow_actions=True)

    text = page(client.get("/"))
    assert dict(CARD.findall(text))["claimed"] == "2"
    assert dict(CARD.findall(text))["running"] == "1"
    text = page(client.get("/jobs?status=claimed"))
    assert sorted(re.findall(r'<tr data-job="([^"]+)"', text)) == sorted(ahead)
    assert re.findall(r'<tr data-job="([^"]+)"', page(client.get("/jobs?status=running"))) == [
        started
    ]
    text = page(client.get(f"/jobs/{ahead[0]}"))
    assert '<span class="status status-claimed">claimed</span>' in text
    assert 'data-testid="claimed-ahead"' in text and 'data-testid="lease"' in text
    # its attempt, as in `heartq jobs show`: claimed, not started, not running
    assert re.findall(r'data-outcome="(\w+)"', text) == ["claimed"]
    assert "status-running" not in text
    assert "Cancel this job" in text  # held by its worker: a cancel asks it
    text = page(client.get("/workers"))
    assert 'data-running="1"' in text and 'data-claimed-ahead="2"' in text


def test_the_dead_letter_queue_lists_dead_jobs_newest_first(
    store: Store, dashboard: Dashboard
) -> None:
    now = store.clock()
    enqueue_one(store, now)
    first = dead_job(store, now - 10, error="Traceback\nKeyError: 'x'")
    second = dead_job(store, now - 5, error="ValueError: y")
    client = dashboard()

    text = page(client.get("/dlq"))
    assert rows(text) == [second, first]
    assert "KeyError: &#39;x&#39;" in text and "ValueError: y" in text
    store.purge_dead_ids()
    assert 'data-testid="dlq-empty"' in page(client.get("/dlq"))


def test_static_files_are_served(store: Store, dashboard: Dashboard) -> None:
    client = dashboard()
    text = page(client.get("/"))
    for asset in re.findall(r'(?:src|href)="(/static/[^"]+)"', text):
        response = client.get(asset)
        assert response.status_code == 200, asset
        assert response.content
    assert "htmx" in client.get("/static/htmx.min.js").text
    assert client.get("/static/style.css").headers["content-type"].startswith("text/css")
    assert client.get("/static/nothing.js").status_code == 404


def test_login_is_a_404_without_a_token(store: Store, dashboard: Dashboard) -> None:
    client = dashboard(allow_actions=True)
    text = page(client.get("/login"), 404)
    assert alert(text) == "this dashboard has no token to sign in with"
    response = client.post("/login", data={"_csrf": client.cookies["heartq_csrf"], "token": "x"})
    assert alert(page(response, 404)) == "this dashboard has no token to sign in with"
    assert 'href="/login"' not in page(client.get("/"))


def test_mounted_under_a_prefix_every_link_and_redirect_keeps_it(
    store: Store, store_url: str
) -> None:
    job_id = enqueue_one(store, store.clock())
    board = create_app(store_url)
    try:
        with TestClient(Starlette(routes=[Mount("/heartq", board)])) as client:
            first = client.get("/heartq/jobs")
            text = page(first)
            assert "Path=/heartq;" in first.headers["set-cookie"]  # cookies follow the mount
            links = re.findall(r'(?:href|src|action)="([^"]+)"', text)
            assert links and all(link.startswith("/heartq/") for link in links), links
            assert f'href="/heartq/jobs/{job_id}"' in text
            found = client.get(f"/heartq/jobs?id={job_id[:8]}", follow_redirects=False)
            assert located(found) == f"/heartq/jobs/{job_id}"
            assert client.get("/heartq/static/dashboard.js").status_code == 200
    finally:
        board.state.store.link.close()


@on_every_backend  # a store operation: each backend's SQL
def test_the_queues_page_lists_each_queues_busiest_fairness_keys(
    store: Store, dashboard: Dashboard
) -> None:
    now = store.clock()
    store.enqueue(
        [new_job(queue="imports", fair_key="acct:2", fair_weight=2.5) for _ in range(2)], now=now
    )
    store.enqueue([new_job(queue="imports", fair_key="acct:<big>") for _ in range(5)], now=now)
    store.enqueue([new_job(queue="other", fair_key=f"k{n:02d}") for n in range(12)], now=now)
    store.enqueue([new_job(queue="plain")], now=now)
    register(store, "w1", now, queues=("imports",))
    # acct:2, first in key order and in line (enqueued first)
    assert len(store.claim("w1", ["imports"], 1, LEASE, now=now)) == 1
    text = page(dashboard().get("/queues"))
    assert 'data-fair-keys="2"' in text and 'data-fair-keys="12"' in text
    assert 'data-fair-keys="0"' in text  # plain: no keys
    table = text.split('data-testid="fair-keys" data-queue="imports"', 1)[1].split("</table>")[0]
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in table.split("<tr")[2:]]
    assert cells == [["acct:2", "1", "1", "2.5"], ["acct:&lt;big&gt;", "5", "0", "1"]], cells
    other = text.split('data-testid="fair-keys" data-queue="other"', 1)[1].split("</table>")[0]
    assert other.count("<tr data-key=") == 10 and "... 2 more" in other
