# django-outbox: `make demo` runs the example on SQLite; `make test` runs the whole suite.
SHELL := /bin/bash
.DEFAULT_GOAL := help

# Django 6.x needs Python >= 3.12; Django 5.2 LTS is tested on the oldest Python it supports here.
PYTHON ?= $(shell .ci/find-python 3.12 3.13)
# (Twice, on 2026-11-25 and before, the 5.2 leg's SQLite run died of SIGBUS inside Python
# 3.10's sqlite3 module; it did not come back in the leg's full runs on 3.10 since (one beside
# the Django 6 leg, as make test runs them), nor in three runs of its worker and job tests. pytest's faulthandler prints every thread's stack on a SIGBUS,
# and the worker processes' too (PYTHONFAULTHANDLER, tests/processes.py): should it come back,
# the log says where.)
PYTHON_LTS ?= $(shell .ci/find-python 3.10 3.11 3.12)
# The wheel is tried on the newest Python and the first Django 6 release line.
PYTHON_WHEEL ?= $(shell .ci/find-python 3.13 3.12)
VENV := .venv
VENV_LTS := .venv-django52
VENV_WHEEL := .venv-wheel
PG_URL ?= postgres://postgres@127.0.0.1:5432/outbox
SQLITE_URL ?= sqlite:///$(CURDIR)/.test-databases/outbox.sqlite3
MARIADB_URL ?= mysql://root@127.0.0.1:3306/outbox_mariadb
PYTEST_ARGS ?=
BENCH_PG_URL ?= postgres://postgres@127.0.0.1:5432/outbox_bench
BENCH_SQLITE_URL ?= sqlite:///$(CURDIR)/.bench/outbox.sqlite3
BENCH_MARIADB_URL ?= mysql://root@127.0.0.1:3306/outbox_bench
# MariaDB's figures beside PostgreSQL's (the pgbench floor is PostgreSQL's own; the million-row
# table and the stats' timings are left to a long run).
BENCH_MARIADB_ARGS ?= --skip large-table --skip stats
BENCH_ARGS ?=
BENCH_SQLITE_ARGS ?= --only drain --only atomic --only bulk --only fair
# The relay (outbox_relay_bench) at a small size, to stay quick: each broker against its own
# publish rate, on PostgreSQL then SQLite; on PostgreSQL also the latency at 1,000 messages a
# second (at 100 for RabbitMQ, whose client confirms one message at a time) and the idle cost.
# It empties and removes its stream, queue or topic, OUTBOX_BENCH_TOPIC (outbox-bench): give
# each bench that shares a broker a name of its own.
BENCH_RELAY_ARGS ?= --messages 5000 --latency-seconds 5 --idle-seconds 5
BENCH_RELAY_FAST = --broker memory --broker redis --broker nats --broker kafka
BENCH_RELAY_RABBITMQ = --broker rabbitmq --messages 1000 --latency-rate 100 --idle-seconds 0

.PHONY: help install install-lts postgres brokers mariadb browser lint test test-sqlite \
	test-postgresql test-postgresql-chaos test-mariadb test-lts test-lts-sqlite test-lts-postgresql wheel chaos demo bench \
	screenshots clean docs

help:
	@echo "make demo   run the example project on SQLite: signups, jobs, retries, a report"
	@echo "make test   lint, type-check, the suite on SQLite and PostgreSQL (Django 6 and 5.2), MariaDB"
	@echo "make bench  the pgbench floor, outbox_bench and the relay's bench on PostgreSQL, MariaDB, then SQLite (~18 min)"
	@echo "make chaos  the fault-injection suite at full size (kills, database restarts, load)"
	@echo "make docs   build the documentation site into docs/_build/html"

# Created once; reinstalled in place when pyproject.toml changes. The development tools are the
# dependency group "dev" (pip >= 25.1 installs groups: the pip upgrade comes first).
$(VENV)/.installed: pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e . --group dev "django>=6.0,<7"
	touch $@

$(VENV_LTS)/.installed: pyproject.toml
	test -x $(VENV_LTS)/bin/python || $(PYTHON_LTS) -m venv $(VENV_LTS)
	$(VENV_LTS)/bin/pip install --quiet --upgrade pip
	$(VENV_LTS)/bin/pip install --quiet -e ".[tasks]" --group dev "django>=5.2,<5.3"
	touch $@

install: $(VENV)/.installed
install-lts: $(VENV_LTS)/.installed

# mysqlclient (the extra "mariadb"), built against Debian's libmariadb-dev, which
# .ci/ensure-mariadb installs with the server where missing.
$(VENV)/.mariadb: pyproject.toml $(VENV)/.installed
	.ci/ensure-mariadb
	$(VENV)/bin/pip install --quiet -e ".[mariadb]" --group dev "django>=6.0,<7"
	touch $@

# The local MariaDB server answering (started if it does not; never restarted), and the
# driver installed.
mariadb: $(VENV)/.mariadb
	@.ci/ensure-mariadb $(notdir $(MARIADB_URL))

