"""The compiled hot loop and its Python twin keep one contract."""

from __future__ import annotations

import os
import time
from array import array

import pytest
from conftest import query

import collector
from collector import hotloop, watcher
from collector.hotloop import PyTimer

TIMERS = [pytest.param(PyTimer, id="python")]
if hotloop.COMPILED:
    TIMERS.append(pytest.param(hotloop.Timer, id="compiled"))


def pairs(data: bytes) -> list[tuple[int, int]]:
    values = array("q")
    values.frombytes(data)
    return list(zip(values[0::2], values[1::2], strict=True))


def test_the_compiled_loop_is_built_where_a_compiler_is():
    if os.environ.get("STALLWATCH_REQUIRE_COMPILED") == "1":
        assert hotloop.COMPILED, "collector._hotloop was not built: is gcc installed?"


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


def test_the_python_twin_records_the_same_rows(db_path, monkeypatch):
    monkeypatch.setattr(watcher, "Timer", PyTimer)
    with collector.watch(range(300), db=db_path, gpu_hz=0, host_hz=0) as watched:
        assert list(watched) == list(range(300))
    assert query(db_path, "SELECT COUNT(*), COUNT(step_s), MIN(wait_s) >= 0 FROM batches") == [(300, 299, 1)]
