"""Each limits test starts as a new worker process would: nothing known of the limits (the
database is emptied between tests, their rows with it)."""

from collections.abc import Iterator

import pytest

from django_outbox.limits import claims, state


@pytest.fixture(autouse=True)
def limited_claims_start_afresh() -> Iterator[None]:
    claims._room_known.clear()
    claims._one_trip_resumes.clear()
    claims._one_trip_pauses.clear()
    state._known_rows.clear()
    yield
    claims._room_known.clear()
    claims._one_trip_resumes.clear()
    claims._one_trip_pauses.clear()
