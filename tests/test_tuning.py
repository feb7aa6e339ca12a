"""Live tuning: the policy's decisions, the loader put at a setting, and tuned runs of real loaders."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import statistics
import time
import warnings

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

from collector import watch
from collector.diagnosis import diagnose
from collector.diagnosis.calibration import C
from collector.diagnosis.choose import candidates, choose
from collector.diagnosis.data import load_run
from collector.diagnosis.decide import tuner_candidates
from collector.diagnosis.model import EpochModel, Setting
from collector.diagnosis.stats import measure
from collector.errors import CollectorWarning
from collector.record import tuning
from collector.record.tuning import apply, setting_of
from collector.tune.advisor import Advisor, AdvisorError
from collector.tune.answers import NothingPays, Proposal
from collector.tune.every import tune_every
from collector.tune.policy import BASELINE_EPOCHS, NOISE_FLOOR, Policy, Segment
from collector.tune.propose import propose, with_edges

START = Setting(num_workers=0, threads=2, prefetch_factor=None)
FOUR = START.but(num_workers=4)


def seg(epoch: int, per_batch_s: float, batches: int = 100) -> Segment:
    return Segment(epoch, 0, batches, per_batch_s * batches, float(epoch), float(epoch + 1))


def proposal(setting: Setting, baseline: Setting = START, predicted: float = 2.0) -> Proposal:
    return Proposal(baseline, setting, predicted, predicted * 0.8, predicted * 1.2)


def run_epochs(policy: Policy, times: dict[Setting, float], offers: list[Proposal | None]) -> list[Setting]:
    """Each epoch: the policy picks a setting from the offer, which then measures ``times[setting]``."""
    used = []
    for epoch, offer in enumerate(offers):
        setting, _ = policy.next_setting(offer)
        used.append(setting)
        policy.measured(seg(epoch, times[setting]), setting)
    return used


def test_a_trial_waits_for_the_baseline_epochs_then_is_kept_when_it_measures_faster_than_the_noise():
    policy = Policy(start=START)
    offer = proposal(FOUR)
    used = run_epochs(policy, {START: 0.010, FOUR: 0.004}, [offer] * 5)
    assert used[:BASELINE_EPOCHS] == [START] * BASELINE_EPOCHS and used[BASELINE_EPOCHS:] == [FOUR] * 3
    (trial,) = policy.trials
    assert trial.kept and trial.measured == pytest.approx(2.5) and trial.epoch == BASELINE_EPOCHS
    assert policy.current == FOUR
    assert policy.summary() == (
        "tuned: num_workers 0 -> 4: 2.5x measured; start there next time: DataLoader(..., num_workers=4)"
    )


def test_a_trial_is_judged_on_its_second_segment_only_where_its_persistent_workers_start_in_the_first():
    two = START.but(num_workers=2, persistent_workers=True)
    policy = Policy(start=START)
    for epoch in range(BASELINE_EPOCHS):
        policy.measured(seg(epoch, 0.010), START)
    assert policy.next_setting(proposal(two))[0] == two
    assert policy.measured(seg(2, 0.012), two) is None  # its workers started here: not judged yet
    kept = policy.measured(seg(3, 0.005), two)
    assert kept is not None and kept.kept and kept.epoch == 3
    policy.every = 1
    one_thread = two.but(threads=1)  # the same workers, already running
    assert policy.next_setting(proposal(one_thread, baseline=two))[0] == one_thread
    lost = policy.measured(seg(4, 0.008), one_thread)
    assert lost is not None and not lost.kept and lost.epoch == 4  # judged on its first: one slow epoch
    assert policy.current == two


def test_a_trial_within_the_settings_own_variation_is_reverted():
    policy = Policy(start=START)
    policy.measured(seg(0, 0.014), START)  # the warm-up
    policy.measured(seg(1, 0.010), START)
    policy.measured(seg(2, 0.0115), START)  # 15% apart: its noise
    assert policy.noise(START) == pytest.approx(0.15)
    setting, tried = policy.next_setting(proposal(FOUR))
    assert setting == FOUR and tried is not None
    trial = policy.measured(seg(3, 0.0098), FOUR)  # 1.10x against their median: inside the noise
    assert trial is not None and not trial.kept and "within the 15% variation" in trial.why
    assert policy.current == START and policy.summary() is None


def test_the_warm_up_epoch_is_no_sample_of_its_settings_speed_nor_of_its_noise():
    policy = Policy(start=START)
    policy.measured(seg(0, 0.020), START)  # imports, caches, workers' start: twice the steady epoch
    policy.measured(seg(1, 0.010), START)
    assert policy.noise(START) == NOISE_FLOOR  # one steady epoch: no measured variation yet
    setting, _ = policy.next_setting(proposal(FOUR, predicted=1.15))
    trial = policy.measured(seg(2, 0.0087), setting)
    assert trial is not None and trial.kept and trial.measured == pytest.approx(0.010 / 0.0087)
    assert policy.measured_speedup() == pytest.approx(0.010 / 0.0087)  # the warm-up is not the start's speed


def test_an_answer_from_the_warm_up_alone_is_provisional_both_ways():
    warm_only, steady = BASELINE_EPOCHS - 1, BASELINE_EPOCHS
    policy = Policy(start=START)
    run_epochs(policy, {START: 0.01}, [None] * BASELINE_EPOCHS)
    policy.nothing_pays(NothingPays("no untried setting is predicted to beat the current one", seen=warm_only))
    small = dataclasses.replace(proposal(FOUR, predicted=1.0 + NOISE_FLOOR / 2), seen=warm_only)
    assert policy.next_setting(small) == (START, None) and policy.done is None and policy.wants_proposal()
    policy.measured(seg(BASELINE_EPOCHS, 0.01), START)
    steady_offer = dataclasses.replace(proposal(FOUR, predicted=1.3), seen=steady)
    assert policy.next_setting(steady_offer) == (FOUR, steady_offer)

    slow_start = Policy(start=START)  # a warm-up 30% slower than the steady epoch after it
    slow_start.measured(seg(0, 0.013), START)
    slow_start.measured(seg(1, 0.010), START)
    gain = proposal(FOUR, predicted=1.2)
    assert slow_start.next_setting(dataclasses.replace(gain, seen=warm_only)) == (START, None)
    assert slow_start.done is None
    assert slow_start.next_setting(dataclasses.replace(gain, seen=steady))[0] == FOUR  # steady noise: the floor

    ended = Policy(start=START)
    run_epochs(ended, {START: 0.01}, [None] * BASELINE_EPOCHS)
    ended.nothing_pays(NothingPays("every setting worth trying was tried", seen=steady))
    assert ended.done == "every setting worth trying was tried" and not ended.wants_proposal()


def test_once_a_gain_is_kept_at_most_one_epoch_in_every_is_a_trial():
    policy = Policy(start=START, every=4)
    eight = START.but(num_workers=8)
    offers: list[Proposal | None] = [proposal(FOUR)] * 3 + [proposal(eight, baseline=FOUR)] * 7
    used = run_epochs(policy, {START: 0.01, FOUR: 0.004, eight: 0.0039}, offers)
    trials = [i for i, s in enumerate(used) if s == eight]
    assert trials == [2 + 4]  # the first trial at epoch 2, the next 4 epochs later; reverted, never again
    assert policy.current == FOUR


def test_a_reverted_trial_also_waits_for_the_budget_before_the_next():
    policy = Policy(start=START, every=3)
    two = START.but(num_workers=2)
    offers = [proposal(two)] * 3 + [proposal(FOUR)] * 4
    used = run_epochs(policy, {START: 0.01, two: 0.0125, FOUR: 0.004}, offers)
    assert used == [START, START, two, START, START, FOUR, FOUR]


def test_nothing_predicted_above_the_noise_ends_tuning_without_a_trial():
    policy = Policy(start=START)
    used = run_epochs(policy, {START: 0.01, FOUR: 0.001}, [proposal(FOUR, predicted=1.0 + NOISE_FLOOR / 2)] * 4)
    assert used == [START] * 4 and not policy.trials and policy.done is not None
    assert not policy.wants_proposal()


def test_an_iterable_dataset_never_gets_another_worker_count():
    policy = Policy(start=START, fixed_workers=True)
    assert run_epochs(policy, {START: 0.01, FOUR: 0.001}, [proposal(FOUR)] * 4) == [START] * 4


@pytest.mark.parametrize("value", [0, 1, -3, "yes", 2.5])
def test_tune_takes_true_false_or_an_integer_of_at_least_two(value):
    with pytest.raises(ValueError, match="tune must be True, False or an integer"):
        tune_every(value)
    assert tune_every(True) == 4 and tune_every(6) == 6 and tune_every(False) is None


class Squares(Dataset):
    def __init__(self, n: int = 64, sleep_s: float = 0.0) -> None:
        self.n, self.sleep_s = n, sleep_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.sleep_s:
            time.sleep(self.sleep_s)
        return torch.tensor([float(i)])


def test_before_the_training_process_is_sampled_twice_the_helper_says_later_and_tuning_goes_on(db_path):
    """A model would take the step's unmeasured CPU for none (a short first epoch has one sample or none)."""
    order(db_path, tune=False, epochs=6, sleep_s=0.006)  # 2.5 s: the 2 Hz sampler's samples, several
    sampled = propose(db_path, 1, START.but(threads=torch.get_num_threads()), [], fixed_workers=False)
    assert "later" not in sampled
    with sqlite3.connect(db_path) as db:  # the same run as its first half-second left it: one sample
        first = db.execute("SELECT min(ts) FROM proc_samples WHERE role = 'main'").fetchone()[0]
        db.execute("DELETE FROM proc_samples WHERE role = 'main' AND ts > ?", (first,))
    early = propose(db_path, 1, START.but(threads=torch.get_num_threads()), [], fixed_workers=False)
    assert early["later"] is True and "not sampled yet" in early["none"]
    with sqlite3.connect(db_path) as db:  # the tuner's own readings at an epoch's edges (NOTE [ The first question ])
        t0, t1 = db.execute("SELECT started_at, ended_at FROM epochs WHERE epoch = 0").fetchone()
        db.execute("DELETE FROM proc_samples WHERE role != 'main'")  # the writer's own first samples not in yet
    edges = [[t0, 10.0, 1.0], [t1, 10.0 + 0.5 * (t1 - t0), 1.0]]  # half a core
    told = propose(db_path, 1, START.but(threads=torch.get_num_threads()), [], fixed_workers=False, edges=edges)
    assert "later" not in told
    assert measure(with_edges(load_run(db_path, 1, live=True), edges)).main_cpu_cores == pytest.approx(0.5)
    policy = Policy(start=START)
    run_epochs(policy, {START: 0.01}, [None] * (BASELINE_EPOCHS + 1))
    policy.nothing_pays(NothingPays(early["none"], seen=BASELINE_EPOCHS + 1, later=True))
    assert policy.done is None and policy.wants_proposal()  # a steady answer that could not say yet: ask again


