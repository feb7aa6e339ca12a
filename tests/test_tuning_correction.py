"""Live tuning's correction: the job's measured gains over the model's predicted ones scale its later predictions;
and a later trial must pay as seen from every setting the run measured."""

from __future__ import annotations

import dataclasses

import pytest
from test_tuning import START, run_epochs, seg

from collector.diagnosis.choose import Ranking, candidates, choose
from collector.diagnosis.decide import tuner_candidates
from collector.diagnosis.model import EpochModel, Setting
from collector.tune.answers import Proposal
from collector.tune.policy import MAX_CORRECTION, MAX_TRIALS, MIN_CORRECTION, Policy

TWO = START.but(num_workers=2, prefetch_factor=2, persistent_workers=True, threads=1)
THREE = TWO.but(num_workers=3)
FOUR = TWO.but(num_workers=4)


def offer(setting: Setting, baseline: Setting, predicted: float) -> Proposal:
    """A proposal as the helper sends it: the model's own prediction, its range +-10%."""
    return Proposal(baseline, setting, predicted, 1.0 + (predicted - 1.0) * 0.9, 1.0 + (predicted - 1.0) * 1.1)


def test_before_any_trial_the_models_prediction_is_taken_as_it_is():
    policy = Policy(start=START)
    assert policy.correction() == 1.0
    assert offer(TWO, START, 1.3).corrected(1.3) == pytest.approx(1.3)


def test_a_trial_measured_above_its_prediction_lets_a_small_predicted_gain_still_get_its_try():
    # The first trial was predicted 1.10x and measured 1.30x: the model under-predicts this job by 3x.
    # The next candidate's 1.02x, below the 3% noise floor as the model says it, is 1.06x corrected.
    policy = Policy(start=START, every=2)
    offers = [offer(TWO, START, 1.10)] * 4 + [offer(THREE, TWO, 1.02)] * 3
    used = run_epochs(policy, {START: 0.013, TWO: 0.010, THREE: 0.0085}, offers)
    assert used == [START, START, TWO, TWO, THREE, THREE, THREE]
    first, second = policy.trials
    assert first.kept and first.measured == pytest.approx(1.3)
    assert second.kept and policy.current == THREE
    assert second.proposal.correction == pytest.approx(3.0)
    row = second.row()
    assert row[7:10] == pytest.approx((1.06, 1.054, 1.066))  # the corrected prediction and range are stored
    assert "predicted 1.06x (the model's 1.02x, its gain x3.00 by this job's trials)" in second.why


def test_without_the_correction_the_same_small_prediction_ends_tuning():
    policy = Policy(start=START, every=2)
    offers = [offer(TWO, START, 1.30)] * 4 + [offer(THREE, TWO, 1.02)] * 3
    used = run_epochs(policy, {START: 0.013, TWO: 0.010, THREE: 0.0085}, offers)
    assert policy.trials[0].measured == pytest.approx(1.3) and policy.correction() == pytest.approx(1.0)
    assert used[4:] == [TWO] * 3 and policy.done is not None and "predicted 1.02x" in policy.done


def test_a_trial_measured_below_its_prediction_makes_the_model_more_cautious():
    # Predicted 1.50x, measured 1.20x: 0.4 of the gain. The next 1.20x counts as 1.08x, within the
    # kept setting's 9% variation, so tuning ends instead of spending another epoch on it.
    policy = Policy(start=START, every=2)
    run_epochs(policy, {START: 0.012, TWO: 0.010}, [offer(TWO, START, 1.50)] * 4)
    policy.measured(seg(4, 0.0109), TWO)
    assert policy.current == TWO and policy.noise(TWO) == pytest.approx(0.09)
    assert policy.correction() == pytest.approx(0.4)
    setting, trial = policy.next_setting(offer(THREE, TWO, 1.20))
    assert setting == TWO and trial is None
    assert policy.done is not None and "predicted 1.08x (the model's 1.20x, its gain x0.40" in policy.done


def test_a_slower_trial_pulls_the_correction_down_to_its_bound():
    policy = Policy(start=START, every=2)
    run_epochs(policy, {START: 0.010, TWO: 0.012}, [offer(TWO, START, 1.5)] * 4)
    (trial,) = policy.trials
    assert not trial.kept and trial.measured < 1.0
    assert policy.correction() == MIN_CORRECTION


