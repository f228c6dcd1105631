"""The stream settings of the transport URL against a stream that exists: heartq uses
it as it is and says, in words, where it differs (`transport_stream_mismatch`)."""

from __future__ import annotations

from nats.js.api import StorageType, StreamConfig, StreamInfo, StreamState

from heartq.transport.names import NatsNames
from heartq.transport.settings import NatsOptions
from heartq.transport.stream import differences, stream_config


def info(**config: object) -> StreamInfo:
    state = StreamState(messages=0, bytes=0, first_seq=0, last_seq=0, consumer_count=0)
    return StreamInfo(config=StreamConfig(name="S", **config), state=state)  # type: ignore[arg-type]


def test_only_the_settings_given_are_compared() -> None:
    existing = info(num_replicas=3, storage="memory", max_age=0, max_msgs=-1, max_bytes=-1)
    assert differences(existing, NatsOptions.parse("nats://h:1").stream_settings()) == []
    asked = NatsOptions.parse(
        "nats://h:1?replicas=1&storage=file&max_age=60&max_msgs=10&max_bytes=100"
    ).stream_settings()
    assert differences(existing, asked) == [
        "replicas 3 (the transport URL says 1)",
        "storage memory (the transport URL says file)",
        "max_age unlimited (the transport URL says 60)",
        "max_msgs unlimited (the transport URL says 10)",
        "max_bytes unlimited (the transport URL says 100)",
    ]
    same = info(num_replicas=1, storage="file", max_age=60.0, max_msgs=10, max_bytes=100)
    assert differences(same, asked) == []


def test_a_stream_heartq_makes_carries_the_urls_settings() -> None:
    names = NatsNames.derive("d1", None, None)
    plain = stream_config(names, {})
    assert (plain.num_replicas, plain.storage, plain.max_age) == (1, StorageType.FILE, None)
    chosen = stream_config(names, {"replicas": 3, "storage": "memory", "max_age": 60.0})
    assert (chosen.num_replicas, chosen.storage, chosen.max_age) == (3, StorageType.MEMORY, 60.0)
    assert chosen.subjects == ["heartq.d1.>"]
