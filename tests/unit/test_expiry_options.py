"""`expires=` as an enqueue takes it: seconds from now (a positive, finite number) or an
aware datetime (one already past expires the job at once); anything else is refused in
one line naming the option, before anything is stored."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime, timedelta

import pytest

from heartq.errors import ConfigError, PayloadError
from heartq.options import Options


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (-1.0, "expires must be a positive number of seconds, got -1.0"),
        (0, "expires"),
        (math.nan, "expires"),
        (math.inf, "expires"),
        ("60", "expires must be seconds from now or an aware datetime"),
        (True, "expires must be seconds from now or an aware datetime"),
        (datetime(2030, 1, 1), "expires must be timezone-aware"),
        (datetime(9999, 1, 1, tzinfo=UTC), "expires"),
    ],
)
def test_bad_expiries_are_one_clear_line(value: object, said: str) -> None:
    with pytest.raises((ConfigError, PayloadError)) as refused:
        Options(expires=value)  # type: ignore[typeddict-item]
    message = str(refused.value)
    assert said in message and "\n" not in message


def test_seconds_and_aware_times_are_seconds_from_now() -> None:
    assert Options(expires=90).expires_in == 90.0
    assert Options().expires_in is None
    ahead = Options(expires=datetime.now(UTC) + timedelta(minutes=5)).expires_in
    assert ahead is not None and 299.0 < ahead <= 300.0
    past = Options(expires=datetime.fromtimestamp(time.time() - 10, UTC)).expires_in
    assert past is not None and -11.0 < past <= -10.0  # expired at once, not refused
