"""The dashboard's routes: pages that read the store, and actions that go through the
same store operations as the command line (`cancel_job`, `replay_dead`, `purge_dead_ids`).

Pages: `/` overview, `/jobs` (filters, id search, keyset pages), `/jobs/ID`, `/workers`,
`/dlq`. Actions: `POST /jobs/ID/cancel`, `POST /dlq/replay` (the ids ticked, or one),
`POST /dlq/purge`; `GET|POST /login` and `POST /logout` when a token guards them
(`security.py`). Each page carries a live region that htmx re-reads every `refresh`
seconds; jinja2 autoescapes every value (job arguments and errors are anyone's text).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any
from urllib.parse import quote, urlencode

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from heartq import display, events, ids, payload, runtime_schedules
from heartq.config import resolve_url
from heartq.dashboard import views
from heartq.dashboard.security import (
    CSRF_COOKIE,
    CSRF_FIELD,
    SESSION_COOKIE,
    Guard,
    Refused,
    csrf_token,
)
from heartq.errors import (
    AmbiguousJobId,
    ConfigError,
    HeartqError,
    JobNotFound,
    PayloadError,
    StoreUnavailable,
)
from heartq.event_stream import EventStream
from heartq.inspect import fairness
from heartq.inspect import jobs as inspect_jobs
from heartq.inspect.fleet import ABANDONED_HINT, CLAIMED_AHEAD_HINT, GONE_HINT
from heartq.model import CancelResult, JobStatus
from heartq.store import Store, open_store, redact, redact_text

PAGE_SIZE = 50
"""Jobs per page of `/jobs`."""
DEFAULT_REFRESH = 2.0
"""Seconds between two reads of a page's live region."""
SECURITY_HEADERS = {
    # No inline script or style anywhere: what a job's text could smuggle in stays text.
    "content-security-policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
    "img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
}
NOTICES = {
    "cancelled": "Cancelled: the job had not started and will not run.",
    "cancel_requested": "Cancel requested: its worker tells the task within about a second, "
    "and ends the attempt after a grace of at most 5 s if the task does not stop by itself.",
    "already_finished": "The job had already finished: nothing to cancel.",
    "replayed": "Replayed {n} dead job(s).",
    "nothing_replayed": "Nothing was replayed: the jobs chosen are no longer dead.",
    "purged": "Purged {n} dead job(s) for good.",
    "paused": "Paused: no job of the queue starts until it is resumed; every worker obeys "
    "within about a second.",
    "resumed": "Resumed: the queue's jobs start again.",
    "scaled": "Scaled: each worker obeys the new cap within about a second.",
    "schedule_added": "Schedule stored: every worker runs it within about a second.",
    "schedule_removed": "Schedule removed: no tick after the workers' next pass.",
    "schedule_paused": "Schedule paused: its ticks pass without a job until resumed.",
    "schedule_resumed": "Schedule resumed from its next tick.",
    "signed_in": "Signed in: actions are allowed.",
    "signed_out": "Signed out.",
}
"""What an action's redirect says; the page shows only these words (and a count)."""


