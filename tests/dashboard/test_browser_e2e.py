"""The dashboard in a real headless Chromium (Debian's), against a real `heartq
dashboard` process and real worker processes killed with real signals.

What a user sees: the overview while a worker runs (with a rate limit holding jobs
back), a job's progress moving without a reload, a killed worker's job showing the crash
and its recovery in the timeline, a dead job replayed from the page, an action refused
without the token, text typed in a field that the page's refreshes leave alone, and
hostile text that stays text. Screenshots of every page go to
test-artifacts/screenshots/.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import textwrap
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Dialog, Page, Request, Route, expect

from heartq.inspect.fleet import GONE_HINT
from tests.browser_harness import launch_chromium, screenshot_dir
from tests.cli.helpers import HeartqCli, clean_env, wait_for
from tests.support import free_port

pytestmark = [pytest.mark.slow, pytest.mark.one_at_a_time("browser")]

HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 1">\'"'
LIVE = 0.5
"""The dashboards here re-read their pages every half second."""
WAIT_MS = 20_000
expect.set_options(timeout=WAIT_MS)
"""Assertions wait as long as actions: `set_default_timeout` covers a page's actions, not
Playwright's `expect` (5 s of its own), which a loaded machine outlasts."""

TASKS = textwrap.dedent(
    '''
    """The tasks the browser tests' workers run."""

    import os
    import time

    import heartq

    app = heartq.App()


    @app.task
    def progress(ctx, seconds=6.0, until=None):
        """Progress moving to 1 over `seconds`, and on until the file `until` (if given)
        is there: the test ends the job once it saw what it looks for."""
        start = time.monotonic()
        while not ctx.cancelled and (
            (until and not os.path.exists(until) and time.monotonic() - start < 120)
            or (not until and time.monotonic() - start < seconds)
        ):
            done = (time.monotonic() - start) / seconds
            ctx.heartbeat(progress=min(done, 1.0), stage="crunching", message="<b>step</b>")
            time.sleep(0.05)
        return {"echo": "<script>window.__pwned = 1</script>"}


    @app.task(max_retries=0)
    def fail(text=""):
        raise ValueError(text)


    @app.task(rate_limit="1/m")
    def limited():
        return "once a minute"


    @app.task(max_retries=3)
    def hold(ctx, seconds=60.0):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not ctx.cancelled:
            time.sleep(0.05)
            ctx.heartbeat()
        return "held"
    '''
)


