"""Stage timing against the real torchvision: each Compose step by position and class, v1 and v2, and the advice."""

from __future__ import annotations

import os
import time

import pytest
import torch
from fixture_datasets import JpegFiles, write_jpegs
from test_stages import record
from torch.utils.data import DataLoader

import collector
from collector.diagnosis.replay import replay_draft
from collector.store.reader import Reader


def torchvision_transforms():
    """torchvision.transforms; skipped without it, failed under STALLWATCH_REQUIRE_TORCHVISION=1 (CI sets it)."""
    try:
        import torchvision.transforms as transforms
        import torchvision.transforms.v2  # noqa: F401 - the v2 Compose
    except (ImportError, RuntimeError, OSError) as exc:  # 0.28 beside torch 2.13's CPU build fails to load
        if os.environ.get("STALLWATCH_REQUIRE_TORCHVISION") == "1":
            pytest.fail(f"torchvision does not import ({exc}) and STALLWATCH_REQUIRE_TORCHVISION=1: see README, Set up")
        pytest.skip(f"torchvision does not import ({exc}); STALLWATCH_REQUIRE_TORCHVISION=1 makes this a failure")
    return transforms


@pytest.fixture
def jpegs(tmp_path):
    return write_jpegs(str(tmp_path), 12, side=256)


def stage_rows(db_path, run_id):
    rows = Reader(db_path).worker_stages(run_id)
    return rows.groupby("stage")[["calls", "wall_s", "pixels_in", "pixels_out"]].sum(min_count=1)


def test_a_compose_is_timed_step_by_step_with_its_pixels(db_path, jpegs):
    T = torchvision_transforms()
    pipeline = T.Compose([T.Resize(32), T.CenterCrop(32), T.ToTensor(), T.Normalize([0.5] * 3, [0.5] * 3)])
    loader = DataLoader(JpegFiles(jpegs, transform=pipeline, sleep_s=0.01), batch_size=3, num_workers=2)
    run_id, batches = record(loader, db_path)
    rows = stage_rows(db_path, run_id)
    steps = [s for s in rows.index if s.startswith("transform ")]
    assert sorted(steps) == [
        "transform 0 Resize",
        "transform 1 CenterCrop",
        "transform 2 ToTensor",
        "transform 3 Normalize",
    ]
    assert (rows.loc[steps, "calls"] == 12).all()
    assert rows.loc["transform 0 Resize", "pixels_in"] == 12 * 256 * 256
    assert rows.loc["transform 0 Resize", "pixels_out"] == 12 * 32 * 32
    assert rows.loc["PIL decode JPEG", "pixels_out"] == 12 * 256 * 256
    plain = list(DataLoader(JpegFiles(jpegs, transform=pipeline), batch_size=3, num_workers=2))
    assert all(torch.equal(a, b) for a, b in zip(plain, batches, strict=True))


def test_a_v2_compose_is_timed_step_by_step(db_path, jpegs):
    torchvision_transforms()
    from torchvision.transforms import v2

    pipeline = v2.Compose([v2.PILToTensor(), v2.Resize(32, antialias=True), v2.ToDtype(torch.float32, scale=True)])
    loader = DataLoader(JpegFiles(jpegs, transform=pipeline, sleep_s=0.01), batch_size=3, num_workers=1)
    run_id, batches = record(loader, db_path)
    rows = stage_rows(db_path, run_id)
    assert {"transform 0 PILToTensor", "transform 1 Resize", "transform 2 ToDtype"} <= set(rows.index)
    assert rows.loc["transform 1 Resize", "calls"] == 12
    plain = list(DataLoader(JpegFiles(jpegs, transform=pipeline), batch_size=3, num_workers=1))
    assert all(torch.equal(a, b) for a, b in zip(plain, batches, strict=True))


def test_a_failing_step_raises_as_without_stallwatch(db_path, jpegs):
    T = torchvision_transforms()

    pipeline = T.Compose([T.Resize(32), T.Lambda(fail)])
    plain_loader = DataLoader(JpegFiles(jpegs, transform=pipeline), batch_size=3, num_workers=1)
    with pytest.raises(Exception) as plain:
        list(plain_loader)
    watched = collector.watch(DataLoader(JpegFiles(jpegs, transform=pipeline), batch_size=3, num_workers=1), db=db_path)
    with watched, pytest.raises(Exception) as ours:
        list(watched)
    assert type(ours.value) is type(plain.value)
    mine, theirs = str(ours.value).splitlines(), str(plain.value).splitlines()
    assert mine[-1] == theirs[-1] == "ValueError: a step that fails"
    assert "collector" + os.sep + "record" not in str(ours.value)  # no frame of ours
    assert set(mine) <= set(theirs)  # a timed Compose's own line may be missing: NOTE [ A worker's exception ]


def fail(image):
    raise ValueError("a step that fails")


def test_decode_at_reduced_size_is_advised_with_its_replayed_gain(db_path, jpegs, monkeypatch):
    T = torchvision_transforms()
    from collector.diagnosis import data as data_module
    from collector.diagnosis.assemble import diagnose_data

    pipeline = T.Compose([T.Resize(16), T.ToTensor()])
    loader = DataLoader(JpegFiles(jpegs, transform=pipeline, sleep_s=0.0), batch_size=2, num_workers=1)
    run_id, _ = record(loader, db_path, epochs=3)
    gain = replay_draft(tuple(jpegs[:4]), 16)
    assert gain is not None and gain.files == 4 and 0 < gain.draft_s < gain.full_s
    report = diagnose_data(data_module.load_run(db_path, run_id))
    stages = {row.stage: row for row in report.stages}
    assert stages["PIL decode JPEG"].share > 0.15
    decode = [s for s in report.suggestions if s.parameter == "decode_size"]
    if decode:  # priced by the model: it speaks only where the whole job gains C.MIN_SPEEDUP
        low, high = decode[0].expected_speedup_range
        assert low <= decode[0].expected_speedup <= high
        assert "Pixels change slightly" in decode[0].reason


def nap_step(image):
    time.sleep(0.005)
    return image


def test_without_workers_the_sampler_names_the_compose_step(db_path, jpegs):
    T = torchvision_transforms()
    pipeline = T.Compose([T.Resize(32), T.Lambda(nap_step), T.ToTensor()])
    loader = DataLoader(JpegFiles(jpegs * 4, transform=pipeline), batch_size=4, num_workers=0)
    run_id, batches = record(loader, db_path, epochs=2)
    assert len(batches) == 24
    rows = stage_rows(db_path, run_id)
    assert rows.loc["transform 1 Lambda", "wall_s"] > 0.3 * rows.loc["fetch", "wall_s"]
    # every stage named is one of the pipeline's; a decode shorter than a look's interval shows only on average
    named = (
        "fetch",
        "collate",
        "__getitem__",
        "PIL ",
        "transform 0 Resize",
        "transform 1 Lambda",
        "transform 2 ToTensor",
    )
    assert all(stage.startswith(named) for stage in rows.index), list(rows.index)
