"""A SQLite queue whose file may be read but not written (`chmod 0444`, a read-only mount
of a copy): the commands that only look read it; one that must write says so in one line,
and never that it "retries by itself" (a one-shot command does not; a worker does).

The commands run as `python -m heartq` without the capabilities that let root ignore
file modes (`tests.support.without_dac_override`), so the mode holds for them.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.cli.helpers import COMMAND_TIMEOUT, HeartqCli, clean_env
from tests.conftest import only_on
from tests.support import without_dac_override

READS = [
    ["jobs", "list"],
    ["jobs", "list", "--json"],
    ["stats"],
    ["workers", "--all"],
    ["tasks"],
    ["dlq", "list"],
    ["periodic"],
]
"""Every command that only reads but `jobs show` (run with the job's id) and `jobs watch`
(which waits for an end no one can write; it opens the queue as `jobs show` does)."""


def _run_read_only(heartq: HeartqCli, commands: list[list[str]]) -> list[tuple[int, str, str]]:
    """Each command at once, as a process that file modes hold for."""
    unprivileged = without_dac_override()
    procs = [
        subprocess.Popen(
            [*unprivileged, *heartq.argv(args, heartq.url)],
            cwd=heartq.cwd,
            env=clean_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for args in commands
    ]
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=COMMAND_TIMEOUT)
        done.append((proc.returncode, out, err))
    return done


@only_on("sqlite")
def test_a_read_only_file_is_read_by_the_commands_that_only_look(heartq: HeartqCli) -> None:
    job_id = heartq.add("ok")
    heartq.close()  # its last connection gone, the file alone holds every commit
    path = Path(heartq.url.removeprefix("sqlite:///"))
    path.chmod(0o444)
    try:
        reads = [*READS, ["jobs", "show", job_id]]
        writes = [["jobs", "cancel", job_id], ["dlq", "purge", "--yes"]]
        runs = _run_read_only(heartq, [*reads, *writes])
        for args, (code, out, err) in zip(reads, runs, strict=False):
            assert code == 0 and err == "", (args, code, out, err)
        assert job_id in runs[0][1] and job_id in runs[-len(writes) - 1][1]
        refused = (
            f"heartq: error: SQLite database {path} is read-only: nothing can be written "
            "until the file (and its directory) is writable again (a worker waits, and "
            "resumes by itself)\n"
        )
        for args, (code, out, err) in zip(writes, runs[len(reads) :], strict=True):
            assert (code, err) == (1, refused), (args, code, out, err)
        siblings = sorted(p.name for p in path.parent.iterdir() if p.name.startswith(path.name))
        assert siblings == [path.name]  # no -shm made, read-only, that a writer could not use
    finally:
        path.chmod(0o644)
    assert heartq.job(job_id)["status"] == "queued"  # nothing was written
    heartq.burst()  # writable again: a worker takes it, as if nothing happened
    assert heartq.job(job_id)["status"] == "succeeded"