@dataclass
class Site:
    """A queue on a SQLite file, its dashboard process and its worker processes."""

    cli: HeartqCli
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    address: str = ""

    def start_dashboard(self, *options: str) -> str:
        port = free_port()
        log = open(self.cli.cwd / "dashboard.log", "wb")  # noqa: SIM115 - the process owns it
        argv = ["dashboard", "--port", str(port), "--refresh", str(LIVE), *options]
        self.processes.append(
            subprocess.Popen(
                self.cli.argv(argv, self.cli.url),
                cwd=self.cli.cwd,
                env=clean_env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        self.address = f"http://127.0.0.1:{port}"
        wait_for(self._answers, timeout=30, what="the dashboard to answer")
        return self.address

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(self.address + "/", timeout=2) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def start_worker(self, *options: str) -> subprocess.Popen[bytes]:
        name = f"worker-{len(self.processes)}.log"
        worker = self.cli.start_worker(*options, log=name)
        self.processes.append(worker)
        return worker

    def url(self, path: str) -> str:
        return self.address + path

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
        self.cli.close()


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "tasks.py").write_text(TASKS)
    running = Site(HeartqCli(f"sqlite:///{workdir / 'q.db'}", workdir))
    running.cli("migrate").ok()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with launch_chromium() as chromium:
        yield chromium


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    tab.set_default_timeout(WAIT_MS)
    tab.on("dialog", lambda dialog: accept(dialog))
    yield tab
    context.close()


def accept(dialog: Dialog) -> None:
    """The page asks before it acts (data-confirm); the user says yes."""
    dialog.accept()


def shoot(page: Page, name: str) -> None:
    page.screenshot(path=str(screenshot_dir() / f"dashboard-{name}.png"), full_page=True)


def not_pwned(page: Page) -> None:
    """No script from the database ran: hostile text stayed text."""
    assert page.evaluate("typeof window.__pwned") == "undefined"


def test_the_overview_and_a_jobs_progress_move_while_a_worker_runs(site: Site, page: Page) -> None:
    site.start_worker("--concurrency", "2")
    site.start_dashboard()
    # Its progress moves over 12 s (the overview's checks come first, and beside a CPU
    # burner they took over 6 s), and the job ends when the test has seen it move.
    job_id = site.cli.add("progress", {"seconds": 12.0, "until": "progress-seen"})
    for n in range(3):
        site.cli.add("fail", {"text": f"{HOSTILE} #{n}"})
    wait_for(lambda: "limited" in {t["name"] for t in site.cli.json("tasks")}, what="tasks")
    for _ in range(3):  # the task's limit, declared by its worker: one start a minute
        site.cli.add("limited")
    page.goto(site.url("/"))
    expect(page.get_by_test_id("workers-alive")).to_contain_text("1")
    expect(page.get_by_test_id("total-running").locator(".n")).to_have_text("1")
    expect(page.get_by_test_id("total-dead").locator(".n")).to_have_text("3")
    limits = page.get_by_test_id("overview-rate-limits")
    expect(limits.locator("tr").nth(1)).to_contain_text("limited")
    expect(limits.locator("tr").nth(1).locator("td").nth(1)).to_have_text("1/m")
    expect(limits.locator("tr").nth(1).locator("td").nth(3)).to_contain_text("in ")
    expect(limits.locator("tr").nth(1).locator("td").nth(4)).to_have_text("2")
    shoot(page, "overview")

    page.goto(site.url(f"/jobs/{job_id}"))
    page.evaluate("window.__sameDocument = true")  # gone if the page reloads
    bar = page.get_by_test_id("progress").locator("progress")
    first = float(bar.get_attribute("value") or 0)
    page.wait_for_function(
        "([first]) => Number(document.querySelector('[data-testid=progress] progress')"
        "?.value) > first + 0.2",
        arg=[first],
    )
    shoot(page, "job-running")
    (site.cli.cwd / "progress-seen").touch()
    expect(page.locator("h1 .status")).to_have_text("succeeded", timeout=WAIT_MS)
    assert page.evaluate("window.__sameDocument") is True, "the page was reloaded"
    expect(page.get_by_test_id("result")).to_contain_text("<script>window.__pwned = 1</script>")
    not_pwned(page)
    shoot(page, "job")

    page.goto(site.url("/jobs"))
    expect(page.get_by_test_id("jobs").locator("tr[data-job]")).to_have_count(7)
    expect(page.get_by_test_id("jobs")).to_contain_text(HOSTILE[:40])
    not_pwned(page)
    shoot(page, "jobs")


def test_a_killed_workers_job_shows_the_crash_and_the_recovery(site: Site, page: Page) -> None:
    doomed = site.start_worker("--concurrency", "1", "--name", "doomed")
    site.start_dashboard()
    job_id = site.cli.add("hold", {"seconds": 60.0})
    wait_for(lambda: site.cli.job(job_id)["status"] == "running", what="the job to start")
    page.goto(site.url(f"/jobs/{job_id}"))
    page.evaluate("window.__sameDocument = true")
    expect(page.get_by_test_id("timeline").locator("tr[data-outcome=running]")).to_have_count(1)
    expect(page.get_by_test_id("lease")).to_contain_text("runs out in")

    rescuer = site.start_worker("--concurrency", "1", "--name", "rescuer")
    os.kill(doomed.pid, signal.SIGKILL)
    doomed.wait(timeout=10)
    crashed = page.get_by_test_id("timeline").locator("tr[data-outcome=crashed]")
    expect(crashed).to_have_count(1)
    # found by its free liveness lock, its silence or its lease: whichever pass came first
    crash = crashed.get_by_test_id("crash")
    found_by = r"detected_by: (liveness_lock|stale_worker|lease_expired)"
    expect(crash).to_contain_text(re.compile(found_by))
    second = page.get_by_test_id("timeline").locator("tr[data-execution='2']")
    expect(second).to_have_attribute("data-outcome", "running")
    worker_ids = {w["name"]: w["id"] for w in site.cli("workers", "--all", "--json").json()}
    expect(crash).to_contain_text(f"worker_id: {worker_ids['doomed']}")
    expect(crash).to_contain_text(f"detector: {worker_ids['rescuer']}")  # who found it
    expect(second).to_contain_text(worker_ids["rescuer"])  # and who runs it now
    assert page.evaluate("window.__sameDocument") is True, "the page was reloaded"
    shoot(page, "job-recovered")

    page.goto(site.url("/workers?all=1"))
    doomed_row = page.locator("tr", has_text="doomed")
    expect(doomed_row).to_contain_text("inactive")
    expect(page.locator("tr", has_text="rescuer")).to_contain_text("1 / 1")
    shoot(page, "workers")
    assert rescuer.poll() is None


def test_a_killed_workers_job_shows_its_worker_gone_until_reaped(site: Site, page: Page) -> None:
    """As `heartq jobs show` says it (tests/cli/test_gone.py): a running job whose worker
    was SIGKILLed, with no other worker to reclaim it, shows its worker gone on its page,
    live, without a reload; once `heartq reclaim` requeued it, no more."""
    doomed = site.start_worker("--concurrency", "1")
    site.start_dashboard()
    job_id = site.cli.add("hold", {"seconds": 60.0})
    wait_for(lambda: site.cli.job(job_id)["status"] == "running", what="the job to start")
    page.goto(site.url(f"/jobs/{job_id}"))
    page.evaluate("window.__sameDocument = true")
    expect(page.get_by_test_id("lease")).to_contain_text("runs out in")
    gone = page.get_by_test_id("worker-gone")
    expect(gone).to_have_count(0)

    os.killpg(doomed.pid, signal.SIGKILL)
    doomed.wait(timeout=10)
    expect(gone).to_have_text("worker gone", timeout=WAIT_MS)  # expect waits 5 s unless told
    expect(gone).to_have_attribute("title", GONE_HINT)
    expect(page.locator("dl.facts")).to_contain_text(f"gone: {GONE_HINT}")
    assert site.cli.json("jobs", "show", job_id)["worker_gone"] is True
    assert page.evaluate("window.__sameDocument") is True, "the page was reloaded"
    shoot(page, "job-worker-gone")

    site.cli("reclaim").ok()
    expect(page.locator("h1 .status-queued")).to_have_count(1, timeout=WAIT_MS)
    expect(gone).to_have_count(0)
    assert site.cli.json("jobs", "show", job_id)["worker_gone"] is None


def test_a_dead_job_is_replayed_from_the_page_once_signed_in(site: Site, page: Page) -> None:
    site.start_worker("--concurrency", "1")
    site.start_dashboard("--token", "s3cret-token")
    job_id = site.cli.add("fail", {"text": HOSTILE})
    blocked = site.cli.add("hold", {"seconds": 0.1}, depends_on=[job_id])
    wait_for(lambda: site.cli.job(job_id)["status"] == "dead", what="the job to die")

    page.goto(site.url(f"/jobs/{blocked}"))  # blocked by it, named, its error shown as text
    expect(page.locator("h1 .status")).to_have_text("blocked")
    expect(page.get_by_test_id("blocked-by")).to_contain_text(job_id)
    expect(page.get_by_test_id("replay-holder")).to_have_count(0)  # not signed in
    not_pwned(page)
    shoot(page, "job-blocked")

    page.goto(site.url("/dlq"))
    row = page.locator(f"tr[data-job='{job_id}']")
    expect(row).to_contain_text(HOSTILE[:30])
    not_pwned(page)
    expect(row.get_by_test_id("replay-one")).to_have_count(0)  # not signed in: no button
    csrf = next(c["value"] for c in page.context.cookies() if c["name"] == "heartq_csrf")
    refused = page.request.post(
        site.url("/dlq/replay"), form={"_csrf": csrf, "one": job_id}, max_redirects=0
    )
    assert refused.status == 403 and "token" in refused.text()
    assert site.cli.job(job_id)["status"] == "dead"  # the refusal changed nothing

    page.goto(site.url("/login"))
    shoot(page, "login")
    page.get_by_label("Token").fill("wrong")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("wrong token")
    page.goto(site.url("/login"))
    page.get_by_label("Token").fill("s3cret-token")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("status")).to_contain_text("Signed in")
    session = next(c for c in page.context.cookies() if c["name"] == "heartq_session")
    assert "s3cret" not in session["value"] and session["httpOnly"]

    page.goto(site.url("/dlq"))
    shoot(page, "dlq")
    page.locator(f"tr[data-job='{job_id}']").get_by_test_id("replay-one").click()
    expect(page.get_by_role("status")).to_contain_text("Replayed 1 dead job(s)")
    # its second attempt's row shows from its start (open, from the job row): wait for
    # that attempt to end, not for the row
    wait_for(
        lambda: [bool(e["ended_at"]) for e in site.cli.job(job_id)["executions"]] == [True] * 2,
        what="the replayed job to run again",
    )
    job = site.cli.job(job_id)
    assert len(job["executions"]) == 2
    assert job["status"] == "dead"  # it fails again, as its code does
    assert site.cli.job(blocked)["status"] == "blocked"  # and blocks again

    page.goto(site.url(f"/jobs/{blocked}"))  # signed in: its page replays the dead job
    page.get_by_test_id("replay-holder").click()
    expect(page.get_by_role("status")).to_contain_text("Replayed 1 dead job(s)")
    wait_for(lambda: len(site.cli.job(job_id)["executions"]) == 3, what="a third attempt")


