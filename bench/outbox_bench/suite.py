"""The whole benchmark: which figures, in which order, against which targets."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import connections

from . import measure
from . import tasks as bench_tasks
from .floor import FloorUnavailable, measure_floor
from .tables import created, effect_model
from .writes import using

#: Every part of the bench, in the order it runs.
PARTS = (
    "enqueue",
    "bulk",
    "drain",
    "atomic",
    "fair",
    "latency",
    "idle",
    "large-table",
    "stats",
    "floor",
)


@dataclass(frozen=True)
class BenchConfig:
    runs: int = 3
    jobs: int = 20_000
    processes: int = 2
    concurrency: int = 8
    prefetch: int = 100
    enqueue_jobs: int = 3_000
    # Like the floor's pgbench clients: each its own thread and connection.
    enqueue_clients: int = 4
    bulk_batch: int = 1_000
    latency_samples: int = 200
    fair_keys: int = 1_000
    fair_backlog: int = 10_000
    retained: int = 1_000_000
    ready: int = 100_000
    floor_seconds: float = 10.0
    idle_seconds: float = 10.0
    parts: tuple[str, ...] = PARTS


#: The targets the bench checks, as (figure, at least/at most, value): docs/performance.md.
TARGETS: dict[str, dict[str, tuple[str, float]]] = {
    "postgresql": {
        "enqueue_per_s": (">=", 1_400),
        "enqueue_cost_vs_create": ("<=", 1.3),
        "enqueue_1_client_cost_vs_create": ("<=", 1.3),
        "enqueue_cost_vs_raw": ("<=", 1.1),
        "enqueue_1_client_cost_vs_raw": ("<=", 1.1),
        "bulk_enqueue_per_s": (">=", 60_000),
        "drain_per_s": (">=", 20_000),
        "drain_vs_claim100_floor": (">=", 0.35),
        "drain_cpu_us_per_job": ("<=", 40),
        "enqueue_cost_vs_atomic_raw": ("<=", 1.05),
        "enqueue_1_client_cost_vs_atomic_raw": ("<=", 1.05),
        "atomic_drain_per_s": (">=", 2_500),
        "atomic_drain_vs_insert_floor": (">=", 0.60),
        "atomic_drain_vs_atomic_job_floor": (">=", 0.65),
        "atomic_drain_vs_bare_django": (">=", 0.85),
        "atomic_drain_cpu_us_per_job": ("<=", 350),
        "atomic_queue_cpu_us_per_job": ("<=", 120),
        "fair_drain_vs_unkeyed": (">=", 0.75),
        "fair_interleaved_drain_vs_unkeyed": (">=", 0.75),
        "fair_drain_prefetch_0_vs_unkeyed": (">=", 0.75),
        "latency_p50_ms": ("<=", 1.5),
        "latency_p99_ms": ("<=", 3.0),
        "large_table_drain_vs_empty": (">=", 0.80),
        "worker_peak_rss_mb": ("<", 80),
    },
    # The database issue's goals: drains within 0.7x of PostgreSQL's on the same machine (in
    # docs/performance.md, beside them), p99 latency under the poll interval plus 10 ms.
    "mysql": {
        "latency_p99_ms": ("<", 510),
        "fair_drain_vs_unkeyed": (">=", 0.75),
        "worker_peak_rss_mb": ("<", 80),
    },
    "sqlite": {
        "drain_per_s": (">=", 1_500),
        "fair_drain_vs_unkeyed": (">=", 0.75),
        "fair_interleaved_drain_vs_unkeyed": (">=", 0.75),
        "fair_drain_prefetch_0_vs_unkeyed": (">=", 0.75),
        "worker_peak_rss_mb": ("<", 80),
    },
}


def meets(value: float, comparison: str, target: float) -> bool:
    return {
        ">=": value >= target,
        "<=": value <= target,
        "<": value < target,
    }[comparison]


def run_bench(config: BenchConfig, log: Callable[[str], None]) -> dict[str, Any]:
    """Measure every part of ``config.parts``; return the figures (medians and runs)."""
    vendor = connections[using()].vendor
    figures: dict[str, measure.Figure] = {}

    def figure(name: str, unit: str) -> measure.Figure:
        return figures.setdefault(name, measure.Figure(name, unit))

    measure.delete_bench_jobs()
    parts = config.parts
    for run in range(1, config.runs + 1):
        if "enqueue" in parts:
            for clients, suffix in ((config.enqueue_clients, ""), (1, "_1_client")):
                rates = measure.measure_enqueue(config.enqueue_jobs, clients)
                enqueued, bare, raw = rates["enqueue"], rates["create"], rates["raw"]
                atomic_raw = rates["atomic_raw"]
                figure(f"enqueue{suffix}_per_s", "jobs/s").runs.append(enqueued)
                figure(f"bare_create{suffix}_per_s", "rows/s").runs.append(bare)
                figure(f"raw_insert{suffix}_per_s", "rows/s").runs.append(raw)
                figure(f"enqueue{suffix}_cost_vs_create", "x").runs.append(bare / enqueued)
                figure(f"raw_insert_in_atomic{suffix}_per_s", "rows/s").runs.append(atomic_raw)
                figure(f"enqueue{suffix}_cost_vs_raw", "x").runs.append(raw / enqueued)
                figure(f"enqueue{suffix}_cost_vs_atomic_raw", "x").runs.append(
                    atomic_raw / enqueued
                )
                log(
                    f"run {run}: enqueue {enqueued:,.0f}/s, bare create {bare:,.0f}/s, "
                    f"raw INSERT {raw:,.0f}/s, raw INSERT in atomic() {atomic_raw:,.0f}/s "
                    f"({clients} client{'s' if clients > 1 else ''})"
                )
        if "bulk" in parts:
            bulk = measure.measure_bulk_enqueue(config.jobs, config.bulk_batch)
            figure("bulk_enqueue_per_s", "jobs/s").runs.append(bulk)
            log(f"run {run}: bulk enqueue {bulk:,.0f}/s")
    if {"drain", "atomic", "fair", "large-table"} & set(parts):
        with (
            measure.running_workers(
                config.processes, config.concurrency, config.prefetch
            ) as workers,
            created(effect_model(), using()),
        ):
            for run in range(1, config.runs + 1):
                if "drain" in parts:
                    _drain(config, workers, figure, log, run)
                if "atomic" in parts:
                    _atomic(config, workers, figure, log, run)
                if "fair" in parts:
                    _fair(config, figure, log, run)
            if "large-table" in parts:
                _large_table(config, figure, log)
            figure("worker_peak_rss_mb", "MB").runs.append(max(workers.peak_rss_mb(), default=0))
    if "fair" in parts and config.prefetch != 0:
        _fair_without_prefetch(config, figure, log)
    if "stats" in parts:
        _stats(config, figure, log)
    if "latency" in parts:
        for run in range(1, config.runs + 1):
            latencies = measure.measure_latency(config.latency_samples, config.concurrency)
            for name, fraction in (("p50", 0.50), ("p95", 0.95), ("p99", 0.99)):
                figure(f"latency_{name}_ms", "ms").runs.append(
                    measure.percentile(latencies.after_commit, fraction)
                )
            for name, fraction in (("p50", 0.50), ("p99", 0.99)):
                figure(f"latency_from_commit_sent_{name}_ms", "ms").runs.append(
                    measure.percentile(latencies.from_commit_sent, fraction)
                )
            log(
                f"run {run}: enqueue->start p50 "
                f"{measure.percentile(latencies.after_commit, 0.5):.2f} ms, p99 "
                f"{measure.percentile(latencies.after_commit, 0.99):.2f} ms"
            )
    if "idle" in parts:
        for run in range(1, config.runs + 1):
            idle = measure.measure_idle(config.idle_seconds, config.concurrency)
            figure("idle_worker_cpu_ms_per_s", "ms/s").runs.append(idle["cpu_ms_per_s"])
            figure("idle_poll_ms", "ms").runs.append(idle["poll_ms"])
            log(
                f"run {run}: idle worker {idle['cpu_ms_per_s']:.1f} ms CPU/s, "
                f"a poll {idle['poll_ms']:.2f} ms"
            )
    floor: dict[str, Any] | None = None
    if "floor" in parts and vendor == "postgresql":
        floor = _floor(config, figures, log)
    return {
        "vendor": vendor,
        "config": config.__dict__ | {"parts": list(config.parts)},
        "figures": {name: item.as_dict() for name, item in figures.items()},
        "floor": floor,
        "targets": _check_targets(vendor, figures),
    }


def _drain(
    config: BenchConfig,
    workers: measure.Workers,
    figure: Callable[[str, str], measure.Figure],
    log: Callable[[str], None],
    run: int,
) -> None:
    """The no-op drain, its workers' CPU per job, and the whole machine's: the cores it
    would fill if nothing ever waited set the drain's ceiling on this machine."""
    drained, cpu = measure.drain_with_cpu(workers, config.jobs, bench_tasks.noop)
    figure("drain_per_s", "jobs/s").runs.append(drained.per_s)
    figure("drain_cpu_us_per_job", "us").runs.append(cpu)
    line = f"run {run}: drain (atomic=False) {drained.per_s:,.0f}/s, {cpu:.0f} us CPU/job"
    if drained.machine_busy_seconds and drained.machine_idle_seconds is not None:
        busy_us = drained.machine_busy_seconds / config.jobs * 1e6
        cores = os.cpu_count() or 1
        ceiling = cores / busy_us * 1e6
        idle = drained.machine_idle_seconds / (
            drained.machine_busy_seconds + drained.machine_idle_seconds
        )
        figure("drain_machine_cpu_us_per_job", "us").runs.append(busy_us)
        figure("drain_cpu_ceiling_per_s", "jobs/s").runs.append(ceiling)
        figure("drain_vs_cpu_ceiling", "x").runs.append(drained.per_s / ceiling)
        line += (
            f"; the machine (workers, database, bench) {busy_us:.0f} us CPU/job, {idle:.0%} "
            f"idle: {cores} cores would drain {ceiling:,.0f}/s if nothing waited"
        )
    log(line)


