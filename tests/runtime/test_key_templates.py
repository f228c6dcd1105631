"""Keys filled from a job's arguments (`rate_key`, `concurrency_key` templates): a job
whose template reads an argument that is None or absent has no key and is not held by
that limit (as BullMQ leaves a job without its group key); an argument whose value the
enqueuing program cannot know (a default in code it does not have) is refused, naming
the template and the argument; a template that reads no parameter of its task is refused
where the task is defined (docs/design/limits.md, "Keys from templates")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import heartq
from heartq.errors import ConfigError
from tests.support import wait_for

from .conftest import WorkerThread

# PostgreSQL takes a key's claim lock by the key's name alone (an advisory lock, which
# every schema of a database shares): one test process runs the files that claim keys.
pytestmark = pytest.mark.one_at_a_time("key-locks")


def _keys(app: heartq.App, job_id: str) -> tuple[Any, ...]:
    job = app.store.get_job(job_id)
    return job["rate_key"], job["rate_limit"], job["concurrency_key"], job["concurrency_limit"]


NO_KEYS = (None, None, None, None)


def test_none_or_absent_means_no_key(app: heartq.App) -> None:
    @app.task(
        rate_limit="1/m",
        rate_key="account:{account}",
        concurrency_key="account:{account}",
        concurrency_limit=1,
    )
    def send(to: str, account: str | None = None) -> None:
        """Limited per account; a message on no account is not held by either."""

    @app.task(rate_limit="1/m", rate_key="region:{region}")
    def hook(**fields: Any) -> None:
        """Limited per region, for the events that name one."""

    @app.task(rate_limit="1/m", rate_key="{site}:{lang}")
    def crawl(site: str, lang: str | None = None) -> None:
        """Two arguments: None in either, no key."""

    assert _keys(app, send.enqueue("a@x")) == NO_KEYS  # the default, None
    assert _keys(app, send.enqueue("a@x", account=None)) == NO_KEYS
    assert _keys(app, send.enqueue("a@x", "acme")) == ("account:acme", "1/m", "account:acme", 1)
    mixed = send.enqueue_many([{"to": "a", "account": "b"}, {"to": "a"}])
    assert [_keys(app, i) for i in mixed] == [("account:b", "1/m", "account:b", 1), NO_KEYS]
    assert _keys(app, app.enqueue("send", {"to": "a"})) == NO_KEYS
    assert _keys(app, hook.enqueue(kind="push"))[:2] == (None, None)  # absent
    assert _keys(app, hook.enqueue(region="eu"))[:2] == ("region:eu", "1/m")
    assert _keys(app, crawl.enqueue("x"))[:2] == (None, None)
    assert _keys(app, crawl.enqueue("x", "fr"))[:2] == ("x:fr", "1/m")
    # the enqueue's own key still applies to every job
    chosen = send.options(rate_key="k").enqueue("a@x")
    assert _keys(app, chosen)[:2] == ("k", "1/m")


def test_a_template_reads_the_tasks_parameters(app: heartq.App) -> None:
    with pytest.raises(ConfigError) as caught:
        app.task(name="typo", rate_limit="1/s", rate_key="account:{acount}")(lambda account: None)
    assert str(caught.value) == (
        "typo: rate_key 'account:{acount}' reads 'acount', which is not a parameter of the "
        "task (it takes 'account')"
    )
    with pytest.raises(ConfigError, match=r"concurrency_key 't:\{ctx\}' reads 'ctx'"):
        app.task(name="ctx", concurrency_key="t:{ctx}", concurrency_limit=1)(lambda ctx, n: None)
    # a task taking **kwargs may be given any argument: its template is not checked
    app.task(name="open", rate_limit="1/s", rate_key="k:{anything}")(lambda **kw: None)


def test_an_enqueue_by_name_cannot_know_a_default_in_code(app: heartq.App) -> None:
    """A program without the task's code does not know a default's value: a job that
    leaves the template's argument to it is refused, naming both; given (None too), it
    is keyed as the task's own program would key it."""

    @app.task(rate_limit="2/s", rate_key="account:{account}")
    def send(to: str, account: str | None = None) -> None:
        """Limited per account."""

    @app.task(rate_limit="2/s", rate_key="region:{region}")
    def hook(**fields: Any) -> None:
        """Limited per region."""

    app.store.declare_tasks([send.policy, hook.policy], "w-test")
    producer = heartq.App(app.url)
    try:
        with pytest.raises(TypeError) as caught:
            producer.enqueue("send", {"to": "a"})
        assert str(caught.value) == (
            "send: rate_key 'account:{account}' reads the argument 'account', which this "
            "job leaves to the task's default; that default is in the task's code, which "
            "this program does not have: pass account= (None: no key)"
        )
        assert producer.store.list_jobs(limit=10) == []
        given = producer.enqueue("send", {"to": "a", "account": "acme"})
        assert _keys(producer, given)[:2] == ("account:acme", "2/s")
        assert _keys(producer, producer.enqueue("send", {"to": "a", "account": None})) == NO_KEYS
        assert _keys(producer, producer.enqueue("hook", {"kind": "push"})) == NO_KEYS
        assert _keys(producer, producer.enqueue("hook", {"region": "eu"}))[0] == "region:eu"
    finally:
        producer.close()


def test_jobs_without_a_key_run_beside_a_held_one(
    app: heartq.App, run_worker: Callable[..., WorkerThread]
) -> None:
    """One start a minute per account: the second job of account "acme" waits, and the
    jobs on no account all run meanwhile, none held by the limit or by each other."""

    @app.task(rate_limit="1/m", rate_key="account:{account}")
    def send(to: str, account: str | None = None) -> None:
        """Limited per account."""

    first, held = send.enqueue("a", "acme"), send.enqueue("b", "acme")
    free = send.enqueue_many([{"to": str(n)} for n in range(6)])
    with run_worker(app, concurrency=2):
        wait_for(
            lambda: all(app.get_job(i)["status"] == "succeeded" for i in [first, *free]),
            timeout=20,
            what="the first job of acme and the six on no account",
        )
        assert app.get_job(held)["status"] == "queued"