def test_typed_text_outlives_the_pages_refreshes(site: Site, page: Page) -> None:
    """What a user typed in a live page's field stays there once focus moved on (to the
    heading here; to the button as it is pressed): the page re-reads itself every
    half second, and neither a refresh on its way as they typed nor one asked for after
    lands over it. Then the form sends it. (Wiped, the sign-in page's `required` token
    field was empty, and the browser refused to send the form, silently.)"""
    site.start_dashboard("--token", "s3cret-token")
    held: list[Route] = []

    def hold_the_first_refresh(route: Route, request: Request) -> None:
        if request.headers.get("hx-request") == "true" and not held:
            held.append(route)  # answered below, once the user has typed
        else:
            route.continue_()

    page.route("**/login", hold_the_first_refresh)
    page.add_init_script(  # before the page's own scripts: no refresh goes uncounted
        """document.addEventListener("htmx:beforeRequest", (event) => {
            if (event.detail.elt.id === "live") window.__refreshes = (window.__refreshes || 0) + 1;
        });"""
    )
    page.goto(site.url("/login"))

    def refresh_held() -> bool:
        page.evaluate("0")  # a round trip, in which Playwright hands the route over
        return bool(held)

    wait_for(refresh_held, what="the first refresh to be on its way")
    token = page.get_by_label("Token")
    token.fill("wrong")
    page.get_by_role("heading", name="Sign in to act on jobs").click()
    expect(token).not_to_be_focused()
    asked = page.evaluate("window.__refreshes")
    held[0].continue_()
    # two more asked for (refused, or sent): htmx answered the held one before them
    page.wait_for_function("([asked]) => window.__refreshes >= asked + 2", arg=[asked])
    expect(token).to_have_value("wrong")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("wrong token")