def _atomic(
    config: BenchConfig,
    workers: measure.Workers,
    figure: Callable[[str, str], measure.Figure],
    log: Callable[[str], None],
    run: int,
) -> None:
    """Atomic drains (one INSERT, and none) with the workers' CPU per job, beside the
    bare-Django floor of the same writes and the handler's INSERT alone (bare.py)."""
    drained, cpu = measure.drain_with_cpu(workers, config.jobs, bench_tasks.write_atomic)
    rate = drained.per_s
    figure("atomic_drain_per_s", "jobs/s").runs.append(rate)
    figure("atomic_drain_cpu_us_per_job", "us").runs.append(cpu)
    log(f"run {run}: drain (atomic=True, one INSERT) {rate:,.0f}/s, {cpu:.0f} us CPU/job")
    bare, handler = measure.bare_floors(config.jobs, config.processes, config.concurrency)
    figure("bare_django_per_s", "jobs/s").runs.append(bare.per_s)
    figure("bare_django_cpu_us_per_job", "us").runs.append(bare.cpu_us_per_job)
    figure("handler_alone_cpu_us_per_job", "us").runs.append(handler.cpu_us_per_job)
    figure("atomic_drain_vs_bare_django", "x").runs.append(rate / bare.per_s)
    # The queue's share as its target defines it: beyond the bare-Django loop (the handler's
    # code alone, with the job row's UPDATE through the ORM); and, stricter, beyond the
    # handler's INSERT alone, so counting the success mark as the queue's.
    figure("atomic_queue_cpu_us_per_job", "us").runs.append(cpu - bare.cpu_us_per_job)
    figure("atomic_queue_and_mark_cpu_us_per_job", "us").runs.append(cpu - handler.cpu_us_per_job)
    log(
        f"run {run}: bare Django (INSERT + job UPDATE per transaction) {bare.per_s:,.0f}/s, "
        f"{bare.cpu_us_per_job:.0f} us CPU/job; the handler's INSERT alone "
        f"{handler.cpu_us_per_job:.0f} us CPU/job; the queue's own share "
        f"{cpu - bare.cpu_us_per_job:.0f} us beyond bare Django, "
        f"{cpu - handler.cpu_us_per_job:.0f} us with the success mark"
    )
    drained, cpu = measure.drain_with_cpu(workers, config.jobs, bench_tasks.noop_atomic)
    figure("atomic_noop_drain_per_s", "jobs/s").runs.append(drained.per_s)
    figure("atomic_noop_drain_cpu_us_per_job", "us").runs.append(cpu)
    log(f"run {run}: drain (atomic=True, no write) {drained.per_s:,.0f}/s, {cpu:.0f} us CPU/job")


