"""An epoch with fresh workers, played out on shared cores (NOTE [ Fresh workers each epoch ]), against hand-worked cases."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from diagnosis_fixtures import Synthetic, write_synthetic

from collector.diagnosis.build import build_model, fit_step
from collector.diagnosis.calibration import C
from collector.diagnosis.data import load_run
from collector.diagnosis.fresh import Epoch
from collector.diagnosis.model import EpochModel, Setting
from collector.diagnosis.stats import Facts, measure

IDLE = dict(prefetch=2, cores=8.0, background=0.0, load_cpu_s=0.0, step_threads=1.0, step_compute_s=0.0)


def test_workers_that_are_the_limit_deliver_in_rounds_and_the_last_round_is_a_whole_fetch():
    """Two workers, 1 s a batch each, a 0.1 s step: batches ready at 1, 1, 2, 2; the loop ends at 2.2, not 4 x 0.5."""
    epoch = Epoch(workers=2, load_blocked_s=1.0, step_blocked_s=0.1, **IDLE)
    assert epoch.seconds(4) == pytest.approx(2.2)
    assert epoch.seconds(5) == pytest.approx(3.1)  # a fifth batch is a third round of its own


def test_a_loop_that_is_the_limit_waits_only_for_the_first_batch():
    epoch = Epoch(workers=2, load_blocked_s=0.1, step_blocked_s=1.0, **IDLE)
    assert epoch.seconds(4) == pytest.approx(0.1 + 4 * 1.0)


def test_a_worker_and_the_step_on_one_core_share_it_and_the_work_is_conserved():
    """1 s of fetch CPU and 1 s of step CPU a batch on 1 core: alone, then halves, then the last step alone: 4 s."""
    one_core = dict(IDLE, cores=1.0, load_cpu_s=1.0, step_compute_s=1.0)
    epoch = Epoch(workers=1, load_blocked_s=0.0, step_blocked_s=0.0, **one_core)
    assert epoch.seconds(2) == pytest.approx(4.0)
    assert epoch.seconds(5) == pytest.approx(10.0)  # every second of CPU, on one core


def test_a_multi_threaded_step_beside_a_computing_worker_advances_at_its_share_to_the_power_of_its_threads():
    """A 2-thread step with 1 worker computing on 2 cores: 3 runnable, (2/3)^2 of its speed while the worker runs."""
    two = dict(IDLE, cores=2.0, load_cpu_s=10.0, step_threads=2.0, step_compute_s=0.4)
    epoch = Epoch(workers=1, load_blocked_s=0.0, step_blocked_s=0.0, **two)
    # batch 0 alone: 10 s. Then the step (0.4 s of work at 4/9) beside the worker's batch 1: 0.9 s, at 10.9
    # the worker has done 0.9 * 2/3 = 0.6 s of batch 1; it finishes the other 9.4 s alone at 20.3; the last step 0.4.
    assert epoch.seconds(2) == pytest.approx(20.7)


def test_with_one_index_out_a_worker_fetches_each_batch_while_the_loop_steps_the_one_before():
    """One worker, prefetch 1, a slow loop: batch i + 1 goes out as batch i is taken, and is ready before it is due."""
    epoch = Epoch(workers=1, load_blocked_s=0.5, step_blocked_s=1.0, **dict(IDLE, prefetch=1))
    assert epoch.seconds(3) == pytest.approx(0.5 + 3 * 1.0)


SHARED = dict(
    cores=2.0,
    background=0.0,
    step_work_s=0.080,
    step_threads=1.0,
    step_blocked_s=0.0,
    handoff_s=0.001,
    load_cpu_s=0.100,
    load_blocked_s=0.0,
    start_per_worker_s=0.045,  # with C.START_FIXED_S, 0.1 s for 2 workers
    end_per_worker_s=0.0095,  # with C.END_FIXED_S, 0.025 s for 2 workers
    recorded=Setting(2, 1, 2, False),
)
FRESH, KEPT = Setting(2, 1, 2, False), Setting(2, 1, 2, True)


def test_a_short_epoch_of_fresh_workers_is_played_out_and_a_long_one_goes_on_at_the_steady_cycle(monkeypatch):
    short = EpochModel(epoch_batches=8, **dict(SHARED, cores=4.0))  # a core each: no sharing
    # the loop is the limit (81 ms a batch); persistent workers' queues start empty at each iter(),
    # so their epoch waits for the first fetch too; fresh workers add their start and the end
    assert short.epoch_s(KEPT) == pytest.approx(8 * 0.081 + 0.1)
    assert short.epoch_s(FRESH) - short.epoch_s(KEPT) == pytest.approx(0.1 + 0.025)
    played: list[int] = []
    seconds = Epoch.seconds
    monkeypatch.setattr(Epoch, "seconds", lambda self, batches: played.append(batches) or seconds(self, batches))
    long = dataclasses.replace(short, epoch_batches=1_000_000)
    assert long.epoch_s(FRESH) == pytest.approx(1_000_000 * long.cycle(FRESH), rel=1e-4)
    assert played == [C.FILL_BATCHES]  # whole rounds of 2 past it go at the steady cycle, not one by one


def test_each_fresh_worker_adds_its_start_and_end_beside_a_fixed_part():
    """Forked and joined one after another: 6 fresh workers cost 4 workers' share more than 2, persistent ones none."""
    model = EpochModel(epoch_batches=8, **dict(SHARED, cores=4.0))
    assert model.ends_s(2) == pytest.approx(0.1 + 0.025)
    assert model.ends_s(6) - model.ends_s(2) == pytest.approx(4 * (0.045 + 0.0095))
    assert model.ends_s(0) == 0.0
    six = Setting(6, 1, 2, False)
    assert model.epoch_s(six) - model.epoch_s(six.but(persistent_workers=True)) == pytest.approx(model.ends_s(6))


