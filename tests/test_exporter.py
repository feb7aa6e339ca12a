"""The exporter: counters that follow a file as it grows, the windowed stall as the diagnosis computes it, bad input."""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from export_fixtures import T0, bad_file, free_port, start_run
from helpers import query
from prometheus_client.parser import text_string_to_metric_families

import collector
from collector.cli.demo import run_demo
from collector.export import tail
from collector.export.metrics import METRICS, families, served_names
from collector.export.server import ExporterServer
from collector.export.sources import Exporter
from collector.export.tail import WAIT_BUCKETS_S
from collector.store import export_queries
from collector.store.connection import Store


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def exporter(*paths: str, now: float, **kwargs) -> tuple[Exporter, list[str]]:
    told: list[str] = []
    return Exporter(list(paths), clock=Clock(now), report=told.append, **kwargs), told


def only(refresh):
    assert len(refresh.runs) == 1, [r.labels for r in refresh.runs]
    return refresh.runs[0]


def test_counters_equal_the_file_and_grow_with_it_without_recounting(db_path):
    store = Store(db_path)
    run = start_run(store).add([0.001] * 60 + [0.2] * 40)
    exp, _ = exporter(db_path, now=run.ts + 1)
    first = only(exp.refresh())
    assert first.batches == 100 and first.wait_s == pytest.approx(0.06 + 8.0)
    assert first.step_s == pytest.approx(1.0)
    assert first.wait_le[WAIT_BUCKETS_S.index(0.001)] == 60 and first.wait_le[WAIT_BUCKETS_S.index(0.25)] == 100
    run.add([0.03] * 10)
    exp.clock.now = run.ts + 1  # type: ignore[attr-defined]
    second = only(exp.refresh())
    assert second.batches == 110 and second.wait_s == pytest.approx(8.06 + 0.3)
    assert second.wait_le[WAIT_BUCKETS_S.index(0.025)] == 60 and second.wait_le[WAIT_BUCKETS_S.index(0.05)] == 70
    assert only(exp.refresh()).batches == 110  # nothing new: nothing counted twice


@pytest.mark.parametrize("window_s", [0.5, 60.0])
def test_counters_are_the_same_whether_batches_are_counted_in_sql_or_from_the_rows_read(db_path, window_s):
    """A short window makes first sight and long gaps count the older batches in SQL; a long one reads every row."""
    store = Store(db_path)
    run = start_run(store, workers=2).add([0.001, 0.004, 0.03, 0.2] * 25)
    exp, _ = exporter(db_path, now=run.ts, window_s=window_s)
    for more in ([0.002] * 10, [0.05, 0.6] * 40, [0.0001] * 3):
        snap = only(exp.refresh())
        ((n, wait, step, fetches, wall, le_5ms),) = query(
            db_path,
            "SELECT COUNT(*), SUM(wait_s), SUM(step_s), COUNT(f.wall_s), SUM(f.wall_s), SUM(wait_s <= 0.005)"
            " FROM batches b LEFT JOIN worker_fetches f USING (run_id, worker_pid, worker_incarnation, worker_seq)",
        )
        assert (snap.batches, snap.fetches, snap.wait_le[WAIT_BUCKETS_S.index(0.005)]) == (n, fetches, le_5ms)
        assert (snap.wait_s, snap.step_s, snap.fetch_wall_s) == pytest.approx((wait, step, wall))
        assert snap.stall.batches == len(
            [t for (t,) in query(db_path, "SELECT ts FROM batches") if t >= run.ts - window_s]
        )
        run.add(more)
        exp.clock.now = run.ts  # type: ignore[attr-defined]


def test_a_fast_run_reads_a_sample_of_its_rows_with_exact_counters_and_the_same_stall(db_path, monkeypatch):
    """NOTE [ Sampled window ]: past MAX_WINDOW_ROWS new rows a scrape reads every n-th batch for the window."""
    store = Store(db_path)
    run = start_run(store, workers=2).add([0.0005, 0.0007, 0.02, 0.0006, 0.09] * 400)
    full = only(exporter(db_path, now=run.ts)[0].refresh())
    read: list[int] = []
    batch_rows = export_queries.batch_rows
    monkeypatch.setattr(tail, "MAX_WINDOW_ROWS", 100)
    monkeypatch.setattr(export_queries, "batch_rows", lambda *a, **k: read.append(len(r := batch_rows(*a, **k))) or r)
    sampled = only(exporter(db_path, now=run.ts)[0].refresh())
    assert sum(read) <= 100 + tail.HEAD_BATCHES  # every 20th row of the epoch, and its head
    assert (sampled.batches, sampled.wait_s, sampled.wait_le) == (
        full.batches,
        pytest.approx(full.wait_s),
        full.wait_le,
    )
    assert sampled.stall.batches == pytest.approx(full.stall.batches, rel=0.02)
    assert sampled.stall.stall_fraction == pytest.approx(full.stall.stall_fraction, abs=0.01)
    assert sampled.stall.verdict == full.stall.verdict == "input-bound"