def _fair(
    config: BenchConfig,
    figure: Callable[[str, str], measure.Figure],
    log: Callable[[str], None],
    run: int,
) -> None:
    """Fair keys: drains spread over many keys against an unkeyed one, in turn (the keys'
    jobs enqueued one key after another, and interleaved); and how long a new key waits
    behind one key's backlog, with and without fair_key."""
    # Each layout twice, in mirrored order (unkeyed, bulk, interleaved, interleaved, bulk,
    # unkeyed): a drift of the machine's speed weighs on all alike.
    layouts = ("unkeyed", "fair", "fair_interleaved")
    rates: dict[str, list[float]] = {layout: [] for layout in layouts}
    for layout in (*layouts, *reversed(layouts)):
        rates[layout].append(
            measure.drain(
                config.jobs,
                bench_tasks.noop,
                fair_keys=0 if layout == "unkeyed" else config.fair_keys,
                interleaved=layout == "fair_interleaved",
            )
        )
    unkeyed = sum(rates["unkeyed"]) / 2
    figure("unkeyed_drain_per_s", "jobs/s").runs.append(unkeyed)
    for layout, how in (("fair", "one key after another"), ("fair_interleaved", "interleaved")):
        fair = sum(rates[layout]) / 2
        figure(f"{layout}_drain_per_s", "jobs/s").runs.append(fair)
        figure(f"{layout}_drain_vs_unkeyed", "x").runs.append(fair / unkeyed)
        log(
            f"run {run}: drain over {config.fair_keys:,} fair keys, enqueued {how}: "
            f"{fair:,.0f}/s, unkeyed {unkeyed:,.0f}/s ({fair / unkeyed:.2f}x; "
            f"prefetch {config.prefetch})"
        )
    unkeyed_rate, fair_rate = measure.fair_enqueue_cost(config.enqueue_jobs, 100)
    figure("fair_enqueue_per_s", "jobs/s").runs.append(fair_rate)
    figure("fair_enqueue_cost_vs_unkeyed", "x").runs.append(unkeyed_rate / fair_rate)
    log(
        f"run {run}: enqueue with a fair key (100 keys) {fair_rate:,.0f}/s, without "
        f"{unkeyed_rate:,.0f}/s ({unkeyed_rate / fair_rate:.2f}x the cost)"
    )
    for fair_key, label in ((True, "fair"), (False, "unkeyed")):
        ahead, waited = measure.newcomer_wait(config.fair_backlog, fair=fair_key)
        figure(f"{label}_newcomer_claimed_ahead", "jobs").runs.append(ahead)
        figure(f"{label}_newcomer_wait_ms", "ms").runs.append(waited)
        log(
            f"run {run}: a new key behind {config.fair_backlog:,} jobs of one key "
            f"({label}): {ahead:,} claimed ahead of it, started after {waited:,.0f} ms"
        )


