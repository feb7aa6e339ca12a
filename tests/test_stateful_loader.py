"""torchdata's StatefulDataLoader: saved and restored mid-epoch, the loop gets the same batches, and every run is recorded."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from fixture_datasets import SlowDataset, Stream
from helpers import query
from torchdata.stateful_dataloader import StatefulDataLoader

import collector
from collector.record.scoped import Scoped

SCRIPT = Path(__file__).parent / "scripts" / "stateful_resume.py"
# torchdata 0.11 calls torch.set_vital, which torch 2.13 deprecates: its noise, not ours
pytestmark = [
    pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning"),
    pytest.mark.slow,  # worker processes and `collector run` subprocesses: about 13 s
]
FIELDS = (  # per run and epoch: batches, worker ids, queue depths, batches joined to their worker's fetch
    "SELECT b.run_id, b.epoch, COUNT(*), COUNT(b.worker_id), COUNT(b.ready), COUNT(f.wall_s) FROM batches b"
    " LEFT JOIN worker_fetches f ON f.run_id = b.run_id AND f.worker_pid = b.worker_pid"
    " AND f.worker_incarnation = b.worker_incarnation AND f.worker_seq = b.worker_seq"
    " GROUP BY b.run_id, b.epoch ORDER BY b.run_id, b.epoch"
)


def listed(batches: Any) -> list[list[float]]:
    return [batch.flatten().tolist() for batch in batches]


def resume(
    dataset: Any, workers: int, wrap: Callable[[Any], Any]
) -> tuple[list[list[float]], dict[str, Any], list[Any]]:
    """Five batches, state_dict(), a fresh loader restored from it to the epoch's end, then one whole epoch more."""

    def make() -> StatefulDataLoader:  # type: ignore[type-arg]
        return StatefulDataLoader(
            dataset, batch_size=2, num_workers=workers, generator=torch.Generator().manual_seed(0)
        )

    first = wrap(make())
    batches = iter(first)
    head = [next(batches).flatten().tolist() for _ in range(5)]
    state = first.state_dict()
    del batches
    second = wrap(make())
    second.load_state_dict(state)
    return head + listed(second) + listed(second), state, [first, second]


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("kind", ["map-style", "iterable"])
def test_a_loader_saved_and_restored_mid_epoch_gives_the_same_batches_watched_and_every_one_is_recorded(
    kind: str, workers: int, db_path: str
) -> None:
    dataset = SlowDataset(24) if kind == "map-style" else Stream(24)
    plain, plain_state, _ = resume(dataset, workers, lambda loader: loader)
    uninterrupted = listed(StatefulDataLoader(dataset, batch_size=2, num_workers=workers))
    assert plain[:12] == uninterrupted  # the restored loader goes on where the first stopped: a real resume
    watched, state, loaders = resume(
        dataset, workers, lambda loader: collector.watch(loader, db=db_path, gpu_hz=0, host_hz=0)
    )
    for loader in loaders:
        loader.close()
    assert watched == plain
    assert state == plain_state
    every = 1 if workers else 0  # worker and queue fields exist only where workers do
    assert query(db_path, FIELDS) == [
        (1, 0, 5, 5 * every, 5 * every, 5 * every),
        (2, 0, 7, 7 * every, 7 * every, 7 * every),
        (2, 1, 12, 12 * every, 12 * every, 12 * every),  # fresh workers for the next epoch are timed too
    ]
    resumed = '["epoch 0 resumed mid-epoch from a saved state_dict"]'  # NOTE [ Resumed runs ]: a note, nothing wrong
    assert query(db_path, "SELECT warnings FROM runs") == [(None,), (resumed,)]


def test_a_stream_fast_forwarded_on_resume_keeps_its_batches_and_the_run_says_why_its_fetches_are_not_joined(
    db_path: str,
) -> None:
    dataset = Stream(24, stateful=False)  # no state of its own: torchdata draws the first five batches again in iter()
    plain, _, _ = resume(dataset, 2, lambda loader: loader)
    with pytest.warns(collector.CollectorWarning, match="inside iter"):
        watched, _, loaders = resume(
            dataset, 2, lambda loader: collector.watch(loader, db=db_path, gpu_hz=0, host_hz=0)
        )
    for loader in loaders:
        loader.close()
    assert watched == plain
    assert query(db_path, FIELDS) == [(1, 0, 5, 5, 5, 5), (2, 0, 7, 7, 7, 0), (2, 1, 12, 12, 12, 12)]
    assert query(db_path, "SELECT COUNT(worker_seq) FROM batches WHERE run_id = 2 AND epoch = 0") == [(0,)]
    (warnings,) = query(db_path, "SELECT warnings FROM runs WHERE id = 2")[0]
    assert "5 batches inside iter()" in warnings and "worker_seq is NULL" in warnings


def test_collector_run_records_each_stateful_loader_of_an_unmodified_script_with_and_without_workers(
    tmp_path: Path,
) -> None:
    db = tmp_path / "run.sqlite"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path.cwd()), os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-m", "collector", "run", "--db", str(db), "--gpu-hz", "0", "--host-hz", "0"]
    done = subprocess.run(
        [*command, "--no-verdict", str(SCRIPT), "0", "2"], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    epoch = [[float(i) for i in range(j, j + 4)] for j in range(0, 16, 4)]
    assert done.stdout.splitlines() == [f"0 {epoch}", f"2 {epoch}"]
    rows = query(
        str(db),
        "SELECT r.name, COUNT(b.idx), COUNT(b.worker_id), COUNT(b.ready), COUNT(f.wall_s) FROM runs r"
        " LEFT JOIN batches b ON b.run_id = r.id LEFT JOIN worker_fetches f ON f.run_id = b.run_id"
        " AND f.worker_pid = b.worker_pid AND f.worker_incarnation = b.worker_incarnation"
        " AND f.worker_seq = b.worker_seq GROUP BY r.id ORDER BY r.id",
    )
    assert [(name.rsplit("/", 1)[-1], *counts) for name, *counts in rows] == [
        ("stateful_resume.py:18", 2, 0, 0, 0),  # made where the script builds it, each loader its own run
        ("stateful_resume.py:22", 2, 0, 0, 0),
        ("stateful_resume.py:18", 2, 2, 2, 2),
        ("stateful_resume.py:22", 2, 2, 2, 2),
    ]


def test_the_callbacks_record_an_accelerate_stateful_shard_and_say_why_its_first_epoch_fetches_are_untimed(
    db_path: str,
) -> None:
    # Scoped is what the Lightning and Hugging Face callbacks start and stop. accelerate's shard calls the
    # StatefulDataLoader's state_dict() as it is built, which starts the first epoch's workers there, before any iter().
    from accelerate.data_loader import DataLoaderShard

    def shard() -> Any:
        return DataLoaderShard(SlowDataset(16), use_stateful_dataloader=True, batch_size=4, num_workers=2)

    plain = shard()
    expected = listed(plain) + listed(plain)
    recording = Scoped(db_path, gpu_hz=0, host_hz=0, tags={})
    recording.start()
    try:
        with pytest.warns(collector.CollectorWarning, match="outside the loop's iter"):
            loader = shard()
            assert listed(loader) + listed(loader) == expected
    finally:
        ((_, run_id),) = recording.finish()
    assert query(db_path, FIELDS) == [(run_id, 0, 4, 4, 4, 0), (run_id, 1, 4, 4, 4, 4)]
    (warnings,) = query(db_path, "SELECT warnings FROM runs")[0]
    assert "state_dict()" in warnings and "worker ids and queue depth are recorded" in warnings
