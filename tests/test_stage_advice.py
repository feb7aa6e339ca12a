"""Advice inside the pipeline: each rule from a stage table, priced by the one prediction model."""

from __future__ import annotations

import pytest

from collector.diagnosis.calibration import C
from collector.diagnosis.model import EpochModel
from collector.diagnosis.replay import DraftGain
from collector.diagnosis.report_types import StageRow
from collector.diagnosis.rules_stages import price, stage_advice
from collector.diagnosis.setting import Setting
from collector.diagnosis.stages import StageFacts, Stages


@pytest.fixture
def model() -> EpochModel:
    """Input-bound on loading's CPU: one worker takes 40 ms of CPU a batch, the step 10 ms, on 4 idle cores."""
    return EpochModel(
        cores=4.0,
        background=0.0,
        step_work_s=0.002,
        step_threads=1.0,
        step_blocked_s=0.008,
        handoff_s=0.0005,
        load_cpu_s=0.040,
        load_blocked_s=0.002,
        epoch_batches=500,
        start_per_worker_s=C.START_PER_WORKER_S,
        end_per_worker_s=C.END_PER_WORKER_S,
        recorded=Setting(1, 1, 2, True),
    )


def stage(name: str, share: float, *, cpu: float = 1.0, pixels_in=None, pixels_out=None) -> StageFacts:
    wall = share * 10.0
    row = StageRow(name, 100, wall / 400 * 1000, share, cpu)
    return StageFacts(row, wall, wall * cpu, pixels_in, pixels_out)


def table(*rows: StageFacts, files=("a.jpg", "b.jpg")) -> Stages:
    return Stages(rows, fetch_wall_s=10.0, fetch_cpu_s=sum(f.cpu_s or 0 for f in rows), samples=400, files=files)


PHOTO = (
    stage("PIL decode JPEG", 0.6, pixels_out=512.0 * 512),
    stage("transform 0 Resize", 0.2, pixels_in=512.0 * 512, pixels_out=64.0 * 64),
    stage("transform 1 RandomHorizontalFlip", 0.1),
    stage("__getitem__", 0.1),
)


def fake_replay(saving: float):
    def replay(paths, side):
        assert side == 64 and paths == ("a.jpg", "b.jpg")
        return DraftGain(full_s=1.0, draft_s=1.0 - saving, files=len(paths))

    return replay


def test_a_saving_of_nothing_prices_at_one_and_more_saving_at_more(model):
    st = table(*PHOTO)
    assert price(model, st, []) == pytest.approx(1.0)
    half, most = price(model, st, [(PHOTO[0], 0.5)]), price(model, st, [(PHOTO[0], 0.9)])
    assert 1.0 < half < most


def test_a_large_decode_shrunk_afterwards_is_advised_to_decode_smaller_with_its_replayed_gain(model):
    found = stage_advice(table(*PHOTO), model, {}, replay=fake_replay(0.6))
    decode = next(s for s in found if s.parameter == "decode_size")
    low, high = decode.expected_speedup_range
    assert 1.1 <= low <= decode.expected_speedup <= high
    assert "saved 60% of the decode and shrink" in decode.reason and "Pixels change slightly" in decode.reason
    assert decode.suggested == 'img.draft("RGB", (64, 64)) before load'


@pytest.mark.parametrize(
    ("rows", "replay"),
    [
        (PHOTO, None),  # no replay: no measured gain, no advice
        (PHOTO, fake_replay(0.0)),  # the draft saved nothing
        ((stage("PIL decode JPEG", 0.6, pixels_out=80.0 * 80), *PHOTO[1:]), fake_replay(0.6)),  # barely shrunk
        ((stage("PIL decode PNG", 0.6, pixels_out=512.0 * 512), *PHOTO[1:]), fake_replay(0.6)),  # no draft for PNG
        ((stage("PIL decode JPEG", 0.05, pixels_out=512.0 * 512), *PHOTO[1:]), fake_replay(0.6)),  # decode is small
    ],
)
def test_decode_smaller_is_not_advised_where_it_cannot_pay(model, rows, replay):
    found = stage_advice(table(*rows), model, {}, replay=replay)
    assert not [s for s in found if s.parameter == "decode_size"]


def test_the_deterministic_front_is_cached_up_to_the_first_random_step_with_its_memory(model):
    found = stage_advice(table(*PHOTO), model, {"dataset_len": 50_000})
    cache = next(s for s in found if s.parameter == "cache")
    assert cache.suggested == "cache samples after transform 0 Resize"
    assert "0.6 GiB for 50000 samples" in cache.reason  # 64 x 64 x 3 uint8 bytes a sample
    assert cache.expected_speedup_range[0] <= cache.expected_speedup <= cache.expected_speedup_range[1]


def test_a_pipeline_without_a_random_step_caches_whole_samples(model):
    rows = (PHOTO[0], PHOTO[1], stage("__getitem__", 0.2))
    cache = next(s for s in stage_advice(table(*rows), model, {}) if s.parameter == "cache")
    assert cache.suggested == "cache whole samples"
    assert "transform 0 Resize, __getitem__" in cache.reason


def test_uint8_to_the_gpu_only_beside_a_gpu(model):
    rows = (
        stage("PIL decode JPEG", 0.3),
        stage("transform 0 RandomResizedCrop", 0.2),
        stage("transform 1 ToTensor", 0.25),
        stage("transform 2 Normalize", 0.25),
    )
    assert not [s for s in stage_advice(table(*rows), model, {}) if s.parameter == "uint8_to_gpu"]
    gpu = stage_advice(table(*rows), model, {}, cuda=True, batch_nbytes=4 * 2**20)
    uint8 = next(s for s in gpu if s.parameter == "uint8_to_gpu")
    assert "1.0 MiB instead of 4.0" in uint8.reason


def test_a_heavy_hand_over_is_advised_fewer_bytes(model):
    rows = (stage("__getitem__", 0.7), stage("hand-over", 0.4))
    found = stage_advice(table(*rows), model, {}, batch_nbytes=64 * 2**20)
    assert [s.parameter for s in found] == ["handover"]
    assert "64.0 MiB a batch" in found[0].current


def test_no_table_or_no_model_gives_no_advice(model):
    assert stage_advice(None, model, {}) == []
    assert stage_advice(table(*PHOTO), None, {}) == []