@pytest.mark.parametrize(
    ("predicted", "measured", "expected"),
    [
        (1.5, 1.5, 1.0),  # as predicted
        (1.1, 1.2, 2.0),
        (1.05, 2.0, MAX_CORRECTION),  # one trial far above: bounded
        (1.5, 1.3, 0.6),
        (1.5, 1.0, MIN_CORRECTION),  # no gain at all: bounded
    ],
)
def test_the_correction_is_the_measured_gain_over_the_predicted_gain_bounded(predicted, measured, expected):
    policy = Policy(start=START)
    run_epochs(policy, {START: 0.010, TWO: 0.010 / measured}, [offer(TWO, START, predicted)] * 4)
    assert policy.correction() == pytest.approx(expected)


def test_the_correction_weighs_every_trial_by_its_predicted_gain():
    # Trial 1: predicted 1.5, measured 2.0 (kept). Trial 2: predicted 1.5, measured about 1.0 (reverted).
    # Together: (1.0 + 0.0) / (0.5 + 0.5) = 1.0, whatever either alone said.
    policy = Policy(start=START, every=2)
    offers = [offer(TWO, START, 1.5)] * 4 + [offer(FOUR, TWO, 1.5)] * 3
    run_epochs(policy, {START: 0.010, TWO: 0.005, FOUR: 0.005}, offers)
    assert [t.kept for t in policy.trials] == [True, False]
    assert policy.correction() == pytest.approx(1.0)


def test_the_trial_budget_still_bounds_a_corrected_model():
    policy = Policy(start=START, every=2)
    settings = [START.but(num_workers=n, prefetch_factor=2) for n in range(1, 12)]
    times = {START: 0.010, **{s: 0.010 * 0.8 ** (i + 1) for i, s in enumerate(settings)}}
    offers: list[Proposal | None] = []
    for i, s in enumerate(settings):
        offers += [offer(s, settings[i - 1] if i else START, 1.1)] * 2
    run_epochs(policy, times, [offers[0], offers[0], *offers])
    assert len(policy.trials) == MAX_TRIALS and policy.done == f"{MAX_TRIALS} trials made"


def test_the_helper_ranks_by_the_corrected_gain_so_a_small_one_is_no_longer_within_reach_of_no_change():
    # A photo run's model at 1 persistent worker (recorded beside other work; epochs of 800 batches, so
    # each epoch's fill, which more workers shorten, hardly counts): 2 and 3 workers 1.01x, so
    # "no change" is within C.CLOSE of the best and wins. Its gain tripled, 3 workers' 1.03x is not.
    one = Setting(num_workers=1, threads=1, prefetch_factor=2, persistent_workers=True)
    model = EpochModel(
        cores=2.0,
        background=4.5,
        step_work_s=0.126,
        step_threads=1.0,
        step_blocked_s=0.0039,
        handoff_s=0.0045,
        load_cpu_s=0.114,
        load_blocked_s=0.0014,
        epoch_batches=800.0,
        start_per_worker_s=0.04,
        end_per_worker_s=0.025,
        recorded=one,
        others_busy=1.5,
        queue_loss_s=0.0083,
        spread=0.076,
    )
    settings = [one, *(s for s in candidates(model) if s != one)]
    assert choose(model, settings)[0].setting == one
    chosen, _ = choose(model, settings, Ranking(MAX_CORRECTION))
    assert chosen.setting.num_workers > 1
    assert chosen.speedup == pytest.approx(1.0 + (model.speedup(chosen.setting) - 1.0) * MAX_CORRECTION)


