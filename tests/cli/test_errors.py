"""Exit status and error messages: 0 done, 1 one clear line on stderr, 2 a usage error."""

from __future__ import annotations

import pytest

from heartq.cli.main import cli
from heartq.config import env_variables
from tests.cli.conftest import without_the_queue
from tests.cli.helpers import HeartqCli, leaf_commands
from tests.conftest import LAYER_BACKENDS, on_every_backend

COMMANDS = [
    ["migrate"],
    ["enqueue", "ok"],
    ["jobs", "list"],
    ["jobs", "list", "--json"],
    ["jobs", "show", "some-id"],
    ["jobs", "cancel", "some-id"],
    ["workers", "--all"],
    ["dlq", "list"],
    ["dlq", "replay", "--all"],
    ["dlq", "purge"],
    ["reclaim"],
    ["stats", "--json"],
    ["periodic"],
    ["worker", "tasks:app", "--burst"],
]
"""One invocation of every command that opens the queue."""

READ_COMMANDS = {
    "jobs list", "jobs show", "workers", "dlq list", "reclaim", "stats", "migrate", "periodic",
}  # fmt: skip


def test_every_command_takes_url_and_every_read_command_json() -> None:
    commands = leaf_commands(cli)
    interface = {"migrate", "worker", "enqueue", "jobs list", "jobs show", "jobs cancel",
                 "workers", "dlq list", "dlq replay", "dlq purge", "reclaim", "stats"}  # fmt: skip
    assert interface <= set(commands)
    for name, command in commands.items():
        options = {opt for param in command.params for opt in param.opts}
        assert "--url" in options, name
        if name in READ_COMMANDS:
            assert "--json" in options, name


@without_the_queue
def test_unreachable_database(heartq: HeartqCli) -> None:
    url = "sqlite:////nonexistent/dir/x.db"
    for run in heartq.many(COMMANDS, url=url):
        run.fails(1)
        assert "cannot open SQLite database /nonexistent/dir/x.db" in run.err, run.explain()
        assert "directory /nonexistent/dir does not exist" in run.err
        assert run.out == ""


@without_the_queue
@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://admin:hunter2@db.example/q", "unsupported queue URL 'mysql://admin:***@db."),
        ("sqlite://relative.db", "bad SQLite URL"),
    ],
)
def test_bad_url(heartq: HeartqCli, url: str, message: str) -> None:
    some = [["enqueue", "ok"], ["jobs", "list", "--json"], ["worker", "tasks:app", "--burst"]]
    for run in heartq.many(some, url=url):
        run.fails(1)
        assert message in run.err, run.explain()
        assert "hunter2" not in run.err + run.out


def test_url_from_the_environment_then_the_default(heartq: HeartqCli) -> None:
    job_id = heartq.add("ok")
    from_env = heartq("jobs", "list", "--json", url=None, HEARTQ_URL=heartq.url)
    assert [job["id"] for job in from_env.json()] == [job_id]
    heartq("migrate", url=None).ok()  # the default: a file in the working dir
    assert (heartq.cwd / "heartq.db").exists()
    assert heartq("stats", "--json", url=None).json()["url"] == "sqlite:///heartq.db"


@without_the_queue  # (the queue is only looked at, by the test, before and after)
def test_an_empty_url_is_an_error_not_the_environment_s_queue(heartq: HeartqCli) -> None:
    """`--url "$QUEUE"` with QUEUE unset: one line, exit 1, and nothing done to the queue
    `HEARTQ_URL` names (nor to the default one), before or after the command."""
    heartq.add("ok")
    before = heartq.json("jobs", "list")
    typed = [[*command, "--url", ""] for command in COMMANDS]
    typed += [["--url", " ", *command] for command in (["enqueue", "ok"], ["dlq", "purge"])]
    for run in heartq.many(typed, url=None, HEARTQ_URL=heartq.url):
        run.fails(1)
        assert "--url is empty: give a queue URL" in run.err, run.explain()
    assert heartq.json("jobs", "list") == before
    assert not (heartq.cwd / "heartq.db").exists()


def test_an_error_shows_a_traceback_only_with_debug(heartq: HeartqCli) -> None:
    quiet, loud = heartq.many([["jobs", "show", "x"], ["--debug", "jobs", "show", "x"]])
    quiet.fails(1)
    assert loud.code == 1 and "Traceback" in loud.err and "JobNotFound" in loud.err


