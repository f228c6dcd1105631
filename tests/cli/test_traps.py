"""Two traps for teams coming from BullMQ, Oban or Celery on Redis, said where the options
are typed (`--help`): `max_retries` counts retries after the first attempt, and a higher
priority runs first."""

from __future__ import annotations

from click.testing import CliRunner

from heartq.cli.main import cli


def _help(*command: str) -> str:
    result = CliRunner().invoke(cli, [*command, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def test_enqueue_help_says_how_retries_count_and_which_priority_runs_first() -> None:
    said = _help("enqueue")
    assert (
        "--max-retries N Retries after the first attempt: 3 means 4 attempts in all "
        "(BullMQ's attempts and Oban's max_attempts count the first: give theirs minus one)"
    ) in said
    assert (
        "--priority INTEGER RANGE Higher runs first: the reverse of BullMQ, Oban and Celery "
        "on Redis, where lower does (negate theirs: their 1 is -1 here) [0]."
    ) in said


def test_tasks_help_reads_its_columns_the_same_way() -> None:
    said = _help("tasks")
    assert "PRIO: higher runs first (the reverse of BullMQ, Oban and Celery on Redis)" in said
    assert "RETRIES: retries after the first attempt, so 3 is 4 attempts" in said
