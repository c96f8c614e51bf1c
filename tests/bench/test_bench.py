"""``manage.py outbox_bench`` runs, reports every figure it was asked for, and cleans up.

These check that the bench works, not how fast anything is: speed is measured by ``make bench``.
"""

from __future__ import annotations

import io
import json
import os
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from django_outbox.models import Job

pytestmark = [pytest.mark.process, pytest.mark.bench, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def bench(monkeypatch):
    # The bench's worker processes inherit the environment: point them at the test database.
    monkeypatch.setenv("OUTBOX_TEST_DATABASE_NAME", str(connection.settings_dict["NAME"]))

    def run(*arguments: str) -> dict[str, Any]:
        out = io.StringIO()
        call_command("outbox_bench", "--json", *arguments, stdout=out, verbosity=0)
        results: dict[str, Any] = json.loads(out.getvalue())
        return results

    return run


def test_enqueue_and_drain_figures_are_measured_and_the_bench_jobs_deleted(bench):
    Job.objects.create(task_name="someone.elses", queue="default", max_attempts=1)
    results = bench(
        "--runs", "1", "--jobs", "200", "--bulk-batch", "50", "--processes", "1",
        "--concurrency", "2", "--only", "bulk", "--only", "drain", "--only", "atomic",
    )  # fmt: skip
    figures = results["figures"]
    rates = {
        "bulk_enqueue_per_s",
        "drain_per_s",
        "atomic_drain_per_s",
        "atomic_noop_drain_per_s",
        "bare_django_per_s",
        "worker_peak_rss_mb",
    }
    # CPU is read in the kernel's clock ticks (10 ms): a drain of 200 jobs may take fewer.
    cpu = {
        "drain_cpu_us_per_job",
        "atomic_drain_cpu_us_per_job",
        "atomic_noop_drain_cpu_us_per_job",
        "bare_django_cpu_us_per_job",
        "handler_alone_cpu_us_per_job",
    }
    ratios = {
        "atomic_drain_vs_bare_django",
        "atomic_queue_cpu_us_per_job",
        "atomic_queue_and_mark_cpu_us_per_job",
    }
    # The whole machine's CPU is read in ticks too: a drain that kept no core busy for one
    # has no ceiling.
    machine = {"drain_machine_cpu_us_per_job", "drain_cpu_ceiling_per_s", "drain_vs_cpu_ceiling"}
    assert rates | cpu | ratios <= set(figures) <= rates | cpu | ratios | machine
    if "drain_vs_cpu_ceiling" in figures:
        assert figures["drain_vs_cpu_ceiling"]["median"] == pytest.approx(
            figures["drain_per_s"]["median"] / figures["drain_cpu_ceiling_per_s"]["median"]
        )
        assert figures["drain_cpu_ceiling_per_s"]["median"] == pytest.approx(
            (os.cpu_count() or 1) / figures["drain_machine_cpu_us_per_job"]["median"] * 1e6
        )
    assert all(figures[name]["median"] > 0 for name in rates)
    assert all(figures[name]["median"] >= 0 for name in cpu)
    assert figures["bare_django_cpu_us_per_job"]["median"] > 0
    assert figures["atomic_drain_vs_bare_django"]["median"] == pytest.approx(
        figures["atomic_drain_per_s"]["median"] / figures["bare_django_per_s"]["median"]
    )
    assert figures["atomic_queue_cpu_us_per_job"]["median"] == pytest.approx(
        figures["atomic_drain_cpu_us_per_job"]["median"]
        - figures["bare_django_cpu_us_per_job"]["median"]
    )
    assert figures["atomic_queue_and_mark_cpu_us_per_job"]["median"] == pytest.approx(
        figures["atomic_drain_cpu_us_per_job"]["median"]
        - figures["handler_alone_cpu_us_per_job"]["median"]
    )
    assert results["vendor"] == connection.vendor
    # Only the bench's own jobs are gone, and the table the atomic jobs wrote to.
    assert list(Job.objects.values_list("task_name", flat=True)) == ["someone.elses"]
    assert "outbox_bench_effect" not in connection.introspection.table_names()


def test_the_fair_figures_compare_with_unkeyed_jobs(bench):
    results = bench(
        "--runs", "1", "--jobs", "200", "--processes", "1", "--concurrency", "2",
        "--fair-keys", "10", "--fair-backlog", "300", "--enqueue-jobs", "30", "--only", "fair",
    )  # fmt: skip
    figures = results["figures"]
    for layout in ("fair", "fair_interleaved"):
        assert figures[f"{layout}_drain_vs_unkeyed"]["median"] == pytest.approx(
            figures[f"{layout}_drain_per_s"]["median"] / figures["unkeyed_drain_per_s"]["median"]
        )
    # The worker's default, no prefetch, measured too, beside the configured prefetch's.
    assert figures["fair_drain_prefetch_0_vs_unkeyed"]["median"] == pytest.approx(
        figures["fair_drain_prefetch_0_per_s"]["median"]
        / figures["unkeyed_drain_prefetch_0_per_s"]["median"]
    )
    assert figures["unkeyed_prefetch_0_vs_prefetching"]["median"] == pytest.approx(
        figures["unkeyed_drain_prefetch_0_per_s"]["median"]
        / figures["unkeyed_drain_per_s"]["median"]
    )
    # With fair keys the newcomer overtakes the backlog; without, it waits behind it.
    fair_ahead = figures["fair_newcomer_claimed_ahead"]["median"]
    unkeyed_ahead = figures["unkeyed_newcomer_claimed_ahead"]["median"]
    assert fair_ahead < unkeyed_ahead
    assert unkeyed_ahead > 100
    assert not Job.objects.exists()


@pytest.mark.postgresql
def test_latency_is_measured_from_commit_to_handler_start(bench):
    results = bench("--runs", "1", "--latency-samples", "10", "--only", "latency")
    latency = {name: figure["median"] for name, figure in results["figures"].items()}
    assert latency["latency_p50_ms"] <= latency["latency_p99_ms"] < 1000
    # A handler starts after its job's COMMIT goes out, however loaded the machine: timed from
    # there, every wait is above zero; timed from the COMMIT's return, none is longer.
    assert (
        0 < latency["latency_from_commit_sent_p50_ms"] <= latency["latency_from_commit_sent_p99_ms"]
    )
    assert latency["latency_p50_ms"] <= latency["latency_from_commit_sent_p50_ms"]
    assert latency["latency_p99_ms"] <= latency["latency_from_commit_sent_p99_ms"]
    assert results["targets"]["latency_p50_ms"]["target"] == "<= 1.5"
    assert not Job.objects.exists()


# Several clients are worker processes, each importing Django: once, on the production engine.
@pytest.mark.postgresql
def test_the_enqueue_figure_compares_with_a_bare_create_and_a_raw_insert(bench):
    results = bench("--runs", "1", "--enqueue-jobs", "30", "--enqueue-clients", "2",
                    "--only", "enqueue")  # fmt: skip
    figures = results["figures"]
    assert figures["enqueue_cost_vs_create"]["median"] == pytest.approx(
        figures["bare_create_per_s"]["median"] / figures["enqueue_per_s"]["median"]
    )
    assert figures["enqueue_1_client_cost_vs_raw"]["median"] == pytest.approx(
        figures["raw_insert_1_client_per_s"]["median"] / figures["enqueue_1_client_per_s"]["median"]
    )
    assert not Job.objects.exists()
    # The comparison table is dropped again.
    assert "outbox_bench_row" not in connection.introspection.table_names()


def test_nothing_to_measure_is_an_error(bench):
    with pytest.raises(CommandError, match="leave nothing to measure"):
        bench("--only", "bulk", "--skip", "bulk")
