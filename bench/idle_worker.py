"""What an idle worker costs its database: transactions per second with nothing to do, at the
default intervals and at the floors the checks allow (PostgreSQL).

Run: ``DATABASE_URL=postgres://postgres@127.0.0.1:5432/outbox_idle .venv/bin/python
bench/idle_worker.py`` (creates the tables with ``migrate``; the database must exist). Counts
the database's committed and rolled-back transactions (``pg_stat_database``) while one worker
(4 threads, no jobs) runs for ``SECONDS``; nothing else may use the database meanwhile.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

SECONDS = 10.0


def transactions() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        # The statistics are a snapshot per transaction: clear it to see the latest counts.
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database "
            "WHERE datname = current_database()"
        )
        return int(cursor.fetchone()[0])


def measure(label: str, **outbox: float) -> None:
    from django.conf import settings
    from django.db import connection
    from django.test.utils import override_settings

    from django_outbox.worker.loop import Worker

    with override_settings(OUTBOX={**settings.OUTBOX, **outbox}):
        worker = Worker(concurrency=4, cron=False)
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        time.sleep(2)  # past the start's own statements
        before = transactions()
        started = time.monotonic()
        time.sleep(SECONDS)
        counted = transactions() - before - 2  # this script's own reads
        took = time.monotonic() - started
        worker.request_stop()
        thread.join(30)
    connection.close()
    print(f"{label:<45} {counted / took:7.1f} transactions/s")


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    from django_outbox.validation.bounds import HEARTBEAT_SECONDS_MIN, POLL_SECONDS_MIN

    measure(
        "defaults (POLL 1 s, HEARTBEAT 10 s)",
        POLL_SECONDS=1.0,
        HEARTBEAT_SECONDS=10.0,
        LEASE_SECONDS=60.0,
    )
    measure(
        f"floors (POLL {POLL_SECONDS_MIN:g} s, HEARTBEAT {HEARTBEAT_SECONDS_MIN:g} s)",
        POLL_SECONDS=POLL_SECONDS_MIN,
        HEARTBEAT_SECONDS=HEARTBEAT_SECONDS_MIN,
        LEASE_SECONDS=max(1.0, 3 * HEARTBEAT_SECONDS_MIN),
    )


if __name__ == "__main__":
    main()
