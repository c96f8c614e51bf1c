"""What ``import django_outbox`` offers, and when it may be imported."""

from __future__ import annotations

import subprocess
import sys

import pytest

import django_outbox
from django_outbox import models
from tests.helpers import REPO


def test_the_model_and_its_statuses_are_importable_from_the_package():
    from django_outbox import Job, JobStatus

    assert Job is models.Job
    assert JobStatus is models.JobStatus
    assert {"Job", "JobStatus"} <= set(django_outbox.__all__)


def test_every_public_name_is_there():
    for name in django_outbox.__all__:
        assert getattr(django_outbox, name) is not None, name


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'Jobs'"):
        django_outbox.Jobs  # noqa: B018


def test_the_package_imports_before_django_is_set_up():
    # Django imports the app's package before its registry is ready, and a project's models.py
    # may import `task` from it: the model must not be imported with the package.
    code = (
        "import sys, django_outbox; "
        "assert 'django_outbox.models' not in sys.modules, 'models imported'; "
        "print(django_outbox.task.__name__)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "task"


def test_the_api_reference_lists_every_public_name():

    from django_outbox import cron, signals, testing

    reference = (REPO / "docs" / "api.md").read_text()
    names = [
        *django_outbox.__all__,
        *testing.__all__,
        *cron.__all__,
        *(name for name in vars(signals) if name.startswith("job_")),
    ]
    missing = [name for name in names if f"`{name}" not in reference]
    assert not missing, f"docs/api.md does not list {missing}"