# bench/bench_tune.py's photo run at its second question: 4 persistent workers kept (0.70 s epochs, the step's
# threads about 1.1 of 2 busy beside the workers) after its start, no workers (1.29 s)
PHOTO_AT_4 = EpochModel(
    cores=2.0,
    background=0.0,
    step_work_s=0.0497,
    step_threads=1.1431,
    step_blocked_s=0.0,
    handoff_s=0.0001,
    load_cpu_s=0.095,
    load_blocked_s=0.0018,
    epoch_batches=8.0,
    start_per_worker_s=0.006,
    end_per_worker_s=0.0025,
    recorded=Setting(4, 2, 2, True),
    spread=0.0419,
)
PHOTO_AT_0 = dataclasses.replace(
    PHOTO_AT_4,
    background=0.0229,
    others_busy=0.0229,
    step_work_s=0.1155,
    step_threads=1.9477,
    handoff_s=0.001,
    load_cpu_s=0.102,
    load_blocked_s=0.0,
    recorded=Setting(0, 2, None),
    spread=0.0,
)


def test_a_setting_is_tried_only_where_every_measured_setting_predicts_it_pays():
    """From the kept setting 2 workers play 1.11x faster (they measured 0.96x); from the start, 0.91x: not tried."""
    settings = [PHOTO_AT_4.recorded, *tuner_candidates(PHOTO_AT_4)]
    alone, _ = choose(PHOTO_AT_4, settings)
    assert alone.setting == Setting(2, 2, 2, True) and alone.speedup > 1.05
    seen = Ranking.seen_from(PHOTO_AT_4, 1.0, [PHOTO_AT_0])
    assert seen.speedup(PHOTO_AT_4, Setting(2, 2, 2, True)) < 0.95
    assert seen.speedup(PHOTO_AT_4, PHOTO_AT_4.recorded) == pytest.approx(1.0)
    both, _ = choose(PHOTO_AT_4, settings, seen)
    assert both.setting == PHOTO_AT_4.recorded


def test_every_measured_setting_plays_another_thread_count_with_the_steps_measured_share():
    """After a kept 1-thread trial the share is measured (0.95): the start's model plays the way back with it."""
    # 2 persistent workers at 1 thread kept: a 110-ms step on its one thread, 1.07-s epochs
    one = Setting(2, 1, 2, True)
    current = dataclasses.replace(PHOTO_AT_4, recorded=one, measured_share=0.95, step_threads=1.0, step_work_s=0.11)
    back = Setting(8, 2, 2, True)
    shared = dataclasses.replace(PHOTO_AT_0, measured_share=0.95)
    with_share = shared.epoch_s(current.recorded) / shared.epoch_s(back)
    with_table = PHOTO_AT_0.epoch_s(current.recorded) / PHOTO_AT_0.epoch_s(back)
    assert with_share > with_table * 1.03  # a step sharing out more gains more from its second thread
    assert current.speedup(back) > with_share
    assert Ranking.seen_from(current, 1.0, [PHOTO_AT_0]).speedup(current, back) == pytest.approx(with_share)


def test_after_a_miss_a_setting_between_the_measured_ones_is_offered_uncorrected():
    """NOTE [ After a miss ]: 8 workers measured 0.8x; 2 between 0 and 8 still get their try at the model's 1.08x."""
    eight, two = START.but(num_workers=8, persistent_workers=True), START.but(num_workers=2, persistent_workers=True)

    def missed_eight() -> Policy:
        policy = Policy(start=START, every=1)
        offers = [None, None, offer(eight, START, 1.33), offer(eight, START, 1.33)]
        run_epochs(policy, {START: 0.010, eight: 0.0125}, offers)
        assert policy.missed == eight and policy.correction() == MIN_CORRECTION
        return policy

    assert missed_eight().next_setting(offer(two, START, 1.08)) == (START, None)  # corrected: 1.027x, in the noise
    between = dataclasses.replace(offer(two, START, 1.08), between=True)
    setting, tried = missed_eight().next_setting(between)
    assert setting == two and tried is not None and tried.correction == 1.0


@pytest.mark.parametrize(
    ("workers", "between"), [(0, True), (1, True), (2, True), (4, True), (7, True), (8, False), (9, False)]
)
def test_between_spans_the_current_worker_count_to_the_missed_ones_not_the_missed_itself(workers, between):
    """The current count on the other thread count counts: it lies between too."""
    from collector.diagnosis.decide import between as _between

    current, missed = START.but(threads=2), START.but(num_workers=8, persistent_workers=True)
    assert _between(current.but(num_workers=workers, threads=1), current, missed) is between