def test_app_that_cannot_be_loaded(heartq: HeartqCli) -> None:
    (heartq.cwd / "broken.py").write_text('raise RuntimeError("kaput at import")\n')
    (heartq.cwd / "notapp.py").write_text("app = 3\n")
    cases = {
        "nosuchmodule:app": "cannot import APP 'nosuchmodule:app': module 'nosuchmodule' "
        "failed to import: ModuleNotFoundError: No module named 'nosuchmodule'",
        "tasks:nothing": "cannot load APP 'tasks:nothing': module 'tasks' has no attribute "
        "'nothing'",
        "broken": "cannot import APP 'broken': module 'broken' failed to import: "
        "RuntimeError: kaput at import",
        "notapp:app": "notapp.app is a int, not a heartq.App",
        ":app": "bad APP ':app'",
    }
    runs = heartq.many([["worker", ref, "--burst"] for ref in cases])
    for run, message in zip(runs, cases.values(), strict=True):
        run.fails(1)
        assert message in run.err, run.explain()
    heartq("worker", "tasks", "--burst").ok()  # a module alone means its `app`


def test_a_bad_setting_in_the_environment_is_one_line_not_a_traceback(heartq: HeartqCli) -> None:
    """`HEARTQ_LEASE=abc` is refused by the commands that use the settings, in one line;
    the others work (importing the command line must not read the settings)."""
    heartq("workers", HEARTQ_LEASE="abc").ok()
    run = heartq("reclaim", HEARTQ_LEASE="abc").fails(1)
    assert "HEARTQ_LEASE must be a number of seconds" in run.err, run.err
    run = heartq("worker", "tasks:app", "--burst", HEARTQ_LEASE="abc").fails(1)
    assert "HEARTQ_LEASE must be a number of seconds" in run.err, run.err


@on_every_backend  # PostgreSQL reads one variable more
def test_a_bad_variable_is_named_by_the_worker_whichever_it_is(
    heartq: HeartqCli, backend: str
) -> None:
    """`HEARTQ_LEASE=-3 heartq worker ...`: one line naming the variable (not click's
    "Invalid value for '--lease'", an option nobody typed), for every variable a worker
    reads; typed as an option, the same value is the option's usage error. The app's
    module imports fine up to its `heartq.App()`, which refuses the variable: said as it
    is, with the line that met it, not blamed on the import (`cannot import APP ...:
    module 'tasks' failed to import: ConfigError: ...`). Every variable on the run's first
    backend; on another, what only it reads, and HEARTQ_LEASE (whose line is checked whole):
    the settings are read the same whatever the URL (a worker each, 0.3-0.7 s)."""
    variables = [*env_variables().values(), "HEARTQ_STARTUP_TIMEOUT", "HEARTQ_TRANSPORT"]
    if backend != LAYER_BACKENDS[0]:
        variables = ["HEARTQ_LEASE"]
    if heartq.url.startswith("postgresql"):
        variables.append("HEARTQ_POOL_SIZE")  # read for PostgreSQL only
    worker = ["worker", "tasks:app", "--burst"]
    runs = [heartq(*worker, **{variable: "-3"}) for variable in variables]
    for variable, run in zip(variables, runs, strict=True):
        run.fails(1)
        assert variable in run.err, run.explain()
        assert "Invalid value" not in run.err and "'-3'" in run.err, run.explain()
        assert "cannot import APP" not in run.err and "failed to import" not in run.err
    lease = runs[variables.index("HEARTQ_LEASE")].err.strip()
    assert lease == (
        "heartq: error: HEARTQ_LEASE must be a positive number of seconds, got '-3' (raised "
        "by tasks.py, line 10, while importing APP 'tasks:app')"
    )
    typed = heartq(*worker, "--lease", "-3").fails(2)
    assert "Invalid value for '--lease'" in typed.err, typed.explain()


@without_the_queue
def test_an_empty_queue_name_in_queues_is_a_usage_error(heartq: HeartqCli) -> None:
    """`--queues ''` (a variable that expanded to nothing), `a,,b`, a trailing comma: not
    the app's queues instead, one line naming the option; nothing runs."""
    heartq.add("ok")  # a worker let through would run it
    typed = ["", "default,,cpu", "default,", " , "]
    runs = heartq.many([["worker", "tasks:app", "--burst", "--queues", t] for t in typed])
    for value, run in zip(typed, runs, strict=True):
        run.fails(2)
        errors = [line for line in run.err.splitlines() if line.startswith("Error:")]
        assert errors == [
            f"Error: Invalid value for '--queues': {value!r} holds an empty queue name: give "
            "queue names separated by commas, like default,emails"
        ], run.explain()
    assert [job["status"] for job in heartq.json("jobs", "list")] == ["queued"]
    heartq("worker", "tasks:app", "--burst", "--queues", " default , cpu ").ok()
    assert [job["status"] for job in heartq.json("jobs", "list")] == ["succeeded"]