def test_apply_puts_a_dataloader_at_a_setting_and_ends_persistent_workers_of_another():
    loader = DataLoader(Squares(), batch_size=8, num_workers=2, persistent_workers=True)
    list(loader)
    old = loader._iterator
    assert old is not None and old._workers_status
    apply(loader, START.but(num_workers=0, threads=torch.get_num_threads()))
    assert loader._iterator is None and not any(old._workers_status)
    assert (loader.num_workers, loader.prefetch_factor, loader.persistent_workers) == (0, None, False)
    assert next(b[:, 0].tolist() for b in loader) == list(map(float, range(8)))
    apply(loader, setting_of(loader).but(num_workers=2, persistent_workers=True))
    assert (loader.num_workers, loader.prefetch_factor, loader.persistent_workers) == (2, 2, True)
    assert sum(len(b) for b in loader) == 64


def order(db: str, tune: bool, epochs: int, sleep_s: float) -> tuple[list[list[float]], list[float]]:
    loader = DataLoader(Squares(64, sleep_s), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(7))
    seen, times = [], []
    with watch(loader, db=db, run="tuned" if tune else "plain", tune=tune) as watched:
        for _ in range(epochs):
            t0 = time.perf_counter()
            for batch in watched:
                seen.append(batch[:, 0].tolist())
                time.sleep(0.001)
            times.append(time.perf_counter() - t0)
    return seen, times


