"""The compiled hot loop and its Python twin keep one contract."""

from __future__ import annotations

import os
import time
import traceback
from array import array

import pytest
from helpers import query

import collector
from collector.record import hotloop
from collector.record import plain_loop as watcher
from collector.record.hotloop import PyTimer, py_epoch

TIMERS = [pytest.param(PyTimer, id="python")]
EPOCHS = [pytest.param((PyTimer, py_epoch), id="python")]
if hotloop.COMPILED:
    TIMERS.append(pytest.param(hotloop.Timer, id="compiled"))
    EPOCHS.append(pytest.param((hotloop.Timer, hotloop.Epoch), id="compiled"))


def pairs(data: bytes) -> list[tuple[int, int]]:
    values = array("q")
    values.frombytes(data)
    return list(zip(values[0::2], values[1::2], strict=True))


def test_the_compiled_loop_is_built_where_a_compiler_is():
    if os.environ.get("STALLWATCH_REQUIRE_COMPILED") == "1":
        assert hotloop.COMPILED, "collector.record._hotloop was not built: is gcc installed?"


@pytest.mark.parametrize("timer_type", TIMERS)
def test_items_pass_through_and_each_next_is_timed_on_the_perf_counter_clock(timer_type):
    before = time.perf_counter_ns()
    timer = timer_type(iter(["a", "b", "c"]), 8)
    assert timer.last is None and timer.count == 0
    assert list(timer) == ["a", "b", "c"]
    after = time.perf_counter_ns()
    first, data = timer.drain()
    got = pairs(data)
    assert first == 0 and len(got) == 3 == timer.count
    assert all(before <= t0 <= t1 <= after for t0, t1 in got)
    assert all(got[i][1] <= got[i + 1][0] for i in range(2))
    assert timer.last == (got[2][0], got[2][1], got[1][1])
    assert timer.drain() == (3, b"")


@pytest.mark.parametrize("timer_type", TIMERS)
def test_a_lapped_ring_keeps_the_newest_entries_and_says_where_they_start(timer_type):
    timer = timer_type(range(10), 4)
    for _ in range(3):
        next(timer)
    assert timer.drain()[0] == 0
    for _ in range(7):
        next(timer)
    first, data = timer.drain()
    assert first == 6 and len(pairs(data)) == 4  # entries 3..5 were overwritten


@pytest.mark.parametrize("timer_type", TIMERS)
def test_exceptions_from_the_iterator_reach_the_caller_unchanged(timer_type):
    def source():
        yield 1
        raise KeyError("bad sample")

    timer = timer_type(source(), 4)
    assert next(timer) == 1
    with pytest.raises(KeyError, match="bad sample"):
        next(timer)
    assert timer.count == 1
    with pytest.raises(StopIteration):
        next(timer)


class Calls:
    """on_batch, on_end and on_error for an Epoch, recording what they were given."""

    def __init__(self, stride=1, fail_with=None):
        self.stride = stride
        self.fail_with = fail_with
        self.batches = []
        self.ends = []
        self.errors = []

    def on_batch(self, idx, t0, t1, prev, cpu_ns, batch):
        self.batches.append((idx, t0, t1, prev, cpu_ns, batch))
        if self.fail_with is not None:
            raise self.fail_with
        return self.stride

    def on_end(self, count):
        self.ends.append(count)

    def on_error(self, exc):
        self.errors.append(exc)


class Source:
    """An iterator that counts how often next() is called, and can fail at one index."""

    def __init__(self, n, fail_at=None):
        self.n, self.fail_at, self.calls = n, fail_at, 0

    def __iter__(self):
        return self

    def __next__(self):
        self.calls += 1
        i = self.calls - 1
        if i == self.fail_at:
            raise KeyError("bad sample")
        if i >= self.n:
            raise StopIteration
        return i


@pytest.mark.parametrize("types", EPOCHS)
def test_an_epoch_describes_every_stride_th_batch_with_its_clocks_and_ends_once(types):
    timer_type, epoch_type = types
    source, calls = Source(10), Calls(stride=3)
    timer = timer_type(source, 64)
    epoch = epoch_type(timer, calls.on_batch, calls.on_end, calls.on_error)
    assert list(epoch) == list(range(10))
    clocks = pairs(timer.drain()[1])
    assert [b[0] for b in calls.batches] == [0, 3, 6, 9]
    for idx, t0, t1, prev, cpu_ns, batch in calls.batches:
        assert (t0, t1) == clocks[idx] and batch == idx and cpu_ns >= 0
        assert prev == (None if idx == 0 else clocks[idx - 1][1])
    assert calls.ends == [10] and calls.errors == []
    assert list(epoch) == [] and calls.ends == [10]
    assert source.calls == 11  # never asked again after it ran out


