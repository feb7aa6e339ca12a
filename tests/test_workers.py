"""Worker processes: queue depth, which worker served each batch, and its fetch timing."""

from __future__ import annotations

import multiprocessing

import pytest
from fixture_datasets import SlowDataset
from torch.utils.data import DataLoader

import collector
from collector.record import loader_probe
from collector.record.worker_timing import TimedFetcher, TimingRings
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


class ThreeArgumentIterator:
    """A DataLoader iterator whose _process_data takes more than torch's (data, worker_idx), as torchdata's does."""

    def __init__(self) -> None:
        self._num_workers = 2
        self.calls: list[tuple[object, ...]] = []

    def _process_data(self, data, worker_id, state_dict, *, flag=None):
        self.calls.append((data, worker_id, state_dict, flag))
        if data == "broken":
            raise ValueError("corrupt sample 3")
        return f"{data}!"


def test_a_probe_forwards_a_process_data_signature_it_does_not_know_and_raises_only_what_it_raised():
    it = ThreeArgumentIterator()
    stored: list[tuple[str, str]] = []
    probe = loader_probe.attach(it, lambda key, message: stored.append((key, message)))
    assert probe is not None
    assert it._process_data("a", 1, {"pos": 3}, flag=True) == "a!"
    assert it.calls == [("a", 1, {"pos": 3}, True)]
    assert probe.last == (1, 0)  # worker 1's first batch
    assert it._process_data("b", 1, None) == "b!" and probe.last == (1, 1)
    with pytest.raises(ValueError, match="corrupt sample 3"):  # the loader's own exception, as it was
        it._process_data("broken", 0, None)
    assert stored == []


def test_a_process_data_call_without_a_worker_id_keeps_its_batch_and_stores_why_it_has_no_worker():
    it = ThreeArgumentIterator()
    stored: list[tuple[str, str]] = []
    probe = loader_probe.attach(it, lambda key, message: stored.append((key, message)))
    assert probe is not None
    it._process_data("a", 0, None)
    assert it._process_data(data="c", worker_id=1, state_dict=None) == "c!"  # by keyword: a shape we do not know
    assert probe.last is None  # the batch is stored without a worker, not with the previous batch's
    assert [key for key, _ in stored] == ["worker-ids"]
    assert "_process_data was called with 0 positional argument(s) and data, state_dict, worker_id" in stored[0][1]


def test_a_torch_iterator_without_the_fields_the_probe_reads_is_recorded_without_them_and_says_so():
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    class Renamed(_BaseDataLoaderIter):
        def __init__(self) -> None:  # none of torch's private state
            pass

    stored: list[tuple[str, str]] = []
    assert loader_probe.attach(Renamed(), lambda key, message: stored.append((key, message))) is None
    assert [key for key, _ in stored] == ["queue-fields"]
    assert loader_probe.attach(ForeignIterator([1]), lambda key, message: stored.append((key, message))) is None
    assert len(stored) == 1  # another iterable's iterator: nothing of torch's to miss


class PlainFetcher:
    def __init__(self) -> None:
        self.dataset_iter = iter(range(3))
        self.ended = False

    def fetch(self, index):
        return next(self.dataset_iter)


def test_a_timed_fetcher_writes_through_to_the_fetcher_it_wraps_so_a_restored_stream_resumes():
    inner = PlainFetcher()
    timed = TimedFetcher(inner, TimingRings(multiprocessing.get_context("fork"), 1), worker_id=0, incarnation=0)
    resumed = iter(range(10, 13))
    timed.dataset_iter = resumed  # what torchdata's worker does when it restores a stream mid-epoch
    timed.ended = True
    assert inner.dataset_iter is resumed and inner.ended is True
    assert timed.fetch(None) == 10 and timed.dataset_iter is resumed
    del timed.ended
    assert not hasattr(inner, "ended")


def test_workers_that_cannot_install_their_timing_still_serve_every_batch_and_run_the_users_init(
    db_path, tmp_path, monkeypatch
):
    from collector.record import worker_timing

    def moved(rings, worker_id):
        raise AttributeError("type object '_DatasetKind' has no attribute 'create_fetcher'")

    monkeypatch.setattr(worker_timing, "_install", moved)  # forked workers inherit it
    marker = tmp_path / "inits"
    marker.mkdir()
    fork = multiprocessing.get_context("fork")
    loader = DataLoader(SlowDataset(8), batch_size=2, num_workers=2, multiprocessing_context=fork)
    loader.worker_init_fn = TouchInit(str(marker))
    expected = [b.tolist() for b in DataLoader(SlowDataset(8), batch_size=2)]
    with collector.watch(loader, db=db_path, gpu_hz=0, host_hz=0) as watched:
        assert [b.tolist() for b in watched] == expected
        run_id = watched.run_id
    assert sorted(p.name for p in marker.iterdir()) == ["0", "1"]
    batches = Reader(db_path).batches(run_id)
    assert batches.worker_id.notna().all() and batches.worker_wall_s.isna().all()


def test_a_torch_whose_fetches_cannot_be_timed_records_the_rest_and_stores_why(db_path, monkeypatch):
    from collector.record import worker_timing

    reason = "worker fetch times (worker_fetches) are not recorded: torch.utils.data._DatasetKind has no create_fetcher"
    monkeypatch.setattr(worker_timing, "not_supported", lambda: reason)
    with pytest.warns(collector.CollectorWarning, match="no create_fetcher"):
        run_id = record(DataLoader(SlowDataset(8), batch_size=2, num_workers=2), db_path)
    reader = Reader(db_path)
    batches = reader.batches(run_id)
    assert len(batches) == 4 and batches.worker_id.notna().all() and batches.ready.notna().all()
    assert batches.worker_wall_s.isna().all()
    assert reader.run(run_id)["warnings"] == [reason]
