"""Each loop's records have their layout's fields (NOTE [ Record layouts ]), and every field is a batches column."""

from __future__ import annotations

import inspect
import time
from collections import deque
from typing import Any

import pytest
from fixture_datasets import SlowDataset
from helpers import query
from torch.utils.data import DataLoader

from collector.record import hotloop, loader_probe
from collector.record import plain_loop as plain
from collector.record.cuda_idle import IdleResolver
from collector.record.full_loop import FullLoop
from collector.record.handover import Shared
from collector.record.load_clock import LoadClock
from collector.sample.sampler import Rates
from collector.store.connection import Store
from collector.writer.batch_records import CLOCKS, FAST, LAYOUTS, PACKERS, fast_records, ring_clocks
from collector.writer.frames import Flush, Open, RunStart
from collector.writer.sink import Sink

BATCHES, BATCH_SIZE, STRIDE = 6, 2, 2
CLOCK_COLUMNS = ("ts", "wait_s", "step_s")  # what the three clocks become: NOTE [ Clocks in SQL ]
LOOPS = [
    pytest.param(
        "plain",
        (hotloop.Timer, hotloop.Epoch),
        id="plain-compiled",
        marks=pytest.mark.skipif(not hotloop.COMPILED, reason="collector.record._hotloop is not built"),
    ),
    pytest.param("plain", (hotloop.PyTimer, hotloop.py_epoch), id="plain-python"),
    pytest.param("full", None, id="full-with-workers"),
]


def batches_columns(db_path: str) -> set[str]:
    Store(db_path).close()  # a file with the schema of collector/store/schema.py
    return {row[1] for row in query(db_path, "PRAGMA table_info(batches)")}


def stored_column(field: str) -> str:
    return field[: -len("_ns")] + "_s" if field.endswith("_ns") else field


def test_each_layout_has_one_packer_whose_parameters_are_its_fields():
    assert set(PACKERS) == set(LAYOUTS)
    for name, layout in LAYOUTS.items():
        assert tuple(inspect.signature(PACKERS[name]).parameters) == layout, name


def test_every_field_of_every_layout_is_a_column_of_the_schema(db_path):
    columns = batches_columns(db_path)
    for name, layout in LAYOUTS.items():
        assert layout[:CLOCKS] == FAST, name
        assert {"epoch", "idx", *CLOCK_COLUMNS} <= columns
        missing = [field for field in layout[CLOCKS:] if stored_column(field) not in columns]
        assert not missing, f"{name}: {missing} are no batches column"


def new_shared() -> Shared:
    records = {name: deque[tuple[Any, ...]]() for name in ("queue", "sampled", "described")}
    return Shared(records=records, epoch_events=deque(), resolver=IdleResolver(), stride=[STRIDE])


def run_loop(kind: str, types: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, list[tuple[Any, ...]]], list]:
    """One epoch of ``kind`` over BATCHES batches: {layout name: records}, and the plain loop's timed pairs."""
    shared = new_shared()
    errors: list[BaseException] = []
    if kind == "plain":
        monkeypatch.setattr(plain, "Timer", types[0])
        monkeypatch.setattr(plain, "Epoch", types[1])
        loader = DataLoader(SlowDataset(BATCHES * BATCH_SIZE), batch_size=BATCH_SIZE)
        loop = plain.plain_loop(iter(loader), 0, time.perf_counter_ns(), shared, errors.append, LoadClock(None), None)
        assert len(list(loop)) == BATCHES
    else:
        loader = DataLoader(SlowDataset(BATCHES * BATCH_SIZE), batch_size=BATCH_SIZE, num_workers=2)
        it = iter(loader)
        warned: list[tuple[str, str]] = []
        probe = loader_probe.attach(it, lambda key, message: warned.append((key, message)))
        assert probe is not None and not warned
        full = FullLoop(it, 0, time.perf_counter_ns(), shared, probe, False, errors.append, LoadClock(None))
        assert len(list(full.iterator())) == BATCHES
        del it
    assert not errors
    records = {name: list(chunk) for name, chunk in shared.records.items() if chunk}
    timed = [(epoch, *timer.drain()) for epoch, timer in shared.timers.items()]
    if timed:
        records["fast"] = [
            r for epoch, first, pairs in timed for r in fast_records(epoch, first, *ring_clocks(pairs), None)
        ]
    return records, timed


@pytest.mark.parametrize(("kind", "types"), LOOPS)
def test_the_records_of_each_loop_have_their_layouts_fields(kind, types, monkeypatch):
    records, _ = run_loop(kind, types, monkeypatch)
    expected = {"plain": {"fast", "described"}, "full": {"queue", "sampled"}}[kind]
    assert set(records) == expected
    seen = set()
    for name, chunk in records.items():
        layout = LAYOUTS[name]
        for record in chunk:
            assert type(record) is tuple and len(record) == len(layout), name  # marshal takes exact tuples only
            fields = dict(zip(layout, record, strict=True))
            assert fields["epoch"] == 0 and 0 <= fields["idx"] < BATCHES
            assert fields["t_request_ns"] <= fields["t_return_ns"]
            if name != "fast":
                seen.add(fields["idx"])
            if "samples" in fields:
                assert (fields["samples"], fields["pinned"]) == (BATCH_SIZE, 0)
                assert fields["load_cpu_ns"] is not None and fields["load_cpu_ns"] >= 0
            if kind == "full":
                assert fields["worker_id"] in (0, 1) and fields["worker_pid"] is not None
    if kind == "full":
        assert seen == set(range(BATCHES))
    assert sorted(r[1] for r in records.get("sampled", records.get("described", []))) == list(range(0, BATCHES, STRIDE))


@pytest.mark.parametrize(("kind", "types"), LOOPS)
def test_the_records_of_each_loop_land_in_their_columns(kind, types, monkeypatch, db_path):
    records, timed = run_loop(kind, types, monkeypatch)
    records.pop("fast", None)  # the Sink packs them from the timed pairs itself
    sink = Sink(
        Open(db_path, RunStart("records", {}, {}, {}, "host", 1, "cmd", None, None), time.time(), 0, Rates(0, 0))
    )
    sink.write(Flush(records=records, timed=timed), sample=False)
    sink.close()
    rows = query(
        db_path,
        "SELECT idx, wait_s >= 0, step_s IS NOT NULL, samples, load_cpu_s IS NOT NULL, worker_id IS NOT NULL"
        " FROM batches ORDER BY idx",
    )
    described = [idx % STRIDE == 0 for idx in range(BATCHES)]
    assert [row[0] for row in rows] == list(range(BATCHES))
    assert all(row[1] for row in rows)
    assert [row[2] for row in rows] == [False] + [True] * (BATCHES - 1)
    assert [row[3] for row in rows] == [BATCH_SIZE if d else None for d in described]
    assert [row[4] for row in rows] == described
    assert [row[5] for row in rows] == [kind == "full"] * BATCHES
