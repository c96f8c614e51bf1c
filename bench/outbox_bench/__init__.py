"""Benchmarks shipped with django-outbox: ``manage.py outbox_bench``."""
