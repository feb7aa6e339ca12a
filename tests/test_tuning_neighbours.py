"""NOTE [ Measured neighbours ]: where the model ranks nothing above a kept setting's noise, the settings one
change from it are measured, each no slower than the start as the model plays it; a job that kept nothing tries none."""

from __future__ import annotations

import dataclasses

import pytest
from test_tuning import START, run_epochs
from test_tuning_correction import PHOTO_AT_0, PHOTO_AT_4, offer

from collector.diagnosis.decide import Search, decide, neighbours, tuner_candidates
from collector.tune.policy import Policy

KEPT = PHOTO_AT_4.recorded  # 4 persistent workers at 2 threads, 1.36x over no workers on the course's light class


def search(**changes: object) -> Search:
    base = Search(
        current=KEPT,
        wide=True,
        threads=2,
        physical_cores=2,
        tried=frozenset({PHOTO_AT_0.recorded, KEPT}),
        noise=0.05,
        vantages=(PHOTO_AT_0,),
    )
    return dataclasses.replace(base, **changes)


def test_the_neighbours_are_one_change_away_the_nearest_worker_count_on_each_side():
    """A count past a measured one is no neighbour: after 5 workers, 6 comes only from 5 kept."""
    found = set(neighbours(KEPT, tuner_candidates(PHOTO_AT_4, 2, 2), threads=2))
    assert found == {
        KEPT.but(num_workers=3),
        KEPT.but(num_workers=5),
        KEPT.but(threads=1),
        KEPT.but(persistent_workers=False),
    }
    assert all(len(KEPT.changed(s)) == 1 for s in found)


def test_nothing_ranked_above_the_noise_with_a_banked_gain_measures_the_neighbour_the_model_ranks_highest():
    assert decide(PHOTO_AT_4, search()).chosen.setting == KEPT  # nothing banked: tuning ends as before
    decision = decide(PHOTO_AT_4, search(banked=1.36))
    assert decision is not None and decision.neighbour
    assert decision.chosen.setting == KEPT.but(num_workers=5)  # the model's 1.004x, the highest of the four
    tried = search(banked=1.36, tried=frozenset({PHOTO_AT_0.recorded, KEPT, KEPT.but(num_workers=5)}))
    assert decide(PHOTO_AT_4, tried).chosen.setting == KEPT.but(num_workers=3)  # 0.956x: the next, not 6


def test_a_neighbour_the_model_plays_slower_than_the_start_is_never_tried():
    """1 thread plays 0.83x of the kept setting: with 1.36x banked it stays above the start, with 1.1x it would not."""
    others = {KEPT.but(num_workers=n) for n in (3, 5)} | {KEPT.but(persistent_workers=False)}
    tried = frozenset({PHOTO_AT_0.recorded, KEPT, *others})
    assert decide(PHOTO_AT_4, search(banked=1.36, tried=tried)).chosen.setting == KEPT.but(threads=1)
    assert not decide(PHOTO_AT_4, search(banked=1.10, tried=tried)).neighbour


def test_a_neighbour_below_the_noise_is_tried_and_kept_only_where_it_measures_faster():
    two, four = START.but(num_workers=2, persistent_workers=True), START.but(num_workers=4, persistent_workers=True)
    near = dataclasses.replace(offer(four, two, 0.98), neighbour=True)
    policy = Policy(start=START, every=2)
    offers = [offer(two, START, 1.30)] * 4 + [near] * 4
    used = run_epochs(policy, {START: 0.013, two: 0.010, four: 0.009}, offers)
    assert used[4:] == [four, four, four, four] and policy.current == four  # its 2nd segment judged: 1.11x, kept
    assert policy.banked() == pytest.approx(0.013 / 0.009)
    assert policy.correction() == pytest.approx(1.0)  # a neighbour claims no gain: the correction is the first trial's
    assert "measured to decide" in policy.trials[-1].why


def test_a_neighbour_that_measures_slower_goes_back_and_a_plain_proposal_below_the_noise_still_ends_tuning():
    two, four = START.but(num_workers=2, persistent_workers=True), START.but(num_workers=4, persistent_workers=True)
    near = dataclasses.replace(offer(four, two, 0.98), neighbour=True)
    policy = Policy(start=START, every=2)
    used = run_epochs(policy, {START: 0.013, two: 0.010, four: 0.011}, [offer(two, START, 1.30)] * 4 + [near] * 3)
    assert used[4:] == [four, four, two] and policy.current == two and policy.done is None
    plain = Policy(start=START, every=2)
    run_epochs(plain, {START: 0.013, two: 0.010, four: 0.011}, [offer(two, START, 1.30)] * 4 + [offer(four, two, 0.98)])
    assert plain.done is not None and plain.banked() == pytest.approx(1.3)


def test_a_job_that_kept_nothing_banks_nothing():
    policy = Policy(start=START, every=2)
    run_epochs(policy, {START: 0.010}, [None] * 4)
    assert policy.banked() is None
