"""The signup service tested end to end: the endpoint enqueues, the test asserts what
was enqueued and drains it through heartq's real worker."""

from __future__ import annotations

import heartq
import pytest
from fastapi.testclient import TestClient
from heartq import testing

import tasks


def test_a_signup_enqueues_a_welcome_email(client: TestClient) -> None:
    answer = client.post("/signups", json={"address": "ada@example.org"})

    assert answer.status_code == 202
    [job] = testing.assert_enqueued(tasks.send_welcome_email, args={"address": "ada@example.org"})
    assert job.id == answer.json()["email_job"]
    assert job.queue == "emails"


def test_a_malformed_signup_enqueues_nothing(client: TestClient) -> None:
    assert client.post("/signups", json={"name": "Ada"}).status_code == 422
    testing.assert_not_enqueued(tasks.send_welcome_email)


def test_the_welcome_email_is_sent_once_drained(
    client: TestClient, heartq_app: heartq.App, outbox: list[tuple[str, str]]
) -> None:
    client.post("/signups", json={"address": "ada@example.org"})
    assert outbox == []  # the request only enqueued it

    [run] = testing.drain(heartq_app)

    assert run.result == "welcome email sent to ada@example.org"
    assert outbox == [("ada@example.org", "Welcome!")]


def test_a_mail_server_down_once_is_retried(
    client: TestClient,
    heartq_app: heartq.App,
    outbox: list[tuple[str, str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    failures = [ConnectionError("mail server down")]

    def down_once(address: str, subject: str) -> None:
        if failures:
            raise failures.pop()
        outbox.append((address, subject))

    monkeypatch.setattr(tasks, "deliver", down_once)
    client.post("/signups", json={"address": "ada@example.org"})

    [run] = testing.drain(heartq_app)  # the retry waits out its backoff: left queued
    assert (run.outcomes, run.status) == (["failed"], "queued")
    assert "ConnectionError: mail server down" in run.error

    [run] = testing.drain(heartq_app, run_retries_now=True)  # its retry, due at once
    assert (run.outcomes, run.status) == (["succeeded"], "succeeded")
    assert outbox == [("ada@example.org", "Welcome!")]


def test_a_bad_address_goes_to_the_dead_letter_queue(
    client: TestClient, heartq_app: heartq.App, outbox: list[tuple[str, str]]
) -> None:
    client.post("/signups", json={"address": "ada"})

    [run] = testing.drain(heartq_app, run_retries_now=True)

    assert (run.outcomes, run.status) == (["failed"], "dead")  # Permanent: no retry
    assert run.dead_reason == "permanent failure: heartq.errors.Permanent: not an address: 'ada'"
    assert outbox == []


def test_the_task_alone(heartq_app: heartq.App, outbox: list[tuple[str, str]]) -> None:
    sent = testing.run(tasks.send_welcome_email, "bob@example.org")
    assert sent == "welcome email sent to bob@example.org"

    with pytest.raises(heartq.Permanent, match="not an address"):
        testing.run(tasks.send_welcome_email, "bob")
