"""The metric families an exporter serves, as a table, and the prometheus_client collector that fills them per scrape."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    StateSetMetricFamily,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from collector.diagnosis.report_types import VERDICTS
from collector.export.sources import Exporter, Refresh
from collector.export.tail import LABEL_NAMES, WAIT_BUCKETS_S, RunSnapshot

STATES = ("running", "completed", "crashed", "interrupted", "stopped")
PARTS = ("cpu", "io")  # the diagnosis's split of a worker fetch: load_cpu_s and load_io_s (wall - CPU)

# NOTE [ Metric table ]
# Every family the exporter serves: name (as exposed, before the _total /
# _bucket / _info suffixes the type adds), type, extra labels besides
# LABEL_NAMES, and help. docs/metrics.md documents the same table, and
# tests/test_export_deploy.py checks that every Grafana and alert expression
# names only these.
METRICS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "stallwatch_batches": ("counter", (), "Batches the training loop received from its DataLoader."),
    "stallwatch_data_wait_seconds": ("counter", (), "Seconds the loop spent blocked in next() waiting for a batch."),
    "stallwatch_batch_wait_seconds": ("histogram", (), "Time each batch kept the loop waiting in next()."),
    "stallwatch_data_stall_ratio": (
        "gauge",
        (),
        "Share of the recent window's wall time the loop stalled for data (waits beyond a ready batch's "
        "hand-off, plus epoch starts), as `stallwatch report --window-s` computes it.",
    ),
    "stallwatch_step_seconds": ("counter", (), "Seconds the loop spent in training steps between batches."),
    "stallwatch_batches_ready": ("gauge", (), "Batches ready in the loader at next(), mean over the recent window."),
    "stallwatch_batches_in_flight": (
        "gauge",
        (),
        "Batches requested from workers and not yet consumed, mean over the recent window.",
    ),
    "stallwatch_worker_fetches": ("counter", (), "Batches whose worker fetch was timed."),
    "stallwatch_worker_production_seconds": (
        "counter",
        ("part",),
        "Worker seconds producing batches (__getitem__ + collate): part=cpu is the worker's CPU time, "
        "part=io the rest (storage, sleeping, waiting for a core).",
    ),
    "stallwatch_worker_stage_seconds": (
        "counter",
        ("stage", "part"),
        "Worker seconds by stage inside the timed fetches (a Compose step, PIL decode, __getitem__, collate, "
        "hand-over; stage=fetch is the timed fetches whole): part=cpu on a CPU, part=blocked the rest.",
    ),
    "stallwatch_gpu_utilization_ratio": (
        "gauge",
        ("gpu",),
        "GPU utilisation sampled through NVML, 0-1, mean over the recent window (absent when not sampled).",
    ),
    "stallwatch_dropped_records": (
        "counter",
        (),
        "Batch records the collector dropped because its writer fell behind.",
    ),
    "stallwatch_dropped_samples": ("counter", (), "GPU, host and process samples the collector lost."),
    "stallwatch_run_status": ("stateset", (), "How the run stands: " + ", ".join(STATES) + "."),
    "stallwatch_verdict": (
        "stateset",
        (),
        "The diagnosis verdict over the recent window: " + ", ".join(VERDICTS) + ".",
    ),
    "stallwatch_run": ("info", (), "The run's DataLoader configuration, world size, stage and stallwatch version."),
    "stallwatch_run_start_time_seconds": ("gauge", (), "When the run started, Unix time."),
    "stallwatch_loader_setting": (
        "gauge",
        ("parameter",),
        "The DataLoader's setting now (a tuned run's as the tuner changes it): num_workers, prefetch_factor, "
        "persistent_workers and pin_memory (1 or 0), threads (torch's intra-op threads, tuned runs).",
    ),
    "stallwatch_last_batch_time_seconds": (
        "gauge",
        (),
        "When the run's newest batch was handed to the loop, Unix time.",
    ),
    "stallwatch_exporter_file_up": (
        "gauge",
        ("file",),
        "1 if the exporter could read the file on this scrape, else 0.",
    ),
    "stallwatch_exporter_file_error": (
        "info",
        ("file", "reason"),
        "Why the exporter could not read a file (one per file whose stallwatch_exporter_file_up is 0).",
    ),
    "stallwatch_exporter_refresh_seconds": ("gauge", (), "Seconds this scrape spent reading the files."),
}
EXPORTER_METRICS = (  # not per run
    "stallwatch_exporter_file_up",
    "stallwatch_exporter_file_error",
    "stallwatch_exporter_refresh_seconds",
)
REFRESH_EVERY_S = 1.0  # scrapes closer together than this share one refresh
REASON_CHARS = 300  # a reason label's length at most
_CLASSES = {
    "counter": CounterMetricFamily,
    "gauge": GaugeMetricFamily,
    "histogram": HistogramMetricFamily,
    "info": InfoMetricFamily,
    "stateset": StateSetMetricFamily,
}


def _family(name: str) -> Any:  # one of the *MetricFamily classes: add_metric differs per type
    kind, extra, doc = METRICS[name]
    labels = list(extra) if name in EXPORTER_METRICS else [*LABEL_NAMES, *extra]
    unit = "seconds" if name.endswith("_seconds") else ("ratio" if name.endswith("_ratio") else "")
    if kind in ("counter", "gauge", "histogram"):
        return _CLASSES[kind](name, doc, labels=labels, unit=unit)
    return _CLASSES[kind](name, doc, labels=labels)


def families(refresh: Refresh) -> list[Metric]:
    """The families of one refresh; runs whose labels coincide are exported once, the newest."""
    by_labels: dict[tuple[str, ...], RunSnapshot] = {}
    for snap in refresh.runs:
        key = tuple(snap.labels.values())
        if key not in by_labels or snap.started_at > by_labels[key].started_at:
            by_labels[key] = snap
    f = {name: _family(name) for name in METRICS}
    for snap in by_labels.values():
        _add_run(f, snap)
    for path, up in refresh.files.items():
        f["stallwatch_exporter_file_up"].add_metric([path], 1.0 if up else 0.0)
    for path, reason in refresh.reasons.items():
        f["stallwatch_exporter_file_error"].add_metric([path, reason[:REASON_CHARS]], {})
    f["stallwatch_exporter_refresh_seconds"].add_metric([], refresh.seconds)
    return list(f.values())


def _add_run(f: dict[str, Any], s: RunSnapshot) -> None:
    labels = s.labels.values()
    f["stallwatch_batches"].add_metric(labels, s.batches)
    f["stallwatch_data_wait_seconds"].add_metric(labels, s.wait_s)
    buckets = [(_le(le), float(n)) for le, n in zip(WAIT_BUCKETS_S, s.wait_le, strict=True)]
    f["stallwatch_batch_wait_seconds"].add_metric(labels, [*buckets, ("+Inf", float(s.batches))], s.wait_s)
    f["stallwatch_data_stall_ratio"].add_metric(labels, s.stall.stall_fraction)
    f["stallwatch_step_seconds"].add_metric(labels, s.step_s)
    if s.stall.ready_mean is not None:
        f["stallwatch_batches_ready"].add_metric(labels, s.stall.ready_mean)
    if s.stall.in_flight_mean is not None:
        f["stallwatch_batches_in_flight"].add_metric(labels, s.stall.in_flight_mean)
    if s.fetches:
        f["stallwatch_worker_fetches"].add_metric(labels, s.fetches)
        cpu = min(s.fetch_cpu_s, s.fetch_wall_s)
        f["stallwatch_worker_production_seconds"].add_metric([*labels, "cpu"], cpu)
        f["stallwatch_worker_production_seconds"].add_metric([*labels, "io"], s.fetch_wall_s - cpu)
    for stage, (wall, stage_cpu) in s.stages.items():
        if stage_cpu is not None:  # a stage without a CPU figure is not split, so not exported
            on_cpu = min(stage_cpu, wall)
            f["stallwatch_worker_stage_seconds"].add_metric([*labels, stage, "cpu"], on_cpu)
            f["stallwatch_worker_stage_seconds"].add_metric([*labels, stage, "blocked"], wall - on_cpu)
    for gpu, util in sorted(s.gpu_util_pct.items()):
        f["stallwatch_gpu_utilization_ratio"].add_metric([*labels, str(gpu)], util / 100.0)
    f["stallwatch_dropped_records"].add_metric(labels, s.dropped_records)
    f["stallwatch_dropped_samples"].add_metric(labels, s.dropped_samples)
    f["stallwatch_run_status"].add_metric(labels, {state: state == s.state for state in STATES})
    f["stallwatch_verdict"].add_metric(labels, {v: v == s.stall.verdict for v in VERDICTS})
    f["stallwatch_run"].add_metric(labels, s.info)
    f["stallwatch_run_start_time_seconds"].add_metric(labels, s.started_at)
    for parameter, value in s.setting.items():
        f["stallwatch_loader_setting"].add_metric([*labels, parameter], value)
    if s.last_batch_at is not None:
        f["stallwatch_last_batch_time_seconds"].add_metric(labels, s.last_batch_at)


def _le(bound: float) -> str:
    return repr(float(bound))


class StallwatchCollector(Collector):
    """Refreshes the exporter on each scrape and yields its families.

    Scrapes share refreshes: one runs at a time, and a scrape within
    ``every_s`` of the last refresh (those that waited for it included) is
    answered from it, so many scrapers cost one refresh a second at most.
    """

    def __init__(
        self,
        exporter: Exporter,
        on_refresh: Callable[[Refresh], None] | None = None,
        *,
        every_s: float = REFRESH_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.exporter = exporter
        self.on_refresh = on_refresh
        self.every_s = every_s
        self.clock = clock
        self._lock = threading.Lock()
        self._last: tuple[float, Refresh] | None = None

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            if self._last is not None and self.clock() - self._last[0] < self.every_s:
                refresh = self._last[1]
            else:
                refresh = self.exporter.refresh()
                self._last = (self.clock(), refresh)
        if self.on_refresh is not None:
            self.on_refresh(refresh)
        yield from families(refresh)


def served_names() -> set[str]:
    """Every sample name the table can expose (with the suffixes each type adds)."""
    suffixes = {
        "counter": ("_total",),
        "gauge": ("",),
        "histogram": ("_bucket", "_sum", "_count"),
        "info": ("_info",),
        "stateset": ("",),
    }
    return {name + suffix for name, (kind, _, _) in METRICS.items() for suffix in suffixes[kind]}
