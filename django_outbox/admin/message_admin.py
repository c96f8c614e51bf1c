"""The admin's messages for brokers: what waits, what a broker refused, and what to do.

A blocked message (the broker refused it for good, or too often) holds back the later messages
of its key. Retry hands it to the relay again (after fixing the broker: binding a queue, adding
a stream); skip deletes it, and its key's later messages go on. Both need the change or delete
permission; the payload and headers are shown as text, escaped like every other field.
"""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from ..models import Message, MessageStatus

if TYPE_CHECKING:
    MessageModelAdmin = admin.ModelAdmin[Message]
else:
    # ModelAdmin is generic only in the type stubs.
    MessageModelAdmin = admin.ModelAdmin


class MessageAdmin(MessageModelAdmin):
    list_display = ("id", "topic", "key", "type", "broker", "status", "attempts", "created_at")
    list_filter = ("status", "broker")
    search_fields = ("=key", "topic")
    ordering = ("-id",)
    list_per_page = 100
    show_full_result_count = False
    actions = ["retry_messages", "skip_messages"]
    readonly_fields = (
        "id",
        "topic",
        "key",
        "type",
        "broker",
        "status",
        "attempts",
        "created_at",
        "available_at",
        "sent_at",
        "lease_expires_at",
        "last_error",
        "headers_text",
        "payload_text",
    )
    exclude = ("headers", "payload", "lease_token")

    def has_add_permission(self, request: HttpRequest) -> bool:
        # Messages come from publish(), checked; a hand-made one could bypass the checks.
        return False

    @admin.display(description=_("headers"))
    def headers_text(self, message: Message) -> str:
        return json.dumps(message.headers, indent=2, ensure_ascii=False)

    @admin.display(description=_("payload"))
    def payload_text(self, message: Message) -> str:
        return json.dumps(message.payload, indent=2, ensure_ascii=False)

    @admin.action(permissions=["change"], description=_("Retry selected blocked messages"))
    def retry_messages(self, request: HttpRequest, queryset: QuerySet[Message]) -> None:
        count = queryset.filter(status=MessageStatus.BLOCKED).update(
            status=MessageStatus.PENDING, available_at=None, lease_token=None, lease_expires_at=None
        )
        self.message_user(
            request,
            ngettext(
                "%d blocked message handed to the relay again.",
                "%d blocked messages handed to the relay again.",
                count,
            )
            % count,
            messages.SUCCESS,
        )

    @admin.action(
        permissions=["delete"],
        description=_("Skip selected blocked messages (delete them: their keys go on)"),
    )
    def skip_messages(self, request: HttpRequest, queryset: QuerySet[Message]) -> None:
        count, _by_model = queryset.filter(status=MessageStatus.BLOCKED).delete()
        self.message_user(
            request,
            ngettext("%d blocked message skipped.", "%d blocked messages skipped.", count) % count,
            messages.SUCCESS,
        )

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Message], search_term: str
    ) -> tuple[QuerySet[Message], bool]:
        """Find a message by its id too, as consumers and logs show it."""
        try:
            message_id = uuid.UUID(search_term.strip())
        except ValueError:
            return super().get_search_results(request, queryset, search_term)
        return queryset.filter(pk=message_id), False