class Dashboard:
    """One dashboard over one store: its templates, guard and routes; its actions told to
    `events`."""

    def __init__(self, store: Store, guard: Guard, refresh: float, events: EventStream) -> None:
        self.store = store
        self.events = events
        self.reads = views.OverviewReads.of(store)
        self.guard = guard
        self.refresh = refresh
        self.env = jinja2.Environment(
            loader=jinja2.PackageLoader("heartq.dashboard", "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        self.env.filters["seconds"] = display.fmt_seconds

    # -- rendering ---------------------------------------------------------------------
    def page(
        self, request: Request, template: str, status_code: int = 200, **context: Any
    ) -> HTMLResponse:
        csrf, new_cookie = csrf_token(request)
        notice = NOTICES.get(request.query_params.get("notice", ""), "")
        html = self.env.get_template(template).render(
            request=request,
            base=request.scope.get("root_path", ""),
            path=request.url.path,
            csrf_field=CSRF_FIELD,
            csrf=csrf,
            may_act=self.guard.may_act(request),
            mode=self.guard.mode.value,
            needs_token=self.guard.token is not None,
            refresh=self.refresh,
            store_url=redact(self.store.link.url),
            notice=notice.format(n=_int(request.query_params.get("n"))),
            statuses=views.STATUSES,
            **context,
        )
        response = HTMLResponse(html, status_code=status_code, headers=SECURITY_HEADERS)
        if new_cookie:
            response.set_cookie(
                CSRF_COOKIE, csrf, httponly=True, samesite="strict", path=_cookie_path(request)
            )
        return response

    def error(self, request: Request, status: int, message: str) -> HTMLResponse:
        return self.page(request, "error.html", status_code=status, message=message)

    # -- pages -------------------------------------------------------------------------
    def overview(self, request: Request) -> Response:
        return self.page(request, "overview.html", **views.overview(self.store, self.reads))

    def jobs(self, request: Request) -> Response:
        query = request.query_params
        wanted = _typed(query.get("id", "").strip(), "a job id")
        if wanted:
            return self._find(request, wanted)
        status = query.get("status") or None
        if status is not None and status not in views.STATUSES:
            return self.error(request, 400, f"unknown status {status!r}")
        queue = _typed(query.get("queue", "").strip(), "a queue") or None
        task = _typed(query.get("task", "").strip(), "a task") or None
        before = _typed(query.get("before", ""), "a page's start") or None
        page = inspect_jobs.browse_jobs(
            self.store, status=status, queue=queue, task=task, before=before, limit=PAGE_SIZE
        )
        now = self.store.clock()
        filters = {"status": status or "", "queue": queue or "", "task": task or ""}
        kept = {k: v for k, v in filters.items() if v}
        return self.page(
            request,
            "jobs.html",
            jobs=[views.job_row(job, now) for job in page.jobs],
            filters=filters,
            older=urlencode({**kept, "before": page.next_before}) if page.next_before else None,
            # the first page, with the filters in force (none: plain `/jobs`)
            newest="/jobs" + (f"?{urlencode(kept)}" if kept else "") if before else None,
        )

    def _find(self, request: Request, wanted: str) -> Response:
        try:
            job_id = self.store.resolve_job_id(wanted)
        except (JobNotFound, AmbiguousJobId) as exc:
            return self.error(request, 404, str(exc))
        return RedirectResponse(f"{_base(request)}{_job_path(job_id)}", status_code=303)

    def job(self, request: Request) -> Response:
        ref = _typed(request.path_params["job_id"], "a job id")
        if not ref:  # `/jobs/`
            return RedirectResponse(f"{_base(request)}/jobs", status_code=303)
        try:
            job_id = self.store.resolve_job_id(ref)
        except (JobNotFound, AmbiguousJobId) as exc:
            return self.error(request, 404, str(exc))
        if job_id != ref:  # a prefix or another case: to the job's own address
            return RedirectResponse(f"{_base(request)}{_job_path(job_id)}", status_code=303)
        now = self.store.clock()
        job = inspect_jobs.job_detail(self.store, job_id)
        return self.page(request, "job.html", job=views.job_page(job, now), gone_hint=GONE_HINT)

    def workers(self, request: Request) -> Response:
        include_all = request.query_params.get("all") == "1"
        rows = views.workers_view(self.store, include_all=include_all)
        return self.page(
            request,
            "workers.html",
            workers=rows,
            include_all=include_all,
            gone_hint=GONE_HINT,
            abandoned_hint=ABANDONED_HINT,
            claimed_ahead_hint=CLAIMED_AHEAD_HINT,
        )

    def dlq(self, request: Request) -> Response:
        now = self.store.clock()
        dead = self.store.list_jobs(status=JobStatus.DEAD.value, limit=views.DLQ_LIMIT)
        return self.page(
            request,
            "dlq.html",
            jobs=[views.job_row(job, now) for job in dead],
            limit=views.DLQ_LIMIT,
        )

    def queues(self, request: Request) -> Response:
        return self.page(
            request, "queues.html", queues=views.queues_view(self.store), shown=fairness.SHOWN
        )

    def schedules(self, request: Request) -> Response:
        now = self.store.clock()
        rows = views.schedules_view(self.store, now)
        return self.page(request, "schedules.html", schedules=rows)

    def login(self, request: Request) -> Response:
        if self.guard.token is None:
            return self.error(request, 404, "this dashboard has no token to sign in with")
        return self.page(request, "login.html")

    # -- actions -----------------------------------------------------------------------
    # Async to read their forms; the store's (blocking) calls go to the thread pool, as
    # the pages' do, so a slow database never stalls the event loop serving other pages.
    async def _form(self, request: Request) -> FormData:
        """An action's form, once the guard let it through (else `Refused`)."""
        form = await request.form()
        self.guard.check_action(request, _text(form.get(CSRF_FIELD)))
        return form

    async def cancel(self, request: Request) -> Response:
        await self._form(request)
        ref = _typed(request.path_params["job_id"], "a job id")
        job_id = await run_in_threadpool(self.store.resolve_job_id, ref)
        result = await run_in_threadpool(self.store.cancel_job, job_id, by=_requester(request))
        self._audit(request, "cancel", [job_id], result=result.value)
        notice = {
            CancelResult.CANCELLED: "cancelled",
            CancelResult.CANCEL_REQUESTED: "cancel_requested",
        }.get(result, "already_finished")
        return _back(request, _job_path(job_id), notice)

    async def replay(self, request: Request) -> Response:
        form = await self._form(request)
        one = _text(form.get("one"))  # a row's own button: that job alone
        chosen = [one] if one else [v for v in form.getlist("job_id") if isinstance(v, str) and v]
        if not chosen:
            raise Refused(400, "tick the dead jobs to replay first")
        chosen = [_typed(job_id, "a job id") for job_id in chosen]
        replayed = await run_in_threadpool(self.store.replay_dead, list(dict.fromkeys(chosen)))
        self._audit(request, "replay", replayed)
        return _back(request, "/dlq", "replayed" if replayed else "nothing_replayed", replayed)

    async def purge(self, request: Request) -> Response:
        form = await self._form(request)
        older = form.get("older_than")
        older_than = _float(older) if isinstance(older, str) and older.strip() else None
        purged = await run_in_threadpool(self.store.purge_dead_ids, older_than=older_than)
        self._audit(request, "purge", purged)
        return _back(request, "/dlq", "purged", purged)

    async def control(self, request: Request) -> Response:
        """Pause, resume or scale a queue (`heartq queues`), as the form's path says."""
        form = await self._form(request)
        queue = _typed(request.path_params["queue"], "a queue name")
        action = request.url.path.rsplit("/", 1)[-1]
        change: dict[str, Any] = {"paused": None, "scale": False, "concurrency": None}
        if action in ("pause", "resume"):
            change["paused"] = action == "pause"
        else:
            typed = (_text(form.get("concurrency")) or "").strip()
            change.update(scale=True, concurrency=_cap(typed))
        try:
            control = await run_in_threadpool(
                lambda: self.store.set_queue_control(queue, by=_requester(request), **change)
            )
        except ConfigError as exc:
            raise Refused(400, str(exc)) from None
        self._audit(
            request, action, [], queue=queue, paused=control.paused, concurrency=control.concurrency
        )
        return _back(
            request, "/queues", {"pause": "paused", "resume": "resumed"}.get(action, "scaled")
        )

    async def add_schedule(self, request: Request) -> Response:
        """Store a runtime schedule (`heartq periodic add`) from the form."""
        form = await self._form(request)
        field = {k: (_text(form.get(k)) or "").strip() for k in ("name", "task", "when", "args")}
        queue = (_text(form.get("queue")) or "").strip() or None
        try:
            args = json.loads(field["args"]) if field["args"] else None
        except ValueError as exc:
            raise Refused(400, f"args: not JSON: {exc}") from None
        when = field["when"]
        spec: dict[str, Any] = {"cron": when} if not _number(when) else {"every": float(when)}
        try:
            schedule = runtime_schedules.build(
                field["name"], field["task"], args=args, queue=queue, **spec
            )
            replace = form.get("replace") is not None
            await run_in_threadpool(
                lambda: runtime_schedules.add(
                    self.store, schedule, replace=replace, by=_requester(request)
                )
            )
        except ConfigError as exc:
            raise Refused(400, str(exc)) from None
        self._audit(request, "schedule_add", [], schedule=schedule.name, spec=schedule.spec)
        return _back(request, "/schedules", "schedule_added")

    async def change_schedule(self, request: Request) -> Response:
        """Pause, resume or remove a schedule, as the form's path says."""
        await self._form(request)
        name = _typed(request.path_params["name"], "a schedule name")
        action = request.url.path.rsplit("/", 1)[-1]
        by = _requester(request)

        def change() -> bool:
            if action == "remove":
                return self.store.remove_schedule(name)
            return self.store.pause_schedule(name, action == "pause", by)

        try:
            done = await run_in_threadpool(change)
        except ConfigError as exc:
            raise Refused(400, str(exc)) from None
        if not done:
            raise Refused(404, f"no schedule named {name!r}")
        self._audit(request, f"schedule_{action}", [], schedule=name)
        notice = {"remove": "schedule_removed", "pause": "schedule_paused"}
        return _back(request, "/schedules", notice.get(action, "schedule_resumed"))

    async def sign_in(self, request: Request) -> Response:
        form = await request.form()
        self.guard.check_sign_in(request, _text(form.get(CSRF_FIELD)))
        if not self.guard.token_matches(_text(form.get("token")) or ""):
            self._audit(request, "sign_in_refused", [])
            raise Refused(403, "wrong token")
        response = _back(request, "/", "signed_in")
        response.set_cookie(
            SESSION_COOKIE,
            self.guard.session_value(),
            httponly=True,
            samesite="strict",
            path=_cookie_path(request),
        )
        return response

    async def sign_out(self, request: Request) -> Response:
        # a form like any other: another site may not sign this browser out either
        form = await request.form()
        self.guard.check_sign_in(request, _text(form.get(CSRF_FIELD)))
        response = _back(request, "/", "signed_out")
        response.delete_cookie(SESSION_COOKIE, path=_cookie_path(request))
        return response

    def _audit(self, request: Request, action: str, job_ids: list[str], **fields: Any) -> None:
        """Tell an action taken here (or refused) as `dashboard_action`."""
        self.events.emit(
            events.DASHBOARD_ACTION,
            logging.WARNING if action.endswith("refused") else logging.INFO,
            action=action,
            job_ids=job_ids,
            client=request.client.host if request.client else None,
            **fields,
        )

    # -- errors ------------------------------------------------------------------------
    async def on_refused(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, Refused)
        return self.error(request, exc.status, exc.message)

    async def on_store_error(self, request: Request, exc: Exception) -> Response:
        if isinstance(exc, JobNotFound | AmbiguousJobId):
            return self.error(request, 404, str(exc))
        if isinstance(exc, PayloadError):  # what was asked cannot be (a page's start)
            return self.error(request, 400, redact_text(str(exc)))
        status = 503 if isinstance(exc, StoreUnavailable) else 500
        return self.error(request, status, redact_text(f"the queue's database: {exc}"))


def create_app(
    url: str | Store | None = None,
    *,
    allow_actions: bool = False,
    token: str | None = None,
    refresh: float = DEFAULT_REFRESH,
    events: EventStream | None = None,
) -> Starlette:
    """The dashboard as an ASGI app, to serve with `heartq dashboard` or to mount in an
    application's own server (`Mount("/heartq", create_app(url))`).

    `url`: the queue (else `HEARTQ_URL`, else `sqlite:///heartq.db`), or a `Store`.
    Read-only unless `allow_actions` or a `token` (that action requests must carry).
    `events`: where its actions are told (`dashboard_action`): an app's stream
    (`app.events`), else one of its own, which logs them."""
    if refresh <= 0:
        raise ValueError(f"refresh must be a positive number of seconds, got {refresh!r}")
    store = url if isinstance(url, Store) else open_store(resolve_url(url))
    store.link.migrate()
    board = Dashboard(
        store,
        Guard(allow_actions=allow_actions, token=token or None),
        refresh,
        events if events is not None else EventStream(),
    )
    static = resources.files("heartq.dashboard").joinpath("static")
    routes = [
        Route("/", board.overview, name="overview"),
        Route("/jobs", board.jobs, name="jobs"),
        # `path`: an id a caller chose may hold a `/` (its links keep it, or send `%2F`)
        Route("/jobs/{job_id:path}", board.job, name="job"),
        Route("/jobs/{job_id:path}/cancel", board.cancel, methods=["POST"], name="cancel"),
        Route("/workers", board.workers, name="workers"),
        Route("/dlq", board.dlq, name="dlq"),
        Route("/dlq/replay", board.replay, methods=["POST"], name="replay"),
        Route("/dlq/purge", board.purge, methods=["POST"], name="purge"),
        Route("/queues", board.queues, name="queues"),
        *(
            Route(f"/queues/{{queue:path}}/{action}", board.control, methods=["POST"])
            for action in ("pause", "resume", "scale")
        ),
        Route("/schedules", board.schedules, name="schedules"),
        Route("/schedules/add", board.add_schedule, methods=["POST"]),
        *(
            Route(f"/schedules/{{name:path}}/{action}", board.change_schedule, methods=["POST"])
            for action in ("pause", "resume", "remove")
        ),
        Route("/login", board.login, name="login"),
        Route("/login", board.sign_in, methods=["POST"], name="sign_in"),
        Route("/logout", board.sign_out, methods=["POST"], name="sign_out"),
        Mount("/static", StaticFiles(directory=str(static)), name="static"),
    ]
    handlers: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
        Refused: board.on_refused,
        HeartqError: board.on_store_error,
    }
    app = Starlette(routes=routes, exception_handlers=handlers)
    app.state.store = store
    return app


def _base(request: Request) -> str:
    return str(request.scope.get("root_path", ""))


def _job_path(job_id: str) -> str:
    """A job's page, its id quoted whole: an id may hold `/`, `?`, `#` or `%`."""
    return f"/jobs/{quote(job_id, safe='')}"


def _cookie_path(request: Request) -> str:
    return _base(request) or "/"


def _back(request: Request, path: str, notice: str, done: list[str] | None = None) -> Response:
    """After an action: to the page it came from, saying what happened (303, so a reload
    does not post again)."""
    query = {"notice": notice, **({"n": str(len(done))} if done is not None else {})}
    return RedirectResponse(f"{_base(request)}{path}?{urlencode(query)}", status_code=303)


def _requester(request: Request) -> str:
    client = request.client.host if request.client else "unknown"
    return ids.requester(f"heartq dashboard (from {client})")


def _text(value: object) -> str | None:
    """A form field's text (None for a missing field or an uploaded file)."""
    return value if isinstance(value, str) else None


def _int(value: str | None) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 0


def _typed(value: str, what: str) -> str:
    """Text from the address or a form, as the store may be asked about it: no name or
    id holds NUL, and PostgreSQL refuses one in any text (a 400, not a database error)."""
    if "\x00" in value:
        raise Refused(400, f"{what} cannot contain NUL characters")
    return value


def _cap(value: str) -> int | None:
    """A queue's cap as typed: blank or `none` lifts it; else a whole number, 0 or more
    (the store says what is wrong with a negative one)."""
    if value.lower() in ("", "none"):
        return None
    try:
        return int(value)
    except ValueError:
        raise Refused(400, f"jobs at once: {value!r} is not a whole number") from None


def _number(value: str) -> bool:
    """Whether a schedule's `when` as typed is seconds (`every`) rather than a cron."""
    try:
        float(value)
    except ValueError:
        return False
    return True


def _float(value: str) -> float:
    """The purge's age as typed: a duration as every other (`payload.duration_problem`:
    finite, at most ten years), 0 or more."""
    try:
        seconds = float(value)
    except ValueError:
        raise Refused(400, f"older than: {value!r} is not a number of seconds") from None
    problem = payload.duration_problem(seconds)
    if problem is not None:
        raise Refused(400, f"older than: {problem}, got {value.strip()!r}")
    if seconds < 0:
        raise Refused(400, "older than: a number of seconds, 0 or more")
    return seconds