@pytest.mark.slow
def test_a_starved_loader_tuned_live_gets_faster_with_the_same_samples_in_the_same_order(db_path, capsys):
    """The held-out check's shape: num_workers=0 on an I/O-like dataset, 10 epochs."""
    plain, _ = order(db_path, tune=False, epochs=12, sleep_s=0.006)
    tuned, times = order(db_path, tune=True, epochs=12, sleep_s=0.006)
    assert tuned == plain
    report = diagnose(db_path, "tuned").to_dict()
    trials = [(t["epoch"], t["setting"], t["measured_speedup"], t["kept"]) for t in report["tuning"]]
    kept = [t for t in report["tuning"] if t["kept"]]
    assert kept and kept[0]["measured_speedup"] > 1.2 and kept[0]["setting"]["num_workers"] > 0
    assert {"epoch", "setting", "predicted_speedup", "measured_speedup", "kept"} <= set(kept[0])
    assert report["tuned"].startswith("tuned: num_workers 0 -> ")
    err = capsys.readouterr().err
    assert "stallwatch tuned tuned (test_tuning.py:" in err and "): num_workers 0 -> " in err  # the loader named
    with sqlite3.connect(db_path) as conn:
        query = "SELECT e.setting FROM epochs e JOIN runs r ON r.id = e.run_id WHERE r.name = 'tuned' ORDER BY e.epoch"
        settings = [json.loads(s) for (s,) in conn.execute(query)]
        query = "SELECT DISTINCT p.role FROM proc_samples p JOIN runs r ON r.id = p.run_id WHERE r.name = 'tuned'"
        roles = {role for (role,) in conn.execute(query)}
    # the run trains on at the kept setting, faster; a neighbour's trial (NOTE [ Measured neighbours ]) and the
    # kept workers' restart after it are epochs at other speeds, so the kept setting's own epochs are compared
    final = {k: v for k, v in kept[-1]["setting"].items() if k in settings[-1]}
    at_kept = [
        t for t, s in zip(times, settings, strict=True) if {k: s.get(k) for k in final} == final and not s.get("trial")
    ]
    assert len(at_kept) >= 3 and statistics.median(at_kept) < 0.6 * min(times[:BASELINE_EPOCHS]), (times, trials)
    assert {
        "writer",
        "helper",
    } <= roles  # sampled as the collector's own, not other processes (NOTE [ Our own processes ])


