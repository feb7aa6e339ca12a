"""An epoch's end where the loop never asks past its last batch and holds the iterator (Lightning's way)."""

from __future__ import annotations

import gc
import itertools
import json
import sqlite3
import time
from typing import Any

import pytest
from test_tuning_windows import Offering, Slow
from torch.utils.data import DataLoader

from collector import watch
from collector.record import tuning
from collector.record.loader_setting import setting_of

GAP_S = 0.05  # the loop's own work between an epoch's last batch and the next iter() (Lightning's epoch-end hooks)


def sized_loop(watched: Any, epochs: int, cycle: bool = False) -> list[list[float]]:
    """Take len() batches an epoch, never the final next(); the iterator stays held until the next iter() replaces it.

    ``cycle``: held in a reference cycle, so that only a garbage collection
    frees it (not run here: it would come later, at any time).
    """
    seen, held = [], None
    gc.disable()
    try:
        for _ in range(epochs):
            it = iter(watched)
            seen += [next(it)[:, 0].tolist() for _ in range(len(watched))]
            time.sleep(GAP_S)
            held = [it]
            if cycle:
                held.append(held)
    finally:
        gc.enable()
    return seen


def epochs_of(db: str) -> list[tuple[int, float, float, int, float | None, str | None]]:
    with sqlite3.connect(db) as conn:
        return conn.execute(
            "SELECT epoch, started_at, ended_at, batches, end_wait_s, setting FROM epochs ORDER BY epoch"
        ).fetchall()


@pytest.mark.parametrize("workers", [0, 1])
def test_an_epoch_the_loop_holds_ends_at_its_last_batch_before_the_next_begins(db_path, workers):
    loader = DataLoader(Slow(12, 0.0), batch_size=4, num_workers=workers, persistent_workers=workers > 0)
    with watch(loader, db=db_path) as watched:
        sized_loop(watched, 3, cycle=workers > 0)
    rows = epochs_of(db_path)
    assert [(epoch, batches, wait) for epoch, _, _, batches, wait, _ in rows] == [(e, 3, None) for e in range(3)]
    for (_, _, ended, *_), (_, next_started, *_) in itertools.pairwise(rows):
        assert ended <= next_started - GAP_S  # at the last batch, not when the next iter() let the iterator go
    assert rows[-1][2] is not None  # the last one, still held at the run's end, ended with the run


def test_a_trial_in_a_loop_that_holds_its_iterator_is_measured_on_its_own_epochs(db_path, monkeypatch):
    """Each trial row measures epochs that ran at its setting, as the epochs table records them."""
    loader = DataLoader(Slow(32, 0.004), batch_size=4, num_workers=0)
    monkeypatch.setattr(tuning, "Advisor", Offering(setting_of(loader), {"num_workers": 2, "persistent_workers": True}))
    with watch(loader, db=db_path, tune=True) as watched:
        seen = sized_loop(watched, 6)
    assert seen == [[float(i) for i in range(b, b + 4)] for _ in range(6) for b in range(0, 32, 4)]
    ran = {epoch: json.loads(setting)["num_workers"] for epoch, *_, setting in epochs_of(db_path)}
    with sqlite3.connect(db_path) as conn:
        trials = conn.execute("SELECT epoch, setting, measured_speedup, kept FROM trials").fetchall()
    assert trials
    for epoch, setting, measured, kept in trials:
        assert ran[epoch] == json.loads(setting)["num_workers"] == 2
        assert kept and measured > 1.3  # 2 workers on 4-ms items: about 2x
