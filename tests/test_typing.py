"""`Task.enqueue` is typed from the task's function (ParamSpec): a type checker catches a
misspelled, missing or mistyped argument, and an option passed as an argument, before
the code runs. Runs mypy (strict) on a small program, as a user's CI would."""

from __future__ import annotations

import textwrap
from pathlib import Path

from mypy import api

PROGRAM = textwrap.dedent(
    """
    from datetime import UTC, datetime

    import heartq

    app = heartq.App()


    @app.task(queue="cpu", max_retries=1)
    def crunch(ctx: heartq.JobContext, name: str, n: int = 1) -> int:
        return n


    @app.task
    async def fetch(url: str) -> str:
        return url


    crunch.enqueue(name="x")
    crunch.enqueue("x", 2)
    crunch.options(delay=5, priority=9).enqueue(name="x", n=3)
    crunch.options(eta=datetime.now(UTC)).enqueue("x")
    fetch.enqueue(url="https://example.org")
    crunch.enqueue(nmae="x")  # BAD 1
    crunch.enqueue()  # BAD 2
    crunch.enqueue(name=1)  # BAD 3
    crunch.enqueue(name="x", delay=5)  # BAD 4
    crunch.options(delay=5).enqueue(n="3", name="x")  # BAD 5
    fetch.enqueue(link="x")  # BAD 6
    """
)


def test_a_type_checker_catches_bad_enqueue_calls(tmp_path: Path) -> None:
    program = tmp_path / "producer.py"
    program.write_text(PROGRAM)
    out, err, _ = api.run(["--strict", "--no-incremental", "--cache-dir", "/dev/null",
                           str(program)])  # fmt: skip
    flagged = {int(line.split(":")[1]) for line in out.splitlines() if ": error:" in line}
    lines = PROGRAM.splitlines()
    bad = {i + 1 for i, line in enumerate(lines) if "# BAD" in line}
    assert flagged == bad, out + err
