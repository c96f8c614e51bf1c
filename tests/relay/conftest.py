"""The relay's tests publish to the in-memory broker unless they name a real one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import override_settings

from django_outbox.relay.brokers import close_brokers, memory

MEMORY = "django_outbox.relay.brokers.memory.InMemoryBroker"


@pytest.fixture
def memory_broker(settings: object) -> Iterator[None]:
    """OUTBOX["BROKERS"] with one in-memory broker, "default", emptied before and after."""
    from django.conf import settings as django_settings

    outbox = {**django_settings.OUTBOX, "BROKERS": {"default": {"BACKEND": MEMORY}}}
    memory.clear()
    with override_settings(OUTBOX=outbox):
        yield
    close_brokers()
    memory.clear()
    memory._down.clear()
