# django-outbox: `make demo` runs the example on SQLite; `make test` runs the whole suite.
SHELL := /bin/bash
.DEFAULT_GOAL := help

# Django 6.x needs Python >= 3.12; Django 5.2 LTS is tested on the oldest Python it supports here.
PYTHON ?= $(shell .ci/find-python 3.12 3.13)
PYTHON_LTS ?= $(shell .ci/find-python 3.10 3.11 3.12)
VENV := .venv
VENV_LTS := .venv-django52
PG_URL ?= postgres://postgres@127.0.0.1:5432/outbox
SQLITE_URL ?= sqlite:///$(CURDIR)/.test-databases/outbox.sqlite3
PYTEST_ARGS ?=
BENCH_PG_URL ?= postgres://postgres@127.0.0.1:5432/outbox_bench
BENCH_SQLITE_URL ?= sqlite:///$(CURDIR)/.bench/outbox.sqlite3
BENCH_ARGS ?=
BENCH_SQLITE_ARGS ?= --only drain --only atomic --only bulk

.PHONY: help install install-lts postgres lint test test-sqlite test-postgresql test-lts demo bench clean

help:
	@echo "make demo   run the example project on SQLite: signups, jobs, retries, a report"
	@echo "make test   lint, type-check, and the suite on SQLite and PostgreSQL (Django 6 and 5.2)"
	@echo "make bench  the pgbench floor and outbox_bench on PostgreSQL, then on SQLite (~10 min)"

# Created once; reinstalled in place when pyproject.toml changes.
$(VENV)/.installed: pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e ".[dev]" "django>=6.0,<7"
	touch $@

$(VENV_LTS)/.installed: pyproject.toml
	test -x $(VENV_LTS)/bin/python || $(PYTHON_LTS) -m venv $(VENV_LTS)
	$(VENV_LTS)/bin/pip install --quiet --upgrade pip
	$(VENV_LTS)/bin/pip install --quiet -e ".[dev]" "django>=5.2,<5.3"
	touch $@

install: $(VENV)/.installed
install-lts: $(VENV_LTS)/.installed

postgres:
	@.ci/ensure-postgres

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy django_outbox
	DJANGO_SETTINGS_MODULE=tests.settings $(VENV)/bin/python -m django makemigrations --check --dry-run

test-sqlite: install
	DATABASE_URL=$(SQLITE_URL) $(VENV)/bin/pytest $(PYTEST_ARGS)

test-postgresql: install postgres
	DATABASE_URL=$(PG_URL) $(VENV)/bin/pytest $(PYTEST_ARGS)

# Django 5.2 LTS on the oldest supported Python, both databases.
test-lts: install-lts postgres
	DATABASE_URL=$(SQLITE_URL) $(VENV_LTS)/bin/pytest $(PYTEST_ARGS)
	DATABASE_URL=$(PG_URL)_lts $(VENV_LTS)/bin/pytest $(PYTEST_ARGS)

test: lint test-sqlite test-postgresql test-lts

demo: install
	cd example_project && rm -f demo.sqlite3 demo.sqlite3-wal demo.sqlite3-shm \
	  && ../$(VENV)/bin/python manage.py migrate --verbosity 0 \
	  && ../$(VENV)/bin/python manage.py demo

# The example project with DEBUG off (DEBUG records every query), on database URL $(1).
bench_manage = cd example_project && DEBUG=false DATABASE_URL=$(1) ../$(VENV)/bin/python manage.py

bench: install postgres
	psql "$(dir $(BENCH_PG_URL))postgres" -tAc "SELECT 1 FROM pg_database WHERE datname = '$(notdir $(BENCH_PG_URL))'" | grep -q 1 \
	  || psql "$(dir $(BENCH_PG_URL))postgres" -c "CREATE DATABASE $(notdir $(BENCH_PG_URL))"
	$(call bench_manage,$(BENCH_PG_URL)) migrate --verbosity 0
	$(call bench_manage,$(BENCH_PG_URL)) outbox_bench $(BENCH_ARGS)
	mkdir -p .bench && rm -f .bench/outbox.sqlite3*
	$(call bench_manage,$(BENCH_SQLITE_URL)) migrate --verbosity 0
	$(call bench_manage,$(BENCH_SQLITE_URL)) outbox_bench $(BENCH_SQLITE_ARGS) $(BENCH_ARGS)

clean:
	rm -rf $(VENV) $(VENV_LTS) .test-databases .bench .mypy_cache .ruff_cache *.egg-info
