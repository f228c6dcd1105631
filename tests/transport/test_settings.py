"""The transport's settings: off unless asked for (nats-py not even imported), a URL that
says what it means, and an ack_wait that outlasts lease + reclaim interval."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import heartq
from heartq.errors import ConfigError
from heartq.transport import resolve_transport
from heartq.transport.names import token
from heartq.transport.settings import NatsOptions
from tests.support import IMPORT_EVERY_COMMAND


def test_no_transport_imports_no_nats() -> None:
    code = (
        "import sys, heartq, heartq.worker\n"
        + IMPORT_EVERY_COMMAND
        + "app = heartq.App('sqlite:///:memory:')\n"
        "assert app.transport is None\n"
        "assert not [m for m in sys.modules if m == 'nats' or m.startswith('nats.')]\n"
    )
    env = {"PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=60)


def test_resolution_and_refusals() -> None:
    assert resolve_transport(None, {}) is None
    assert resolve_transport(None, {"HEARTQ_TRANSPORT": "nats://h:1"}) == "nats://h:1"
    assert resolve_transport("nats://a:2", {"HEARTQ_TRANSPORT": "nats://h:1"}) == "nats://a:2"
    with pytest.raises(ConfigError, match=r"^transport must be a nats:// URL"):
        resolve_transport("redis://h:1", {})
    with pytest.raises(ConfigError, match=r"^HEARTQ_TRANSPORT must be a nats:// URL"):
        resolve_transport(None, {"HEARTQ_TRANSPORT": "redis://h:1"})
    with pytest.raises(ConfigError, match="unknown transport option"):
        NatsOptions.parse("nats://h:1?streem=X")
    with pytest.raises(ConfigError, match="ack_wait must be a number"):
        NatsOptions.parse("nats://h:1?ack_wait=soon")


@pytest.mark.parametrize(
    ("query", "message"),
    [("stream=a.b", "transport stream 'a.b'"), ("ack_wait=soon", "ack_wait must be a number")],
)
def test_a_bad_transport_url_is_refused_before_any_job_is_stored(
    tmp_path: Path, query: str, message: str
) -> None:
    """Refused where it is given (the app, `HEARTQ_TRANSPORT`), not by the first publish,
    which comes after the job committed: the caller would take a stored job for a failed
    enqueue."""
    url = f"sqlite:///{tmp_path / 'q.db'}"
    with pytest.raises(ConfigError, match=message):
        heartq.App(url, transport=f"nats://h:1?{query}")
    with pytest.raises(ConfigError, match=message):
        resolve_transport(None, {"HEARTQ_TRANSPORT": f"nats://h:1?{query}"})
    assert not (tmp_path / "q.db").exists()


def test_ack_wait_must_outlast_lease_and_reap() -> None:
    options = NatsOptions.parse("nats://h:1?stream=S&prefix=p.q&ack_wait=100")
    assert options.server == "nats://h:1"
    assert options.ack_wait_for(lease=60, reclaim_interval=30) == 100
    with pytest.raises(ConfigError, match=r"ack_wait \(100 s\) must be longer"):
        options.ack_wait_for(lease=90, reclaim_interval=30)
    assert NatsOptions.parse("nats://h:1").ack_wait_for(90, 30) == 240


def test_queue_names_become_safe_subject_tokens() -> None:
    names = NatsOptions.parse("nats://h:1?stream=S&prefix=p").names("d1")
    assert names.subject("emails") == "p.emails"
    assert names.subject("a.b *>") == "p.a~2e~b~20~~2a~~3e~"
    assert names.durable("a.b") == "HEARTQ_d1_a~2e~b"
    assert token("") == "~"


def test_default_names_carry_the_deployment_id() -> None:
    """Before schema v9 every deployment got stream `HEARTQ`, subjects `heartq.jobs.*`
    and consumers `HEARTQ_<queue>`, so two queues on one server shared them."""
    plain = NatsOptions.parse("nats://h:1")
    one, two = plain.names("0123456789abcdef"), plain.names("fedcba9876543210")
    assert (one.stream, one.subjects) == ("HEARTQ_0123456789abcdef", "heartq.0123456789abcdef.>")
    assert one.subject("emails") == "heartq.0123456789abcdef.emails"
    assert one.durable("emails") == "HEARTQ_0123456789abcdef_emails"
    assert {one.stream, one.subjects, one.durable("q")}.isdisjoint(
        {two.stream, two.subjects, two.durable("q")}
    )


def test_the_url_names_win_but_consumers_keep_the_deployment() -> None:
    """`stream=` and `prefix=` replace the stream and the subjects; consumers stay the
    deployment's, so two deployments sharing a stream never share a consumer."""
    shared = NatsOptions.parse("nats://h:1?stream=SHARED")
    one, two = shared.names("aaaa"), shared.names("bbbb")
    assert one.stream == two.stream == "SHARED"
    assert (one.prefix, two.prefix) == ("heartq.aaaa", "heartq.bbbb")
    assert (one.durable("q"), two.durable("q")) == ("HEARTQ_aaaa_q", "HEARTQ_bbbb_q")
    both = NatsOptions.parse("nats://h:1?stream=S&prefix=app.jobs").names("aaaa")
    assert (both.stream, both.subject("q"), both.durable("q")) == (
        "S",
        "app.jobs.q",
        "HEARTQ_aaaa_q",
    )


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("stream=a.b", "transport stream 'a.b' must be letters, digits"),
        ("stream=a%20b", "transport stream 'a b' must be letters, digits"),
        ("prefix=app.*", "transport prefix 'app.*' must be dot-separated tokens"),
        ("prefix=app..jobs", "transport prefix 'app..jobs' must be dot-separated tokens"),
        ("prefix=jobs.>", "transport prefix 'jobs.>' must be dot-separated tokens"),
    ],
)
def test_names_nats_cannot_take_are_refused_in_one_line(query: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as refused:
        NatsOptions.parse(f"nats://h:1?{query}")
    assert "\n" not in str(refused.value)


def test_a_server_list_is_taken_whole() -> None:
    """A cluster's nodes, comma-separated: each one handed to the client (nats-py takes
    a list, never a comma-separated string: it refused the whole URL after the worker
    had started, which then polled the database for good)."""
    options = NatsOptions.parse("nats://n1:4222,n2:4223,nats://n3?stream=S")
    assert options.urls == ["nats://n1:4222", "nats://n2:4223", "nats://n3:4222"]
    assert options.server == "nats://n1:4222,nats://n2:4223,nats://n3:4222"
    assert options.stream == "S"
    tls = NatsOptions.parse("tls://a:1,b:2")
    assert tls.urls == ["tls://a:1", "tls://b:2"]


def test_credentials_are_shared_and_never_shown() -> None:
    options = NatsOptions.parse("nats://app:s3cret@n1:4222,n2:4222,other@n3:4222")
    assert options.urls == [
        "nats://app:s3cret@n1:4222",
        "nats://app:s3cret@n2:4222",
        "nats://other@n3:4222",
    ]
    assert "s3cret" not in options.server
    assert options.server.startswith("nats://app:***@n1:4222,")
    with pytest.raises(ConfigError) as refused:
        NatsOptions.parse("nats://app:s3cret@n1:4222,n2:port")
    assert "s3cret" not in str(refused.value)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("nats://n1:4222,,n2:4222", "empty entry"),
        ("nats://n1:4222,", "empty entry"),
        ("nats://n1:4222,n2:x", r"transport server 'nats://n2:x' has no valid port"),
        ("nats://n1:4222,http://n2:1", r"'http://n2:1' must be nats:// or tls://"),
        ("nats://n1:4222/db", "must be host:port, nothing after it"),
        ("nats://:4222", "has no host"),
    ],
)
def test_a_server_list_heartq_cannot_use_is_refused_in_one_line(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as refused:
        NatsOptions.parse(url)
    assert "\n" not in str(refused.value)
    with pytest.raises(ConfigError, match=message):
        heartq.App("sqlite:///:memory:", transport=url)


def test_stream_and_client_settings() -> None:
    plain = NatsOptions.parse("nats://h:1")
    assert plain.stream_settings() == {}  # nothing to compare with an existing stream
    assert (plain.connect_timeout, plain.reconnect_wait, plain.randomize) == (1.0, 0.5, True)
    chosen = NatsOptions.parse(
        "nats://h:1?replicas=3&storage=memory&max_age=3600&max_msgs=1000&max_bytes=1048576"
        "&reconnect_wait=0.2&connect_timeout=2&ping_interval=5&max_outstanding_pings=3"
        "&randomize=false"
    )
    assert chosen.stream_settings() == {
        "replicas": 3,
        "storage": "memory",
        "max_age": 3600.0,
        "max_msgs": 1000,
        "max_bytes": 1048576,
    }
    assert (chosen.reconnect_wait, chosen.connect_timeout, chosen.ping_interval) == (0.2, 2, 5)
    assert (chosen.max_outstanding_pings, chosen.randomize) == (3, False)
    assert (plain.stale_after, NatsOptions.parse("nats://h:1?stale_after=0").stale_after) == (2, 0)


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("replicas=7", "replicas must be 1 to 5"),
        ("replicas=2.5", "replicas must be a whole number"),
        ("replicas=0", "replicas must be positive"),
        ("storage=disk", "storage must be file or memory"),
        ("max_age=-1", "max_age must be positive"),
        ("max_msgs=lots", "max_msgs must be a whole number"),
        ("randomize=maybe", "randomize must be true or false"),
        ("ping_interval=", "ping_interval must be a number of seconds"),
        ("backstop=0", "backstop must be positive"),
        ("stale_after=-1", "stale_after must be positive"),
    ],
)
def test_stream_and_client_settings_heartq_cannot_use_are_refused(query: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as refused:
        NatsOptions.parse(f"nats://h:1?{query}")
    assert "\n" not in str(refused.value)
