"""Stage timing inside real DataLoader workers: recorded per worker and stage, off with stages=False, unseen by the loop."""

from __future__ import annotations

import multiprocessing

import pytest
import torch
from fixture_datasets import JpegFiles, NappingDataset, write_jpegs
from torch.utils.data import DataLoader

import collector
from collector.store.reader import Reader


def record(loader, db_path, epochs=1, **kwargs):
    batches = []
    with collector.watch(loader, db=db_path, gpu_hz=0, host_hz=0, **kwargs) as watched:
        for _ in range(epochs):
            batches += [batch.clone() for batch in watched]
        run_id = watched.run_id
    return run_id, batches


def by_stage(db_path, run_id):
    rows = Reader(db_path).worker_stages(run_id)
    return {stage: group for stage, group in rows.groupby("stage")}


@pytest.fixture
def jpegs(tmp_path):
    return write_jpegs(str(tmp_path), 12, side=96)


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_each_worker_records_open_decode_collate_and_the_fetch_they_add_up_to(db_path, jpegs, start_method):
    loader = DataLoader(
        JpegFiles(jpegs, sleep_s=0.01),  # slow enough that every fetch is timed within the budget
        batch_size=3,
        num_workers=2,
        multiprocessing_context=multiprocessing.get_context(start_method),
    )
    run_id, _ = record(loader, db_path, epochs=2)
    stages = by_stage(db_path, run_id)
    fetch, decode, opened = stages["fetch"], stages["PIL decode JPEG"], stages["PIL open"]
    assert sorted(fetch.worker_id) == [0, 1]
    assert fetch.samples.sum() == 24 and fetch.calls.sum() == 8  # two epochs of 12 samples, 4 batches
    decoded = 24 if start_method == "fork" else 24 - 2 * 3 * 2  # spawn: PIL, imported in a first fetch, hooked after it
    assert decode.calls.sum() == opened.calls.sum() == decoded
    assert decode.pixels_out.sum() == decoded * 96 * 96
    assert stages["collate"].calls.sum() == 8
    assert "hand-over" in stages and "__getitem__" in stages
    own = Reader(db_path).worker_stages(run_id)
    timed = own[~own.stage.str.startswith(("fetch", "file "))].wall_s.sum()
    assert timed == pytest.approx(fetch.wall_s.sum() + stages["hand-over"].wall_s.sum(), rel=0.3)
    assert len([s for s in stages if s.startswith("file ")]) >= 2  # named for replaying their decode
    getitem = stages["__getitem__"]
    assert getitem.cpu_s.sum() < getitem.wall_s.sum()  # its sleep is blocked time, not CPU


def test_stages_false_records_no_stage_rows(db_path, jpegs):
    run_id, _ = record(DataLoader(JpegFiles(jpegs), batch_size=3, num_workers=2), db_path, stages=False)
    assert Reader(db_path).worker_stages(run_id).empty
    assert len(Reader(db_path).batches(run_id)) == 4


def test_the_loop_gets_the_same_batches_with_stage_timing(db_path, jpegs):
    plain = [batch.clone() for batch in DataLoader(JpegFiles(jpegs), batch_size=3, num_workers=2)]
    _, watched = record(DataLoader(JpegFiles(jpegs), batch_size=3, num_workers=2), db_path)
    assert len(plain) == len(watched) == 4
    assert all(torch.equal(a, b) for a, b in zip(plain, watched, strict=True))


def test_an_image_that_fails_to_open_raises_as_without_stallwatch(db_path, jpegs, tmp_path):
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not a jpeg")
    paths = [*jpegs[:2], str(broken)]

    def failure(loader):
        with pytest.raises(Exception) as caught:
            for _ in loader:
                pass
        return caught.value

    plain = failure(DataLoader(JpegFiles(paths), batch_size=3, num_workers=1))
    watched = collector.watch(DataLoader(JpegFiles(paths), batch_size=3, num_workers=1), db=db_path, gpu_hz=0)
    with watched:
        ours = failure(watched)
    assert type(ours) is type(plain)
    assert str(ours) == str(plain)  # the worker's traceback too: no frame of ours


def test_a_dataset_without_hooks_gets_its_own_functions_from_the_stack_sampler(db_path):
    loader = DataLoader(NappingDataset(16, nap_s=0.02), batch_size=4, num_workers=1)
    run_id, _ = record(loader, db_path)
    stages = by_stage(db_path, run_id)
    nap = stages["code fixture_datasets.py:nap"]
    assert nap.wall_s.sum() > 0.5 * stages["fetch"].wall_s.sum()
    assert nap.calls.sum() >= 5  # ticks


def test_the_report_shows_the_stage_table(db_path, jpegs):
    from collector.diagnosis.diagnose import diagnose

    run_id, _ = record(DataLoader(JpegFiles(jpegs, sleep_s=0.01), batch_size=3, num_workers=2), db_path, epochs=2)
    report = diagnose(db_path, run_id)
    stages = report.to_dict()["stages"]
    assert {row["stage"] for row in stages} >= {"PIL decode JPEG", "PIL open", "collate", "__getitem__"}
    assert all(set(row) == {"stage", "calls", "ms_per_sample", "share", "cpu_share"} for row in stages)
    assert sum(row["share"] for row in stages if row["stage"] != "hand-over") == pytest.approx(1.0, abs=0.05)
    assert [row["share"] for row in stages] == sorted((row["share"] for row in stages), reverse=True)


def test_without_workers_a_sampler_beside_the_training_thread_fills_the_table(db_path):
    loader = DataLoader(NappingDataset(48, nap_s=0.01), batch_size=4, num_workers=0)
    run_id, batches = record(loader, db_path, epochs=2)
    assert len(batches) == 24
    stages = by_stage(db_path, run_id)
    fetch, nap = stages["fetch"], stages["code fixture_datasets.py:nap"]
    assert (fetch.worker_id == -1).all()
    assert fetch.samples.sum() > 0
    assert nap.wall_s.sum() > 0.5 * fetch.wall_s.sum()  # the waiting is the fetch's time
    assert nap.cpu_s.sum() < 0.5 * nap.wall_s.sum()  # and it is not CPU


def test_without_workers_stages_false_starts_no_sampler(db_path):
    import threading

    before = set(threading.enumerate())
    run_id, _ = record(DataLoader(NappingDataset(8, nap_s=0.001), batch_size=4), db_path, stages=False)
    assert Reader(db_path).worker_stages(run_id).empty
    assert not [t for t in set(threading.enumerate()) - before if t.name == "sw-stages"]