def test_an_on_conflict_the_api_refuses_is_a_usage_error(heartq: HeartqCli) -> None:
    """`--on-conflict explode`, `RAISE` or `''` is refused as `on_conflict=` is by the
    Python API (exit 2, one line, nothing stored), never taken for `return`; the words
    are `heartq.options.OPTIONS`' choices, as written."""
    first = heartq.enqueue("ok", "--unique-key", "k")
    typed = ["explode", "RAISE", ""]
    enqueue = ["enqueue", "ok", "--unique-key", "k", "--on-conflict"]
    runs = heartq.many([[*enqueue, t] for t in typed])
    for value, run in zip(typed, runs, strict=True):
        run.fails(2)
        errors = [line for line in run.err.splitlines() if line.startswith("Error:")]
        assert errors == [
            f"Error: Invalid value for '--on-conflict': {value!r} is not one of 'return', "
            "'raise'."
        ], run.explain()
        assert run.out == "", run.explain()
    assert [job["id"] for job in heartq.json("jobs", "list")] == [first]
    assert heartq(*enqueue, "return").ok().out.strip() == first


def test_an_empty_id_in_depends_on_is_a_usage_error(heartq: HeartqCli) -> None:
    """`--depends-on ID,` (a trailing comma), `a,,b`, `''`: refused as `--queues` refuses
    an empty name (`comma_separated`, one rule for both), not read as fewer ids."""
    first = heartq.add("ok")
    typed = [f"{first},", f"{first},,{first}", "", " , "]
    runs = heartq.many([["enqueue", "ok", "--depends-on", t] for t in typed])
    for value, run in zip(typed, runs, strict=True):
        run.fails(2)
        errors = [line for line in run.err.splitlines() if line.startswith("Error:")]
        assert errors == [
            f"Error: Invalid value for '--depends-on': {value!r} holds an empty job id: give "
            "job ids separated by commas, like 04206418,7c2a91e0"
        ], run.explain()
    assert [job["id"] for job in heartq.json("jobs", "list")] == [first]
    then = heartq.enqueue("ok", "--depends-on", f" {first[-8:]} ")
    assert [d["id"] for d in heartq.job(then)["depends_on"]] == [first]


@on_every_backend  # past the bound: an OverflowError on SQLite, a database error on PostgreSQL
def test_an_integer_past_what_the_database_holds_is_a_usage_error(heartq: HeartqCli) -> None:
    """Every integer option reads one bound, the 32-bit range every integer heartq hands
    the database lies in (`payload.check_int`, `heartq.cli.common.Count`): past it, a
    usage error in one line naming the option, on every backend alike, nothing run or
    stored; not `unexpected error: OverflowError` on SQLite and `integer out of range`
    from PostgreSQL, nor a worker started with a concurrency no database can count."""
    heartq.add("ok")
    huge = "99999999999999999999"
    typed = [
        (["jobs", "list", "--limit", huge], "--limit", "1<=x<=2147483647"),
        (["dlq", "list", "--limit", huge], "--limit", "1<=x<=2147483647"),
        (["worker", "tasks:app", "--burst", "--concurrency", "99999999999"], "--concurrency",
         "1<=x<=2147483647"),
        (["worker", "tasks:app", "--burst", "--prefetch", "99999999999"], "--prefetch",
         "0<=x<=2147483647"),
        (["enqueue", "ok", "--priority", str(2**40)], "--priority",
         "-2147483648<=x<=2147483647"),
        (["enqueue", "ok", "--max-retries", str(2**31)], "--max-retries", "0<=x<=2147483647"),
        (["enqueue", "ok", "--concurrency-key", "k", "--concurrency-limit", str(2**31)],
         "--concurrency-limit", "1<=x<=2147483647"),
    ]  # fmt: skip
    runs = heartq.many([args for args, _, _ in typed])
    for (_args, option, bound), run in zip(typed, runs, strict=True):
        run.fails(2)
        errors = [line for line in run.err.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1 and errors[0].startswith(f"Error: Invalid value for '{option}': ")
        assert errors[0].endswith(f" is not in the range {bound}."), run.explain()
    assert [job["status"] for job in heartq.json("jobs", "list", "--limit", "2147483647")] == [
        "queued"
    ]


def test_a_worker_s_counts_past_what_the_database_holds_are_refused() -> None:
    """The API reads the same bound: `Worker(concurrency=...)`, `prefetch` from the
    argument or `HEARTQ_PREFETCH`, `reclaim_batch`."""
    import heartq
    from heartq.worker import Worker

    app = heartq.App("sqlite:///never-opened.db")
    with pytest.raises(heartq.ConfigError, match="concurrency must be between 1 and 2147483647"):
        Worker(app, concurrency=2**40)
    with pytest.raises(heartq.ConfigError, match="prefetch must be between 0 and 2147483647"):
        heartq.App(prefetch=2**40)
    with pytest.raises(heartq.ConfigError, match="reclaim_batch must be between 1 and 2147483647"):
        heartq.App(reclaim_batch=2**31)
