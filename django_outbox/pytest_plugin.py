"""The pytest plugin: an ``outbox`` fixture with django_outbox.testing's helpers.

Registered by the package's ``pytest11`` entry point, so installing django-outbox-queue is
enough: ``def test_signup(outbox): ...; outbox.run_jobs(); outbox.assert_enqueued(...)``.
"""

from __future__ import annotations

import types

import pytest


@pytest.fixture
def outbox(request: pytest.FixtureRequest) -> types.ModuleType:
    """django_outbox.testing, with database access for the test (pytest-django's ``db``)."""
    request.getfixturevalue("db")
    from . import testing

    return testing
