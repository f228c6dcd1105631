"""The same service tested with unittest: heartq.testing needs no pytest
(`python -m unittest test_without_pytest`; pytest runs it too)."""

from __future__ import annotations

import unittest
from unittest import mock

from heartq import testing

import tasks


class WelcomeEmailTest(unittest.TestCase):
    def setUp(self) -> None:
        self.app = self.enterContext(testing.use_fresh_queue(tasks.app))
        self.deliver = self.enterContext(mock.patch.object(tasks, "deliver"))

    def test_the_email_is_delivered(self) -> None:
        tasks.send_welcome_email.enqueue("ada@example.org")

        [run] = testing.drain(self.app)

        self.assertEqual(run.status, "succeeded")
        self.deliver.assert_called_once_with("ada@example.org", "Welcome!")