postgres:
	@.ci/ensure-postgres

# Redis, NATS (JetStream) and RabbitMQ for the relay's tests, started where they do not answer.
brokers:
	@.ci/ensure-brokers

# Debian's chromium and chromium-driver for the admin's browser tests (-m browser), installed
# where missing and possible; the tests skip, saying why, where they are not.
browser:
	@.ci/ensure-chromium

# The documentation site from docs/ (warnings, broken links and references included, are errors).
docs: install
	$(VENV)/bin/sphinx-build --fail-on-warning --keep-going --quiet -b html docs docs/_build/html
	@echo "docs/_build/html/index.html"

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/mypy django_outbox tests bench/outbox_bench bench/*.py tools
	PYTHONPATH=bench DJANGO_SETTINGS_MODULE=tests.settings $(VENV)/bin/python -m django makemigrations --check --dry-run

test-sqlite: install
	DATABASE_URL=$(SQLITE_URL) $(VENV)/bin/pytest $(PYTEST_ARGS)

# Prepared statements on this leg, as the README recommends; Django's default on the LTS leg.
# The browser tests (-m browser) and the quickstart's (-m docs) run on the SQLite leg only:
# they test the admin's pages and the docs, and the quickstart makes a SQLite project of its
# own whatever the suite's database.
PG_MARKERS ?= not browser and not docs
PG_PYTEST_ARGS ?= -m "$(PG_MARKERS)"
test-postgresql: install postgres
	OUTBOX_TEST_PREPARE_THRESHOLD=5 DATABASE_URL=$(PG_URL) $(VENV)/bin/pytest $(PG_PYTEST_ARGS) \
	  $(PYTEST_ARGS)

# PostgreSQL's fault-injection tests alone, on a database of their own, so that `make test` can
# run them beside the rest of that leg (which then leaves them out).
PG_CHAOS_URL ?= $(PG_URL)_chaos
test-postgresql-chaos: install postgres brokers
	OUTBOX_TEST_PREPARE_THRESHOLD=5 DATABASE_URL=$(PG_CHAOS_URL) $(VENV)/bin/pytest -m chaos \
	  $(PYTEST_ARGS)

# MariaDB, on Django 6: the whole suite but the browser tests and the quickstart's (as on
# PostgreSQL), the fault-injection tests included; the database restart among them runs on a
# private server of its own (tests/chaos/test_mariadb_restart.py), never the shared one.
MARIADB_PYTEST_ARGS ?= -m "not browser and not docs"
test-mariadb: install mariadb
	DATABASE_URL=$(MARIADB_URL) $(VENV)/bin/pytest $(MARIADB_PYTEST_ARGS) $(PYTEST_ARGS)

# Django 5.2 LTS on the oldest supported Python, both databases. The fault-injection tests
# (-m chaos) test the queue, not Django: they run on the Django 6 legs. So do the browser tests
# (-m browser, a minute a leg: the admin's views and templates are tested on 5.2 without them),
# the bench's (-m bench: the benchmark app, a minute) and the quickstart's (-m docs: it follows
# the page with the suite's Django). On SQLite the worker-process tests (-m process: a worker,
# a supervisor, signals, started as their own processes) are left to the 5.2 PostgreSQL leg,
# which runs them on the same Python and Django: a minute and a half of this leg's, most of it
# starting processes.
LTS_PYTEST_ARGS ?= -m "not chaos and not browser and not bench and not docs"
LTS_SQLITE_PYTEST_ARGS ?= -m "not chaos and not browser and not bench and not docs and not process"
test-lts-sqlite: install-lts
	DATABASE_URL=$(SQLITE_URL) $(VENV_LTS)/bin/pytest $(LTS_SQLITE_PYTEST_ARGS) $(PYTEST_ARGS)

test-lts-postgresql: install-lts postgres
	DATABASE_URL=$(PG_URL)_lts $(VENV_LTS)/bin/pytest $(LTS_PYTEST_ARGS) $(PYTEST_ARGS)

test-lts: test-lts-sqlite test-lts-postgresql

# The package as users install it: the wheel built, installed into a new virtualenv with
# Django 6.0 (the suite runs 6.x's newest), and the demo run against it.
wheel: install
	rm -rf dist $(VENV_WHEEL)
	$(VENV)/bin/pip wheel --quiet --no-deps --wheel-dir dist .
	$(PYTHON_WHEEL) -m venv $(VENV_WHEEL)
	$(VENV_WHEEL)/bin/pip install --quiet dist/django_outbox_queue-*.whl "django>=6.0,<6.1" \
	  "django-environ>=0.11"
	.ci/check-wheel dist/django_outbox_queue-*.whl $(VENV_WHEEL)

# Five chains of legs run side by side (.ci/parallel): the legs wait on worker processes,
# sleeps and servers far more than they compute (with four chains a whole run used about 60% of
# the 2 cores' time). No leg stops or restarts a shared server: the fault-injection tests that
# do run on servers of their own. The chains are about as long as each other: on 2026-11-29,
# with four chains, PostgreSQL with its fault-injection tests (11:48) and the two 5.2 legs in
# one chain (12:19) set the whole run's length (13:40 with installs); with these five, MariaDB
# (10:56) did (12:02).
test: lint docs install-lts postgres mariadb brokers browser
	.ci/parallel "$(MAKE) --no-print-directory --keep-going test-postgresql \
	    PG_MARKERS='not browser and not docs and not chaos'" \
	  "$(MAKE) --no-print-directory --keep-going test-sqlite wheel" \
	  "$(MAKE) --no-print-directory --keep-going test-mariadb" \
	  "$(MAKE) --no-print-directory --keep-going test-lts-postgresql" \
	  "$(MAKE) --no-print-directory --keep-going test-lts-sqlite test-postgresql-chaos"

# The fault-injection suite at full size; `make test` runs it at CI size. Each database's run
# keeps every broker down 10 minutes (tests/chaos/test_broker_outage.py, 15 min with its
# checks) and restarts a private RabbitMQ node ten times: about 35 min a database.
# Figures go to .chaos/report.jsonl, for docs/reliability.md.
CHAOS_ARGS ?=
chaos: install postgres brokers
	mkdir -p .chaos
	OUTBOX_CHAOS_SCALE=full OUTBOX_CHAOS_REPORT=$(CURDIR)/.chaos/report.jsonl \
	  DATABASE_URL=$(SQLITE_URL) $(VENV)/bin/pytest -m chaos $(CHAOS_ARGS)
	OUTBOX_CHAOS_SCALE=full OUTBOX_CHAOS_REPORT=$(CURDIR)/.chaos/report.jsonl \
	  OUTBOX_TEST_PREPARE_THRESHOLD=5 DATABASE_URL=$(PG_URL) $(VENV)/bin/pytest -m chaos $(CHAOS_ARGS)

demo: install
	cd example_project && rm -f demo.sqlite3 demo.sqlite3-wal demo.sqlite3-shm \
	  && ../$(VENV)/bin/python manage.py migrate --verbosity 0 \
	  && ../$(VENV)/bin/python manage.py demo

# The example project with the bench app (bench/outbox_bench) and DEBUG off (DEBUG records
# every query), on database URL $(1).
bench_manage = cd example_project && DEBUG=false DATABASE_URL=$(1) PYTHONPATH=../bench \
  DJANGO_SETTINGS_MODULE=outbox_bench.settings ../$(VENV)/bin/python manage.py

bench: install postgres mariadb brokers
	psql "$(dir $(BENCH_PG_URL))postgres" -tAc "SELECT 1 FROM pg_database WHERE datname = '$(notdir $(BENCH_PG_URL))'" | grep -q 1 \
	  || psql "$(dir $(BENCH_PG_URL))postgres" -c "CREATE DATABASE $(notdir $(BENCH_PG_URL))"
	$(call bench_manage,$(BENCH_PG_URL)) migrate --verbosity 0
	$(call bench_manage,$(BENCH_PG_URL)) outbox_bench $(BENCH_ARGS)
	$(call bench_manage,$(BENCH_PG_URL)) outbox_relay_bench $(BENCH_RELAY_FAST) $(BENCH_RELAY_ARGS)
	$(call bench_manage,$(BENCH_PG_URL)) outbox_relay_bench $(BENCH_RELAY_ARGS) $(BENCH_RELAY_RABBITMQ)
	.ci/ensure-mariadb $(notdir $(BENCH_MARIADB_URL))
	$(call bench_manage,$(BENCH_MARIADB_URL)) migrate --verbosity 0
	$(call bench_manage,$(BENCH_MARIADB_URL)) outbox_bench $(BENCH_MARIADB_ARGS) $(BENCH_ARGS)
	mkdir -p .bench && rm -f .bench/outbox.sqlite3*
	$(call bench_manage,$(BENCH_SQLITE_URL)) migrate --verbosity 0
	$(call bench_manage,$(BENCH_SQLITE_URL)) outbox_bench $(BENCH_SQLITE_ARGS) $(BENCH_ARGS)
	$(call bench_manage,$(BENCH_SQLITE_URL)) outbox_relay_bench $(BENCH_RELAY_FAST) \
	  $(BENCH_RELAY_ARGS) --latency-seconds 0 --idle-seconds 0

# The admin's pictures in docs/images/, taken from the example project with the package installed
# from its wheel (tracebacks show a user's paths), by Debian's chromium.
screenshots: install browser
	$(VENV)/bin/python tools/screenshots.py $(PYTHON_WHEEL)

clean:
	rm -rf $(VENV) $(VENV_LTS) $(VENV_WHEEL) dist build .test-databases .bench .chaos .mypy_cache .ruff_cache *.egg-info
