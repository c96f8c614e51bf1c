"""OUTBOX["HEALTH"]: its checks (E020, E021) and its defaults."""

from __future__ import annotations

import math

import pytest
from django.test import override_settings

from django_outbox.conf import get_settings
from django_outbox.validation.bounds import DAY
from django_outbox.validation.setting import setting_errors as outbox_setting_errors


@pytest.mark.parametrize(
    ("health", "check_id"),
    [
        pytest.param([60], "django_outbox.E020", id="E020-not-a-dict"),
        pytest.param({"ALLOWED_ERRORS": 60}, "django_outbox.E020", id="E020-unknown-key"),
        pytest.param({"ALLOWED_ERROR_SECONDS": -1}, "django_outbox.E021", id="E021-negative"),
        pytest.param({"ALLOWED_ERROR_SECONDS": "60"}, "django_outbox.E021", id="E021-string"),
        pytest.param({"GRACE_SECONDS": math.nan}, "django_outbox.E021", id="E021-nan"),
        pytest.param({"GRACE_SECONDS": DAY + 1}, "django_outbox.E021", id="E021-above-a-day"),
        pytest.param({"GRACE_SECONDS": True}, "django_outbox.E021", id="E021-bool"),
    ],
)
def test_an_invalid_health_setting_is_reported_with_its_id(health, check_id):
    errors = outbox_setting_errors({"HEALTH": health})
    assert [error.id for error in errors] == [check_id]
    assert errors[0].hint


@pytest.mark.parametrize(
    "health",
    [{}, {"ALLOWED_ERROR_SECONDS": 0}, {"GRACE_SECONDS": 600, "ALLOWED_ERROR_SECONDS": 900.5}],
)
def test_valid_health_settings_pass(health):
    assert outbox_setting_errors({"HEALTH": health}) == []


def test_health_keys_left_out_keep_their_defaults():
    with override_settings(OUTBOX={"HEALTH": {"GRACE_SECONDS": 10}}):
        assert get_settings().health == {"ALLOWED_ERROR_SECONDS": 60.0, "GRACE_SECONDS": 10.0}
    assert get_settings().health == {"ALLOWED_ERROR_SECONDS": 60.0, "GRACE_SECONDS": 120.0}