def test_fewer_intra_op_threads_run_the_step_by_amdahls_law_not_by_its_cpu():
    """A 2-thread step measured busy on both threads for 80 ms: on one it takes 80 ms x 1.7, not 160 ms of CPU."""
    model = EpochModel(epoch_batches=100, **dict(SHARED, step_work_s=0.160, step_threads=2.0))
    speedup_2 = 1 / (1 - C.PARALLEL_SHARE / 2)
    assert model.step_alone_s(2.0) == pytest.approx(0.080)
    assert model.step_alone_s(1.0) == pytest.approx(0.080 * speedup_2)
    assert 1.5 < speedup_2 < 1.8  # NOTE [ Intra-op threads ]: measured 1.52-1.93x on bench/pipelines.py's CNNs


def test_a_step_that_kept_its_one_thread_busy_runs_by_amdahls_law_on_more_and_one_that_left_threads_idle_does_not():
    """Recorded on 1 busy thread: on 2 it runs 1.7x faster alone. Recorded with a pool of 4 it used 1.5 of: no faster on 8."""
    busy = EpochModel(epoch_batches=100, **dict(SHARED, cores=8.0, recorded=Setting(0, 1, None)))
    assert busy.threads_saturated
    assert busy.q(Setting(0, 2, None)) == 2.0
    assert busy.step_alone_s(busy.q(Setting(0, 2, None))) == pytest.approx(0.080 / (1 / (1 - C.PARALLEL_SHARE / 2)))
    assert busy.speedup(Setting(0, 2, None)) > 1.0
    idle = EpochModel(epoch_batches=100, **dict(SHARED, cores=8.0, step_threads=1.5, recorded=Setting(0, 4, None)))
    assert not idle.threads_saturated
    assert idle.q(Setting(0, 8, None)) == 1.5
    assert idle.speedup(Setting(0, 8, None)) == pytest.approx(1.0)


def test_the_steps_work_comes_out_of_the_played_epoch_where_its_workers_compute_only_at_its_start():
    """8 batches, 4 persistent workers (8 in flight) fetch them all at the start: past it the steps run alone.

    Read as a steady cycle's step, stretched beside 4 computing workers (0.13 s), the 0.05 s measured would
    leave the step a third of its work; the played epoch gives it back whole (NOTE [ The step beside
    computing workers ]).
    """
    true = EpochModel(
        epoch_batches=8, **dict(SHARED, step_work_s=0.1, step_threads=2.0, recorded=Setting(4, 2, 2, True))
    )
    measured = true.step_mean_s(true.recorded, head=4)
    assert measured == pytest.approx(true.step_alone_s(2.0))  # alone
    assert true._steady(true.recorded)[1] > 2 * measured  # a steady cycle's step: workers beside it throughout
    fitted = fit_step(dataclasses.replace(true, step_work_s=0.01), measured, head=4)
    assert fitted.step_work_s == pytest.approx(0.1, rel=1e-6)
    assert fitted.epoch_s(true.recorded) == pytest.approx(true.epoch_s(true.recorded), rel=1e-6)


def fresh_run_facts(path: str, batches: int, **spec: Any) -> Facts:
    """A recorded run with 2 fresh workers (30 ms a fetch, 10 ms of it CPU) and a 20 ms step, measured."""
    write_synthetic(
        path,
        Synthetic(
            wait_s=np.full(batches, 0.002),
            step_s=0.02,
            config={"batch_size": 32, "num_workers": 2, "persistent_workers": False, "prefetch_factor": 2},
            worker_id=np.arange(batches) % 2,
            worker_wall_s=np.full(batches, 0.03),
            worker_cpu_s=np.full(batches, 0.01),
            **spec,
        ),
    )
    return measure(load_run(path))


def test_a_run_measures_its_fresh_workers_start_and_end_and_the_model_takes_a_workers_share_out_of_them(tmp_path):
    """2 fresh workers: iter() to batch 0 takes 0.102 s (0.03 s of it the first fetch), the final next() 0.03 s."""
    facts = fresh_run_facts(str(tmp_path / "fresh.sqlite"), 200, epoch_len=20, first_batch_s=0.1, end_wait_s=0.03)
    model = build_model(facts)
    assert model is not None and model.first_fetch_s(2) == pytest.approx(0.03)
    start, end = 0.102 - 0.03, 0.03
    assert model.ends_s(2) == pytest.approx(start + end, abs=1e-6)  # its own count: as measured
    share = (start - C.START_FIXED_S + end - C.END_FIXED_S) / 2
    assert model.ends_s(4) == pytest.approx(start + end + 2 * share, abs=1e-6)


def test_with_one_epoch_recorded_its_own_start_is_the_measure(tmp_path):
    """The tuner's first question comes after one epoch: its 0.5 s worker start counts, not the default's 0.03 s."""
    facts = fresh_run_facts(str(tmp_path / "one-epoch.sqlite"), 20, first_batch_s=0.5)
    assert facts.epochs == 1 and facts.epoch_first_s == pytest.approx((0.502,))
    model = build_model(facts)
    assert model is not None
    assert model.start_per_worker_s == pytest.approx((0.502 - model.first_fetch_s(2) - C.START_FIXED_S) / 2)
    assert model.speedup(model.recorded.but(persistent_workers=True)) > 1.5
