"""watch(): the loop sees exactly what it saw before, and each batch's timing lands in SQLite."""

from __future__ import annotations

import gc
import os
import sqlite3
import threading
import time
import warnings
from typing import ClassVar

import pytest
import torch
from fixture_datasets import FailingDataset, SlowDataset
from helpers import query, wait_until
from torch.utils.data import DataLoader, DistributedSampler

import collector
from collector.store.reader import Reader


def quiet(loader, db_path, **kwargs):
    return collector.watch(loader, db=db_path, gpu_hz=0, host_hz=0, **kwargs)


def test_wait_and_step_times_match_known_sleeps(db_path):
    loader = DataLoader(SlowDataset(12, sleep_s=0.03), batch_size=1)
    with quiet(loader, db_path, run="sleepy") as watched:
        for _ in watched:
            time.sleep(0.01)
        run_id = watched.run_id
    batches = Reader(db_path).batches(run_id)
    assert len(batches) == 12
    assert 0.028 <= batches.wait_s.median() <= 0.06
    assert 0.009 <= batches.step_s.median() <= 0.03
    assert batches.step_s.isna().sum() == 1  # the first batch of the epoch has no step before it
    assert batches.ready.isna().all() and batches.worker_id.isna().all()


def test_same_batches_same_order_and_loader_attributes(db_path):
    dataset = SlowDataset(40)
    plain = DataLoader(dataset, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(7))
    wrapped_loader = DataLoader(dataset, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(7))
    with quiet(wrapped_loader, db_path) as watched:
        assert len(watched) == len(plain) == 10
        assert watched.dataset is dataset and watched.batch_size == 4
        assert watched.sampler is wrapped_loader.sampler
        for _ in range(2):
            expected = [b.tolist() for b in plain]
            assert [b.tolist() for b in watched] == expected


def test_sampler_set_epoch_reaches_the_original_sampler(db_path):
    dataset = SlowDataset(16)
    sampler = DistributedSampler(dataset, num_replicas=2, rank=0, shuffle=True, seed=3)
    with quiet(DataLoader(dataset, batch_size=2, sampler=sampler), db_path) as watched:
        watched.sampler.set_epoch(5)
        assert sampler.epoch == 5
        assert len(list(watched)) == 4


def test_plain_iterable_is_recorded_with_null_queue_and_worker_fields(db_path):
    with quiet([10, 20, 30], db_path) as watched:
        assert list(watched) == [10, 20, 30]
        assert len(watched) == 3
        run_id = watched.run_id
    rows = query(db_path, "SELECT idx, ready, in_flight, worker_id, samples FROM batches WHERE run_id=?", (run_id,))
    assert [r[0] for r in rows] == [0, 1, 2]
    assert all(r[1] is None and r[2] is None and r[3] is None for r in rows)
    run = Reader(db_path).run(run_id)
    assert run["status"] == "completed" and run["config"]["loader"] == "list"


def test_a_dataset_exception_the_script_recovers_from_is_counted_and_the_run_completes(db_path):
    watched = quiet(DataLoader(FailingDataset(10, bad_index=3), batch_size=1), db_path)
    seen = []
    with pytest.raises(ValueError, match="corrupt sample 3"):
        for batch in watched:
            seen.append(int(batch))
    watched.close()
    assert seen == [0, 1, 2]
    run = Reader(db_path).run(watched.run_id)
    assert run["status"] == "completed" and run["error"] is None and run["exit_code"] is None
    assert run["error_count"] == 1
    assert run["first_error"] == run["last_error"] == "ValueError: corrupt sample 3"


def test_a_dataset_exception_that_ends_the_with_block_marks_the_run_crashed(db_path):
    with (
        pytest.raises(ValueError, match="corrupt sample 3"),
        quiet(DataLoader(FailingDataset(10, bad_index=3), batch_size=1), db_path) as watched,
    ):
        for _ in watched:
            pass
    run = Reader(db_path).run(watched.run_id)
    assert run["status"] == "crashed" and "ValueError: corrupt sample 3" in run["error"]
    assert run["error_count"] == 1