def _fair_without_prefetch(
    config: BenchConfig,
    figure: Callable[[str, str], measure.Figure],
    log: Callable[[str], None],
) -> None:
    """The fair drain (keys one after another) against an unkeyed one at the worker's default
    ``--prefetch 0``, with workers of its own, in mirrored order as ``_fair``'s; and the unkeyed
    drain at ``--prefetch 0`` against the configured prefetch's (the fair part's figure).

    Without prefetch a thread waits for a claim's round trip between jobs, whatever the jobs'
    keys: short jobs drain at a fraction of a prefetching worker's rate, fair or not.
    """
    with measure.running_workers(config.processes, config.concurrency, prefetch=0):
        for run in range(1, config.runs + 1):
            rates: dict[str, list[float]] = {"unkeyed": [], "fair": []}
            for layout in ("unkeyed", "fair", "fair", "unkeyed"):
                rates[layout].append(
                    measure.drain(
                        config.jobs,
                        bench_tasks.noop,
                        fair_keys=0 if layout == "unkeyed" else config.fair_keys,
                    )
                )
            unkeyed = sum(rates["unkeyed"]) / 2
            fair = sum(rates["fair"]) / 2
            prefetching = figure("unkeyed_drain_per_s", "jobs/s").runs[run - 1]
            figure("unkeyed_drain_prefetch_0_per_s", "jobs/s").runs.append(unkeyed)
            figure("fair_drain_prefetch_0_per_s", "jobs/s").runs.append(fair)
            figure("fair_drain_prefetch_0_vs_unkeyed", "x").runs.append(fair / unkeyed)
            figure("unkeyed_prefetch_0_vs_prefetching", "x").runs.append(unkeyed / prefetching)
            log(
                f"run {run}: drain over {config.fair_keys:,} fair keys at prefetch 0: "
                f"{fair:,.0f}/s, unkeyed {unkeyed:,.0f}/s ({fair / unkeyed:.2f}x); unkeyed at "
                f"prefetch {config.prefetch} {prefetching:,.0f}/s "
                f"(prefetch 0 at {unkeyed / prefetching:.2f}x)"
            )


