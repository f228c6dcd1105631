"""The overview's costly reads (every job counted, the chart's hour) are reused for
`COSTLY_READ_FACTOR` times what they cost, shared by every page open at once."""

from __future__ import annotations

import threading

from heartq.dashboard.views import Throttled


def test_a_read_is_reused_until_its_cost_times_the_factor_has_passed() -> None:
    reads: list[int] = []

    def read() -> int:
        reads.append(len(reads))
        return len(reads)

    cheap = Throttled(read, factor=0.0)  # costs nothing to repeat: read every time
    assert [cheap.get(), cheap.get()] == [1, 2]
    costly = Throttled(read, factor=1e9)  # whatever it cost, not again for ages
    assert [costly.get(), costly.get(), costly.get()] == [3, 3, 3]
    assert len(reads) == 3 and costly.age >= 0


def test_pages_open_at_once_share_one_read() -> None:
    started, release = threading.Event(), threading.Event()
    reads: list[int] = []

    def slow_read() -> int:
        reads.append(1)
        started.set()
        release.wait(10)
        return 42

    throttled = Throttled(slow_read, factor=1e9)
    answers: list[int] = []
    first = threading.Thread(target=lambda: answers.append(throttled.get()))
    first.start()
    assert started.wait(10)
    others = [threading.Thread(target=lambda: answers.append(throttled.get())) for _ in range(3)]
    for thread in others:
        thread.start()
    release.set()
    for thread in (first, *others):
        thread.join(10)
    assert answers == [42, 42, 42, 42] and len(reads) == 1
