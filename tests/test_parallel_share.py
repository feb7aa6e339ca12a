"""The step's parallel share: unmeasured, a span a thread change is ranked by the worst of; measured on two thread counts."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict, replace

import numpy as np
import pytest
from diagnosis_fixtures import Synthetic, write_synthetic

from collector.diagnosis.build import build_model, parallel_share_between
from collector.diagnosis.calibration import C
from collector.diagnosis.choose import choose, predict
from collector.diagnosis.data import load_run
from collector.diagnosis.decide import tuner_candidates
from collector.diagnosis.model import EpochModel, Setting
from collector.diagnosis.stats import measure
from collector.store.reader import Reader
from collector.tune.propose import other_settings, with_measured_share

# bench/bench_tune.py's photo pipeline as the tuner's first question saw it: 8 batches an epoch,
# no workers, a 57 ms step on 2 busy threads, 97 ms of CPU to decode a batch
PHOTO = EpochModel(
    cores=2.0,
    background=0.045,
    step_work_s=0.1136,
    step_threads=2.0,
    step_blocked_s=0.0,
    handoff_s=0.001,
    load_cpu_s=0.0969,
    load_blocked_s=0.0,
    epoch_batches=8.0,
    start_per_worker_s=0.006,
    end_per_worker_s=0.0025,
    recorded=Setting(0, 2, None),
    others_busy=0.045,
)


def amdahl(q: float, p: float) -> float:
    return 1.0 / ((1.0 - p) + p / q)


def test_a_setting_at_the_recorded_threads_has_no_span_and_one_at_fewer_spans_the_shares_left_open():
    workers = PHOTO.recorded.but(num_workers=4, persistent_workers=True)
    assert PHOTO.speedup_span(workers) == (PHOTO.speedup(workers), PHOTO.speedup(workers))
    one = workers.but(threads=1)
    low, high = PHOTO.speedup_span(one)
    assert low < PHOTO.speedup(one) < high
    # the least is where a thread does the most: the highest share makes one thread slowest
    high_share = replace(PHOTO, measured_share=C.PARALLEL_SHARE_HIGH)
    assert low == pytest.approx(high_share.speedup(one))
    ranged, plain = predict(PHOTO, one), predict(PHOTO, workers)
    assert ranged.high / ranged.low > plain.high / plain.low  # the range widens with the share's span


def test_fewer_threads_level_with_more_workers_at_the_middle_share_lose_to_them_at_the_worst():
    """The photo pipeline's step ran 1.85x faster on 2 threads than on 1; the table's middle share plays 1.7x."""
    settings = [PHOTO.recorded, *tuner_candidates(PHOTO)]
    middle = replace(PHOTO, measured_share=C.PARALLEL_SHARE)  # the share taken as known
    assert choose(middle, settings)[0].setting.threads == 1
    chosen, _ = choose(PHOTO, settings)
    assert chosen.setting.threads == 2 and chosen.setting.num_workers >= 2


def test_two_thread_counts_give_the_share_by_amdahls_law():
    p = 0.9
    two = replace(PHOTO, step_work_s=2 * 0.052)
    one = replace(PHOTO, step_work_s=0.052 * amdahl(2.0, p), step_threads=1.0, recorded=Setting(0, 1, None))
    assert parallel_share_between(one, two) == pytest.approx(p)
    assert parallel_share_between(two, one) == pytest.approx(p)
    assert parallel_share_between(two, two) is None
    slower = replace(one, step_work_s=0.040)  # faster on 1 thread: nothing parallel
    assert parallel_share_between(slower, two) == 0.0
    measured = replace(one, measured_share=p)
    assert measured.speedup_span(Setting(0, 2, None))[0] == pytest.approx(measured.speedup(Setting(0, 2, None)))


def test_a_tuned_run_on_two_thread_counts_measures_its_share_from_its_own_epochs(tmp_path):
    """4 epochs at 2 threads (50 ms steps), then a kept trial of 1 thread (90 ms): 1.8x, a share of 0.89."""
    db = str(tmp_path / "tuned.sqlite")
    write_synthetic(
        db,
        Synthetic(
            wait_s=np.full(80, 0.002),
            step_s=np.r_[np.full(40, 0.05), np.full(40, 0.09)],
            epoch_len=10,
            main_cpu_pct=200.0,
            host_cpu_pct=100.0,
            torch_threads=2,
        ),
    )
    before, after = Setting(0, 2, None), Setting(0, 1, None)
    with sqlite3.connect(db) as con:
        for epoch in range(8):
            setting = before if epoch < 4 else after
            stored = json.dumps(asdict(setting), sort_keys=True)
            con.execute("UPDATE epochs SET setting = ? WHERE epoch = ?", (stored, epoch))
    data = load_run(db)
    model = build_model(measure(data))
    assert model is not None and model.recorded == after and model.measured_share is None
    measured = with_measured_share(model, other_settings(Reader(db), 1, model, data.all_epochs))
    assert measured.measured_share == pytest.approx(2 * (1 - 1 / 1.8), abs=0.02)
    assert measured.speedup(before) == pytest.approx(0.092 / 0.052, rel=0.03)
    assert model.speedup(before) < 0.092 / 0.052 * 0.97  # the table's share would have played it slower
