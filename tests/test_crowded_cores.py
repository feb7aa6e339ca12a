"""Our threads' share of the cores beside other processes' busy threads (NOTE [ Crowded cores ])."""

from __future__ import annotations

import itertools

import pytest

from collector.diagnosis.choose import candidates, choose
from collector.diagnosis.cores import background_for, background_using, share, their_cores
from collector.diagnosis.model import EpochModel, Setting


def at(n: int, threads: int = 1) -> Setting:
    """n persistent workers (none: no queue) and ``threads`` intra-op threads."""
    return Setting(n, threads, 2 if n else None, n > 0)


def two_cores(**kw: float | int | bool) -> EpochModel:
    """A model of a 1-thread step and CPU-bound loading on 2 cores, persistent workers, recorded without workers."""
    base: dict = dict(
        cores=2.0,
        background=0.0,
        step_work_s=0.120,
        step_threads=1.0,
        step_blocked_s=0.0,
        handoff_s=0.0,
        load_cpu_s=0.100,
        load_blocked_s=0.0,
        epoch_batches=1000,
        start_per_worker_s=0.0,
        end_per_worker_s=0.0,
        recorded=at(0),
    )
    return EpochModel(**{**base, **kw})


def test_our_threads_alone_split_the_cores_evenly():
    assert share(3.0, 0.0, 2.0) == pytest.approx(2 / 3)
    assert share(2.0, 0.0, 2.0) == 1.0


def test_a_busy_process_that_fits_beside_ours_takes_nothing_from_them():
    assert share(1.0, 1.0, 2.0) == 1.0


def test_a_busy_process_keeps_its_core_and_ours_crowd_the_other():
    """One busy process, a worker and the step on 2 cores: 0.52-0.64 measured, not the even 0.67."""
    assert share(2.0, 1.0, 2.0) == pytest.approx(0.5)
    assert share(2.0, 1.0, 2.0) < 2.0 / 3.0


def test_with_every_core_crowded_the_split_is_even_again():
    assert share(3.0, 1.0, 2.0) == pytest.approx(0.5)  # two threads on each core


def test_the_share_falls_as_other_processes_add_threads():
    shares = [share(1.0, b / 4, 2.0) for b in range(0, 25)]
    assert all(a >= b - 1e-12 for a, b in itertools.pairwise(shares))
    assert shares[0] == 1.0 and shares[-1] < 0.3


@pytest.mark.parametrize("measured", [0.2, 0.35, 0.5, 0.8, 0.95])
def test_the_background_read_from_a_share_gives_that_share_back(measured):
    background = background_for(1.0, measured, 2.0)
    assert share(1.0, background, 2.0) == pytest.approx(measured, abs=1e-6)


def test_a_lone_thread_on_half_a_core_had_at_least_one_and_a_half_busy_threads_beside_it():
    """One keeps a core to itself, and at least half a thread's demand shares ours."""
    assert background_for(1.0, 0.5, 2.0) == pytest.approx(1.5)
    assert background_for(1.0, 1.0, 2.0) == 0.0


def test_busy_processes_that_fit_beside_ours_are_the_cores_they_used():
    assert background_using(1.0, 0.7, 2.0) == pytest.approx(0.7)
    assert their_cores(1.0, 0.7, 2.0) == pytest.approx(0.7)


def test_two_busy_processes_beside_our_three_threads_share_one_core_and_count_as_two():
    """Measured beside 2 workers and a step on 2 cores: two busy processes got 0.76-1.0 of a core between them."""
    assert their_cores(3.0, 2.0, 2.0) == pytest.approx(1.0)
    assert background_using(3.0, 1.0, 2.0) == pytest.approx(2.0, abs=1e-6)
    assert share(1.0, background_using(3.0, 1.0, 2.0), 2.0) == pytest.approx(0.5, abs=1e-6)  # the loop alone: half


@pytest.mark.parametrize("ours", [1.0, 1.8, 3.0, 4.5])
@pytest.mark.parametrize("busy", [0.2, 0.9, 1.3, 1.7])
def test_the_threads_read_from_the_cores_they_used_get_those_cores_back(ours, busy):
    assert their_cores(ours, background_using(ours, busy, 2.0), 2.0) == pytest.approx(busy, abs=1e-6)


def test_beside_a_busy_process_one_worker_gains_nothing_over_none():
    """0.1 s of loading and a 0.12 s step on 2 cores beside a busy process: the worker and the step share a core.

    An even split (2 cores among 2.8 runnable threads) would promise 1.3x; bench/bench_predictions.py's light
    pipeline measured 0.79x for that change.
    """
    model = two_cores(background=1.0, others_busy=1.0)
    assert model.cycle(at(0)) == pytest.approx(0.220)  # the loop keeps a core to itself
    assert model.cycle(at(1)) == pytest.approx(0.220, rel=0.02)
    assert model.speedup(at(1)) == pytest.approx(1.0, abs=0.02)


def test_cpu_bound_loading_gets_no_headroom_from_more_workers_than_cores():
    """Two workers just keep up on 2 cores; a third would only share the same cores (measured 0.85x on the light
    pipeline, where the model gave 3 workers 1.12x and 2 workers 1.19x)."""
    model = two_cores(step_work_s=0.100, handoff_s=0.001, load_cpu_s=0.190, load_blocked_s=0.002)
    assert model.headroom(at(2)) < 1.15 <= model.headroom(at(3))
    chosen, _ = choose(model, candidates(model))
    assert (chosen.setting.num_workers, chosen.setting.threads) == (2, 1)
