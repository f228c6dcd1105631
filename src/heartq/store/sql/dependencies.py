"""Jobs that wait for jobs: the edges an enqueue writes, and the settling of a job's
dependents, which every place a job can end runs in the transaction that ends it.

Why one module: a dependent must be settled exactly once, whoever ends its dependency
(the worker's finish, a completion inside the task's transaction, a release with a
cancel pending, a cancel, every reclaimer), and the enqueue that writes the edges must
agree with all of them on who sees whom. Both halves of that agreement are here:

- The enqueue (`store`) locks every dependency it names (`LOCK_DEPENDENCIES`: each row
  locked in id order and marked `has_dependents`), then inserts the jobs and their edges,
  then settles at once the edges whose dependency had already ended, as its end would
  have. A dependency not found among the jobs is looked up in the trace of pruned
  successes (`pruned_successes`, written by the prune that deleted it): found there, it
  counts as succeeded at once (its edge is written ended); not found there either, it is
  `DependencyNotFound` before anything is inserted.
- The end of a job with `has_dependents` runs `settle` after the statement that ended it,
  as a statement of its own in the same transaction: on PostgreSQL its snapshot is taken
  after the ended rows were locked, so it sees every edge committed before, and an enqueue
  that comes after waits for the lock and finds the job ended. (The worker's one-statement
  finish, committed by itself, leaves such jobs to a transaction of its own: see
  `JobEnds.finish_statement` in `leases.py`.) SQLite has one writer: the order is given.

A dead dependency blocks the jobs that wait for it (`blocked`, unless they cancel or run
anyway), and a blocked job blocks those that wait for it in turn, until the dead job is
replayed (`unblock`) or the blocked job cancelled. Which dependency holds which job is on
the edge (`holds`), changed only by whoever changes the dependency's status, under its
row lock; the job's count of them (`holders`) moves by differences under the job's
lock, as `waiting_for` does: on PostgreSQL a statement that waited for a row's lock
re-reads that row, never the others, so nothing here is decided by reading another
job's status from an older snapshot.

Both are generators of statements (`Program`): the store drives one on its own connection
(`base.drive`), on a borrowed one, or on an asyncio connection, and the logic stays
written once.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from heartq.errors import ConfigError, DependencyNotFound
from heartq.ids import is_job_id
from heartq.model import TERMINAL_STATUSES, JobStatus
from heartq.store.sql.base import Program, Step, each
from heartq.store.sql.statements import Statements

T = TypeVar("T")

DEPENDENTS_SHOWN = 1000
"""`get_job` lists at most 1,000 dependents of a job (a group's members have one each)."""


@dataclass
class Settled:
    """What settling did: the queues that got runnable jobs (to wake), and the awaited
    jobs they cancelled or blocked (to announce: a blocked job's waiter has its answer,
    the dead job that holds it)."""

    queues: set[str] = field(default_factory=set)
    awaited_ends: list[str] = field(default_factory=list)
    held_cancelled: list[str] = field(default_factory=list)
    """The blocked jobs `cancel_held` cancelled (not those cancelled down from them)."""

    def add(self, rows: Sequence[Any]) -> None:
        """Count the jobs a settling statement changed (`id`, `queue`, `status`,
        `awaited`)."""
        self.queues.update(r["queue"] for r in rows if r["status"] == JobStatus.QUEUED)
        self.awaited_ends.extend(
            r["id"] for r in rows if r["awaited"] and r["status"] in ANNOUNCED
        )


ANNOUNCED = frozenset({JobStatus.CANCELLED, JobStatus.BLOCKED})
"""The statuses settling gives that a waiter is told of."""


def ended_with_dependents(rows: Sequence[Any]) -> list[str]:
    """The jobs among rows an ending statement changed (with `status` and
    `has_dependents`) that ended and have dependents: the ones to settle from. Jobs
    without dependents cost nothing more."""
    return [r["id"] for r in rows if r["has_dependents"] and r["status"] in TERMINAL_STATUSES]


def failed_with_dependents(rows: Sequence[Any]) -> bool:
    """Whether any of the ended jobs with dependents among `rows` did not succeed: only
    then can settling their dependents block or unblock a job (`settle`'s `failed`)."""
    return any(
        r["has_dependents"] and r["status"] in TERMINAL_STATUSES - {JobStatus.SUCCEEDED}
        for r in rows
    )


def settle(
    q: Statements, ids: list[str], array: Any, clock: float | None, failed: bool = True
) -> Program[Settled]:
    """Settle the waiting (and blocked) dependents of the jobs `ids` (just ended, in this
    transaction): queued once their last dependency ended and none holds them; blocked by
    one that ended dead (those that block on failure), cancelled by one that ended
    cancelled (or dead, those that cancel), unless they run anyway; and so on down: a
    cancelled dependent's own dependents are settled from it in turn, and a job that
    became blocked or stopped being blocked tells its dependents (`propagate`), a
    statement per level. `failed`: some of `ids` did not succeed (settling after successes
    only can neither block nor unblock: it spares the statement that would look)."""
    done = Settled()
    while ids:
        params = {"ids": array(ids), "now": clock}
        rows = yield (q.SETTLE_DEPENDENTS, params)
        yield (q.END_DEPENDENCY_EDGES, params)
        done.add(rows)
        if failed:
            moved = [r["id"] for r in rows if r["has_dependents"] and r["status"] != "cancelled"]
            yield from propagate(q, moved, array, clock, done)
        ids, failed = ended_with_dependents(rows), True
    return done


def propagate(
    q: Statements, ids: list[str], array: Any, clock: float | None, done: Settled
) -> Program[None]:
    """The jobs `ids` (not ended, their status changed in this transaction) may have
    become blocked or stopped being so: the edges of their dependents say whether each
    holds (`SYNC_HOLDS`), and the dependents whose `holders` moved are blocked or waiting
    accordingly, and so on down while anything moves. Idempotent: an edge already right
    moves nothing."""
    while ids:
        flips = yield (q.SYNC_HOLDS, {"ids": array(ids)})
        holders: Counter[str] = Counter()
        for flip in flips:
            holders[flip["job_id"]] += 1 if flip["holds"] else -1
        rows = yield from shift(q, holders, Counter(), clock, done)
        ids = [r["id"] for r in rows if r["has_dependents"]]


def shift(
    q: Statements,
    holders: Mapping[str, int],
    waiting: Mapping[str, int],
    clock: float | None,
    done: Settled,
) -> Program[list[Any]]:
    """Move the `holders` and `waiting_for` of waiting and blocked jobs by these
    differences (`SHIFT_HOLDERS`): blocked while a dependency holds one, else waiting.
    The rows it changed."""
    moved = [
        {"id": job_id, "holders": holders.get(job_id, 0), "waiting": waiting.get(job_id, 0)}
        for job_id in sorted(set(holders) | set(waiting))
        if holders.get(job_id) or waiting.get(job_id)
    ]
    if not moved:
        return []
    rows = yield (q.SHIFT_HOLDERS, {"shifts": json.dumps(moved), "now": clock})
    done.add(rows)
    return list(rows)


def unblock(q: Statements, ids: list[str], array: Any, clock: float | None) -> Program[Settled]:
    """The dead jobs `ids` were replayed (queued again, in this transaction): the jobs
    they blocked wait for them again (`REOPEN_HELD_EDGES`: the edge is counted again when
    they end), waiting unless another dependency holds them, and so on down."""
    done = Settled()
    edges = yield (q.REOPEN_HELD_EDGES, {"ids": array(ids)})
    reopened = Counter(r["job_id"] for r in edges)
    less = {job_id: -n for job_id, n in reopened.items()}
    rows = yield from shift(q, less, reopened, clock, done)
    yield from propagate(q, [r["id"] for r in rows if r["has_dependents"]], array, clock, done)
    return done


def cancel_held(
    q: Statements, ids: list[str], array: Any, clock: float | None, why: str
) -> Program[Settled]:
    """Cancel the blocked jobs that the dead jobs `ids` hold by their own edge (`why`: the
    dead job `was purged`, or `was not replayed within ...`), then settle their
    dependents from them as from any cancel."""
    rows = yield (q.CANCEL_HELD, {"ids": array(ids), "now": clock, "why": why})
    cancelled = ended_with_dependents(rows)
    done = (yield from settle(q, cancelled, array, clock)) if cancelled else Settled()
    done.awaited_ends.extend(r["id"] for r in rows if r["awaited"])
    done.held_cancelled.extend(r["id"] for r in rows)
    return done


def store(
    q: Statements,
    docs: list[dict[str, Any]],
    array: Any,
    clock: float | None,
    insert_plain: list[Step],
    waited: set[str],
) -> Program[None]:
    """Store a batch of job documents, some with dependencies: the dependencies outside
    the batch locked and checked first (a pruned success counts as succeeded; anything
    else not found is `DependencyNotFound`, nothing inserted), then the
    plain jobs (`insert_plain`, the dialect's usual statements), the linked ones (waiting,
    blocked by a blocked dependency, or in `waited`: waited for by others of the batch)
    and their edges; then the edges whose dependency had already ended are settled at
    once, and the jobs of the batch born blocked tell their dependents of the batch."""
    in_batch = {str(d["id"]) for d in docs}
    wanted = [dep for d in docs for dep in d.get("depends_on", ())]
    outside = sorted(set(wanted) - in_batch)
    ended: list[str] = []
    pruned: set[str] = set()
    blocked: set[str] = set()
    if outside:
        asked = [dep for dep in outside if is_job_id(dep)]  # any other text names no job
        rows = yield (q.LOCK_DEPENDENCIES, {"ids": array(asked)})
        found = {r["id"]: r["status"] for r in rows}
        gone = [dep for dep in dict.fromkeys(wanted) if dep in outside and dep not in found]
        if gone:
            traced = yield (q.PRUNED_SUCCESSES, {"ids": array(sorted(set(asked) & set(gone)))})
            pruned = {r["id"] for r in traced}
            missing = [dep for dep in gone if dep not in pruned]
            if missing:
                raise DependencyNotFound(missing)
        ended = [dep for dep in outside if dep in found and found[dep] in TERMINAL_STATUSES]
        blocked = {dep for dep in outside if found.get(dep) == JobStatus.BLOCKED}
    yield from each(insert_plain)
    linked, edges = _linked(docs, waited, pruned, blocked)
    yield (q.INSERT_LINKED_JOBS, {"jobs": json.dumps(linked), "now": clock})
    yield (q.INSERT_DEPENDENCIES, {"edges": json.dumps(edges)})
    done = Settled()
    if ended:
        done = yield from settle(q, ended, array, clock)
    held = [doc["id"] for doc in linked if doc["holders"] and doc["has_dependents"]]
    yield from propagate(q, held, array, clock, done)


def is_linked(doc: dict[str, Any], waited_for: set[str]) -> bool:
    """Whether a job takes part in dependencies: it waits for others, or others of its
    batch wait for it."""
    return bool(doc.get("depends_on") or doc.get("dependency_results") or doc["id"] in waited_for)


def waited_for(docs: Sequence[dict[str, Any]]) -> set[str]:
    """The ids of a batch's jobs that others of the batch wait for; `ConfigError` if one
    has a unique key (its enqueue may answer another job's id: the edges would point at a
    job never stored)."""
    ids = {dep for d in docs for dep in d.get("depends_on", ())}
    found = {str(d["id"]) for d in docs if d["id"] in ids}
    for doc in docs:
        if doc["id"] in found and doc["unique_key"] is not None:
            raise ConfigError("a job others depend on cannot have a unique_key in the same batch")
    return found


def _linked(
    docs: Sequence[dict[str, Any]], in_batch_deps: set[str], pruned: set[str], blocked: set[str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The linked jobs' documents for `INSERT_LINKED_JOBS`, and their edges (each with
    how its result reaches the job, `result_as`). A dependency in `pruned` (a success
    since pruned) is counted at once: its edge is written ended, and not waited for. A
    job that depends on a blocked job (`blocked`, outside the batch) is blocked from the
    start, held by each such edge."""
    linked: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []
    for doc in docs:
        if not is_linked(doc, in_batch_deps):
            continue
        depends_on = list(doc.get("depends_on", ()))
        results_as = doc.get("results_as") or [None] * len(depends_on)
        waiting_for = sum(dep not in pruned for dep in depends_on)
        holders = sum(dep in blocked for dep in depends_on)
        status = JobStatus.BLOCKED if holders else JobStatus.WAITING
        linked.append(
            dict(
                doc,
                status=(status if waiting_for else JobStatus.QUEUED).value,
                has_dependents=doc["id"] in in_batch_deps,
                waiting_for=waiting_for,
                holders=holders,
                on_dependency_failure=doc.get("on_dependency_failure"),
                dependency_results=bool(doc.get("dependency_results")),
            )
        )
        edges.extend(
            {
                "job_id": doc["id"],
                "depends_on": dep,
                "position": position,
                "ended": JobStatus.SUCCEEDED.value if dep in pruned else None,
                "result_as": result_as,
                "holds": dep in blocked,
            }
            for position, (dep, result_as) in enumerate(zip(depends_on, results_as, strict=True))
        )
    return linked, edges
