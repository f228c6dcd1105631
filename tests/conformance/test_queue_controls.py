"""An operator's controls of a queue, stored (`Store.set_queue_control`,
`Store.queue_controls`): each decision changes only what it names, so a pause and a
scale by two operators both land; bad names and caps are refused before anything is
written. (Workers obeying them: tests/integration/test_queue_controls.py.)"""

from __future__ import annotations

import pytest

from heartq.errors import ConfigError
from heartq.queue_controls import QueueControl
from heartq.store import Store


def _state(control: QueueControl) -> tuple[str, bool, int | None, str | None]:
    return (control.queue, control.paused, control.concurrency, control.changed_by)


def test_each_decision_changes_only_what_it_names(store: Store) -> None:
    assert store.queue_controls() == {}
    paused = store.set_queue_control("q", paused=True, scale=False, concurrency=None, by="ann")
    assert _state(paused) == ("q", True, None, "ann")
    scaled = store.set_queue_control("q", paused=None, scale=True, concurrency=3, by="bob")
    assert _state(scaled) == ("q", True, 3, "bob")
    resumed = store.set_queue_control("q", paused=False, scale=False, concurrency=None, by="ann")
    assert _state(resumed) == ("q", False, 3, "ann")
    lifted = store.set_queue_control("q", paused=None, scale=True, concurrency=None, by="bob")
    assert _state(lifted) == ("q", False, None, "bob")
    assert lifted.changed_at is not None and lifted.changed_at >= paused.changed_at  # type: ignore[operator]
    store.set_queue_control("other", paused=None, scale=True, concurrency=0, by="cy")
    assert sorted(store.queue_controls()) == ["other", "q"]
    assert list(store.queue_controls(["other", "missing"])) == ["other"]
    assert store.queue_controls([]) == {}


@pytest.mark.parametrize(
    ("queue", "concurrency"), [("", None), ("  ", 2), ("q", -1), ("q", True), ("q", 1.5)]
)
def test_bad_input_writes_nothing(store: Store, queue: str, concurrency: object) -> None:
    with pytest.raises(ConfigError):
        store.set_queue_control(
            queue,
            paused=True,
            scale=True,
            concurrency=concurrency,  # type: ignore[arg-type]
            by="ann",
        )
    assert store.queue_controls() == {}