def test_worker_production_splits_each_fetch_into_cpu_and_the_rest(db_path):
    store = Store(db_path)
    run = start_run(store, workers=2).add([0.01] * 50, wall_s=0.020, cpu_s=0.015)
    exp, _ = exporter(db_path, now=run.ts)
    snap = only(exp.refresh())
    assert snap.fetches == 50 and snap.fetch_wall_s == pytest.approx(1.0) and snap.fetch_cpu_s == pytest.approx(0.75)
    samples = scrape_samples(exp, "stallwatch_worker_production_seconds_total")
    assert {s.labels["part"]: round(s.value, 6) for s in samples} == {"cpu": 0.75, "io": 0.25}


def test_worker_stages_are_served_as_cpu_and_blocked_seconds_by_stage(db_path):
    store = Store(db_path)
    run = start_run(store, workers=2).add([0.01] * 10)
    run.stages({"fetch": (2.0, 1.5), "PIL decode JPEG": (1.0, 0.75), "code data.py:load": (0.5, None)})
    run.stages({"fetch": (2.0, 1.0), "file /data/a.jpg": (0.0, 0.0)}, worker_id=1)
    exp, _ = exporter(db_path, now=run.ts)
    samples = scrape_samples(exp, "stallwatch_worker_stage_seconds_total")
    got = {(s.labels["stage"], s.labels["part"]): round(s.value, 6) for s in samples}
    assert got == {
        ("fetch", "cpu"): 2.5,
        ("fetch", "blocked"): 1.5,
        ("PIL decode JPEG", "cpu"): 0.75,
        ("PIL decode JPEG", "blocked"): 0.25,
    }


def test_every_series_carries_run_job_rank_and_host_with_empty_strings_for_unknowns(db_path):
    store = Store(db_path)
    start_run(store, "a", rank=3, job_id="job-7", hostname="node-b").add([0.01] * 30)
    start_run(store, "b").add([0.01] * 30)
    exp, _ = exporter(db_path, now=T0 + 5)
    labels = {(s.labels["run"], s.labels["job_id"], s.labels["rank"], s.labels["host"]) for s in scrape_samples(exp)}
    assert labels == {("a", "job-7", "3", "node-b"), ("b", "", "", "node-a")}


