"""The transport's settings: off unless asked for (nats-py not even imported), a URL that
says what it means, and an ack_wait that outlasts lease + reap interval."""

from __future__ import annotations

import subprocess
import sys

import pytest

from heartq.errors import ConfigError
from heartq.transport import resolve_transport
from heartq.transport.nats import NatsOptions, token


def test_no_transport_imports_no_nats() -> None:
    code = (
        "import sys, heartq, heartq.worker, heartq.cli.main\n"
        "app = heartq.App('sqlite:///:memory:')\n"
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


def test_ack_wait_must_outlast_lease_and_reap() -> None:
    options = NatsOptions.parse("nats://h:1?stream=S&prefix=p.q&ack_wait=100")
    assert options.server == "nats://h:1"
    assert options.ack_wait_for(lease=60, reap_interval=30) == 100
    with pytest.raises(ConfigError, match=r"ack_wait \(100 s\) must be longer"):
        options.ack_wait_for(lease=90, reap_interval=30)
    assert NatsOptions.parse("nats://h:1").ack_wait_for(90, 30) == 240


def test_queue_names_become_safe_subject_tokens() -> None:
    options = NatsOptions.parse("nats://h:1?stream=S&prefix=p")
    assert options.subject("emails") == "p.emails"
    assert options.subject("a.b *>") == "p.a~2e~b~20~~2a~~3e~"
    assert options.durable("a.b") == "S_a~2e~b"
    assert token("") == "~"
