"""The loaders of today: a StatefulDataLoader's resumed run says so, torchdata.nodes and a sharded streaming dataset."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import query
from torch.utils.data import DataLoader, IterableDataset, get_worker_info
from torchdata.stateful_dataloader import StatefulDataLoader

import collector
from collector.record.scoped import Scoped

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")  # torchdata 0.11, torch 2.13
ROOT = Path(__file__).resolve().parents[1]
PER_WORKER = (  # per run: batches, with a worker id, with a queue depth, joined to the worker's fetch, distinct workers
    "SELECT COUNT(*), COUNT(b.worker_id), COUNT(b.ready), COUNT(f.wall_s), COUNT(DISTINCT b.worker_id) FROM batches b"
    " LEFT JOIN worker_fetches f ON f.run_id = b.run_id AND f.worker_pid = b.worker_pid"
    " AND f.worker_incarnation = b.worker_incarnation AND f.worker_seq = b.worker_seq WHERE b.run_id = ?"
)


def listed(batches: Any) -> list[Any]:
    return [b.tolist() if isinstance(b, torch.Tensor) else b for b in batches]


def config_of(db: str, run_id: int) -> dict[str, Any]:
    return dict(json.loads(query(db, "SELECT config FROM runs WHERE id = ?", (run_id,))[0][0]))


def report(db: str, run_id: int) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "collector", "report", db, "--run", str(run_id)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, check=True).stdout


@pytest.mark.slow  # a report subprocess
def test_a_stateful_loader_restored_from_a_state_dict_records_a_run_that_says_it_resumed(db_path: str) -> None:
    def make() -> StatefulDataLoader:  # type: ignore[type-arg]
        return StatefulDataLoader(list(range(40)), batch_size=2, num_workers=2)

    first = collector.watch(make(), db=db_path, run="before", gpu_hz=0, host_hz=0)
    it = iter(first)
    head = [next(it).tolist() for _ in range(5)]
    state = first.state_dict()
    del it
    first.close()
    second = collector.watch(make(), db=db_path, run="after", gpu_hz=0, host_hz=0)
    second.load_state_dict(state)
    rest = listed(second)
    second.close()
    assert head + rest == listed(make())  # state_dict / load_state_dict pass through: a real resume
    assert [config_of(db_path, r)["resumed"] for r in (1, 2)] == [False, True]
    text = report(db_path, 2)
    assert text.splitlines()[1] == "resumed: epoch 0 resumed mid-epoch from a saved state_dict"
    assert query(db_path, PER_WORKER, (2,)) == [(15, 15, 15, 15, 2)]  # worker and queue fields, every batch


def test_a_resumed_loader_under_the_callbacks_recording_says_it_resumed(db_path: str) -> None:
    # Scoped is what the Lightning and Hugging Face callbacks start and stop, and `collector run` records alike.
    loader = StatefulDataLoader(list(range(12)), batch_size=2)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    recording = Scoped(db_path, gpu_hz=0, host_hz=0, tags={})
    recording.start()
    try:
        restored = StatefulDataLoader(list(range(12)), batch_size=2)
        restored.load_state_dict(state)
        assert len(listed(restored)) == 5
    finally:
        ((_, run_id),) = recording.finish()
    assert config_of(db_path, run_id)["resumed"] is True


def double(x: int) -> int:
    time.sleep(0.002)
    return 2 * x


def test_a_torchdata_nodes_loader_records_batches_and_waits_and_says_which_fields_it_cannot_read(db_path: str):
    import torchdata.nodes as tn

    def make() -> Any:
        node = tn.ParallelMapper(tn.IterableWrapper(range(30)), map_fn=double, num_workers=2, method="thread")
        return tn.Loader(tn.Batcher(node, batch_size=3))

    plain = make()
    expected = listed(plain)
    watched = collector.watch(make(), db=db_path, gpu_hz=0, host_hz=0)
    assert listed(watched) == expected
    it = iter(watched)
    next(it)
    state = watched.state_dict()  # passes through to the Loader
    del it
    watched.load_state_dict(state)
    assert listed(watched) == expected[1:]
    watched.close()
    rows = query(
        db_path, "SELECT epoch, COUNT(*), COUNT(wait_s), COUNT(worker_id), COUNT(ready) FROM batches GROUP BY epoch"
    )
    assert rows == [(0, 10, 10, 0, 0), (1, 1, 1, 0, 0), (2, 9, 9, 0, 0)]
    (warnings,) = query(db_path, "SELECT warnings FROM runs")[0]
    assert "queue depth (ready, in_flight) and worker fields" in warnings
    assert "epoch 2 resumed mid-epoch from a saved state_dict" in warnings


class Shards(IterableDataset[torch.Tensor]):
    """A webdataset-style stream: shards split by worker id, each read sample by sample (a ``decode_s`` each)."""

    def __init__(self, shards: int, per_shard: int, decode_s: float = 0.001) -> None:
        self.shards, self.per_shard, self.decode_s = shards, per_shard, decode_s

    def __iter__(self) -> Iterator[torch.Tensor]:
        info = get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        for shard in range(worker, self.shards, workers):  # this worker's shards, as webdataset's split_by_worker
            for i in range(self.per_shard):
                time.sleep(self.decode_s)
                yield torch.tensor([float(shard * 100 + i)])


def test_a_sharded_streaming_dataset_with_workers_records_every_batch_with_its_worker(db_path: str) -> None:
    def make() -> DataLoader:  # type: ignore[type-arg]
        return DataLoader(Shards(4, 8), batch_size=4, num_workers=2)

    expected = listed(make())
    watched = collector.watch(make(), db=db_path, gpu_hz=0, host_hz=0)
    assert listed(watched) == expected
    watched.close()
    assert query(db_path, PER_WORKER, (1,)) == [(8, 8, 8, 8, 2)]
    assert config_of(db_path, 1)["iterable_dataset"] is True