def _large_table(
    config: BenchConfig,
    figure: Callable[[str, str], measure.Figure],
    log: Callable[[str], None],
) -> None:
    """Drain ``ready`` jobs on an empty table, then with ``retained`` finished jobs present."""
    for run in range(1, config.runs + 1):
        empty = measure.drain(config.ready, bench_tasks.noop)
        figure("drain_empty_table_per_s", "jobs/s").runs.append(empty)
        log(f"run {run}: drain {config.ready:,} jobs, no finished jobs: {empty:,.0f}/s")
    log(f"inserting {config.retained:,} finished jobs")
    measure.insert_finished_jobs(config.retained)
    try:
        for run in range(1, config.runs + 1):
            full = measure.drain(config.ready, bench_tasks.noop)
            figure("drain_large_table_per_s", "jobs/s").runs.append(full)
            log(f"run {run}: drain {config.ready:,} jobs beside {config.retained:,}: {full:,.0f}/s")
        # The stats with every retained job in their windows (finished just now): the worst case.
        for name, seconds in measure.time_stats().items():
            figure(f"stats_{name}_ms", "ms").runs.append(seconds * 1000)
            log(f"{name} beside {config.retained:,} finished jobs: {seconds * 1000:,.0f} ms")
    finally:
        measure.delete_bench_jobs()
    ratio = figure("large_table_drain_vs_empty", "x")
    ratio.runs.append(
        figure("drain_large_table_per_s", "jobs/s").value
        / figure("drain_empty_table_per_s", "jobs/s").value
    )


def _stats(
    config: BenchConfig,
    figure: Callable[[str, str], measure.Figure],
    log: Callable[[str], None],
) -> None:
    """Time django_outbox.stats beside ``retained`` finished jobs, without the drains of
    large-table: every job inside the windows (finished in the last 50 minutes), the worst
    case; sampled past 10,000 jobs as they are by default, and with ``exact=True``."""
    log(f"inserting {config.retained:,} finished jobs")
    measure.insert_finished_jobs(config.retained, spread_seconds=3000)
    try:
        for exact in (False, True):
            for name, seconds in measure.time_stats(exact=exact).items():
                name = f"{name}_exact" if exact else name
                figure(f"stats_{name}_ms", "ms").runs.append(seconds * 1000)
                log(f"{name} beside {config.retained:,} finished jobs: {seconds * 1000:,.0f} ms")
    finally:
        measure.delete_bench_jobs()


