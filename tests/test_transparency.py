"""The watched loader behaves exactly like the loader: a loop that skips bad samples, for every loop kind."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import traceback
import warnings

import pytest
import torch
from helpers import query
from torch.utils.data import DataLoader, Dataset, IterableDataset

import collector
from collector.record import hotloop
from collector.record import plain_loop as watcher
from collector.record.hotloop import PyTimer, py_epoch
from collector.store.reader import Reader

BAD = {3, 7}


class BadSamples(Dataset[int]):
    """Ten samples; 3 and 7 raise, as a corrupt file would."""

    def __len__(self) -> int:
        return 10

    def __getitem__(self, index: int) -> int:
        if index in BAD:
            raise ValueError(f"corrupt sample {index}")
        return index


class BadStream(IterableDataset[int]):
    """A stream whose 4th item raises (a generator: it ends there, in both loaders)."""

    def __iter__(self):  # type: ignore[no-untyped-def]
        info = torch.utils.data.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(start, 10, step):
            if i == 3:
                raise ValueError("corrupt record 3")
            yield i


def skip_bad_samples(loader):  # type: ignore[no-untyped-def]
    """The user's loop: keep going past bad samples. (items, [(error text, traceback frames)])."""
    items, errors = [], []
    it = iter(loader)
    while True:
        try:
            items.append(int(next(it)))
        except ValueError as exc:
            frames = [(f.filename, f.name) for f in traceback.extract_tb(exc.__traceback__)]
            errors.append((str(exc), frames))
            continue
        except StopIteration:
            return items, errors


LOOPS = ["compiled", "python"] if hotloop.COMPILED else ["python"]
KINDS = [
    pytest.param(lambda: BadSamples(), 0, id="map-no-workers"),
    pytest.param(lambda: BadSamples(), 2, id="map-2-workers"),
    pytest.param(lambda: BadStream(), 0, id="iterable-no-workers"),
    pytest.param(lambda: BadStream(), 2, id="iterable-2-workers"),
]


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize(("dataset", "workers"), KINDS)
def test_a_loop_that_skips_bad_samples_gets_what_the_plain_loader_gives(loop, dataset, workers, db_path, monkeypatch):
    if loop == "python":
        monkeypatch.setattr(watcher, "Timer", PyTimer)
        monkeypatch.setattr(watcher, "Epoch", py_epoch)
    plain = skip_bad_samples(DataLoader(dataset(), batch_size=None, num_workers=workers))
    watched_loader = collector.watch(
        DataLoader(dataset(), batch_size=None, num_workers=workers), db=db_path, gpu_hz=0, host_hz=0
    )
    watched = skip_bad_samples(watched_loader)
    watched_loader.close()
    assert watched[0] == plain[0]
    assert [text for text, _ in watched[1]] == [text for text, _ in plain[1]]
    for (_, got), (_, expected) in zip(watched[1], plain[1], strict=True):
        assert not [f for f, _ in got if "/collector/" in f]  # no frame of ours
        assert got[0] == expected[0] and got[-1] == expected[-1]  # the loop's line ... the dataset's raise
        assert {name for _, name in got} <= {name for _, name in expected} | {"_next_data"}
    run = Reader(db_path).run(watched_loader.run_id)
    assert run["status"] == "completed" and run["error"] is None
    assert run["error_count"] == len(plain[1])
    if plain[1]:
        assert run["first_error"].startswith("ValueError: ")
    stored = query(db_path, "SELECT COUNT(*) FROM batches")[0][0]
    assert stored + run["dropped_records"] == len(plain[0])


def test_with_workers_the_users_exception_text_is_the_plain_loaders(db_path):
    def first_error(loader):  # type: ignore[no-untyped-def]
        with pytest.raises(ValueError) as raised:
            list(loader)
        # The traceback's frames hold the iterator in a cycle: freed now, its workers end at once
        # (the garbage collector's pass waits 5 s for each, in a later test). The frames' callers
        # go too: the collector's step, taken out of the traceback, is the caller of torch's.
        tb = raised.tb
        while tb is not None:
            frame = tb.tb_frame
            while frame is not None:
                with contextlib.suppress(RuntimeError):  # a frame still running (this test's own)
                    frame.clear()
                frame = frame.f_back
            tb = tb.tb_next
        return str(raised.value)

    plain = first_error(DataLoader(BadSamples(), batch_size=None, num_workers=2))
    with collector.watch(
        DataLoader(BadSamples(), batch_size=None, num_workers=2), db=db_path, gpu_hz=0, host_hz=0
    ) as watched:
        got = first_error(watched)
    assert got == plain and "worker_timing" not in got and "Original Traceback" in got


@pytest.mark.slow
def test_2000_samples_with_two_bad_give_1998_batches_as_plain(db_path):
    class Many(Dataset[int]):
        def __len__(self) -> int:
            return 2000

        def __getitem__(self, index: int) -> int:
            if index in (700, 1500):
                raise ValueError(f"bad {index}")
            return index

    with collector.watch(DataLoader(Many(), batch_size=None), db=db_path, gpu_hz=0, host_hz=0) as watched:
        items, errors = skip_bad_samples(watched)
    assert len(items) == 1998 and len(errors) == 2
    run = Reader(db_path).run(watched.run_id)
    assert (run["status"], run["error_count"], run["last_error"]) == ("completed", 2, "ValueError: bad 1500")


def test_warnings_turned_into_errors_cannot_stop_the_recording(db_path):
    code = "import collector, sys; w = collector.watch([1, 2, 3], db=sys.argv[1]); print(list(w)); w.close()"
    done = subprocess.run([sys.executable, "-W", "error", "-c", code, db_path], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[1, 2, 3]" and done.stderr == ""
    assert query(db_path, "SELECT status, (SELECT COUNT(*) FROM batches) FROM runs") == [("completed", 3)]


def test_under_filterwarnings_error_a_recording_problem_is_stored_not_raised(tmp_path):
    bad = str(tmp_path / "missing" / "x.sqlite")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with collector.watch([1, 2, 3], db=bad, gpu_hz=0, host_hz=0) as watched:
            assert list(watched) == [1, 2, 3]
