"""The collector's own work at an epoch's start is measured, stored as epochs.collector_s and never blamed on the loader."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest
import torch
from diagnosis_fixtures import Synthetic, write_synthetic
from helpers import query
from torch.utils.data import DataLoader, TensorDataset

import collector
from collector.diagnosis import diagnose
from collector.diagnosis.text import render
from collector.record import session as session_module
from collector.record.worker_timing import TimingRings

SLOW_S = 0.3  # a deliberately slow step of the collector's own
STEP_S = 0.002  # a training step


def quiet(loader, db_path):
    return collector.watch(loader, db=db_path, gpu_hz=0, host_hz=0)


def slowly(function):
    """``function``, taking SLOW_S longer: a collector step made slow on purpose through a module seam."""

    def slow(*args, **kwargs):
        time.sleep(SLOW_S)
        return function(*args, **kwargs)

    return slow


def epochs(db_path):
    return query(db_path, "SELECT epoch, first_batch_s, collector_s FROM epochs ORDER BY epoch")


def test_a_slow_step_of_the_collector_at_each_epoch_start_is_its_own_time_not_the_loaders(db_path, monkeypatch):
    monkeypatch.setattr(session_module, "torch_threads", slowly(session_module.torch_threads))
    with quiet([torch.zeros(2)] * 20, db_path) as watched:  # a list: its own iter() and next() take microseconds
        for _ in range(3):
            for _ in watched:
                time.sleep(STEP_S)  # a step: the fractions below are of the loop's time, not of microseconds
    rows = epochs(db_path)
    assert [r[0] for r in rows] == [0, 1, 2]
    for _, first_batch_s, collector_s in rows:
        assert collector_s >= SLOW_S  # measured: it is in the stored start, as a loop's own meter would see it
        assert first_batch_s >= collector_s
        assert first_batch_s - collector_s < SLOW_S / 3  # what is left is the loader's: microseconds here
    summary = diagnose(db_path).summary
    assert summary["collector_s"] == pytest.approx(sum(r[2] for r in rows), abs=1e-5)
    assert summary["stall_fraction"] < 0.2 and summary["data_wait_fraction"] < 0.2  # 0.9 s of ours, not waiting


def test_the_session_a_first_iter_starts_is_the_collectors_own_time(db_path, monkeypatch):
    monkeypatch.setattr(session_module, "host_facts", slowly(session_module.host_facts))
    loader = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=8)
    with quiet(loader, db_path) as watched:  # a DataLoader's run starts at its first iter()
        for _ in range(2):
            for _ in watched:
                pass
    (_, first0, own0), (_, _, own1) = epochs(db_path)
    assert own0 >= SLOW_S and first0 >= own0  # the first iter() started the session: ours, inside the epoch's start
    assert first0 - own0 < SLOW_S / 3
    assert own1 < SLOW_S / 3  # the next epoch reuses the session


def test_a_dataloaders_worker_timing_rings_are_made_at_watch_not_in_the_first_iter(db_path, monkeypatch):
    monkeypatch.setattr(TimingRings, "__init__", slowly(TimingRings.__init__))
    loader = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=8, num_workers=2)
    with quiet(loader, db_path) as watched:
        for _ in watched:
            pass
        run_id = watched.run_id
    ((_, _, own),) = epochs(db_path)
    assert own < SLOW_S  # the slow rings were made before the loop began
    fetches = query(db_path, "SELECT COUNT(*) FROM worker_fetches WHERE run_id = ?", (run_id,))
    assert fetches == [(8,)]  # and the workers timed every batch into them


BASE = Synthetic(
    wait_s=np.full(600, 0.004),
    step_s=0.01,
    config={"batch_size": 32, "num_workers": 2, "prefetch_factor": 2},
    epoch_len=60,
    first_batch_s=0.03,
    ready=np.full(600, 1),
)


def test_a_run_with_the_collectors_own_time_reads_as_the_same_run_without_it(tmp_path):
    ours = write_synthetic(str(tmp_path / "ours.sqlite"), dataclasses.replace(BASE, collector_s=0.2))
    none = write_synthetic(str(tmp_path / "none.sqlite"), BASE)
    blamed = write_synthetic(str(tmp_path / "blamed.sqlite"), dataclasses.replace(BASE, first_batch_s=0.23))
    with_own = diagnose(str(tmp_path / "ours.sqlite"), ours).summary
    without = diagnose(str(tmp_path / "none.sqlite"), none).summary
    counted = diagnose(str(tmp_path / "blamed.sqlite"), blamed).summary
    for key in ("stall_fraction", "data_wait_fraction", "epoch_start_lost_s", "active_s", "warmup_s"):
        assert with_own[key] == pytest.approx(without[key], abs=1e-4), key
    assert with_own["stall_fraction_range"] == pytest.approx(without["stall_fraction_range"], abs=1e-4)
    assert with_own["collector_s"] == pytest.approx(2.0) and without["collector_s"] == 0.0
    # the same 0.2 s an epoch counted as the loader's wait reads as a different run
    assert counted["stall_fraction"] > without["stall_fraction"] + 0.05
    assert counted["epoch_start_lost_s"] > without["epoch_start_lost_s"] + 1.0


def test_the_report_says_the_collectors_own_time_is_not_counted_as_waiting(tmp_path):
    path = str(tmp_path / "ours.sqlite")
    run_id = write_synthetic(path, dataclasses.replace(BASE, collector_s=0.0123))
    assert "the collector's own set-up: 123.0 ms, not counted as waiting" in render(diagnose(path, run_id))
    quiet_path = str(tmp_path / "none.sqlite")
    assert "collector's own" not in render(diagnose(quiet_path, write_synthetic(quiet_path, BASE)))
