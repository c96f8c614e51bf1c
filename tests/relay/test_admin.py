"""The admin's messages: blocked ones listed, retried or skipped, with permissions checked."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.urls import reverse

from django_outbox import Message, MessageStatus, publish

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("memory_broker")]

CHANGELIST = "admin:django_outbox_message_changelist"


def blocked_message(**fields):
    message = publish("orders", {"note": "<script>alert(1)</script>"}, key="k", **fields)
    Message.objects.filter(pk=message.pk).update(
        status=MessageStatus.BLOCKED, attempts=1, last_error="unroutable <b>"
    )
    return message


def test_the_list_and_page_show_a_blocked_message_escaped(admin_client):
    message = blocked_message()
    page = admin_client.get(reverse(CHANGELIST), {"status__exact": "blocked"})
    assert page.status_code == 200
    assert str(message.id) in page.text
    detail = admin_client.get(reverse("admin:django_outbox_message_change", args=[message.pk]))
    assert detail.status_code == 200
    assert "&lt;script&gt;" in detail.text
    assert "<script>alert" not in detail.text
    assert "unroutable &lt;b&gt;" in detail.text
    found = admin_client.get(reverse(CHANGELIST), {"q": str(message.id)})
    assert str(message.id) in found.text


def test_retry_hands_a_blocked_message_back_and_skip_deletes_it(admin_client):
    retried, skipped = blocked_message(), blocked_message()
    pending = publish("orders", {"n": 3})
    url = reverse(CHANGELIST)
    admin_client.post(
        url, {"action": "retry_messages", "_selected_action": [retried.pk, pending.pk]}
    )
    assert Message.objects.get(pk=retried.pk).status == MessageStatus.PENDING
    admin_client.post(
        url, {"action": "skip_messages", "_selected_action": [skipped.pk, pending.pk]}
    )
    # Only blocked messages are skipped: a pending one is never deleted by mistake.
    assert set(Message.objects.values_list("pk", flat=True)) == {retried.pk, pending.pk}


def test_a_viewer_without_change_permission_cannot_retry(client):
    viewer = User.objects.create_user("viewer", password="x", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_message"))
    client.force_login(viewer)
    message = blocked_message()
    response = client.post(
        reverse(CHANGELIST), {"action": "retry_messages", "_selected_action": [message.pk]}
    )
    assert response.status_code in (200, 302, 403)
    assert Message.objects.get(pk=message.pk).status == MessageStatus.BLOCKED
    assert client.get(reverse(CHANGELIST)).status_code == 200
