"""A Django project's own tests of its tasks with heartq.testing: from Django's TestCase
and TransactionTestCase (run by `manage.py test` and by pytest-django), and a
pytest-django test with the `heartq_django_app` fixture (pytest-django only)."""

from django.test import TestCase, TransactionTestCase

from heartq import testing
from heartq.contrib.django.testing import fresh_queue, heartq_task
from shop import tasks
from shop.models import Order


class EnqueuedInATestCase(TestCase):
    def setUp(self):
        self.queue = self.enterContext(fresh_queue())

    def test_the_view_enqueues_the_email(self):
        answer = self.client.post("/email/", {"to": ["ada@example.org"]})
        self.assertEqual(answer.status_code, 202)
        (job,) = testing.assert_enqueued(
            heartq_task(tasks.email_users), args={"emails": ["ada@example.org"]}, app=self.queue
        )
        self.assertEqual(job.id, answer.json()["id"])
        self.assertEqual(tasks.email_users.get_result(job.id).status, "READY")

    def test_one_attempt_runs_in_the_test(self):
        self.assertEqual(testing.run(heartq_task(tasks.count_words), "a b c"), 3)


class RunInATransactionTestCase(TransactionTestCase):
    def setUp(self):
        self.queue = self.enterContext(fresh_queue())

    def test_the_worker_marks_the_order(self):
        answer = self.client.post("/orders/", {"item": "pen"})
        report = testing.drain(self.queue)
        self.assertEqual([run.status.value for run in report], ["succeeded"])
        self.assertEqual(Order.objects.get(pk=answer.json()["order"]).processed, 1)
        result = tasks.mark_processed.get_result(answer.json()["id"])
        self.assertEqual((result.status, result.return_value), ("SUCCESSFUL", 1))


try:
    import pytest
except ImportError:  # manage.py test, without pytest
    pytest = None

if pytest is not None:

    @pytest.mark.django_db(transaction=True)
    def test_with_pytest_django(heartq_django_app, client):
        answer = client.post("/words/", {"text": "x y"})
        report = testing.drain(heartq_django_app)
        assert report.job(answer.json()["id"]).result == 2
