"""The tasks of the signup service. Workers run them: `heartq worker tasks:app`."""

from __future__ import annotations

import os
import smtplib

import heartq

app = heartq.App()  # HEARTQ_URL, else sqlite:///heartq.db; the tests re-point it


def deliver(address: str, subject: str) -> None:
    """Hand one message to the mail server (the tests put an outbox in its place)."""
    with smtplib.SMTP(os.environ.get("SMTP_HOST", "localhost")) as smtp:
        smtp.sendmail("hello@example.org", [address], f"Subject: {subject}\r\n\r\n{subject}")


@app.task(queue="emails", max_retries=3)
def send_welcome_email(address: str) -> str:
    if "@" not in address:
        raise heartq.Permanent(f"not an address: {address!r}")  # no retry can fix it
    deliver(address, "Welcome!")  # a ConnectionError here is retried, with backoff
    return f"welcome email sent to {address}"
