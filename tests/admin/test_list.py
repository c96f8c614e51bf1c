"""The job list an operator reads: one line a job, failed jobs by when they failed, times to the
second with how long ago, and sorts only where an index orders the list."""

import datetime

import pytest
from django.urls import reverse
from django.utils import timezone

from django_outbox.models import Job
from tests.admin.helpers import CHANGELIST, make_failed, make_succeeded
from tests.testapp import tasks


def ids(response):
    return [job.pk for job in response.context["cl"].result_list]


def fail_at(job, minutes_ago):
    Job.objects.filter(pk=job.pk).update(
        finished_at=timezone.now() - datetime.timedelta(minutes=minutes_ago)
    )


@pytest.mark.django_db
class TestOrder:
    def test_the_failed_list_goes_by_failure_time_newest_first(self, admin_client):
        old, newer, newest = (make_failed(tasks.always_fails.enqueue()) for _ in range(3))
        fail_at(old, 1)  # The oldest job failed again a minute ago.
        fail_at(newer, 60)
        fail_at(newest, 30)
        response = admin_client.get(reverse(CHANGELIST), {"status__exact": "failed"})
        assert ids(response) == [old.pk, newest.pk, newer.pk]
        # The column is marked as the sort, and may be reversed.
        assert "sortable column-when_display sorted descending" in response.text
        response = admin_client.get(reverse(CHANGELIST), {"status__exact": "failed", "o": "7"})
        assert ids(response) == [newer.pk, newest.pk, old.pk]

    def test_the_failed_list_of_a_task_or_queue_goes_by_failure_time_too(self, admin_client):
        first, second = (make_failed(tasks.always_fails.enqueue()) for _ in range(2))
        fail_at(first, 1)
        fail_at(second, 5)
        for params in ({"task_name": "tests.testapp.tasks.always_fails"}, {"queue": "default"}):
            response = admin_client.get(reverse(CHANGELIST), {"status__exact": "failed", **params})
            assert ids(response) == [first.pk, second.pk]

    def test_other_lists_go_by_id_and_sort_by_finish_time_only_for_a_finished_status(
        self, admin_client
    ):
        jobs = [tasks.noop.enqueue() for _ in range(3)]
        response = admin_client.get(reverse(CHANGELIST))
        assert ids(response) == [job.pk for job in reversed(jobs)]
        assert "sortable column-when_display" not in response.text
        # ?o=7 (the "when" column) asks for a sort no index serves here: ignored.
        response = admin_client.get(reverse(CHANGELIST), {"o": "7"})
        assert ids(response) == [job.pk for job in reversed(jobs)]
        for job in jobs:
            make_succeeded(job)
        fail_at(jobs[2], 10)
        response = admin_client.get(reverse(CHANGELIST), {"status__exact": "succeeded", "o": "-7"})
        assert ids(response)[-1] == jobs[2].pk


@pytest.mark.django_db
class TestTimes:
    def test_times_are_relative_with_the_clock_to_the_second(self, admin_client):
        job = make_failed(tasks.always_fails.enqueue())
        moment = timezone.now() - datetime.timedelta(minutes=4, seconds=5)
        Job.objects.filter(pk=job.pk).update(finished_at=moment)
        waiting = tasks.noop.enqueue(delay=3600)
        response = admin_client.get(reverse(CHANGELIST))
        local = timezone.localtime(moment)
        assert (
            f'failed 4 min ago</time> <span class="outbox-clock">{local:%H:%M:%S}'
            in (response.text)
            or f"{local:%Y-%m-%d %H:%M:%S}" in response.text
        )
        assert f'title="{local:%Y-%m-%d %H:%M:%S %Z}"' in response.text
        # A delayed job says when it runs.
        assert ">runs in 59 min</time>" in response.text or ">runs in 60 min</time>" in (
            response.text
        ), waiting


@pytest.mark.django_db
class TestPagesByKeyInEveryOrder:
    @pytest.mark.parametrize("order", ["7", "-7", "1", "-1"])
    def test_pages_by_key_follow_each_sortable_order(self, admin_client, monkeypatch, order):
        from django_outbox.admin.job_admin import JobAdmin
        from django_outbox.admin.paging import JobPaginator

        monkeypatch.setattr(JobPaginator, "count_limit", 2)
        monkeypatch.setattr(JobAdmin, "list_per_page", 2)
        jobs = [make_failed(tasks.always_fails.enqueue()) for _ in range(5)]
        # Two failed at the same moment: the id breaks the tie.
        same = timezone.now() - datetime.timedelta(minutes=3)
        for job, minutes in zip(jobs, (9, 3, 3, 1, 7), strict=True):
            Job.objects.filter(pk=job.pk).update(
                finished_at=same
                if minutes == 3
                else timezone.now() - datetime.timedelta(minutes=minutes)
            )
        params = {"status__exact": "failed", "o": order}
        url, seen = reverse(CHANGELIST), []
        query = "?" + "&".join(f"{key}={value}" for key, value in params.items())
        while query:
            response = admin_client.get(url + query)
            cl = response.context["cl"]
            assert cl.by_key, cl.queryset.query.order_by
            assert str(cl.result_count) == "more than 2"
            seen += ids(response)
            query = cl.next_page_query
        expected = list(
            Job.objects.order_by(*cl.queryset.query.order_by).values_list("pk", flat=True)
        )
        assert seen == expected
        assert sorted(seen) == sorted(job.pk for job in jobs)
