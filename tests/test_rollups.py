"""keep_batches: rows past a run's window folded into rollups by the writer, and every reader reading them."""

from __future__ import annotations

import contextlib
import marshal
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import query

import collector
from collector.cli import main as cli_main
from collector.diagnosis.diagnose import diagnose
from collector.export.sources import Exporter
from collector.sample.sampler import Rates
from collector.store.merge import merge_files
from collector.store.reader import Reader
from collector.store.schema import SCHEMA_VERSION
from collector.writer.frames import Flush, Open, RunStart, decode_frame, encode_frame
from collector.writer.sink import Sink

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
import simulate  # noqa: E402


def totals(db: str) -> dict[str, float]:
    """Rows, folded batches, dropped; samples likewise: NOTE [ Accounting ] with rollups."""
    (row,) = query(
        db,
        "SELECT (SELECT COUNT(*) FROM batches), (SELECT TOTAL(batches) FROM batch_rollups), dropped_records,"
        " (SELECT COUNT(*) FROM gpu_samples) + (SELECT COUNT(*) FROM host_samples) + (SELECT COUNT(*) FROM"
        " proc_samples), (SELECT TOTAL(samples) FROM gpu_rollups) + (SELECT TOTAL(samples) FROM host_rollups)"
        " + (SELECT TOTAL(samples) FROM proc_rollups), dropped_samples,"
        " (SELECT COUNT(*) FROM batches b JOIN batch_rollups r ON r.run_id = b.run_id AND r.epoch = b.epoch"
        " AND b.idx BETWEEN r.first_idx AND r.last_idx) FROM runs",
    )
    keys = ("rows", "folded", "dropped", "sample_rows", "samples_folded", "samples_dropped", "both")
    return dict(zip(keys, row, strict=True))


def test_keep_batches_reaches_the_writer_and_a_bad_value_says_how_to_fix_it(tmp_path):
    opening = Open("x.sqlite", RunStart("r", {}, {}, {}, "h", 1, "c", None, None), 0.0, 0, Rates(1, 1, 5000))
    decoded = decode_frame(marshal.loads(encode_frame(opening)[4:]))
    assert isinstance(decoded, Open) and decoded.rates.keep_batches == 5000
    loader = collector.watch(range(3), db=str(tmp_path / "w.sqlite"), keep_batches=None)
    assert loader._stallwatch_start().monitor._opening.rates.keep_batches is None
    with pytest.raises(ValueError, match="keep_batches must be a whole number of batches of at least 1,000"):
        collector.watch(range(3), db=str(tmp_path / "w.sqlite"), keep_batches=10)
    with pytest.raises(SystemExit):
        cli_main(["run", "--keep-batches", "lots", "train.py"])


def test_a_long_run_keeps_its_first_epoch_and_newest_rows_and_every_batch_and_sample_is_accounted(db_path):
    simulate.record(db_path, batches=60_000, keep_batches=5_000, epoch_batches=20_000, end_at=time.time() - 3600)
    got = totals(db_path)
    assert got["rows"] + got["folded"] + got["dropped"] == 60_000 and got["dropped"] == 0
    assert got["folded"] > 45_000 and got["both"] == 0  # no batch both a row and in a rollup
    assert got["samples_folded"] > 0 and got["samples_dropped"] == 0  # rows + folded = taken, set in SQL
    kept = dict(query(db_path, "SELECT epoch, COUNT(*) FROM batches GROUP BY epoch"))
    assert kept[0] == 5_000 and kept[1] == 1  # the first epoch's first 5,000; each epoch's start
    (busiest,) = query(db_path, "SELECT MAX(batches) FROM batch_rollups")[0]  # batches in one second, at most
    assert 5_000 <= kept[2] < 5_000 + busiest  # the newest 5,000 positions, up to the whole second they start in
    (p50, p95, mx, n) = query(
        db_path, "SELECT AVG(wait_p50_s), AVG(wait_p95_s), MAX(wait_max_s), COUNT(*) FROM batch_rollups"
    )[0]
    assert 0 < p50 <= p95 <= mx and n > 200  # about one rollup a second