class Shards(IterableDataset):
    def __iter__(self):
        info = get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(worker, 48, workers):
            time.sleep(0.002)
            yield torch.tensor([float(i)])


@pytest.mark.slow
def test_an_iterable_datasets_samples_and_worker_count_are_untouched(db_path):
    def epochs(tune: bool) -> tuple[list[list[float]], int]:
        loader = DataLoader(Shards(), batch_size=4, num_workers=1)
        with watch(loader, db=db_path, tune=tune) as watched:
            seen = [batch[:, 0].tolist() for _ in range(6) for batch in watched]
        return seen, loader.num_workers

    assert epochs(True) == epochs(False)


@pytest.mark.slow
def test_a_failing_tuner_warns_once_and_training_goes_on_unchanged(db_path, monkeypatch):
    monkeypatch.setattr(tuning, "Advisor", lambda: Advisor("import sys; sys.exit(3)"))
    plain, _ = order(db_path, tune=False, epochs=4, sleep_s=0.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tuned, _ = order(db_path, tune=True, epochs=4, sleep_s=0.0)
    assert tuned == plain
    stopped = [
        w for w in caught if issubclass(w.category, CollectorWarning) and "live tuning stopped" in str(w.message)
    ]
    assert len(stopped) == 1


class Scripted:
    """A helper that proposes 2 persistent workers at the first chance, then dies (``poll`` raises)."""

    pid, started = None, 0.0

    def __init__(self) -> None:
        self.polls = 0

    def ask(self, *args: object, **kwargs: object) -> None:
        pass

    def poll(self) -> Proposal | None:
        self.polls += 1
        if self.polls > BASELINE_EPOCHS + 3:
            raise AdvisorError("the tuner's helper ended")
        start = START.but(threads=torch.get_num_threads())
        return proposal(start.but(num_workers=2, persistent_workers=True), predicted=3.0, baseline=start)

    def close(self) -> None:
        pass


def test_a_tuner_that_fails_at_a_kept_setting_leaves_the_samples_and_their_order_as_they_were(db_path, monkeypatch):
    """Persistent workers draw no seed at each iter(); after the failure the tuner still draws the user's."""
    monkeypatch.setattr(tuning, "Advisor", Scripted)
    plain, _ = order(db_path, tune=False, epochs=8, sleep_s=0.004)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tuned, _ = order(db_path, tune=True, epochs=8, sleep_s=0.004)
    assert any("live tuning stopped" in str(w.message) for w in caught)
    with sqlite3.connect(db_path) as db:
        query = "SELECT e.setting FROM epochs e JOIN runs r ON r.id = e.run_id WHERE r.name = 'tuned' ORDER BY e.epoch"
        settings = [json.loads(s) if s else None for (s,) in db.execute(query)]
    assert settings[BASELINE_EPOCHS + 2]["persistent_workers"] and settings[-1] is None  # kept, then failed
    assert tuned == plain


def oversubscribed_model(others_busy: float, background: float, start_s: float) -> EpochModel:
    """The oversubscribed demo's model (8 workers, 2 cores, 64 batches an epoch), quiet or beside a hog."""
    return EpochModel(
        cores=2.0,
        background=background,
        step_work_s=0.0006,
        step_threads=1.0,
        step_blocked_s=0.0098,
        handoff_s=0.0018,
        load_cpu_s=0.0164,
        load_blocked_s=0.0003,
        epoch_batches=64.0,
        start_per_worker_s=(start_s - C.START_FIXED_S) / 8,  # measured an epoch, for its 8 workers
        end_per_worker_s=(0.04 - C.END_FIXED_S) / 8,
        recorded=Setting(num_workers=8, threads=1, prefetch_factor=2),
        others_busy=others_busy,
        queue_loss_s=0.0002,
        spread=0.17,
    )


def test_the_tuner_may_keep_up_to_a_jobs_own_worker_count_past_the_cap_and_the_report_never_does():
    """Other processes keep a quarter of a core busy (0.26) or a hog fills the machine: the job's own share only."""
    quiet, hog = oversubscribed_model(0.26, 0.26, 0.11), oversubscribed_model(1.02, 4.1, 0.26)
    own = Setting(num_workers=8, threads=1, prefetch_factor=2, persistent_workers=True)
    cap = max(s.num_workers for s in candidates(hog))
    for model in (quiet, hog):
        assert cap < 4 and max(s.num_workers for s in candidates(model)) == cap and own in tuner_candidates(model)
        assert {s.num_workers for s in tuner_candidates(model)} == set(range(9))  # up to its own count, no more
    assert choose(quiet, [quiet.recorded, *tuner_candidates(quiet)])[0].setting.num_workers <= cap
    hold = choose(hog, [hog.recorded, *tuner_candidates(hog)])[0].setting
    assert hold.num_workers > cap and hold.persistent_workers  # fewer give the job's share to the hog
    two = dataclasses.replace(quiet, recorded=quiet.recorded.but(num_workers=2))
    assert {s.num_workers for s in tuner_candidates(two)} == set(range(5))  # 2 a core beside others' load
    assert [s for s in tuner_candidates(two) if s.num_workers <= cap] == candidates(two)
    assert max(s.num_workers for s in tuner_candidates(two, physical_cores=1)) == cap  # the cap is more already
    assert max(s.num_workers for s in tuner_candidates(two, physical_cores=64)) == 4  # a host's, not the job's


def test_on_a_quiet_machine_the_tuner_raises_cpu_bound_workers_a_step_at_a_time_up_to_memorys_limit():
    """NOTE [ After a miss ]: 2 a physical core, or twice the workers the job runs, whichever is more."""
    quiet = dataclasses.replace(oversubscribed_model(0.0, 0.0, 0.11), recorded=START.but(num_workers=2, threads=1))
    cap = max(s.num_workers for s in candidates(quiet))
    assert {s.num_workers for s in tuner_candidates(quiet)} == set(range(5))  # past the cap of 3, not to 16
    assert cap == 3 and candidates(quiet) == [s for s in tuner_candidates(quiet) if s.num_workers <= cap]
    four = dataclasses.replace(quiet, recorded=quiet.recorded.but(num_workers=4))  # 4 kept: measured faster
    assert max(s.num_workers for s in tuner_candidates(four)) == 8
    none = dataclasses.replace(quiet, recorded=quiet.recorded.but(num_workers=0))
    assert max(s.num_workers for s in tuner_candidates(none)) == 4  # no first trial of 16 workers on 2 cores
    tight = dataclasses.replace(four, max_workers=5)
    assert max(s.num_workers for s in tuner_candidates(tight)) == 5


def test_a_trial_that_took_a_thread_away_may_give_it_back_where_the_step_kept_its_thread_busy():
    """The photo pipeline after a kept trial of 2 fresh workers at 1 thread (its measured model): its own 2 threads
    come back as candidates, and the pick holds them; never more than the job ran at, nor for a step with idle threads."""
    photo = EpochModel(
        cores=2.0,
        background=0.0,
        step_work_s=0.1027,
        step_threads=1.0,
        step_blocked_s=0.0,
        handoff_s=0.0017,
        load_cpu_s=0.1034,
        load_blocked_s=0.0019,
        epoch_batches=8.0,
        start_per_worker_s=0.0142,  # 38 ms an epoch for 2 workers
        end_per_worker_s=0.0025,  # 11 ms
        recorded=Setting(num_workers=2, threads=1, prefetch_factor=2),
        queue_loss_s=0.0131,
        spread=0.0276,
    )
    assert {s.threads for s in tuner_candidates(photo)} == {s.threads for s in candidates(photo)} == {1}
    back = tuner_candidates(photo, threads=2)
    assert {s.threads for s in back} == {1, 2} and [s for s in back if s.threads == 1] == tuner_candidates(photo)
    pick = choose(photo, [photo.recorded, *back])[0]
    assert pick.setting.threads == 2 and pick.setting.persistent_workers and pick.speedup > 1.1
    idle = dataclasses.replace(photo, step_threads=1.5, recorded=photo.recorded.but(threads=2))
    assert {s.threads for s in tuner_candidates(idle, threads=4)} == {1, 2}  # it used 1.5 of 2: no more
