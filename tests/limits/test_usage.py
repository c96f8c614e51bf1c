"""Each limit's use, as outbox_stats and the dashboard show it."""

import json
from io import StringIO

import pytest
from django.core.management import call_command

from django_outbox.limits.claims import claim_limited
from django_outbox.limits.usage import limit_usage
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def use_of(name, key=""):
    (use,) = [use for use in limit_usage() if use.name == name and use.key == key]
    return use


def test_a_cap_shows_its_running_jobs_and_those_waiting():
    tasks.capped.enqueue_many([{}] * 10)
    claim_limited("default", "w", None, 10, 30)
    use = use_of(tasks.capped.name)
    assert (use.running, use.concurrency, use.waiting, use.at_cap) == (3, 3, 7, True)


def test_a_rate_shows_the_tokens_left():
    tasks.rated.enqueue_many([{}] * 3)
    assert use_of(tasks.rated.name).tokens == 5
    claim_limited("default", "w", None, 10, 30)
    assert use_of(tasks.rated.name).tokens == pytest.approx(2, abs=0.1)


def test_per_key_limits_list_the_busiest_keys():
    tasks.capped_per_key.enqueue_many([{}] * 5, limit_key="big")
    tasks.capped_per_key.enqueue({}, limit_key="small")
    claim_limited("default", "w", None, 10, 30)
    assert (
        use_of(tasks.capped_per_key.name, "big").running,
        use_of(tasks.capped_per_key.name, "big").waiting,
    ) == (2, 3)
    assert use_of(tasks.capped_per_key.name, "small").running == 1


def test_outbox_stats_shows_the_limits():
    tasks.capped.enqueue_many([{}] * 4)
    claim_limited("default", "w", None, 10, 30)
    out = StringIO()
    call_command("outbox_stats", stdout=out)
    assert f"task {tasks.capped.name}, running 3/3, waiting 1" in out.getvalue()
    out = StringIO()
    call_command("outbox_stats", "--json", stdout=out)
    (capped,) = [
        use for use in json.loads(out.getvalue())["limits"] if use["name"] == tasks.capped.name
    ]
    assert capped["running"] == 3


def test_the_dashboard_shows_each_limit_escaped():
    from django.contrib.auth.models import Permission, User
    from django.test import Client
    from django.urls import reverse

    tasks.capped.enqueue_many([{}] * 4)
    tasks.throttled_by_service.enqueue({}, limit_key="<b>acct</b>")
    claim_limited("default", "w", None, 10, 30)
    user = User.objects.create_user("staff", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_job"))
    client = Client()
    client.force_login(user)
    page = client.get(reverse("admin:django_outbox_dashboard_changelist")).content.decode()
    assert "Concurrency caps and rate limits" in page
    assert "3 / 3" in page
    assert "&lt;b&gt;acct&lt;/b&gt;" in page
    assert "<b>acct</b>" not in page


def test_rows_that_hold_nothing_are_pruned_and_pauses_and_buckets_in_use_kept():
    from django.db import connection

    from django_outbox.db import queries_for
    from django_outbox.limits.pruning import IDLE_SECONDS, prune_idle_limits
    from django_outbox.models import LimitState

    now = queries_for(connection).database_seconds(connection)
    LimitState.objects.create(kind="task", name="cap-only")
    LimitState.objects.create(
        kind="task", name="idle", tokens=0, refilled_at=now - IDLE_SECONDS - 5
    )
    LimitState.objects.create(kind="task", name="recent", tokens=0, refilled_at=now - 5)
    LimitState.objects.create(kind="task", name="paused", paused_until=now + 60)
    LimitState.objects.create(kind="task", name="was paused", paused_until=now - 60)
    assert prune_idle_limits("default") == 3
    assert sorted(LimitState.objects.values_list("name", flat=True)) == ["paused", "recent"]