@pytest.mark.slow
def test_the_diagnosis_report_and_dashboard_read_the_rollups_alike_full_rows(tmp_path):
    bounded, full = str(tmp_path / "bounded.sqlite"), str(tmp_path / "full.sqlite")
    simulate.record(bounded, batches=80_000, keep_batches=5_000, epoch_batches=20_000)
    simulate.record(full, batches=80_000, keep_batches=None, epoch_batches=20_000)
    a, b = diagnose(bounded), diagnose(full)
    assert a.verdict == b.verdict and a.summary["batches"] == b.summary["batches"] == 80_000
    assert abs(a.summary["stall_fraction"] - b.summary["stall_fraction"]) < 0.01
    assert a.summary["folded_batches"] > 60_000 and b.summary["folded_batches"] == 0
    from collector.diagnosis.text import render

    assert "read from per-second rollups" in render(a)
    from app.data import load_run_view, load_runs_table

    view = load_run_view(Reader(bounded), 1, None)
    assert view.headline.batches == 80_000 and view.batches.attrs["folded"] == a.summary["folded_batches"]
    full_view = load_run_view(Reader(full), 1, None)
    assert view.headline.wait_fraction == pytest.approx(full_view.headline.wait_fraction, abs=1e-9)
    assert load_runs_table(Reader(bounded))["batches"].tolist() == [80_000]


def test_a_disk_full_mid_fold_loses_the_flush_counted_and_folds_it_later(db_path):
    failed = []

    def fill_once(sink, done):
        failed.append(sink.failed)
        conn = sink.store.conn
        if done == 20_000:  # the next flush must fold: the file may not grow, and its free pages are taken
            conn.execute(f"PRAGMA max_page_count = {conn.execute('PRAGMA page_count').fetchone()[0]}")
            conn.execute("CREATE TABLE filler (b BLOB)")
            with contextlib.suppress(sqlite3.OperationalError):  # database or disk is full
                while True:
                    conn.execute("INSERT INTO filler VALUES (zeroblob(1024))")
        if done == 24_000:
            conn.execute("DROP TABLE filler")
            conn.execute("PRAGMA max_page_count = 1073741823")

    simulate.record(db_path, batches=40_000, keep_batches=5_000, samples=False, flush_s=10.0, after_flush=fill_once)
    got = totals(db_path)
    assert True in failed and failed[-1] is False  # a write failed full, and the later ones did not
    assert got["dropped"] > 0 and got["rows"] + got["folded"] + got["dropped"] == 40_000 and got["both"] == 0
    assert got["folded"] > 25_000


KILL_MID_FOLD = """
import os, signal, sys
sys.path.insert(0, {bench!r})
import simulate
from collector.store import fold
real = fold.Folder.__call__
def dying(self, conn, now):
    folded = real(self, conn, now)
    if folded and self.sizes and max(self.sizes) >= 1:  # rows folded and deleted, the transaction open
        os.kill(os.getpid(), signal.SIGKILL)
    return folded
fold.Folder.__call__ = dying
simulate.record({db!r}, batches=40_000, keep_batches=5_000, epoch_batches=20_000, samples=False)
"""


