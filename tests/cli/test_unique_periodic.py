"""`heartq enqueue --unique-key/--unique-for`, `--concurrency-key/--concurrency-limit` and
`--rate-key/--rate-limit`, what `heartq jobs show`, `heartq stats` and `heartq tasks` say
of them, and `heartq periodic`."""

from __future__ import annotations

from collections.abc import Sequence

from heartq.model import NewJob, TaskPolicy
from heartq.periodic import Schedule
from heartq.store import Store
from tests.cli.helpers import HeartqCli


def test_enqueue_with_a_unique_key_answers_the_live_job(heartq: HeartqCli) -> None:
    first = heartq.enqueue("ok", "--unique-key", "nightly:7")
    assert heartq.enqueue("ok", "--unique-key", "nightly:7", "--unique-for", "60") == first
    assert heartq.enqueue("ok", "--unique-key", "nightly:8") != first
    job = heartq.json("jobs", "show", first)
    assert job["unique_key"] == "nightly:7"
    assert job["schedule"] is None
    shown = heartq("jobs", "show", first).ok().out
    assert "unique key" in shown and "nightly:7" in shown


def test_enqueue_says_when_a_job_already_holds_the_key(heartq: HeartqCli) -> None:
    """The holder's id on stdout as before, and a line on stderr saying nothing was
    stored; `--json` says `existing`; `--on-conflict raise` is an error (exit 1)."""
    first = heartq.enqueue("ok", "--unique-key", "nightly:9")
    again = heartq("enqueue", "ok", "--unique-key", "nightly:9").ok()
    assert again.out.strip() == first
    assert again.err.strip() == (
        f"heartq: job {first} already holds unique key 'nightly:9': nothing stored"
    )
    assert heartq.json("enqueue", "ok", "--unique-key", "nightly:9") == {
        "id": first,
        "existing": True,
    }
    fresh = heartq.json("enqueue", "ok", "--unique-key", "nightly:10")
    assert fresh["existing"] is False and fresh["id"] != first
    refused = heartq("enqueue", "ok", "--unique-key", "nightly:9", "--on-conflict", "raise")
    run = refused.fails(1)
    assert run.err.strip() == (
        f"heartq: error: job {first} already holds unique key 'nightly:9': nothing stored"
    )


def test_enqueue_unique_keys_the_job_by_its_arguments(heartq: HeartqCli) -> None:
    first = heartq.enqueue("ok", "--unique", "--args", '{"value": {"b": 1, "a": [2]}}')
    again = heartq("enqueue", "ok", "--unique", "--args", '{"value": {"a": [2], "b": 1}}').ok()
    assert again.out.strip() == first
    assert again.err.strip().startswith(f"heartq: job {first} already holds unique key 'args:ok:")
    assert heartq.enqueue("ok", "--unique", "--args", '{"value": 3}') != first
    assert heartq.enqueue("ok", "--args", '{"value": {"a": [2], "b": 1}}') != first  # unkeyed
    run = heartq("enqueue", "ok", "--unique", "--unique-key", "k").fails(1)
    assert "give unique=True (a key from the task and its arguments) or a unique_key" in run.err


def test_unique_for_without_a_key_is_refused_in_one_line(heartq: HeartqCli) -> None:
    run = heartq("enqueue", "ok", "--unique-for", "5").fails(1)
    assert "unique_for needs a unique_key" in run.err


def test_periodic_lists_schedules_with_last_and_next_run(
    heartq: HeartqCli, store: Store
) -> None:
    assert "no periodic schedule yet" in heartq("periodic").ok().out
    assert heartq.json("periodic") == []
    schedule = Schedule(name="nightly", task="ok", every=3600)
    now = store.clock()
    base = now - now % 3600

    def make(ticks: Sequence[float]) -> list[NewJob]:
        return [
            NewJob("ok", "{}", unique_key=schedule.tick_key(t), unique_for=3600.0,
                   schedule=schedule.name)
            for t in ticks
        ]  # fmt: skip

    args = (schedule.name, schedule.task, schedule.spec, schedule.plan, make)
    store.tick_schedule(*args, by="w1", now=base - 10)  # first sight
    (job_id,) = store.tick_schedule(*args, by="w1", now=base + 1)
    (row,) = heartq.json("periodic")
    assert (row["name"], row["task"], row["spec"]) == ("nightly", "ok", "every 3600s")
    assert row["last_job_id"] == job_id and row["last_job_status"] == "queued"
    assert row["last_run"] < row["next_run"]
    out = heartq("periodic").ok().out
    assert "nightly" in out and "every 3600s" in out and job_id[-8:] in out
    shown = heartq("jobs", "show", job_id).ok().out
    assert "periodic schedule 'nightly'" in shown
    stats = heartq.json("stats")["periodic"]
    assert stats["schedules"] == 1 and stats["next_tick_in"] is not None
    assert "1 schedule, next tick in" in heartq("stats").ok().out