def test_keyboard_interrupt_marks_the_run_interrupted(db_path):
    watched = quiet(DataLoader(SlowDataset(10), batch_size=1), db_path)
    with pytest.raises(KeyboardInterrupt), watched:
        for _ in watched:
            raise KeyboardInterrupt
    assert Reader(db_path).run(watched.run_id)["status"] == "interrupted"


def test_breaking_out_of_an_epoch_is_not_a_crash(db_path):
    with quiet(DataLoader(SlowDataset(20), batch_size=2), db_path) as watched:
        for i, _ in enumerate(watched):
            if i == 2:
                break
        assert len(list(watched)) == 10
        run_id = watched.run_id
    epochs = Reader(db_path).epochs(run_id)
    assert epochs.batches.tolist() == [3, 10]
    assert Reader(db_path).run(run_id)["status"] == "completed"


def runs_and_rows(db_path):
    try:
        return query(
            db_path,
            "SELECT name, status, (SELECT COUNT(*) FROM batches b WHERE b.run_id = r.id) FROM runs r ORDER BY id",
        )
    except sqlite3.OperationalError:  # the writer has not made the file's tables yet
        return None


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.slow
def test_a_loader_watched_in_the_for_statement_itself_records_every_batch_and_then_ends(db_path, workers):
    # Nothing but the epoch's iterator holds what watch() returns here: the run lives as long as that
    # iterator, and ends (completed) once the loop has let go of it.
    loader = DataLoader(torch.arange(600), batch_size=3, num_workers=workers)
    for epoch in range(2):
        for i, _ in enumerate(quiet(loader, db_path, run=f"inline-{epoch}")):
            if i == 100:
                gc.collect()
    for _ in quiet(iter(range(500)), db_path, run="inline-iterable"):
        pass
    expected = [("inline-0", "completed", 200), ("inline-1", "completed", 200), ("inline-iterable", "completed", 500)]
    assert wait_until(lambda: runs_and_rows(db_path) == expected, timeout_s=10), runs_and_rows(db_path)


def test_a_loader_let_go_of_at_exit_where_no_thread_can_start_is_closed_at_once(db_path, monkeypatch):
    watched = quiet(iter(range(50)), db_path, run="at-exit")
    list(watched)

    def refused(self):
        raise RuntimeError("can't create new thread at interpreter shutdown")  # Python 3.12+ in atexit

    monkeypatch.setattr(threading.Timer, "start", refused)
    watched._stallwatch_session.close_soon()
    assert runs_and_rows(db_path) == [("at-exit", "completed", 50)]


def test_epochs_record_first_batch_latency_and_bounds(db_path):
    with quiet(DataLoader(SlowDataset(6, sleep_s=0.02), batch_size=3), db_path) as watched:
        for _ in range(2):
            list(watched)
        run_id = watched.run_id
    epochs = Reader(db_path).epochs(run_id)
    assert epochs.epoch.tolist() == [0, 1]
    assert (epochs.first_batch_s >= 0.05).all()
    assert (epochs.ended_at > epochs.started_at).all()


def test_batch_size_bytes_and_pinning_are_recorded(db_path):
    loader = DataLoader(SlowDataset(8), batch_size=4)
    with quiet(loader, db_path) as watched:
        list(watched)
        run_id = watched.run_id
    rows = query(db_path, "SELECT samples, nbytes, pinned FROM batches WHERE run_id=?", (run_id,))
    assert rows == [(4, 16, 0), (4, 16, 0)]


class BrokenLen(list):
    """A user's batch type whose __len__ raises: the collector must not care."""

    def __len__(self):
        raise ValueError("no length today")


