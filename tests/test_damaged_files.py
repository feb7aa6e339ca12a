"""A damaged run is that run's problem: every reader reads the file's other runs and names the damaged value."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import urllib.request
import warnings
from pathlib import Path

import pytest
from export_fixtures import bad_file, free_port
from helpers import REPO, _copy, file_digest, texts

from app.compare_data import load_compare
from app.data import load_run_view, load_runs_table
from collector.cli import main
from collector.diagnosis import diagnose, diagnose_job
from collector.errors import CollectorWarning, DamagedRun, NotAStallwatchFile, QueryTooSlow
from collector.export.metrics import StallwatchCollector, families
from collector.export.sources import Exporter, Refresh
from collector.store import file_checks
from collector.store.merge import merge_files
from collector.store.reader import Reader

LATER = 1.9e9  # an exporter clock after both recorded runs, with a grace that keeps them exported
DAMAGED = 1  # the recorded file's first run ('demo-starved'); run 2 ('demo-healthy') is left alone

# one value of run 1 changed by hand, and the words its one line must hold
CORRUPTIONS = {
    "heartbeat as text": ("UPDATE runs SET heartbeat_at = 'soon' WHERE id = 1", "heartbeat_at"),
    "start at +inf": ("UPDATE runs SET started_at = 1e999 WHERE id = 1", "started_at"),
    "world size 10^12": ("UPDATE runs SET world_size = 1000000000000, rank = 0 WHERE id = 1", "world_size"),
    "a billion workers": (
        "UPDATE runs SET config = json_set(config, '$.num_workers', 1000000000) WHERE id = 1",
        "num_workers",
    ),
    "cores as text": ("UPDATE runs SET host = json_set(host, '$.logical_cores', 'many') WHERE id = 1", "logical_cores"),
    "a wait as text": ("UPDATE batches SET wait_s = 'slow' WHERE run_id = 1 AND idx = 3", "wait_s"),
    "a batch at +inf": ("UPDATE batches SET ts = 1e999 WHERE run_id = 1 AND idx = 5", "ts"),
    "a huge epoch": ("UPDATE epochs SET batches = 9000000000000000000 WHERE run_id = 1", "batches"),
    "worker pids cut short": ("UPDATE epochs SET worker_pids = '[1, 2' WHERE run_id = 1", "worker_pids"),
    "a blob for a count": ("UPDATE batches SET ready = x'00ff' WHERE run_id = 1 AND idx = 2", "ready"),
}


def damaged_copy(recorded: str, directory: Path, sql: str, name: str = "damaged.sqlite") -> str:
    path = str(directory / name)
    _copy(recorded, path)
    conn = sqlite3.connect(path)
    conn.executescript(sql)
    conn.commit()
    conn.close()
    return path


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_a_damaged_run_is_named_in_one_line_and_the_other_run_reads_as_before(recorded_db, tmp_path, corruption):
    sql, column = CORRUPTIONS[corruption]
    path = damaged_copy(recorded_db, tmp_path, sql)
    with pytest.raises(DamagedRun) as raised:
        diagnose(path, DAMAGED)
    message = str(raised.value)
    assert "\n" not in message and "'demo-starved' (id 1)" in message and column in message
    assert diagnose(path, 2).summary == diagnose(recorded_db, 2).summary
    assert diagnose_job(path, 2).summary == diagnose(recorded_db, 2).summary
    assert list(load_runs_table(Reader(path))["id"]) == [2, 1]
    assert load_run_view(Reader(path), 2, None).headline == load_run_view(Reader(recorded_db), 2, None).headline
    compared = load_compare(Reader(path), [DAMAGED, 2])
    # the dashboard reads sums over a time span: it names the run (maybe by another column), or reads what is sound
    assert list(compared.runs["id"]) == ([1, 2] if not compared.damaged else [2])
    for line in compared.damaged:
        assert line.startswith(message.split(": ")[0] + ": run 'demo-starved' (id 1)")


@pytest.mark.parametrize("corruption", ["heartbeat as text", "a wait as text", "a batch at +inf"])
def test_the_exporter_keeps_the_other_runs_series_and_tells_the_damaged_run_once(recorded_db, tmp_path, corruption):
    path = damaged_copy(recorded_db, tmp_path, CORRUPTIONS[corruption][0])
    told: list[str] = []
    exporter = Exporter([path], clock=lambda: LATER, grace_s=LATER, report=told.append)
    for _ in range(3):
        refresh = exporter.refresh()
        assert [s.labels.run for s in refresh.runs] == ["demo-healthy"] and refresh.files == {path: True}
    skipped = [line for line in told if "skipping" in line]
    assert len(skipped) == 1 and "'demo-starved' (id 1)" in skipped[0]


def test_a_report_of_a_damaged_run_is_one_line_on_stderr(recorded_db, tmp_path, capsys):
    path = damaged_copy(recorded_db, tmp_path, CORRUPTIONS["a billion workers"][0])
    assert main(["report", path, "--run", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "num_workers is 1000000000" in err[0]
    assert main(["report", path, "--run", "2"]) == 0


def test_a_table_replaced_by_an_endless_view_is_refused_at_open(recorded_db, tmp_path):
    endless = (
        "DROP TABLE batches; CREATE VIEW batches AS WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r)"
        " SELECT 1 AS run_id, x AS epoch, x AS idx, x AS ts, 0.1 AS wait_s FROM r"
    )
    path = damaged_copy(recorded_db, tmp_path, endless)
    with pytest.raises(NotAStallwatchFile, match="its batches is a view, not a table"):
        Reader(path)
    told: list[str] = []
    refresh = Exporter([path, recorded_db], clock=lambda: LATER, grace_s=LATER, report=told.append).refresh()
    assert refresh.files == {path: False, recorded_db: True} and len(refresh.runs) == 2
    assert "a view" in refresh.reasons[path]


def test_every_query_stops_at_the_readers_time_limit(recorded_db):
    reader = Reader(recorded_db, query_limit_s=0.2)
    endless = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT COUNT(*) FROM r"
    with pytest.raises(QueryTooSlow, match=r"ran past 0\.2 s"):
        reader.scalar(endless)
    assert len(reader.runs()) == 2  # the next query has its own limit


@pytest.mark.parametrize("version", ["0", "-3", "two", "", "1.5"])
def test_a_schema_version_that_is_not_a_positive_integer_is_refused(recorded_db, tmp_path, version):
    path = damaged_copy(recorded_db, tmp_path, f"UPDATE meta SET value = '{version}' WHERE key = 'schema_version'")
    with pytest.raises(NotAStallwatchFile, match="not a positive integer"):
        Reader(path)


def test_a_file_the_exporter_cannot_read_is_served_down_with_its_reason(recorded_db, tmp_path):
    bad = bad_file("not-sqlite", tmp_path)
    refresh = Exporter([bad, recorded_db], clock=lambda: LATER, grace_s=LATER, report=lambda _: None).refresh()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families(refresh) for s in f.samples}
    assert samples[("stallwatch_exporter_file_up", (("file", bad),))] == 0.0
    assert samples[("stallwatch_exporter_file_up", (("file", recorded_db),))] == 1.0
    (reason,) = [dict(k[1])["reason"] for k in samples if k[0] == "stallwatch_exporter_file_error_info"]
    assert "not a readable stallwatch file" in reason or "not a stallwatch file" in reason


class CountingExporter:
    """An exporter stand-in that counts refreshes and holds each one until the test lets it go."""

    def __init__(self) -> None:
        self.refreshes = 0
        self.release = threading.Event()

    def refresh(self) -> Refresh:
        self.refreshes += 1
        self.release.wait(10)
        return Refresh([], {}, 0.0)


def test_concurrent_scrapes_share_one_refresh_a_second():
    now = [100.0]
    source = CountingExporter()
    collector = StallwatchCollector(source, clock=lambda: now[0])  # type: ignore[arg-type]
    scrapes = [threading.Thread(target=lambda: list(collector.collect())) for _ in range(4)]
    for scrape in scrapes:
        scrape.start()
    source.release.set()
    for scrape in scrapes:
        scrape.join(10)
    assert source.refreshes == 1
    now[0] += 0.5
    list(collector.collect())
    assert source.refreshes == 1
    now[0] += 0.6
    list(collector.collect())
    assert source.refreshes == 2


def test_a_damaged_input_leaves_the_merge_output_as_it_was(recorded_db, tmp_path, capsys):
    out = str(tmp_path / "job.sqlite")
    _copy(recorded_db, out)
    before = file_digest(out)
    good = damaged_copy(recorded_db, tmp_path, "UPDATE runs SET hostname = 'node-b'", "good.sqlite")
    damaged = damaged_copy(recorded_db, tmp_path, CORRUPTIONS["heartbeat as text"][0])
    assert main(["merge", out, good, damaged]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and damaged in err[0] and "heartbeat_at" in err[0]
    assert file_digest(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["damaged.sqlite", "good.sqlite", "job.sqlite"]


def test_a_merge_stopped_after_its_first_input_leaves_no_output_and_no_new_file(recorded_db, tmp_path):
    out = str(tmp_path / "job.sqlite")
    a = damaged_copy(recorded_db, tmp_path, "UPDATE runs SET hostname = 'node-a'", "a.sqlite")
    b = damaged_copy(recorded_db, tmp_path, "UPDATE runs SET hostname = 'node-b'", "b.sqlite")

    def stop(merged: object) -> None:
        raise KeyboardInterrupt  # Ctrl-C once the first input is in

    with pytest.raises(KeyboardInterrupt):
        merge_files(out, [a, b], progress=stop)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.sqlite", "b.sqlite"]
    merge_files(out, [a, b])
    assert len(Reader(out).runs()) == 4


def mounts_file(directory: Path, kind: str) -> str:
    """A /proc/mounts where ``directory`` is its own mount of filesystem type ``kind``."""
    path = directory / "mounts"
    path.write_text(
        "/dev/sda1 / ext4 rw,relatime 0 0\n"
        f"server:/export {os.path.realpath(directory)} {kind} rw,vers=4.2 0 0\n"
        "tmpfs /dev/shm tmpfs rw 0 0\n"
    )
    return str(path)


@pytest.mark.parametrize(("kind", "warned"), [("nfs4", True), ("lustre", True), ("fuse.sshfs", True), ("ext4", False)])
def test_a_file_on_a_network_filesystem_gets_one_warning_at_open(recorded_db, tmp_path, monkeypatch, kind, warned):
    monkeypatch.setattr(file_checks, "MOUNTS", mounts_file(tmp_path, kind))
    path = damaged_copy(recorded_db, tmp_path, "SELECT 1", f"on-{kind}.sqlite")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Reader(path)
        Reader(path)
    said = [str(w.message) for w in caught if issubclass(w.category, CollectorWarning)]
    assert len(said) == (1 if warned else 0)
    if warned:
        assert f"network filesystem ({kind})" in said[0] and "local disk" in said[0]


@pytest.mark.slow
def test_the_exporter_starts_beside_damaged_and_hostile_files_and_serves_the_rest(recorded_db, tmp_path):
    damaged = damaged_copy(recorded_db, tmp_path, CORRUPTIONS["heartbeat as text"][0])
    endless = damaged_copy(
        recorded_db, tmp_path, "DROP TABLE gpu_samples; CREATE VIEW gpu_samples AS SELECT 1", "v.sqlite"
    )
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "collector",
        "exporter",
        damaged,
        endless,
        "--port",
        str(port),
        "--grace-s",
        "1e10",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as server:
        try:
            started = server.stdout.readline() if server.stdout else ""
            assert started.startswith("stallwatch exporter: 1 run(s) from 1 file(s)"), started
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
        finally:
            server.terminate()
        told = server.communicate(timeout=30)[1]
    assert 'stallwatch_batches_total{host="' in text and 'run="demo-healthy"' in text
    assert 'run="demo-starved"' not in text
    assert f'stallwatch_exporter_file_up{{file="{endless}"}} 0.0' in text
    assert f"skipping a run of {damaged}: run 'demo-starved' (id 1)" in told and f"skipping {endless}" in told


@pytest.mark.parametrize("corruption", ["start at +inf", "a wait as text"])
def test_the_dashboard_names_the_damaged_run_and_shows_the_other(recorded_db, tmp_path, app_for, corruption):
    path = damaged_copy(recorded_db, tmp_path, CORRUPTIONS[corruption][0])
    at = app_for(path, run_id=1)
    assert not at.exception
    assert "'demo-starved' (id 1)" in texts(at) and CORRUPTIONS[corruption][1].split("_")[0] in texts(at)
    at = app_for(path, run_id=2)
    assert not at.exception and not at.error and [t.value for t in at.title] == ["demo-healthy"]
    at = app_for(path, "routes/runs.py")
    assert not at.exception and len(at.dataframe[0].value) == 2
