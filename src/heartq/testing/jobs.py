"""Every job of a queue, read through the store's keyset pages (`Store.browse_jobs`).

A test's queue is small, but nothing here assumes it: the pages walk the primary key to
the oldest job, so a test that enqueued ten thousand jobs sees all of them, oldest first
(heartq's ids are time-ordered, so that is the order they were enqueued in).
"""

from __future__ import annotations

from typing import Any

from heartq.store import Store

PAGE = 1000
"""Jobs per page."""
SCAN = 100_000
"""Ids a page may read past to fill itself (the filters may match few of them)."""


def all_jobs(
    store: Store, *, task: str | None = None, queue: str | None = None, status: str | None = None
) -> list[dict[str, Any]]:
    """Every job matching the filters, oldest first, as job documents (without their
    executions: `Store.get_job` has those)."""
    found: list[dict[str, Any]] = []
    before: str | None = None
    while True:
        page = store.browse_jobs(
            status=status, queue=queue, task=task, before=before, limit=PAGE, scan=SCAN
        )
        found.extend(page.jobs)
        if page.next_before is None:
            return found[::-1]
        before = page.next_before