def test_a_batch_that_cannot_be_described_is_stored_with_unknown_size(db_path):
    batches = [BrokenLen([i]) for i in range(5)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with quiet(batches, db_path) as watched:
            assert [b[0] for b in watched] == [0, 1, 2, 3, 4]
            run_id = watched.run_id
    assert [str(w.message) for w in caught] == []  # not even the plain loop's last-resort warning
    rows = query(db_path, "SELECT COUNT(*), COUNT(samples) FROM batches WHERE run_id=?", (run_id,))
    assert rows == [(5, 0)]
    assert query(db_path, "SELECT status FROM runs WHERE id=?", (run_id,)) == [("completed",)]


@pytest.mark.parametrize(
    ("kwargs", "error", "fix"),
    [
        ({"loader": 42}, TypeError, "pass the DataLoader itself"),
        ({"loader": [1], "gpu_hz": -1}, ValueError, r"gpu_hz must be a number of samples per second from 0 to 100"),
        ({"loader": [1], "host_hz": -0.5}, ValueError, r"host_hz must be .* from 0 to 100 .*got -0.5"),
        ({"loader": [1], "host_hz": float("inf")}, ValueError, r"host_hz must be .* from 0 to 100 .*got inf"),
        ({"loader": [1], "gpu_hz": float("nan")}, ValueError, r"gpu_hz must be .* from 0 to 100 .*got nan"),
        ({"loader": [1], "host_hz": 1e9}, ValueError, r"host_hz must be .* from 0 to 100"),
        ({"loader": [1], "gpu_hz": True}, ValueError, r"gpu_hz must be a number"),
        ({"loader": [1], "run": ""}, ValueError, "non-empty string"),
        ({"loader": [1], "tags": "lr=0.1"}, TypeError, r"tags must be a mapping .* got str"),
        (
            {"loader": [1], "hots_hz": 3},
            TypeError,
            r"watch\(\) got an unexpected keyword argument 'hots_hz' \(did you mean 'host_hz'\?\); "
            r"its keywords are db, run, gpu_hz, host_hz, tags",
        ),
    ],
)
def test_bad_arguments_raise_at_once_saying_how_to_fix(kwargs, error, fix, db_path):
    loader = kwargs.pop("loader")
    with pytest.raises(error, match=fix):
        collector.watch(loader, db=db_path, **kwargs)
    assert not os.path.exists(db_path)  # nothing started


def test_db_that_is_a_directory_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="is a directory: pass a file path"):
        collector.watch([1], db=tmp_path)


def test_db_defaults_to_env_var_then_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with quiet([1], None) as watched:
        list(watched)
    assert (tmp_path / "stallwatch.sqlite").exists()
    monkeypatch.setenv("STALLWATCH_DB", str(tmp_path / "env.sqlite"))
    with quiet([1], None) as watched:
        list(watched)
    assert (tmp_path / "env.sqlite").exists()


