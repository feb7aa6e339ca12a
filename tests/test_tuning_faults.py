"""A trial's faults are the tuner's: same samples in the same order, no worker left, the threads back (NOTE [ Trials never hurt ])."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sqlite3
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch
from test_tuning_windows import Offering
from torch.utils.data import DataLoader, Dataset, get_worker_info

from collector import watch
from collector.errors import CollectorWarning
from collector.record import tuning
from collector.record.loader_setting import setting_of
from collector.tune.policy import BASELINE_EPOCHS

pytestmark = pytest.mark.slow  # worker processes started and ended in trials: about 30 s in all

EPOCHS = BASELINE_EPOCHS + 3


class Locked(Dataset[torch.Tensor]):
    """Holds a lock, as a dataset with an open handle does: it cannot be pickled for a spawned worker."""

    def __init__(self, n: int) -> None:
        self.n, self.lock = n, threading.Lock()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.tensor([float(i)])


class KillsAWorker(Dataset[torch.Tensor]):
    """In a worker, the first fetch of ``index`` kills that worker with SIGKILL (once: ``flag`` remembers)."""

    def __init__(self, n: int, index: int, flag: Path) -> None:
        self.n, self.index, self.flag = n, index, flag

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        if i == self.index and get_worker_info() is not None and not self.flag.exists():
            self.flag.touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return torch.tensor([float(i)])


def one_worker_only(worker_id: int) -> None:
    """A worker_init_fn that only works with one worker (a per-worker resource there is one of)."""
    if worker_id > 0:
        raise RuntimeError(f"no resource for worker {worker_id}")


def epochs_seen(loader: DataLoader, db: str | None, stop: Any = None) -> list[list[float]]:
    """Every batch's samples over EPOCHS epochs, watched and tuned where ``db``; ``stop(loader, i)`` may raise."""
    seen: list[list[float]] = []

    def run(it: Any) -> None:
        for _ in range(EPOCHS):
            for i, batch in enumerate(it):
                seen.append(batch[:, 0].tolist())
                if stop is not None:
                    stop(loader, i)

    if db is None:
        run(loader)
    else:
        with watch(loader, db=db, tune=True) as watched:
            run(watched)
    return seen


