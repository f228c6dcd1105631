"""The source of `tasks.py`, the app the integration tests' workers run
(`tasks:app`, `heartq.App()` without a URL: `--url` gives it), written into each test's
directory by the `Harness` (tests/integration/conftest.py). Tests that need more tasks
append their own source to it (test_periodic.py, test_timeouts.py).

Its tasks tell the test what happened through files in that directory (`mark`, e.g.
`started-<job>-<attempt>`) and do what their arguments say: hold, deadlock, crash a
child, kill their worker, report progress and checkpoints, write a ledger row in
`ctx.transaction()`, misbehave (`hostile`)."""

from __future__ import annotations

import textwrap

TASKS_SOURCE = textwrap.dedent(
    '''
    """The app the integration tests' workers run."""

    import asyncio
    import ctypes
    import json
    import logging
    import os
    import signal
    import sys
    import threading
    import time
    from pathlib import Path

    import heartq

    app = heartq.App()
    HERE = Path(__file__).resolve().parent


    def mark(name, text=""):
        """Tell the test something happened: a file in the test's directory, there only
        once its text is (written aside, then renamed: a test that waits for the file
        and reads it never reads it empty)."""
        path = HERE / name
        aside = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
        aside.write_text(text)
        os.replace(aside, path)


    def ident(ctx, **extra):
        return {
            "job_id": ctx.job_id,
            "execution_id": ctx.execution_id,
            "worker_id": ctx.worker_id,
            "attempt": ctx.attempt,
            "pid": os.getpid(),
            **extra,
        }


    def started(ctx):
        mark(f"started-{ctx.job_id}-{ctx.attempt}", str(os.getpid()))


    @app.task
    def quick(ctx, value=None):
        started(ctx)
        return ident(ctx, value=value)


    @app.task
    def hold_first(ctx, seconds=60.0):
        """Execution 1 holds for `seconds` (or until stopped); later ones return at once.
        (Not `attempt`: an interrupted attempt is not counted, so it runs as attempt 1
        again.)"""
        started(ctx)
        if ctx.execution_id == 1:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline and not ctx.cancelled:
                time.sleep(0.02)
        return ident(ctx)


    @app.task
    def collect(ctx, results, label=""):
        """A group's callback: records each run of it and what it received."""
        mark(f"collected-{ctx.job_id}-{ctx.execution_id}", json.dumps(results))
        return {"label": label, "results": results}


    @app.task
    def commit_then_return(ctx, value, linger=0.5):
        """Completes its job in its own transaction, then returns `value` a moment later:
        its result lands after the commit that released its dependents."""
        with ctx.transaction():
            pass
        time.sleep(linger)
        return value


    @app.task
    def commit_and_wait(ctx, value, hand=False, seconds=60.0):
        """Completes its job in its own transaction, handing it `value` as its result if
        `hand` (`ctx.commit_result`), tells the test (`committed-<job>-<execution>`), then
        waits `seconds` (for the test to kill its worker) or until the test says go
        (`go-<job>`) before it returns `value`."""
        with ctx.transaction():
            if hand:
                ctx.commit_result(value)
        mark(f"committed-{ctx.job_id}-{ctx.execution_id}", str(os.getpid()))
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not (HERE / f"go-{ctx.job_id}").exists():
            time.sleep(0.02)
        return value


    @app.task
    def hold(ctx, seconds=60.0):
        """Every attempt holds for `seconds` (or until stopped)."""
        started(ctx)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not ctx.cancelled:
            time.sleep(0.02)
        return ident(ctx)


    def stubborn(ctx, seconds=0.0, until=None):
        """Runs `seconds` ignoring ctx.cancelled (as code that cannot be stopped would),
        or, given `until`, until the test makes that file (`seconds` at most); records
        when its code began and ended (wall clock)."""
        mark(f"began-{ctx.job_id}", repr(time.time()))
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not (until and (HERE / until).exists()):
            time.sleep(0.02)
        mark(f"ended-{ctx.job_id}", repr(time.time()))
        return ident(ctx)


    app.task(name="stubborn")(stubborn)
    # timed out 1 s after its code began (in a process-pool child too, however long the
    # child took to start on a loaded machine)
    app.task(name="stubborn_timed", timeout=1.0)(stubborn)


    @app.task
    def crash_child_first(ctx, how="kill"):
        """Process pool: attempt 1 kills its own child process (SIGKILL or a segfault)."""
        started(ctx)
        if ctx.attempt == 1:
            if how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            else:
                ctypes.string_at(0)
        return ident(ctx)


    @app.task(heartbeat_timeout=0.5)
    def deadlock(ctx):
        """Never returns and never heartbeats."""
        started(ctx)
        threading.Event().wait()


    @app.task
    def kill_worker(ctx):
        """Thread pool: kills the worker process running it, on every attempt."""
        started(ctx)
        os.kill(os.getpid(), signal.SIGKILL)


    @app.task
    def heartbeat_loop(ctx, seconds=60.0):
        """Calls ctx.heartbeat() in a loop (a cancel raises heartq.Cancelled out of it)."""
        started(ctx)
        deadline = time.monotonic() + seconds
        step = 0
        while time.monotonic() < deadline:
            step += 1
            ctx.heartbeat(progress=min(step / 1000, 1.0), stage="looping")
            time.sleep(0.05)
        return ident(ctx)


    @app.task
    async def async_loop(ctx, seconds=60.0):
        started(ctx)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return ident(ctx)


    @app.task
    def checkpointed(ctx):
        """Attempt without a checkpoint saves one, then hangs until killed; a later
        attempt returns the checkpoint it was handed."""
        started(ctx)
        if ctx.checkpoint is None:
            ctx.heartbeat(checkpoint={"step": 3})
            mark(f"checkpointed-{ctx.job_id}", str(os.getpid()))
            while True:
                time.sleep(0.05)
        return ident(ctx, checkpoint=ctx.checkpoint)


    @app.task
    def reporting(ctx, steps=8, step_s=0.5, resumed_step_s=None):
        """Reports progress and a checkpoint every step, resuming from its checkpoint
        (its steps then take `resumed_step_s`, if given), and appends each report
        (execution, step, wall time) to `reports-<job>`."""
        started(ctx)
        first = (ctx.checkpoint or {}).get("step", 0)
        if first and resumed_step_s is not None:
            step_s = resumed_step_s
        with open(HERE / f"reports-{ctx.job_id}", "a") as log:
            log.write(f"start {ctx.execution_id} {first} {time.time()}\\n")
            for step in range(first + 1, steps + 1):
                time.sleep(step_s)
                ctx.heartbeat(progress=step / steps, stage=f"step {step}",
                              message=f"{step} of {steps}", checkpoint={"step": step})
                log.write(f"report {ctx.execution_id} {step} {time.time()}\\n")
                log.flush()
        return ident(ctx, resumed_from=first)


    @app.task
    def silent(seconds=60.0):
        """Never calls heartq (no ctx): only killing its process stops it early."""
        time.sleep(seconds)
        return "slept"


    @app.task
    def ledger_write(ctx, table, crash_first="", wait_first=False):
        """Writes one row (job, execution) into `table` in its ctx.transaction(). With
        `crash_first`, execution 1 dies inside the block, after its write and before the
        commit: "process" SIGKILLs the process that runs it. With `wait_first`,
        execution 1 waits for the file `go-<job>` before it opens the transaction."""
        started(ctx)
        while wait_first and ctx.execution_id == 1 and not (HERE / f"go-{ctx.job_id}").exists():
            time.sleep(0.02)
        with ctx.transaction() as conn:
            mark_ = "?" if type(conn).__module__.startswith("sqlite3") else "%s"
            conn.execute(
                f"INSERT INTO {table} VALUES ({mark_}, {mark_})", (ctx.job_id, ctx.execution_id)
            )
            if crash_first == "process" and ctx.execution_id == 1:
                mark(f"wrote-{ctx.job_id}-{ctx.execution_id}")
                os.kill(os.getpid(), signal.SIGKILL)
        return ident(ctx)


    @app.task
    def enqueue_in_transaction(ctx, priority):
        """Enqueues a `quick` job into the lane of `priority` (a new one: its lane is made
        on the way) inside its ctx.transaction(), and holds the block a moment, as tasks
        whose transactions overlap do."""
        with ctx.transaction() as conn:
            child = app.enqueue("quick", {"value": priority}, priority=priority, connection=conn)
            time.sleep(0.2)
        return child


    class Unprintable(Exception):
        def __str__(self):
            raise RuntimeError("no text")

        def __repr__(self):
            raise RuntimeError("no repr")


    def recurse(n):
        return recurse(n + 1) + 1


    @app.task(max_retries=0)
    def hostile(ctx, kind):
        """Does to the process that runs it what its `kind` says
        (tests/integration/test_hostile_processes.py)."""
        started(ctx)
        if kind == "keyboard_interrupt":
            raise KeyboardInterrupt
        if kind == "system_exit":
            sys.exit(3)
        if kind == "os_exit":
            os._exit(3)
        if kind == "unpicklable":  # what a child could never send its parent as is
            raise RuntimeError("holds a lock", threading.Lock())
        if kind == "generator_exit":
            raise GeneratorExit
        if kind == "cancelled_error":
            raise asyncio.CancelledError
        if kind == "unprintable":
            raise Unprintable
        if kind == "recursion":
            return recurse(0)
        if kind == "memory_error":
            raise MemoryError
        if kind == "unencodable":
            return object()
        if kind == "signal_handlers":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        elif kind == "close_stdio":
            for stream in (sys.stdout, sys.stderr):
                if stream is not None:  # another attempt may have replaced it with None
                    stream.close()
            # a library's warning with no handler of its own: logging's last resort
            logging.getLogger("hostile.library").warning("after stderr was closed")
        elif kind == "replace_stdio":
            sys.stdout = sys.stderr = None
        elif kind == "outliving_thread":
            threading.Thread(target=threading.Event().wait, daemon=False).start()
        elif kind == "fork":
            pid = os.fork()
            if pid == 0:
                return "the copy"  # not the attempt: it must never be reported
            os.waitpid(pid, 0)
        return kind
    '''
)
