"""Durations typed on the command line: every option that takes seconds reads them the
same way (`heartq.cli.common.Seconds`), so `nan`, `inf`, `1e400` (infinity to Python) or
an age of centuries is a usage error naming the option, in one line, never an unexpected
error or an age of "365000 days"."""

from __future__ import annotations

from tests.cli.conftest import without_the_queue
from tests.cli.helpers import HeartqCli, Run

FINITE = "must be a finite number of seconds"
TEN_YEARS = "must be at most 3.1536e+08 s (ten years)"


def refused(run: Run, option: str, why: str, typed: str) -> None:
    """Exit 2 (a usage error), no traceback, and one `Error:` line naming the option."""
    run.fails(2)
    errors = [line for line in run.err.splitlines() if line.startswith("Error:")]
    assert errors == [f"Error: Invalid value for '{option}': {why}, got {typed!r}."], run.explain()


@without_the_queue
def test_every_duration_option_refuses_what_is_no_duration(heartq: HeartqCli) -> None:
    missing = f"sqlite:///{heartq.cwd / 'none.db'}"  # a dashboard let through fails, not serves
    cases = [
        (["dlq", "purge", "--older-than", "nan", "-y"], "--older-than", FINITE, "nan"),
        (["dlq", "purge", "--older-than", "1e400", "-y"], "--older-than", FINITE, "1e400"),
        (["dlq", "purge", "--older-than", "1e9", "-y"], "--older-than", TEN_YEARS, "1e9"),
        (["jobs", "watch", "01234567", "--interval", "nan"], "--interval", FINITE, "nan"),
        (["reclaim", "--stale-after", "inf"], "--stale-after", FINITE, "inf"),
        (["dashboard", "--refresh", "nan", "--url", missing], "--refresh", FINITE, "nan"),
        (["worker", "tasks:app", "--lease", "1e400", "--burst"], "--lease", FINITE, "1e400"),
        (["enqueue", "ok", "--delay", "nan"], "--delay", FINITE, "nan"),
        (["enqueue", "ok", "--unique-key", "k", "--unique-for", "1e9"], "--unique-for",
         TEN_YEARS, "1e9"),
    ]  # fmt: skip
    runs = heartq.many([args for args, *_ in cases])
    for run, (_, option, why, typed) in zip(runs, cases, strict=True):
        refused(run, option, why, typed)


def test_dlq_purge_takes_ages_up_to_ten_years(heartq: HeartqCli) -> None:
    purged = heartq.json("dlq", "purge", "--older-than", "315360000", "-y")
    assert purged == {"purged": 0, "older_than": 315360000.0, "ids": []}
