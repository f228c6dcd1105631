"""The chaos runner's fairness check (`chaos_fair.check`) on made-up runs: a key's jobs
first claimed in their order pass (retries and later attempts aside, ties in one claim,
a higher priority enqueued later going first), and a key's later job first claimed
before an earlier one of its priority fails, as a claim ignoring the key's order would."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from tests.soak import chaos_fair


def _job(
    job_id: str, key: str | None, claims: list[str], priority: int = 0, worker: str = "w1"
) -> dict[str, Any]:
    execs = [{"execution_id": n, "started_at": at, "worker_id": worker}
             for n, at in enumerate(claims, 1)]  # fmt: skip
    return {"id": job_id, "queue": "default", "fair_key": key, "priority": priority,
            "executions": execs}  # fmt: skip


def _checked(
    jobs: list[dict[str, Any]], prefetch: int = 0, backend: str = "sqlite"
) -> tuple[list[str], Any]:
    failed: list[str] = []
    links = SimpleNamespace(claim_windows=list, loss_windows=list)
    config = SimpleNamespace(prefetch=prefetch, backend=backend)
    run = SimpleNamespace(enqueued=[j["id"] for j in jobs], config=config, links=links)
    checker = SimpleNamespace(run=run, jobs={j["id"]: j for j in jobs}, fail=failed.append, fair={})
    chaos_fair.check(checker)  # type: ignore[arg-type]
    return failed, checker.fair


def t(ms: int) -> str:
    return f"2026-11-27T20:00:00.{ms:03d}Z"


def test_a_keys_jobs_first_claimed_in_order_pass() -> None:
    failed, figures = _checked([
        _job("a", "k", [t(100), t(900)]),  # retried after b and c started: back in line
        _job("b", "k", [t(200)]),
        _job("x", None, [t(50)]),  # no key: not checked
        _job("c", "k", [t(200)]),  # claimed with b in one claim
        _job("d", "k", [t(150)], priority=2),  # enqueued later, higher priority: first
        _job("e", "j", [t(10)]),  # another key: its own order
    ])  # fmt: skip
    assert failed == []
    assert figures == {"keys": 2, "jobs": 5, "checked": True, "out_of_order": 0,
                       "within_clock_tolerance": 0, "passed_over": 0,
                       "per_key": {"default/j": 1, "default/k": 4}}  # fmt: skip


def test_a_later_job_of_a_key_claimed_first_fails() -> None:
    failed, figures = _checked([
        _job("a", "k", [t(300)]),
        _job("b", "k", [t(200)]),  # after a in the key's order, first claimed before it
        _job("c", "k", [t(100)], priority=1),  # higher priority: may go first
    ])  # fmt: skip
    assert figures["out_of_order"] == 1
    assert len(failed) == 1 and "job b of key k" in failed[0] and "before job a" in failed[0]


def test_with_prefetch_the_order_is_not_checked() -> None:
    failed, figures = _checked([_job("a", "k", [t(300)]), _job("b", "k", [t(200)])], prefetch=2)
    assert failed == [] and figures["checked"] is False


def test_on_postgresql_two_claims_at_once_may_be_dated_out_of_order() -> None:
    """A claim statement dated at its start, skipping the rows another one locked: its
    job is dated a little before the other's (counted), never a second (failed)."""
    jobs = [_job("a", "k", [t(300)]), _job("b", "k", [t(200)]), _job("c", "k", [t(100)])]
    failed, figures = _checked(jobs[:2], backend="postgres")
    assert failed == [] and figures["within_clock_tolerance"] == 1
    late = [_job("a", "k", ["2026-11-27T20:00:01.000Z"]), _job("b", "k", [t(200)])]
    failed, figures = _checked(late, backend="postgres")
    assert len(failed) == 1 and figures["out_of_order"] == 1


def test_on_postgresql_a_job_passed_over_while_another_claim_held_it_is_counted() -> None:
    """A claim leaves locked the entries it walked and did not take; one running meanwhile
    passes over them, and a later job of the key goes first by more than the tolerance
    (seed 72: 0.53 s). Counted when another worker claimed within the tolerance of it;
    failed when none did, as a claim ignoring the key's order would be."""
    passed = [
        _job("a", "k", ["2026-11-27T20:00:00.730Z"], worker="w3"),
        _job("b", "k", [t(200)], worker="w2"),
        _job("x", None, [t(150)], worker="w1"),  # the claim that held a, taking x
    ]
    failed, figures = _checked(passed, backend="postgres")
    assert failed == [] and figures["passed_over"] == 1 and figures["out_of_order"] == 0
    alone = [*passed[:2], _job("x", None, [t(150)], worker="w2")]  # b's own worker only
    failed, figures = _checked(alone, backend="postgres")
    assert len(failed) == 1 and figures["out_of_order"] == 1 and figures["passed_over"] == 0
    failed, figures = _checked(passed, backend="sqlite")  # one writer: no such claim
    assert len(failed) == 1 and figures["out_of_order"] == 1
