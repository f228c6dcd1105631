"""An event stream's rules, without a database (heartq/event_stream.py): who hears what,
at which level, in which order; a subscriber's failure is nobody else's; the log is a
subscriber like any other, of each stream on its own; a hook's failure is its own app's
event. Real workers on real queues: tests/runtime/test_event_streams.py."""

from __future__ import annotations

import logging

import pytest

from heartq import events
from heartq.event_stream import EventStream


def test_every_subscriber_hears_each_event_once_in_the_order_it_subscribed() -> None:
    stream = EventStream()
    heard: list[tuple[str, str, dict[str, object]]] = []
    stream.subscribe(lambda e: heard.append(("first", e.name, e.fields)))
    stream.subscribe(lambda e: heard.append(("second", e.name, e.fields)))

    stream.emit(events.WORKER_STARTED, logging.INFO, worker_id="w", name="web-1")

    fields = {"worker_id": "w", "name": "web-1"}  # `name` is a field like any other
    assert heard == [
        ("first", events.WORKER_STARTED, fields),
        ("second", events.WORKER_STARTED, fields),
    ]


def test_a_failing_subscriber_costs_the_others_and_the_emitter_nothing() -> None:
    stream = EventStream()
    heard: list[str] = []

    @stream.subscribe
    def broken(event: events.Event) -> None:
        raise RuntimeError("a listener's bug")

    stream.subscribe(lambda e: heard.append(e.name))
    stream.emit(events.PRUNED, jobs=1)  # never raises
    assert heard == [events.PRUNED]


def test_a_subscriber_hears_the_levels_it_wants_and_wanted_says_if_anyone_does(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stream = EventStream()
    warnings: list[str] = []
    stream.subscribe(
        lambda e: warnings.append(e.name), wants=lambda level: level >= logging.WARNING
    )
    with caplog.at_level(logging.INFO, logger="heartq"):
        assert not stream.wanted(logging.DEBUG)  # the log is at INFO, the other at WARNING
        assert stream.wanted(logging.INFO)
        stream.emit(events.JOB_CLAIMED, logging.DEBUG, job_id="j")
        stream.emit(events.LEASE_LOST, logging.WARNING, job_id="j")
        every: list[str] = []
        stream.subscribe(every.append)  # type: ignore[arg-type]
        assert stream.wanted(logging.DEBUG)  # one wants every event now
    assert warnings == [events.LEASE_LOST]
    assert [r.getMessage() for r in caplog.records] == [events.LEASE_LOST]


def test_the_log_is_each_streams_own_subscriber(caplog: pytest.LogCaptureFixture) -> None:
    quiet, loud = EventStream(), EventStream()
    quiet.unsubscribe(events.log_event)
    with caplog.at_level(logging.INFO, logger="heartq"):
        quiet.emit(events.PRUNED, jobs=1)
        loud.emit(events.PRUNED, jobs=2)
    assert [r.heartq_fields for r in caplog.records] == [{"jobs": 2}]  # type: ignore[attr-defined]
    assert len(quiet) == 0 and len(loud) == 1


def test_unsubscribing_what_is_not_subscribed_is_refused() -> None:
    stream = EventStream()
    with pytest.raises(ValueError, match="not subscribed"):
        stream.unsubscribe(print)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="callable"):
        stream.subscribe("print")  # type: ignore[arg-type]


def test_a_hooks_failure_is_an_event_of_its_own_stream_only() -> None:
    mine, other = EventStream(), EventStream()
    heard: dict[str, list[dict[str, object]]] = {"mine": [], "other": []}
    mine.subscribe(lambda e: heard["mine"].append(e.fields))
    other.subscribe(lambda e: heard["other"].append(e.fields))

    @mine.hooks.worker_start
    def broken(info: object) -> None:
        raise RuntimeError("tracker down")

    mine.hooks.worker_start.run(object())  # type: ignore[arg-type]
    assert heard == {
        "mine": [
            {
                "kind": "worker_start",
                "hook": broken.__qualname__,
                "stage": "before",
                "error": "RuntimeError('tracker down')",
            }
        ],
        "other": [],
    }
