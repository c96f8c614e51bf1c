"""The reference database backend's test suite (django-tasks-db 0.13.0, ``tests/tests.py``),
run against OutboxBackend.

Adapted as little as possible; every change is marked ``# outbox:`` with its reason, and
docs/django-tasks.md lists them. The reference's tests are under the BSD 3-clause license in
LICENSE beside this file (Copyright (c) Jake Howard and individual contributors).
"""