@pytest.fixture(scope="module")
def demo_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Real recorded demo runs: a starved loop and a healthy one (about 3 s each)."""
    out = {}
    for scenario in ("starved", "healthy"):
        path = str(tmp_path_factory.mktemp(scenario) / "demo.sqlite")
        run_demo(path, 3.0, scenario)
        out[scenario] = path
    return out


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["starved", "healthy"])
def test_stall_ratio_and_verdict_equal_the_diagnosis_of_the_same_batches(demo_files, scenario):
    path = demo_files[scenario]
    whole = collector.diagnose(path)
    exp, _ = exporter(path, now=whole.run["ended_at"] + 1, window_s=60.0)  # the window holds the whole run
    snap = only(exp.refresh())
    assert snap.stall.stall_fraction == pytest.approx(whole.summary["stall_fraction"], abs=1e-4)
    assert snap.stall.verdict == whole.verdict
    if scenario == "starved":  # waits about 3x its step, on any machine
        assert whole.verdict == "input-bound"
    else:  # not-input-bound on a quiet machine; beside other busy processes it may wait 10-30%
        assert whole.summary["stall_fraction"] < 0.5
    recent = collector.diagnose(path, window_s=1.0)
    exp, _ = exporter(path, now=whole.run["ended_at"] + 1, window_s=1.0)  # a window after the warm-up
    assert only(exp.refresh()).stall.stall_fraction == pytest.approx(recent.summary["stall_fraction"], abs=1e-4)


def test_an_ended_run_is_exported_for_the_grace_period_then_dropped(db_path):
    store = Store(db_path)
    run = start_run(store).add([0.01] * 30).end(T0 + 100, "crashed")
    exp, _ = exporter(db_path, now=T0 + 100 + 299, grace_s=300)
    assert only(exp.refresh()).state == "crashed"
    exp.clock.now = T0 + 100 + 301  # type: ignore[attr-defined]
    assert exp.refresh().runs == []
    assert run.run_id not in exp.files[db_path].runs


def test_a_run_whose_heartbeat_stopped_reads_stopped_and_goes_after_the_grace_period(db_path):
    store = Store(db_path)
    run = start_run(store).add([0.01] * 30)  # never ended: killed
    exp, _ = exporter(db_path, now=run.ts + 60, grace_s=120)
    assert only(exp.refresh()).state == "stopped"
    exp.clock.now = run.ts + 121  # type: ignore[attr-defined]
    assert exp.refresh().runs == []


def test_runs_with_the_same_labels_are_exported_once_the_newest(db_path):
    store = Store(db_path)
    start_run(store, "same", started_at=T0).add([0.01] * 10)
    start_run(store, "same", started_at=T0 + 1, pid=4343).add([0.01] * 25)
    exp, _ = exporter(db_path, now=T0 + 2)
    batches = scrape_samples(exp, "stallwatch_batches_total")
    assert [s.value for s in batches] == [25]


def test_a_file_that_appears_later_is_picked_up_also_in_a_watched_directory(tmp_path):
    named, directory = str(tmp_path / "later.sqlite"), tmp_path / "node"
    directory.mkdir()
    exp, told = exporter(named, str(directory), now=T0 + 5)
    assert exp.refresh().runs == [] and told == [
        f"stallwatch exporter: {named} does not exist yet; exported once it appears"
    ]
    start_run(Store(named), "named").add([0.01] * 20)
    start_run(Store(str(directory / "rank0.sqlite")), "in-dir").add([0.01] * 20)
    assert sorted(s.labels.run for s in exp.refresh().runs) == ["in-dir", "named"]


@pytest.mark.parametrize("kind", ["not-sqlite", "foreign", "corrupt"])
def test_a_bad_file_among_the_arguments_is_reported_once_and_skipped_while_the_others_export(tmp_path, kind):
    good = str(tmp_path / "good.sqlite")
    start_run(Store(good)).add([0.01] * 20)
    bad = bad_file(kind, tmp_path)
    exp, told = exporter(bad, good, now=T0 + 5)
    for _ in range(3):
        refresh = exp.refresh()
        assert [s.labels.run for s in refresh.runs] == ["train"]
        assert refresh.files == {bad: False, good: True}
    skipped = [line for line in told if "skipping" in line]
    assert len(skipped) == 1 and skipped[0].startswith(f"stallwatch exporter: skipping {bad}: ")


def test_a_scrape_serves_every_metric_of_the_table_and_nothing_else(db_path, tmp_path):
    store = Store(db_path)
    run = start_run(store, "gpu-run", workers=2).add([0.01] * 40).gpu([50.0, 70.0]).stages({"collate": (1.0, 0.5)})
    exp, _ = exporter(db_path, bad_file("not-sqlite", tmp_path), now=run.ts + 1)  # a bad file: its error series
    server = ExporterServer(exp, "127.0.0.1", 0).start()
    try:
        text = urllib.request.urlopen(server.url, timeout=10).read().decode()
    finally:
        server.shutdown()
    names = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    ours = {n for n in names if n.startswith("stallwatch_")}
    assert ours == served_names()
    assert "process_cpu_seconds_total" in names
    gpu = [s for f in text_string_to_metric_families(text) for s in f.samples if s.name.startswith("stallwatch_gpu")]
    assert [(s.labels["gpu"], s.value) for s in gpu] == [("0", pytest.approx(0.6))]


def test_the_metric_table_follows_prometheus_naming(db_path):
    for name, (kind, _, doc) in METRICS.items():
        assert name.startswith("stallwatch_") and name == name.lower() and doc.endswith(".")
        assert not name.endswith("_total"), "counters get _total from their type"
        if kind == "counter" and "seconds" in name:
            assert name.endswith("_seconds")
    assert families(Exporter([db_path], report=lambda _: None).refresh())  # an empty node still renders


def test_a_port_in_use_is_a_one_line_error(db_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = subprocess.run(
            [sys.executable, "-m", "collector", "exporter", db_path, "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().splitlines() == [
        f"stallwatch: cannot listen on 127.0.0.1:{port}: address already in use (choose another --port)"
    ]


def test_the_exporter_answers_only_on_metrics_and_its_index(db_path):
    server = ExporterServer(Exporter([db_path], report=lambda _: None), "127.0.0.1", free_port()).start()
    try:
        base = server.url.rsplit("/", 1)[0]
        assert b"/metrics" in urllib.request.urlopen(base + "/", timeout=10).read()
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(base + "/other", timeout=10)
        assert missing.value.code == 404
    finally:
        server.shutdown()


def scrape_samples(exp: Exporter, name: str | None = None):
    """The samples one refresh renders, parsed back from the text format prometheus_client writes."""
    from prometheus_client import generate_latest
    from prometheus_client.registry import CollectorRegistry

    from collector.export.metrics import StallwatchCollector

    registry = CollectorRegistry(auto_describe=False)
    registry.register(StallwatchCollector(exp))
    text = generate_latest(registry).decode()
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples if "run" in s.labels]
    return [s for s in samples if name is None or s.name == name]


def test_the_exporter_never_writes_to_the_file(tmp_path: Path):
    path = str(tmp_path / "done.sqlite")
    store = Store(path)
    start_run(store).add([0.01] * 30).end(T0 + 10)
    store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    before = Path(path).read_bytes()
    exp, _ = exporter(path, now=T0 + 20)
    assert only(exp.refresh()).batches == 30
    assert Path(path).read_bytes() == before
