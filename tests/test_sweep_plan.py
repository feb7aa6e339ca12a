"""The sweep's grid and planner, on hand-written measurements: no loaders, no clocks."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from collector.diagnosis.decide import MeasuredSearch, cheapest, next_setting
from collector.diagnosis.setting import Setting
from collector.sweep.grid import (
    Grid,
    code,
    default_workers,
    factory_kwargs,
    from_row,
    parse_bools,
    parse_ints,
    process_threads,
    sweep_setting,
    to_row,
)
from collector.sweep.trial import Trial
from collector.tune.answers import setting_from, setting_json

MiB = 2**20


def S(*args: Any, **kwargs: Any) -> Setting:
    """A sweep's setting, at the threads a default grid holds (the process's)."""
    return sweep_setting(*args, threads=process_threads(), **kwargs)


def drive(grid: Grid, measure: Callable[[Setting], Trial], policy: MeasuredSearch | None = None) -> list[Trial]:
    """Run the planner to the end against a model of the loader."""
    trials: list[Trial] = []
    while True:
        plan = next_setting(grid, trials, policy)
        if plan.setting is None:
            return trials
        assert plan.setting not in {t.setting for t in trials}, "the planner proposed a setting twice"
        trials.append(measure(plan.setting))


def capped(readers: int = 2, per_worker: float = 100.0) -> Callable[[Setting], Trial]:
    """Storage that serves ``readers`` reads at once: throughput = min(workers, readers) * per_worker."""

    def measure(s: Setting) -> Trial:
        return Trial(s, samples_per_s=max(1, min(s.num_workers, readers)) * per_worker, wait_share=0.9, epochs=1)

    return measure


def test_grid_without_workers_collapses_prefetch_and_persistence() -> None:
    grid = Grid(workers=(0, 2), prefetch=(2, 4), persistent_workers=(False, True))
    settings = grid.settings()
    assert len(settings) == 1 + 2 * 2
    assert S(0) in settings
    assert all(s.prefetch_factor is None and not s.persistent_workers for s in settings if s.num_workers == 0)


def test_setting_refuses_prefetch_without_workers_and_says_how_to_fix() -> None:
    with pytest.raises(ValueError, match="pass None and False"):
        S(0, prefetch_factor=2)


def test_setting_code_is_a_pasteable_dataloader_line() -> None:
    assert code(S(4, 2, True, True, 64)) == (
        "DataLoader(..., batch_size=64, num_workers=4, prefetch_factor=2, persistent_workers=True, pin_memory=True)"
    )
    assert code(S(0)) == "DataLoader(..., num_workers=0, pin_memory=False)"


def test_factory_kwargs_leave_batch_size_to_the_factory_unless_swept() -> None:
    assert "batch_size" not in factory_kwargs(S(2, 2))
    assert factory_kwargs(S(2, 2, batch_size=32))["batch_size"] == 32


def test_planner_stops_raising_workers_once_throughput_plateaus() -> None:
    grid = Grid(workers=(0, 1, 2, 4, 8, 16), prefetch=(2,), persistent_workers=(False,))
    trials = drive(grid, capped(readers=2))
    assert [t.setting.num_workers for t in trials] == [0, 1, 2, 4]
    assert cheapest(trials) is not None and cheapest(trials).setting.num_workers == 2  # type: ignore[union-attr]


def test_planner_keeps_raising_workers_while_each_step_pays() -> None:
    grid = Grid(workers=(0, 1, 2, 4, 8), prefetch=(2,), persistent_workers=(False,))
    trials = drive(grid, capped(readers=64))
    assert [t.setting.num_workers for t in trials] == [0, 1, 2, 4, 8]


def test_zero_to_one_worker_is_not_read_as_a_plateau() -> None:
    # One worker is no faster than the main process when nothing overlaps; two are.
    grid = Grid(workers=(0, 1, 2, 4), prefetch=(2,), persistent_workers=(False,))
    trials = drive(grid, capped(readers=4))
    assert [t.setting.num_workers for t in trials][:3] == [0, 1, 2]


def test_adaptive_sweep_tries_fewer_settings_than_the_grid_and_lands_within_10pct_of_its_best() -> None:
    grid = Grid(workers=(0, 1, 2, 4, 8, 16), prefetch=(2, 4), pin_memory=(False, True), persistent_workers=(False,))
    measure = capped(readers=4)
    trials = drive(grid, measure)
    best_on_grid = max(measure(s).samples_per_s or 0.0 for s in grid.settings())
    chosen = cheapest(trials)
    assert chosen is not None
    assert len(trials) < len(grid.settings())
    assert (chosen.samples_per_s or 0.0) >= 0.9 * best_on_grid


def test_paced_sweep_stops_raising_workers_once_the_loop_is_fed() -> None:
    grid = Grid(workers=(0, 1, 2, 4, 8), prefetch=(2,), persistent_workers=(False,))

    def measure(s: Setting) -> Trial:
        fed = s.num_workers >= 1
        return Trial(s, samples_per_s=130.0 if fed else 80.0, wait_share=0.02 if fed else 0.4)

    trials = drive(grid, measure, MeasuredSearch(paced=True))
    assert [t.setting.num_workers for t in trials] == [0, 1]
    assert cheapest(trials).setting.num_workers == 1  # type: ignore[union-attr]


def test_planner_stops_before_workers_that_would_not_fit_in_memory() -> None:
    grid = Grid(workers=(0, 1, 2, 4, 8), prefetch=(2,), persistent_workers=(False,))

    def measure(s: Setting) -> Trial:
        return Trial(
            s,
            samples_per_s=100.0 * max(1, s.num_workers),
            peak_rss_bytes=(300 + 200 * s.num_workers) * MiB,
            worker_rss_bytes=200 * MiB if s.num_workers else None,
            mem_available_bytes=2048 * MiB,
        )

    trials = drive(grid, measure, MeasuredSearch(memory_limit_bytes=1200 * MiB))
    assert [t.setting.num_workers for t in trials] == [0, 1, 2, 4]  # 8 workers: ~1.9 GiB > 1.2 GiB
    notes = next_setting(grid, trials, MeasuredSearch(memory_limit_bytes=1200 * MiB)).notes
    assert any("memory limit" in n for n in notes)


def test_planner_stops_when_the_next_workers_need_more_memory_than_is_free() -> None:
    grid = Grid(workers=(1, 2, 4), prefetch=(2,), persistent_workers=(False,))

    def measure(s: Setting) -> Trial:
        return Trial(s, samples_per_s=100.0 * s.num_workers, worker_rss_bytes=500 * MiB, mem_available_bytes=1000 * MiB)

    trials = drive(grid, measure)
    assert [t.setting.num_workers for t in trials] == [1, 2]


def test_a_failed_setting_is_skipped_and_the_walk_goes_on() -> None:
    grid = Grid(workers=(0, 1, 2, 4), prefetch=(2,), persistent_workers=(False,))
    healthy = capped(readers=8)

    def measure(s: Setting) -> Trial:
        return Trial(s, error="factory raised OSError") if s.num_workers == 2 else healthy(s)

    trials = drive(grid, measure)
    assert [t.setting.num_workers for t in trials] == [0, 1, 2, 4]
    assert cheapest(trials).setting.num_workers == 4  # type: ignore[union-attr]


def test_other_axes_are_tried_one_at_a_time_around_the_best_worker_count() -> None:
    grid = Grid(workers=(0, 2, 4), prefetch=(2, 4), pin_memory=(False, True), persistent_workers=(False,))
    trials = drive(grid, capped(readers=2))
    tried = [t.setting for t in trials]
    assert S(2, 4, False, False) in tried
    assert S(2, 2, True, False) in tried
    assert S(4, 4, True, False) not in tried


def test_persistent_workers_are_tried_only_when_a_trial_saw_a_second_epoch() -> None:
    grid = Grid(workers=(0, 2), prefetch=(2,), persistent_workers=(False, True))

    def one_epoch(s: Setting) -> Trial:
        return Trial(s, samples_per_s=100.0 * max(1, s.num_workers), epochs=1)

    def short_epochs(s: Setting) -> Trial:
        return Trial(s, samples_per_s=100.0 * max(1, s.num_workers), epochs=5)

    assert all(not t.setting.persistent_workers for t in drive(grid, one_epoch))
    assert any(t.setting.persistent_workers for t in drive(grid, short_epochs))


def test_cheapest_takes_the_cheapest_setting_within_tolerance_of_the_best() -> None:
    trials = [
        Trial(S(0), samples_per_s=100.0),
        Trial(S(2, 2), samples_per_s=390.0),
        Trial(S(4, 2), samples_per_s=400.0),
        Trial(S(8, 2), error="boom"),
    ]
    assert cheapest(trials).setting == S(2, 2)  # type: ignore[union-attr]
    assert cheapest(trials, tolerance=0.0).setting == S(4, 2)  # type: ignore[union-attr]
    assert cheapest([Trial(S(0), error="boom")]) is None


def test_the_sweep_s_setting_is_the_report_s_and_its_rows_read_back_equal() -> None:
    grid = Grid(
        workers=(0, 2), prefetch=(4,), pin_memory=(True,), persistent_workers=(True,), batch_size=(32,), threads=3
    )
    first = next_setting(grid, []).setting
    assert first is not None
    setting = grid.with_workers(first, 2)
    back = from_row(json.loads(json.dumps(to_row(setting))), threads=3)
    report_s = Setting(
        num_workers=2, threads=3, prefetch_factor=4, persistent_workers=True, pin_memory=True, batch_size=32
    )
    assert type(back) is Setting and back == setting == report_s
    assert set(to_row(setting)) == {"num_workers", "prefetch_factor", "pin_memory", "persistent_workers", "batch_size"}
    assert from_row(to_row(first), threads=3) == first == Setting(0, 3, None, False, True, 32)


def test_batch_size_none_leaves_the_report_s_setting_as_it_was() -> None:
    start = Setting(num_workers=0, threads=2, prefetch_factor=None)
    more = start.but(num_workers=4)
    assert start.changed(more) == {"num_workers": 4}
    assert start.changed(start.but(threads=1)) == {"torch.set_num_threads": 1}
    assert start.changed(more.but(batch_size=64)) == {"num_workers": 4, "batch_size": 64}
    stored = json.loads(setting_json(more))
    assert "batch_size" not in stored  # files written before it read the same
    assert setting_from(stored) == more and setting_from({**stored, "batch_size": None}) == more


def test_default_workers_go_up_to_twice_the_cores() -> None:
    assert default_workers(2) == (0, 1, 2, 4)
    assert default_workers(16) == (0, 1, 2, 4, 8, 16, 32)
    assert default_workers(6) == (0, 1, 2, 4, 6, 8)


def test_grid_flags_parse_and_explain_bad_values() -> None:
    assert parse_ints("0, 2,4", "--workers") == (0, 2, 4)
    assert parse_bools("false,TRUE,on", "--pin-memory") == (False, True)
    with pytest.raises(ValueError, match="--workers takes whole numbers"):
        parse_ints("two", "--workers")
    with pytest.raises(ValueError, match="--pin-memory takes true/false"):
        parse_bools("maybe", "--pin-memory")