def test_periodic_says_never_for_a_schedule_that_has_not_run(
    heartq: HeartqCli, store: Store
) -> None:
    """A schedule first seen starts from its latest tick without running it: `LAST RUN`
    says `never` (it said `9.1s ago`), `--json` a null `last_run`."""
    schedule = Schedule(name="hourly", task="ok", every=3600)
    args = (schedule.name, schedule.task, schedule.spec, schedule.plan, lambda ticks: [])
    now = store.clock()
    assert store.tick_schedule(*args, by="w1", now=now - now % 3600 + 10) == []  # first sight
    (row,) = heartq.json("periodic")
    assert (row["last_run"], row["last_job_id"]) == (None, None) and row["next_run"]
    (line,) = [line for line in heartq("periodic").ok().out.splitlines() if "hourly" in line]
    assert line.split()[5:7] == ["never", "in"], line  # SCHEDULE TASK SPEC (2 words) FROM LAST


def test_enqueue_with_a_concurrency_key_and_stats(heartq: HeartqCli) -> None:
    options = ("--concurrency-key", "tenant:7", "--concurrency-limit", "2")
    ids = [heartq.enqueue("ok", *options) for _ in range(3)]
    job = heartq.json("jobs", "show", ids[0])
    assert (job["concurrency_key"], job["concurrency_limit"]) == ("tenant:7", 2)
    concurrency = heartq.json("stats")["concurrency"]
    assert concurrency["keys"] == 1 and concurrency["queued"] == 3
    assert concurrency["busiest"] == [{"key": "tenant:7", "running": 0, "queued": 3, "limit": 2}]
    text = heartq("stats").ok().out
    assert "1 key with live jobs, 0 at their limit, 3 keyed jobs waiting" in text
    run = heartq("enqueue", "ok", "--concurrency-key", "tenant:7").fails(1)
    assert "concurrency" in run.err and "\n" not in run.err.strip()


def test_enqueue_with_a_rate_key_stats_and_tasks(heartq: HeartqCli) -> None:
    options = ("--rate-key", "api:7", "--rate-limit", "2/m")
    ids = [heartq.enqueue("ok", *options) for _ in range(3)]
    job = heartq.json("jobs", "show", ids[0])
    assert (job["rate_key"], job["rate_limit"]) == ("api:7", "2/m")
    assert "key 'api:7', at most 2/m starts" in heartq("jobs", "show", ids[0]).ok().out
    rates = heartq.json("stats")["rate_limits"]
    assert (rates["keys"], rates["at_limit"], rates["waiting"]) == (1, 0, 3)
    assert rates["busiest"] == [
        {"key": "api:7", "limit": "2/m", "count": 2, "period": 60.0, "started": 0,
         "next_start_in": None, "waiting": 3, "queued": 3, "running": 0}
    ]  # fmt: skip
    text = heartq("stats").ok().out
    assert "1 key with live jobs, 0 at their limit, 3 due jobs waiting" in text
    assert "(busiest: api:7 2/m: 0 started)" in text
    for bad, why in ((("--rate-limit", "2/m"), "needs a rate_key"),
                     (("--rate-key", "k", "--rate-limit", "2 a minute"), "N/PERIOD"),
                     (("--rate-key", "k", "--rate-limit", "5/ s"), "'5/ s' is not N/PERIOD"),
                     (("--rate-key", "k"), "declares none")):  # fmt: skip
        run = heartq("enqueue", "ok", *bad).fails(1)
        assert why in run.err and "\n" not in run.err.strip(), run.err


def test_an_enqueue_by_name_takes_the_declared_rate_limit(heartq: HeartqCli, store: Store) -> None:
    """The command line has no task code: the limit its workers declared applies, its key
    template filled from the job's arguments; `heartq tasks` shows it."""
    declared = TaskPolicy("metered", "default", 0, 3, 5.0, 3600.0, rate_limit="10/s",
                          rate_key="customer:{customer}")  # fmt: skip
    store.declare_tasks([declared], "w-test")
    job_id = heartq.enqueue("metered", "--args", '{"customer": "acme"}')
    job = heartq.json("jobs", "show", job_id)
    assert (job["rate_key"], job["rate_limit"]) == ("customer:acme", "10/s")
    assert "10/s per customer:{customer}" in heartq("tasks").ok().out
    (task,) = heartq.json("tasks")
    assert (task["rate_limit"], task["rate_key"]) == ("10/s", "customer:{customer}")