def trial_rows(db: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT epoch, setting, measured_speedup, kept, why FROM trials ORDER BY rowid").fetchall()


def stored_warnings(db: str) -> str:
    with sqlite3.connect(db) as conn:
        return " ".join(str(w) for (w,) in conn.execute("SELECT warnings FROM runs"))


def workers_left(timeout_s: float = 10.0) -> list[psutil.Process]:
    """This process's children still alive after ``timeout_s`` (the writer and helper end at close too)."""
    deadline = time.monotonic() + timeout_s
    while True:
        alive = [p for p in psutil.Process().children(recursive=True) if _a_worker(p)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def _a_worker(process: psutil.Process) -> bool:
    """A live child that is not multiprocessing's own resource tracker (which spawn starts once a process)."""
    try:
        return process.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in " ".join(process.cmdline())
    except psutil.Error:
        return False


@pytest.fixture
def spawn_by_default() -> Iterator[None]:
    """The start method macOS, Windows and Python 3.14's Linux use by default."""
    before = multiprocessing.get_start_method(allow_none=True)
    multiprocessing.set_start_method("spawn", force=True)
    try:
        yield
    finally:
        multiprocessing.set_start_method(before, force=True)


def test_a_trial_whose_workers_cannot_start_under_spawn_goes_back_in_the_same_epoch_with_the_same_samples(
    db_path, monkeypatch, spawn_by_default
):
    def make() -> DataLoader:
        return DataLoader(Locked(24), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(1))

    plain, loader = epochs_seen(make(), None), make()
    monkeypatch.setattr(tuning, "Advisor", Offering(setting_of(loader), {"num_workers": 2}))
    with pytest.warns(CollectorWarning, match="a trial of .* failed .*workers did not start"):
        tuned = epochs_seen(loader, db_path)
    assert tuned == plain
    assert loader.num_workers == 0
    ((epoch, setting, measured, kept, why),) = trial_rows(db_path)  # never tried again
    assert epoch == BASELINE_EPOCHS and '"num_workers": 2' in setting and measured is None and not kept
    assert "not judged: its workers did not start" in why and "pickle" in why
    assert "workers did not start" in stored_warnings(db_path)


def test_a_trial_worker_killed_by_a_signal_is_replaced_at_the_last_good_setting_mid_epoch(
    db_path, monkeypatch, tmp_path
):
    def loader() -> DataLoader:
        data = KillsAWorker(48, index=29, flag=tmp_path / "killed")
        return DataLoader(data, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(2))

    plain = epochs_seen(loader(), None)
    tuned_loader = loader()
    monkeypatch.setattr(tuning, "Advisor", Offering(setting_of(tuned_loader), {"num_workers": 2}))
    with pytest.warns(CollectorWarning, match="a trial of .* failed"):
        tuned = epochs_seen(tuned_loader, db_path)
    assert (tmp_path / "killed").exists()
    assert tuned == plain  # nothing lost or repeated across the worker's death
    assert tuned_loader.num_workers == 0
    ((_, _, measured, kept, why), *_) = trial_rows(db_path)
    assert measured is None and not kept and "not judged" in why
    assert not workers_left()


def test_a_worker_init_fn_that_fails_at_more_workers_reverts_the_trial_and_the_dataset_sees_each_batch_once_more_at_most(
    db_path, monkeypatch
):
    def loader() -> DataLoader:
        data = KillsAWorker(40, index=-1, flag=Path("/nonexistent"))
        return DataLoader(data, batch_size=4, num_workers=1, worker_init_fn=one_worker_only)

    plain = epochs_seen(loader(), None)
    tuned_loader = loader()
    monkeypatch.setattr(tuning, "Advisor", Offering(setting_of(tuned_loader), {"num_workers": 2}))
    with pytest.warns(CollectorWarning, match="a trial of .* failed .*no resource for worker 1"):
        tuned = epochs_seen(tuned_loader, db_path)
    assert tuned == plain
    assert tuned_loader.num_workers == 1 and tuned_loader.worker_init_fn is one_worker_only


def test_a_datasets_own_error_in_a_trial_still_reaches_the_loop_from_the_good_setting(db_path, monkeypatch):
    from fixture_datasets import FailingDataset

    def loader() -> DataLoader:
        return DataLoader(FailingDataset(40, bad_index=37), batch_size=4)

    def caught(watched: Any) -> list[Any]:
        out: list[Any] = []
        for _ in range(EPOCHS):
            it = iter(watched)
            while True:
                try:
                    out.append(next(it)[:, 0].tolist())
                except StopIteration:
                    break
                except ValueError as exc:
                    out.append(str(exc))
        return out

    plain = caught(loader())
    tuned_loader = loader()
    monkeypatch.setattr(tuning, "Advisor", Offering(setting_of(tuned_loader), {"num_workers": 2}))
    with warnings.catch_warnings(record=True) as caught_warnings:
        warnings.simplefilter("always")
        with watch(tuned_loader, db=db_path, tune=True) as watched:
            tuned = caught(watched)
    assert tuned == plain and plain.count("corrupt sample 37") == EPOCHS
    assert not [w for w in caught_warnings if "a trial of" in str(w.message)]  # the dataset's error, not the trial's


@pytest.mark.parametrize("persistent", [False, True], ids=["fresh", "persistent"])
def test_ctrl_c_in_a_trial_puts_the_loader_back_ends_its_workers_and_restores_the_threads(
    db_path, monkeypatch, persistent
):
    loader = DataLoader(KillsAWorker(40, index=-1, flag=Path("/nonexistent")), batch_size=4)
    start = setting_of(loader)
    threads = torch.get_num_threads()
    change = {"num_workers": 3, "persistent_workers": persistent, "threads": max(1, threads - 1)}
    monkeypatch.setattr(tuning, "Advisor", Offering(start, change))

    def ctrl_c(loader: DataLoader, i: int) -> None:
        if loader.num_workers == 3 and i == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        epochs_seen(loader, db_path, stop=ctrl_c)
    assert setting_of(loader) == start  # workers, persistence and torch's threads as before the trial
    assert torch.get_num_threads() == threads
    assert loader.__dict__.get("_iterator") is None
    assert not workers_left()
    (row,) = trial_rows(db_path)
    assert row[2] is None and not row[3] and "not judged" in row[4]


class _Ending:
    """What ``_cut_short`` reads of a tuner: the session's status, the epoch before, whether the run is closing."""

    def __init__(self) -> None:
        self.shared = type("Shared", (), {"status": {}})()
        self._last_batches: int | None = None
        self.ending = False


@pytest.mark.parametrize(
    ("ends", "closing", "status", "cut"),
    [
        ([(10, True)], False, None, [False]),  # a final next(): whole
        ([(4, False), (4, False), (4, False)], False, None, [False, False, False]),  # limit_train_batches=4
        ([(10, False), (6, False)], False, None, [False, True]),  # left at batch 6 after a whole epoch: Ctrl-C caught
        ([(10, False), (6, False)], True, None, [False, True]),  # left, then the run closed
        ([(6, False)], False, "interrupted", [True]),  # Ctrl-C ended the run
    ],
)
def test_an_epoch_left_early_is_no_measure_but_a_loop_that_always_stops_at_n_batches_is(ends, closing, status, cut):
    from collector.record.handover import EpochEnded
    from collector.record.tuning_windows import Restarts

    tuner = _Ending()
    if status:
        tuner.shared.status["status"] = status
    seen = []
    for i, (batches, final_next) in enumerate(ends):
        tuner.ending = closing and i == len(ends) - 1
        event = EpochEnded(i, 0, batches, 1 if final_next else None)
        seen.append(Restarts._cut_short(tuner, event, 10))  # type: ignore[arg-type]
    assert seen == cut