def test_run_metadata_records_config_host_versions_and_rank(db_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    loader = DataLoader(SlowDataset(4), batch_size=2, shuffle=True, drop_last=True)
    with quiet(loader, db_path, run="meta") as watched:
        list(watched)
        run_id = watched.run_id
    run = Reader(db_path).run("meta")
    assert run["id"] == run_id and (run["rank"], run["world_size"]) == (1, 4)
    assert run["config"]["batch_size"] == 2 and run["config"]["shuffle"] is True
    assert run["config"]["drop_last"] is True and run["config"]["dataset"] == "SlowDataset"
    assert run["host"]["usable_cores"] >= 1 and run["host"]["ram_bytes"] > 0
    assert run["versions"]["torch"] == torch.__version__
    assert run["pid"] > 0 and run["hostname"] and run["ended_at"] >= run["started_at"]


def test_generated_run_names_are_readable(db_path):
    with quiet([1], db_path) as watched:
        list(watched)
    name = Reader(db_path).run("latest")["name"]
    assert name.count("-") == 2 and name.split("-")[0].isalpha()


def test_cpu_spent_inside_next_is_recorded_for_sampled_batches(db_path):
    from collector.cli.demo import ComputeDataset

    loader = DataLoader(ComputeDataset(8, cpu_s=0.01), batch_size=2)
    with quiet(loader, db_path) as watched:
        list(watched)
        run_id = watched.run_id
    batches = Reader(db_path).batches(run_id)
    assert batches.load_cpu_s.notna().all()  # a slow loop: every batch is sampled
    assert (batches.load_cpu_s >= 0.018).all()  # 2 samples x 10 ms of CPU each
    sleepy = DataLoader(SlowDataset(4, sleep_s=0.02), batch_size=2)
    with quiet(sleepy, db_path) as watched:
        list(watched)
        run_id = watched.run_id
    batches = Reader(db_path).batches(run_id)
    assert (batches.load_cpu_s < 0.01).all() and (batches.wait_s >= 0.04).all()  # waiting, not computing


def test_a_watched_dataloader_is_a_dataloader_that_frameworks_can_inspect_and_rebuild(db_path):
    import inspect

    dataset = SlowDataset(16)
    loader = DataLoader(dataset, batch_size=2, shuffle=True)
    watched = quiet(loader, db_path, run="rebuilt")
    assert isinstance(watched, DataLoader) and type(watched).__name__ == "DataLoader"
    assert inspect.signature(type(watched).__init__) == inspect.signature(DataLoader.__init__)
    assert vars(watched) is vars(loader)  # every attribute is the original's
    # a framework injecting a DistributedSampler rebuilds from the class: the new loader records itself
    sampler = DistributedSampler(dataset, num_replicas=2, rank=1, shuffle=False)
    rebuilt = type(watched)(dataset, batch_size=2, sampler=sampler)
    assert [b.tolist() for b in rebuilt] == [b.tolist() for b in DataLoader(dataset, batch_size=2, sampler=sampler)]
    rebuilt.close()
    watched.close()
    (run,) = Reader(db_path).runs().to_dict("records")  # the original was never iterated: no empty run
    assert run["name"] == "rebuilt" and run["config"]["sampler"] == "DistributedSampler"
    assert query(db_path, "SELECT COUNT(*) FROM batches") == [(4,)]


def test_watch_draws_nothing_from_the_rng_until_the_loop_iterates(db_path):
    loader = DataLoader(SlowDataset(8), batch_size=2, shuffle=True)
    torch.manual_seed(3)
    expected = torch.rand(1)
    torch.manual_seed(3)
    watched = quiet(loader, db_path)
    assert torch.equal(torch.rand(1), expected)
    watched.close()


class ForkWatcher(DataLoader):
    """A DataLoader that notes, as its own iter() starts its workers, which of our threads and children exist."""

    seen: ClassVar[list[tuple[list[str], list[int]]]] = []

    def _get_iterator(self):
        ours = [t.name for t in threading.enumerate() if t.name.startswith("stallwatch")]
        ForkWatcher.seen.append((ours, sorted(_writer_pids())))
        return super()._get_iterator()


def test_the_monitor_and_the_writer_start_after_the_loaders_own_iter_forks_its_workers(db_path):
    ForkWatcher.seen = []
    loader = ForkWatcher(SlowDataset(8), batch_size=2, num_workers=2)
    with collector.watch(loader, db=db_path) as watched:
        for _ in range(2):
            assert len(list(watched)) == 4
            assert watched._stallwatch_start().monitor.is_alive()  # started by the first epoch, after its fork
    (first, second) = ForkWatcher.seen
    assert first == ([], [])  # none of ours existed at the first epoch's fork
    assert second[0] == ["stallwatch-monitor"] and len(second[1]) == 1  # the second epoch's: the monitor, the writer
    assert query(db_path, "SELECT status, (SELECT COUNT(*) FROM batches) FROM runs") == [("completed", 8)]


def test_a_run_asked_for_its_id_or_closed_before_any_iteration_is_recorded(db_path):
    asked = collector.watch(DataLoader(SlowDataset(4), batch_size=2), db=db_path, run="asked")
    assert asked.run_id is not None  # starts the monitor, as before the first epoch
    asked.close()
    never = collector.watch(iter(range(3)), db=db_path, run="never")
    never.close()
    assert query(
        db_path, "SELECT name, status, (SELECT COUNT(*) FROM batches b WHERE b.run_id = r.id) FROM runs r"
    ) == [
        ("asked", "completed", 0),
        ("never", "completed", 0),
    ]


def _writer_pids() -> list[int]:
    """Our writer children alive now (found through the module that tracks the shared writer)."""
    from collector.writer import channel

    process = channel._current
    return [] if process is None or process.poll() is not None else [process.pid]
