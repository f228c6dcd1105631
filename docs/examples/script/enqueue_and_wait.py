"""Enqueue two jobs, wait for their results and print them.

Start a worker first, in this directory and on the same HEARTQ_URL:
`heartq worker tasks:app &`, then `python enqueue_and_wait.py`.
"""

from __future__ import annotations

import sys

import heartq

from tasks import add, app, count_words


def main() -> int:
    try:
        # Arguments are checked against the function's signature here: a wrong one
        # raises TypeError and nothing is stored.
        jobs = {
            "add(2, 3)": add.enqueue(2, 3),
            "count_words": count_words.enqueue(text="the quick brown fox jumps over the fox"),
        }
        for label, job_id in jobs.items():
            try:
                print(f"{label} = {app.result(job_id, timeout=60)}")
            except (heartq.JobDead, heartq.JobCancelled, heartq.ResultTimeout) as error:
                print(f"{label} failed: {error}", file=sys.stderr)
                return 1
        return 0
    finally:
        app.close()  # the script's connections; not needed at exit, but tidy


if __name__ == "__main__":
    sys.exit(main())
