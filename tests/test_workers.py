"""Worker processes: queue depth, which worker served each batch, and its fetch timing."""

from __future__ import annotations

import multiprocessing

import pytest
from fixture_datasets import SlowDataset
from torch.utils.data import DataLoader

import collector
from collector.store.reader import Reader


def record(loader, db_path, epochs=1):
    with collector.watch(loader, db=db_path, gpu_hz=0, host_hz=0) as watched:
        for _ in range(epochs):
            for _ in watched:
                pass
        return watched.run_id


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
@pytest.mark.slow
def test_worker_ids_and_fetch_timings_under_each_start_method(db_path, start_method):
    loader = DataLoader(
        SlowDataset(24, sleep_s=0.01),
        batch_size=3,
        num_workers=2,
        multiprocessing_context=multiprocessing.get_context(start_method),
    )
    run_id = record(loader, db_path)
    batches = Reader(db_path).batches(run_id)
    assert len(batches) == 8
    assert sorted(batches.worker_id.unique().tolist()) == [0, 1]
    assert batches.worker_wall_s.notna().all(), "every batch joined with its worker's fetch timing"
    assert (batches.worker_wall_s >= 0.03).all()  # 3 samples x 10 ms sleep
    assert (batches.worker_cpu_s < batches.worker_wall_s).all()  # sleeping is not CPU
    assert Reader(db_path).run(run_id)["config"]["multiprocessing_context"] == start_method


def test_queue_depth_never_exceeds_workers_times_prefetch(db_path):
    loader = DataLoader(SlowDataset(60, sleep_s=0.002), batch_size=2, num_workers=2, prefetch_factor=3)
    run_id = record(loader, db_path)
    batches = Reader(db_path).batches(run_id)
    assert batches.in_flight.max() <= 6
    assert batches.ready.max() <= 6
    assert (batches.ready <= batches.in_flight).all()
    assert batches.in_flight.iloc[5] == 6  # the prefetch window is full mid-epoch


def test_persistent_workers_keep_pids_and_timings_across_epochs(db_path):
    loader = DataLoader(SlowDataset(12, sleep_s=0.002), batch_size=2, num_workers=2, persistent_workers=True)
    run_id = record(loader, db_path, epochs=3)
    reader = Reader(db_path)
    epochs = reader.epochs(run_id)
    assert len(epochs) == 3
    assert epochs.worker_pids.map(tuple).nunique() == 1
    batches = reader.batches(run_id)
    assert len(batches) == 18 and batches.worker_wall_s.notna().all()
    assert reader.worker_fetches(run_id).worker_incarnation.max() == 2


def test_fresh_workers_each_epoch_get_new_pids(db_path):
    loader = DataLoader(SlowDataset(8), batch_size=2, num_workers=2)
    run_id = record(loader, db_path, epochs=2)
    epochs = Reader(db_path).epochs(run_id)
    assert set(epochs.worker_pids[0]).isdisjoint(epochs.worker_pids[1])


def test_user_worker_init_fn_still_runs_and_is_restored(db_path, tmp_path):
    marker = tmp_path / "inits"
    marker.mkdir()
    loader = DataLoader(SlowDataset(4), batch_size=2, num_workers=2, worker_init_fn=TouchInit(str(marker)))
    original = loader.worker_init_fn
    record(loader, db_path)
    assert sorted(p.name for p in marker.iterdir()) == ["0", "1"]
    assert loader.worker_init_fn is original


class TouchInit:
    def __init__(self, folder: str) -> None:
        self.folder = folder

    def __call__(self, worker_id: int) -> None:
        with open(f"{self.folder}/{worker_id}", "w"):
            pass


def test_dropping_a_watched_loader_stops_its_workers_promptly(db_path):
    import gc
    import time

    loader = DataLoader(SlowDataset(400), batch_size=2, num_workers=2, persistent_workers=True)
    watched = collector.watch(loader, db=db_path, gpu_hz=0, host_hz=0)
    for i, _ in enumerate(watched):
        if i == 10:
            break
    watched.close()
    started = time.monotonic()
    del loader, watched
    gc.collect()
    # a reference cycle through the probe once made each worker join time out (5 s each)
    assert time.monotonic() - started < 4.0


class ForeignIterator:
    """An iterator from a torch whose DataLoader internals look nothing like today's."""

    def __init__(self, items):
        self._items = iter(items)

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._items)


class ForeignLoader:
    """Claims workers, but its iterator has none of the private fields the probe reads."""

    num_workers = 2
    batch_size = 1

    def __iter__(self):
        return ForeignIterator([1, 2, 3])

    def __len__(self):
        return 3


def test_unknown_iterator_internals_degrade_to_null_queue_and_worker_fields(db_path):
    with collector.watch(ForeignLoader(), db=db_path, gpu_hz=0, host_hz=0) as watched:
        assert list(watched) == [1, 2, 3]
        run_id = watched.run_id
    batches = Reader(db_path).batches(run_id)
    assert len(batches) == 3
    assert batches.ready.isna().all() and batches.worker_id.isna().all()