def test_a_queued_job_is_cancelled_from_its_page(site: Site, page: Page) -> None:
    """... and the job that waits for it shows what it waits for, then why it was
    cancelled too."""
    site.start_dashboard("--allow-actions")
    job_id = site.cli.add("hold", {"seconds": 1.0})  # no worker: it waits
    waiting = site.cli.add("hold", {"seconds": 1.0}, depends_on=[job_id])
    page.goto(site.url(f"/jobs/{waiting}"))
    expect(page.locator("h1 .status")).to_have_text("waiting")
    expect(page.get_by_test_id("waits-for")).to_contain_text("Waits for 1 of 1 dependency")
    dependency = page.get_by_test_id("depends-on").locator(f"tr[data-job='{job_id}']")
    expect(dependency).to_contain_text("queued")
    shoot(page, "job-waiting")

    page.goto(site.url(f"/jobs/{job_id[-8:]}"))  # its tail finds it
    expect(page.get_by_test_id("job-id")).to_have_text(job_id)
    expect(page.get_by_test_id("dependents").locator(f"tr[data-job='{waiting}']")).to_contain_text(
        "waiting"
    )
    page.get_by_role("button", name="Cancel this job").click()
    expect(page.get_by_role("status")).to_contain_text("Cancelled")
    expect(page.locator("h1 .status")).to_have_text("cancelled")
    assert "heartq dashboard" in (site.cli.job(job_id)["cancelled_by"] or "")
    expect(page.get_by_test_id("dependents").locator(f"tr[data-job='{waiting}']")).to_contain_text(
        "cancelled"
    )

    page.goto(site.url(f"/jobs/{waiting}"))
    expect(page.locator("h1 .status")).to_have_text("cancelled")
    expect(page.get_by_test_id("error")).to_contain_text(f"dependency_failed: job {job_id}")
    page.goto(site.url("/"))
    expect(page.get_by_test_id("total-waiting").locator(".n")).to_have_text("0")
    expect(page.get_by_test_id("total-cancelled").locator(".n")).to_have_text("2")