def _floor(
    config: BenchConfig, figures: dict[str, measure.Figure], log: Callable[[str], None]
) -> dict[str, Any] | None:
    settings = connections[using()].settings_dict
    conninfo = {
        key: str(settings[name])
        for key, name in (
            ("host", "HOST"),
            ("port", "PORT"),
            ("user", "USER"),
            ("password", "PASSWORD"),
        )
        if settings.get(name)
    }
    try:
        floor = measure_floor(conninfo, seconds=config.floor_seconds, runs=config.runs, log=log)
    except FloorUnavailable as problem:
        log(f"floor skipped: {problem}")
        return None
    ratios = {
        "enqueue_per_s": floor.insert_per_s,
        "bulk_enqueue_per_s": floor.insert_per_s,
        "drain_per_s": floor.claim100_rows_per_s,
        "atomic_drain_per_s": floor.insert_per_s,
        "atomic_noop_drain_per_s": floor.claim1_per_s,
    }
    if "atomic_drain_per_s" in figures:
        # The share of its own SQL's floor an atomic drain that writes reaches.
        figures["atomic_drain_vs_atomic_job_floor"] = measure.Figure(
            "atomic_drain_vs_atomic_job_floor",
            "x",
            [figures["atomic_drain_per_s"].value / floor.atomic_job_per_s],
        )
    for name, base in ratios.items():
        if name in figures:
            ratio_name = {
                "enqueue_per_s": "enqueue_vs_insert_floor",
                "bulk_enqueue_per_s": "bulk_enqueue_vs_insert_floor",
                "drain_per_s": "drain_vs_claim100_floor",
                "atomic_drain_per_s": "atomic_drain_vs_insert_floor",
                "atomic_noop_drain_per_s": "atomic_noop_drain_vs_claim1_floor",
            }[name]
            figures[ratio_name] = measure.Figure(ratio_name, "x", [figures[name].value / base])
    return floor.as_dict()


def _check_targets(vendor: str, figures: dict[str, measure.Figure]) -> dict[str, Any]:
    checked = {}
    for name, (comparison, target) in TARGETS.get(vendor, {}).items():
        if name in figures:
            value = figures[name].value
            checked[name] = {
                "target": f"{comparison} {target:g}",
                "met": meets(value, comparison, target),
            }
    return checked


def format_table(results: dict[str, Any]) -> str:
    """Render the results as a plain-text table, one figure per line."""
    targets = results["targets"]
    runs = results["config"]["runs"]
    lines = [f"django-outbox bench on {results['vendor']} (medians of {runs} runs)"]
    header = f"{'figure':<34} {'median':>12} {'unit':<7} {'target':<10} {'met':<4} runs"
    lines += [header, "-" * len(header)]
    for name, figure in results["figures"].items():
        target = targets.get(name)
        runs = ", ".join(_number(value) for value in figure["runs"])
        lines.append(
            f"{name:<34} {_number(figure['median']):>12} {figure['unit']:<7} "
            f"{target['target'] if target else '':<10} "
            f"{('yes' if target['met'] else 'NO') if target else '':<4} {runs}"
        )
    floor = results.get("floor")
    if floor:
        lines.append("")
        lines.append(
            f"PostgreSQL floor (pgbench, medians): INSERT {floor['insert_per_s']:,.0f}/s, "
            f"claim 1 {floor['claim1_per_s']:,.0f}/s, "
            f"claim 100 {floor['claim100_rows_per_s']:,.0f} rows/s, "
            f"atomic job (BEGIN, INSERT, UPDATE, COMMIT) {floor['atomic_job_per_s']:,.0f}/s"
        )
    return "\n".join(lines)


def _number(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.2f}"