@pytest.mark.parametrize("types", EPOCHS)
def test_an_epochs_source_exception_reaches_the_loop_unchanged_and_the_epoch_goes_on(types):
    timer_type, epoch_type = types
    calls = Calls(stride=2)
    epoch = epoch_type(timer_type(Source(10, fail_at=5), 64), calls.on_batch, calls.on_end, calls.on_error)
    seen = []
    with pytest.raises(KeyError, match="bad sample") as raised:
        for batch in epoch:
            seen.append(batch)
    assert seen == [0, 1, 2, 3, 4]
    assert calls.errors == [raised.value] and calls.ends == []
    assert list(epoch) == [6, 7, 8, 9]  # the loop asked again: the source's next items, as from the source itself
    assert calls.ends == [9]


@pytest.mark.parametrize("types", EPOCHS)
def test_an_epochs_exception_carries_no_frame_of_the_collector(types):
    timer_type, epoch_type = types
    calls = Calls()
    epoch = epoch_type(timer_type(Source(10, fail_at=2), 64), calls.on_batch, calls.on_end, calls.on_error)
    next(epoch), next(epoch)
    with pytest.raises(KeyError) as raised:
        next(epoch)
    files = [entry.filename for entry in traceback.extract_tb(raised.value.__traceback__)]
    assert files == [__file__, __file__]  # this test's next(), then Source.__next__


@pytest.mark.parametrize("types", EPOCHS)
def test_an_epoch_dropped_early_ends_once_without_an_error(types):
    timer_type, epoch_type = types
    calls = Calls(stride=4)
    epoch = epoch_type(timer_type(Source(100), 64), calls.on_batch, calls.on_end, calls.on_error)
    for batch in epoch:
        if batch == 6:
            break
    assert calls.ends == []
    del epoch
    assert calls.ends == [7] and calls.errors == []


@pytest.mark.parametrize("types", EPOCHS)
def test_a_keyboard_interrupt_in_on_batch_goes_to_the_loop(types):
    timer_type, epoch_type = types
    calls = Calls(fail_with=KeyboardInterrupt())
    epoch = epoch_type(timer_type(Source(10), 64), calls.on_batch, calls.on_end, calls.on_error)
    with pytest.raises(KeyboardInterrupt):
        next(epoch)
    assert calls.ends == [] and calls.errors == []


@pytest.mark.parametrize("types", EPOCHS)
def test_a_fault_in_on_batch_warns_once_stops_describing_and_the_batches_keep_coming(types):
    timer_type, epoch_type = types
    calls = Calls(fail_with=ValueError("collector bug"))
    epoch = epoch_type(timer_type(Source(10), 64), calls.on_batch, calls.on_end, calls.on_error)
    with pytest.warns(RuntimeWarning, match="describing a batch failed .*ValueError: collector bug"):
        assert list(epoch) == list(range(10))
    assert len(calls.batches) == 1 and calls.ends == [10]


@pytest.mark.parametrize("types", EPOCHS)
def test_a_stride_below_one_describes_every_batch(types):
    timer_type, epoch_type = types
    calls = Calls(stride=0)
    assert list(epoch_type(timer_type(Source(5), 64), calls.on_batch, calls.on_end, calls.on_error)) == list(range(5))
    assert [b[0] for b in calls.batches] == [0, 1, 2, 3, 4]


def test_the_python_twin_records_the_same_rows(db_path, monkeypatch):
    monkeypatch.setattr(watcher, "Timer", PyTimer)
    monkeypatch.setattr(watcher, "Epoch", py_epoch)
    with collector.watch(range(300), db=db_path, gpu_hz=0, host_hz=0) as watched:
        assert list(watched) == list(range(300))
    assert query(db_path, "SELECT COUNT(*), COUNT(step_s), MIN(wait_s) >= 0 FROM batches") == [(300, 299, 1)]