def test_a_read_only_dashboard_shows_no_action(site: Site, page: Page) -> None:
    site.start_dashboard()
    job_id = site.cli.add("hold", {"seconds": 1.0})
    page.goto(site.url(f"/jobs/{job_id}"))
    expect(page.get_by_test_id("mode")).to_contain_text("read-only")
    expect(page.get_by_role("button", name="Cancel this job")).to_have_count(0)
    csrf = next(c["value"] for c in page.context.cookies() if c["name"] == "heartq_csrf")
    refused = page.request.post(
        site.url(f"/jobs/{job_id}/cancel"), form={"_csrf": csrf}, max_redirects=0
    )
    assert refused.status == 403 and "read-only" in refused.text()
    assert site.cli.job(job_id)["status"] == "queued"


def test_a_refused_actions_page_does_not_read_itself_again(site: Site, page: Page) -> None:
    """The answer to a refused POST (403: read-only) is a page a GET never showed: it is
    not re-read every `--refresh` seconds (it was, by GET, at the action's URL: a 405
    every time), while the pages a GET showed still are."""
    site.start_dashboard()
    job_id = site.cli.add("hold", {"seconds": 1.0})
    action = f"/jobs/{job_id}/cancel"
    asked: list[tuple[str, str]] = []
    page.on("request", lambda request: asked.append((request.method, request.url)))
    page.goto(site.url(f"/jobs/{job_id}"))
    live = page.locator("main#live")
    expect(live).to_have_attribute("hx-trigger", f"every {LIVE}s")  # a GET's page: re-read
    # A form the user sends (a stale page's button): the browser shows the 403 page.
    page.evaluate(
        """(action) => {
            const form = document.createElement("form");
            form.method = "post";
            form.action = action;
            document.body.appendChild(form);
            form.submit();
        }""",
        action,
    )
    expect(page.get_by_role("alert")).to_contain_text("read-only")
    expect(live).not_to_have_attribute("hx-trigger", re.compile(".*"))
    expect(live).not_to_have_attribute("hx-get", re.compile(".*"))
    shoot(page, "refused")
    assert ("GET", site.url(action)) not in asked
    assert site.cli.job(job_id)["status"] == "queued"


