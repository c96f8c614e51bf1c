"""Settings for ``make bench``: the example project's, with the bench app installed.

Run from ``example_project/`` with ``bench/`` on the path::

    PYTHONPATH=../bench DJANGO_SETTINGS_MODULE=outbox_bench.settings python manage.py outbox_bench
"""

from example.settings import *  # noqa: F403
from example.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "outbox_bench"]