def test_a_writer_killed_mid_fold_leaves_the_rows_as_they_were_and_its_replacement_folds_them(db_path):
    done = subprocess.run([sys.executable, "-c", KILL_MID_FOLD.format(bench=str(REPO / "bench"), db=db_path)])
    assert done.returncode == -signal.SIGKILL
    before = totals(db_path)
    committed = query(db_path, "SELECT TOTAL(batches) FROM epochs")[0][0]
    assert before["both"] == 0 and before["rows"] + before["folded"] == committed  # the last commit, whole
    start = RunStart("simulated", {"num_workers": 0}, {}, {}, "bench", 4242, "simulate.py", None, None)
    replacement = Sink(Open(db_path, start, 0.0, 0, Rates(0, 0, 5_000), run_id=1))  # a new writer, the same run
    last_ns = int(query(db_path, "SELECT MAX(ts) FROM batches")[0][0] * 1e9)
    more = [(1, i, last_ns + i * 5_000_000 + 1_000_000, last_ns + (i + 1) * 5_000_000, None) for i in range(20_000)]
    replacement.write(Flush(records={"fast": more}, iterated=int(committed) + 25_000), sample=False)
    replacement.close()
    after = totals(db_path)
    assert after["folded"] > before["folded"] + 10_000 and after["both"] == 0
    assert after["rows"] + after["folded"] + after["dropped"] == committed + 25_000 and after["dropped"] == 5_000


def test_the_exporter_counts_every_batch_once_while_the_writer_folds_between_scrapes(db_path):
    scrapes = []
    clock = [0.0]
    exporter = Exporter([db_path], clock=lambda: clock[0] or 4e9, report=lambda text: None, grace_s=1e12)

    def scrape(sink, done):
        if done % 6_000 == 0:
            scrapes.append(exporter.refresh().runs[0].batches)

    simulate.record(db_path, batches=40_000, keep_batches=2_000, samples=False, flush_s=5.0, after_flush=scrape)
    final = exporter.refresh().runs[0]
    (rows_wait, rows_step) = query(db_path, "SELECT TOTAL(wait_s), TOTAL(step_s) FROM batches")[0]
    (folded_wait, folded_step) = query(db_path, "SELECT TOTAL(wait_s), TOTAL(step_s) FROM batch_rollups")[0]
    assert final.batches == 40_000 and scrapes == sorted(scrapes) and len(scrapes) >= 5
    assert final.wait_s == pytest.approx(rows_wait + folded_wait) and final.step_s == pytest.approx(
        rows_step + folded_step
    )
    assert final.wait_le[-1] == 40_000


def test_merging_a_bounded_file_twice_and_after_it_folded_more_counts_each_batch_once(tmp_path):
    src, out = str(tmp_path / "node.sqlite"), str(tmp_path / "all.sqlite")
    simulate.record(src, batches=30_000, keep_batches=3_000)
    merge_files(out, [src])
    merge_files(out, [src])
    got = totals(out)
    assert got["rows"] + got["folded"] == 30_000 and got["both"] == 0
    assert diagnose(out).summary["batches"] == 30_000


def test_an_older_file_without_rollups_is_read_as_it_is_and_migrated_by_the_next_writer(db_path):
    simulate.record(db_path, batches=5_000, keep_batches=None, samples=False)
    with sqlite3.connect(db_path) as conn:  # as stallwatch 4 wrote it
        for table in ("batch_rollups", "fetch_rollups", "gpu_rollups", "host_rollups", "proc_rollups"):
            conn.execute(f"DROP TABLE {table}")
        conn.execute("DROP TABLE trials")  # and schema 6's live tuning
        conn.execute("ALTER TABLE epochs DROP COLUMN setting")
        conn.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")
    assert diagnose(db_path).summary["batches"] == 5_000
    from app.data import load_run_view

    assert load_run_view(Reader(db_path), 1, None).headline.batches == 5_000
    assert Exporter([db_path], clock=lambda: 4e9, grace_s=1e12, report=print).refresh().runs[0].batches == 5_000
    simulate.record(db_path, batches=30_000, keep_batches=3_000, samples=False, name="new")
    assert query(db_path, "SELECT value FROM meta WHERE key = 'schema_version'") == [(str(SCHEMA_VERSION),)]
    assert query(db_path, "SELECT COUNT(DISTINCT run_id) FROM batch_rollups") == [(1,)]
    assert os.path.exists(db_path)
