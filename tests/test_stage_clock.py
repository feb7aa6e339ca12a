"""Stage timing's parts alone: the nested clock, its budget, the stack sampler's split, the shared-memory boards."""

from __future__ import annotations

import multiprocessing
import sys

import pandas as pd
import pytest

from collector.record.stage_board import StageBoards, deltas
from collector.record.stage_clock import FETCH, GETITEM, StageClock, pixels, sampled_rows
from collector.record.stage_sampler import StackSampler


class FakeClock:
    """A clock that moves only when told; CPU advances by the same steps times ``cpu_ratio``."""

    def __init__(self, cpu_ratio: float = 1.0) -> None:
        self.t = 0.0
        self.cpu_ratio = cpu_ratio

    def wall(self) -> float:
        return self.t

    def cpu(self) -> float:
        return self.t * self.cpu_ratio

    def advance(self, seconds: float) -> None:
        self.t += seconds


def fake_clock(cpu_ratio: float = 1.0) -> tuple[StageClock, FakeClock]:
    fake = FakeClock(cpu_ratio)
    return StageClock(clock=fake.wall, cpu_clock=fake.cpu), fake


def test_nested_stages_keep_their_own_time_and_add_up_to_the_fetch():
    clock, t = fake_clock()
    assert clock.begin()
    t.advance(0.001)  # the dataset's own code
    clock.enter()  # a transform
    t.advance(0.002)
    clock.enter()  # a decode inside it
    t.advance(0.005)
    clock.leave("PIL decode JPEG", None, 1000.0)
    t.advance(0.001)
    clock.leave("transform 0 Resize", 1000.0, 100.0)
    clock.end(samples=4)
    totals = clock.totals()
    assert totals["PIL decode JPEG"][2] == pytest.approx(0.005)
    assert totals["transform 0 Resize"][2] == pytest.approx(0.003)  # its own time: the decode taken out
    assert totals[GETITEM][2] == pytest.approx(0.001)
    assert totals[FETCH][:3] == (1.0, 4.0, pytest.approx(0.009))
    assert totals["transform 0 Resize"][4:] == (1000.0, 100.0)


def test_cheap_fetches_are_timed_one_in_a_stride_that_keeps_the_budget():
    clock, t = fake_clock()
    clock._region_cost_s = 1e-6
    timed = 0
    for _ in range(1000):
        if clock.begin():
            timed += 1
            for _ in range(9):
                clock.enter()
                clock.leave("step")
            t.advance(100e-6)  # a 100 us fetch: 10 regions cost 10 us, 10% of it
            clock.end(samples=1)
        else:
            clock.finish(False, ())
    assert 47 <= timed <= 50  # 10 us / (0.5% of 100 us) = 20: about one fetch in 20


def test_an_untimed_fetch_leaves_hooked_calls_untouched():
    clock, _ = fake_clock()
    clock._skip = 1
    assert not clock.begin()
    assert not clock.active
    clock.finish(False, ())
    assert not clock.in_fetch and clock.totals() == {}


def test_a_fetch_that_raised_books_nothing():
    clock, t = fake_clock()
    clock.begin()
    clock.enter()
    t.advance(0.01)
    clock.abandon()
    assert not clock.active and FETCH not in clock.totals()


def test_sampled_functions_split_the_datasets_own_time_by_their_ticks():
    own = {GETITEM: (10.0, 40.0, 2.0, 1.0, float("nan"), float("nan"))}
    rows = sampled_rows(own, {"code data.py:load": 3, "code data.py:parse": 1}, ticks=8)
    assert rows["code data.py:load"][2:4] == (pytest.approx(0.75), pytest.approx(0.375))
    assert rows["code data.py:parse"][2] == pytest.approx(0.25)
    assert rows[GETITEM][2] == pytest.approx(1.0)  # ticks in no user frame stay the dataset's own


def user_function(sampler: StackSampler) -> str | None:
    return sampler.stage_of(sys._getframe())


def test_the_sampler_names_the_innermost_user_function():
    clock, _ = fake_clock()
    sampler = StackSampler(clock)
    assert user_function(sampler) == "code test_stage_clock.py:user_function"


def test_pixels_reads_images_and_arrays_and_nothing_else():
    class Image:
        size = (640, 480)

    class Array:
        shape = (3, 64, 32)

    assert pixels(Image()) == 640 * 480
    assert pixels(Array()) == 64 * 32
    assert pixels(5) is None
    assert pixels("text") is None


def test_a_board_carries_totals_and_the_monitor_sends_their_growth():
    boards = StageBoards(multiprocessing.get_context("fork"), 2)
    assert boards.drain() == []
    boards.write(1, {"collate": (2.0, 0.0, 0.5, 0.25, float("nan"), float("nan"))})
    assert boards.drain() == [(1, "collate", 2.0, 0.0, 0.5, 0.25, None, None)]
    boards.write(1, {"collate": (3.0, 0.0, 0.75, 0.25, float("nan"), float("nan"))})
    assert boards.drain() == [(1, "collate", 1.0, 0.0, 0.25, 0.0, None, None)]
    assert boards.drain() == []  # nothing moved


def test_a_board_being_written_is_read_at_the_next_drain():
    boards = StageBoards(multiprocessing.get_context("fork"), 1)
    boards.write(0, {"collate": (1.0, 0.0, 0.5, 0.5, 0.0, 0.0)})
    boards.versions[0] += 1  # a writer mid-way
    assert boards.read(0) is None
    boards.versions[0] += 1
    assert boards.read(0) == {"collate": (1.0, 0.0, 0.5, 0.5, 0.0, 0.0)}


def test_a_later_workers_clock_goes_on_from_its_boards_totals():
    before = {"collate": (2.0, 0.0, 0.5, 0.25, float("nan"), float("nan"))}
    clock = StageClock(base=before)
    clock.add_beside("collate", 0.5, 0.25)
    assert clock.totals()["collate"][:4] == (3.0, 0.0, 1.0, 0.5)


def test_growth_skips_malformed_totals():
    assert deltas(0, {}, {"ok": (1.0, 0.0, 1.0, 1.0, 0.0, 0.0), "bad": (1.0,), 3: (1.0,) * 6}) == [
        (0, "ok", 1.0, 0.0, 1.0, 1.0, 0.0, 0.0)
    ]


def test_the_stage_table_divides_by_the_timed_fetches():
    from collector.diagnosis.stages import stages

    df = pd.DataFrame(
        [
            (0, "fetch", 10, 40, 2.0, 1.5, None, None),
            (1, "fetch", 10, 40, 2.0, 1.5, None, None),
            (0, "PIL decode JPEG", 40, 0, 1.0, 0.9, None, 4e6),
            (1, "PIL decode JPEG", 40, 0, 1.0, 0.9, None, 4e6),
            (0, "collate", 10, 0, 0.4, 0.1, None, None),
            (0, "file /data/a.jpg", 1, 0, 0.0, 0.0, None, None),
        ],
        columns=["worker_id", "stage", "calls", "samples", "wall_s", "cpu_s", "pixels_in", "pixels_out"],
    )
    table = stages(df)
    assert table is not None
    decode, collate = table.rows
    assert decode.row.stage == "PIL decode JPEG" and decode.row.calls == 80
    assert decode.row.share == pytest.approx(0.5)
    assert decode.row.ms_per_sample == pytest.approx(2.0 / 80 * 1000)
    assert decode.row.cpu_share == pytest.approx(0.9)
    assert decode.pixels_out == pytest.approx(1e5)
    assert collate.row.share == pytest.approx(0.1)
    assert table.files == ("/data/a.jpg",)