def test_a_queue_is_paused_scaled_and_resumed_from_its_page(site: Site, page: Page) -> None:
    """A worker runs the queue's jobs; paused from the page, it starts none (a job
    enqueued meanwhile stays queued), scaled, then resumed: the job runs."""
    site.start_dashboard("--allow-actions")
    site.start_worker()
    page.goto(site.url("/queues"))
    row = page.get_by_test_id("queues").locator("tr[data-queue='default']")
    expect(row).to_contain_text("active")
    row.get_by_test_id("pause").click()
    expect(page.get_by_role("status")).to_contain_text("Paused")
    expect(row.locator("[data-state]")).to_have_attribute("data-state", "paused")
    wait_for(
        lambda: any(
            "queue_control_seen" in log.read_text() for log in site.cli.cwd.glob("worker-*")
        ),
        timeout=20,
        what="the worker to obey the pause",
    )
    held = site.cli.add("hold", {"seconds": 0.1})
    row.locator("input[name='concurrency']").fill("2")
    row.get_by_test_id("scale").click()
    expect(page.get_by_role("status")).to_contain_text("Scaled")
    expect(row.locator("[data-cap]")).to_have_attribute("data-cap", "2")
    shoot(page, "queues-paused")
    assert site.cli.job(held)["status"] == "queued"
    row.get_by_test_id("resume").click()
    expect(page.get_by_role("status")).to_contain_text("Resumed")
    wait_for(lambda: site.cli.job(held)["status"] == "succeeded", timeout=20, what="the job")


def test_the_queues_page_shows_each_queues_fairness_keys(site: Site, page: Page) -> None:
    """A worker of one slot runs one key's job while three keys wait (one a hostile
    text): the queues page lists the keys, most running first, with their weights, and
    the queue's count of keys leads to them."""
    site.start_worker("--queues", "imports", "--concurrency", "1")
    site.start_dashboard()
    wait_for(
        lambda: "imports" in site.cli("workers").ok().out, timeout=20, what="the worker to start"
    )
    for key, weight, n in (("acct:big", 1.0, 4), ("acct:2", 2.0, 2), (HOSTILE, 1.0, 1)):
        for _ in range(n):
            site.cli.add("hold", {"seconds": 60}, queue="imports", fair_key=key, fair_weight=weight)

    def running() -> bool:
        rows = {row["queue"]: row for row in site.cli("queues", "--json").json()}
        fair = rows.get("imports", {}).get("fair") or {}
        return fair.get("running") == 1

    wait_for(running, timeout=20, what="one key's job to run")
    page.goto(site.url("/queues"))
    row = page.get_by_test_id("queues").locator("tr[data-queue='imports']")
    expect(row.locator("[data-fair-keys]")).to_have_attribute("data-fair-keys", "3")
    row.locator("[data-fair-keys] a").click()
    assert page.url.endswith("#fair-0")
    keys = page.locator("table[data-testid='fair-keys'][data-queue='imports']")
    expect(keys.locator("tr[data-key]")).to_have_count(3)
    first = keys.locator("tr[data-key]").first
    expect(first.locator("td").nth(2)).to_have_text("1")  # most running first
    expect(keys.locator("tr[data-key='acct:2'] td").nth(3)).to_have_text("2")
    expect(keys).to_contain_text(HOSTILE)  # shown as text
    not_pwned(page)
    shoot(page, "queues-fair-keys")
