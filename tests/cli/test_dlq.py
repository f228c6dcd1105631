"""`heartq dlq list|replay|purge`."""

from __future__ import annotations

from tests.cli.conftest import without_the_queue
from tests.cli.helpers import HeartqCli, assert_fits


def make_dead(heartq: HeartqCli, count: int) -> list[str]:
    ids = [heartq.add("boom", {"n": i}, max_retries=0) for i in range(count)]
    heartq.burst()
    return ids


def test_dlq_list(heartq: HeartqCli) -> None:
    empty, empty_json = heartq.many([["dlq", "list"], ["dlq", "list", "--json"]])
    assert empty.ok().out.strip() == "the dead-letter queue is empty"
    assert empty_json.json() == []
    dead = make_dead(heartq, 2)
    alive = heartq.add("ok", delay=60)
    human, as_json, other_queue, limited = heartq.many(
        [
            ["dlq", "list"],
            ["dlq", "list", "--json"],
            ["dlq", "list", "--json", "--queue", "elsewhere"],
            ["dlq", "list", "--json", "--limit", "1"],
        ]
    )
    jobs = as_json.json()
    assert [j["id"] for j in jobs] == list(reversed(dead))
    assert all(j["status"] == "dead" and j["dead_reason"] for j in jobs)
    out = human.ok().out
    assert_fits(out)
    assert alive not in out
    for job_id in dead:
        assert job_id in out
    words = " ".join(out.split())  # wrapped at 80 columns wherever the words fall
    assert "died" in words and "after 1 of 1 tries" in words and "ValueError: boom 1" in words
    assert other_queue.json() == []
    assert len(limited.json()) == 1


def test_dlq_replay_ids_and_all(heartq: HeartqCli) -> None:
    first, second, third = make_dead(heartq, 3)
    out = heartq("dlq", "replay", first).ok().out
    assert out.splitlines() == ["replayed 1 dead job:", f"  {first}"]
    job = heartq.json("jobs", "show", first)
    assert (job["status"], job["attempts"]) == ("queued", 0)
    assert len(job["executions"]) == 1  # the history is kept
    report = heartq.json("dlq", "replay", "--all")
    assert sorted(report["replayed"]) == sorted([second, third])
    assert report["not_found"] == [] and report["not_dead"] == {}
    assert "nothing to replay" in heartq("dlq", "replay", "--all").ok().out


def test_dlq_replay_reports_ids_not_found_or_not_dead(heartq: HeartqCli) -> None:
    [dead] = make_dead(heartq, 1)
    queued = heartq.add("ok", delay=60)
    tail = dead.replace("-", "")[-8:].upper()  # as `heartq demo` prints it, upper-cased
    run = heartq("dlq", "replay", tail, "missing-id", queued).fails(1, one_line=False)
    assert run.out.splitlines() == ["replayed 1 dead job:", f"  {dead}"]
    assert run.err.splitlines() == [
        "heartq: error: no job with id 'missing-id'",
        f"heartq: error: job {queued} is queued, not dead: not replayed",
    ]
    report = heartq("dlq", "replay", "missing-id", queued, "--json")
    assert report.code == 1
    import json

    assert json.loads(report.out) == {
        "replayed": [], "not_found": ["missing-id"], "not_dead": {queued: "queued"},
        "ambiguous": [],
    }  # fmt: skip


@without_the_queue
def test_dlq_replay_needs_ids_or_all_not_both(heartq: HeartqCli) -> None:
    assert "or --all" in heartq("dlq", "replay").fails(2).err
    assert "not both" in heartq("dlq", "replay", "some-id", "--all").fails(2).err


def test_dlq_purge(heartq: HeartqCli) -> None:
    dead = make_dead(heartq, 2)
    kept = heartq.add("ok", delay=60)
    out = heartq("dlq", "purge", "--older-than", "3600").ok().out
    assert out.strip() == "purged 0 jobs dead for over 1h00m"
    refused = heartq("dlq", "purge").fails(2)  # no terminal to ask on: --yes or nothing
    assert "would delete 2 dead jobs for good: add --yes" in refused.err, refused.explain()
    assert len(heartq.json("dlq", "list")) == 2
    purged = heartq.json("dlq", "purge", "--yes")
    assert purged == {"purged": 2, "older_than": None, "ids": sorted(purged["ids"])}
    assert set(purged["ids"]) == set(dead)
    assert heartq.json("dlq", "list") == []
    heartq("jobs", "show", dead[0]).fails(1)
    heartq("jobs", "show", kept).ok()
    assert heartq("dlq", "purge").ok().out.strip() == "purged 0 dead jobs"
    heartq("dlq", "purge", "--older-than", "soon").fails(2)


def test_dlq_purge_asks_on_a_terminal_and_prints_what_it_removed(heartq: HeartqCli) -> None:
    dead = make_dead(heartq, 2)
    no = heartq.in_terminal(["dlq", "purge"], answer="n\n")
    assert no.code == 130 and "delete 2 dead jobs and their history for good?" in no.out, no
    assert len(heartq.json("dlq", "list")) == 2
    yes = heartq.in_terminal(["dlq", "purge"], answer="y\n")
    assert yes.code == 0, yes.explain()
    assert "purged 2 dead jobs:" in yes.out
    for job_id in dead:
        assert f"  {job_id}" in yes.out
    assert heartq.json("dlq", "list") == []
