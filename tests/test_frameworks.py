"""Inside Lightning, the Hugging Face Trainer and DDP: identical training, every rank recorded, readable runs.

Each script prints a RESULT line per mode and rank (its final loss, a hash of
every weight, the items it trained on); the tests run it without stallwatch,
with ``watch()``, with the callbacks and under ``collector run``, in one
process and on 2 ranks (gloo), and compare. Tiny models from a config, CPU only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import query

from collector.store.reader import Reader

SCRIPTS = Path(__file__).parent / "scripts"
ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def run(args: list[str], cwd: Path) -> tuple[dict[tuple[str, int], dict[str, Any]], str]:
    """Run a command; ({(mode, rank): result}, stderr)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(SCRIPTS)]), "OMP_NUM_THREADS": "1"}
    env.pop("STALLWATCH_JOB_STARTED", None)
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=cwd, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    results = {}
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            r = json.loads(line[len("RESULT ") :])
            results[(r["mode"], r["rank"])] = r
    return results, done.stderr


def collector_run(db: Path, *script: str) -> list[str]:
    return [sys.executable, "-m", "collector", "run", "--db", str(db), "--gpu-hz", "0", "--host-hz", "0", *script]


def same_training(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return (a["loss"], a["weights"], a["seen"]) == (b["loss"], b["weights"], b["seen"])


def runs(db: Path) -> list[dict[str, Any]]:
    """The runs, oldest first, names without the script's folder (``fw_plain.py:36``)."""
    rows = Reader(str(db)).runs().sort_values("id").to_dict("records")
    return [{**r, "name": os.path.basename(r["name"])} for r in rows]


def batches(db: Path, run_id: int) -> int:
    return int(query(str(db), "SELECT COUNT(*) FROM batches WHERE run_id = ?", (run_id,))[0][0])


def assert_shards(results: dict[tuple[str, int], dict[str, Any]], mode: str, items: int) -> None:
    """On 2 ranks each trains on its half of the items every epoch: together, each item twice in 2 epochs."""
    seen0, seen1 = results[(mode, 0)]["seen"], results[(mode, 1)]["seen"]
    assert len(seen0) == len(seen1) == items
    assert sorted(seen0 + seen1) == sorted(list(range(items)) * 2)


@pytest.mark.parametrize("world", [1, 2])
def test_a_plain_ddp_loop_trains_identically_watched_and_under_collector_run(tmp_path: Path, world: int) -> None:
    options = ["cost_ms=1", "slow_rank=1", "items=192"] if world == 2 else ["items=64"]
    watched_db, run_db = tmp_path / "watch.sqlite", tmp_path / "run.sqlite"
    script = [str(SCRIPTS / "fw_plain.py"), str(watched_db), str(world), "none,watch", *options]
    plain, _ = run([sys.executable, *script], tmp_path)
    under, stderr = run(
        collector_run(run_db, str(SCRIPTS / "fw_plain.py"), str(run_db), str(world), "none", *options), tmp_path
    )
    for rank in range(world):
        assert same_training(plain[("none", rank)], plain[("watch", rank)])
        assert same_training(plain[("none", rank)], under[("none", rank)])
    recorded = runs(run_db)  # torch.multiprocessing.spawn children, recorded through collector run
    assert sorted(r["rank"] if world > 1 else 0 for r in recorded) == list(range(world))
    assert all(r["name"] == "fw_plain.py:36" for r in recorded)
    if world == 2:
        assert_shards(plain, "none", 192)
        assert len({r["job_id"] for r in recorded}) == 1 and recorded[0]["job_id"].startswith("127.0.0.1:")
        assert [batches(run_db, r["id"]) for r in recorded] == [48, 48]
        # one job verdict, from the launcher, naming the rank whose items cost 3x
        assert stderr.count("stallwatch: 1 DataLoader(s) recorded") == 1
        assert "job of 2 ranks: input-bound, held back by rank 1" in stderr
        assert "waiting at the collective for rank 1, not computing" in stderr
        watched = runs(watched_db)
        assert sorted((r["name"], r["rank"]) for r in watched) == [("plain-train", 0), ("plain-train", 1)]


@pytest.mark.parametrize("world", [1, 2])
def test_lightning_trains_identically_with_watch_in_a_datamodule_the_callback_and_collector_run(
    tmp_path: Path, world: int
) -> None:
    db, run_db = tmp_path / "lightning.sqlite", tmp_path / "run.sqlite"
    script = str(SCRIPTS / "fw_lightning.py")
    plain, stderr = run([sys.executable, script, str(db), str(world), "none,watch,callback", "full"], tmp_path)
    under, run_stderr = run(collector_run(run_db, script, str(run_db), str(world), "none", "full"), tmp_path)
    for rank in range(world):
        for other in (plain[("watch", rank)], plain[("callback", rank)], under[("none", rank)]):
            assert same_training(plain[("none", rank)], other)
    per_rank = 16 // world  # 64 items, batch 4, 2 epochs
    if world == 2:
        assert_shards(plain, "watch", 64)  # the watched loader got Lightning's DistributedSampler
    recorded = runs(db)
    watched = [r for r in recorded if r["name"] == "dm-train"]
    assert sorted(r["rank"] or 0 for r in watched) == list(range(world))
    assert all(batches(db, r["id"]) == per_rank * 2 for r in watched)
    by_callback = [r for r in recorded if r["tags"].get("callback") == "lightning"]
    names = ["fw_lightning.py:57 train", "fw_lightning.py:61 val", "fw_lightning.py:61 val"]
    names += ["fw_lightning.py:64 test", "fw_lightning.py:67 predict"]  # fit (train, val), validate, test, predict
    assert sorted((r["name"], r["stage"], r["rank"] or 0) for r in by_callback) == sorted(
        (name, name.rsplit(" ", 1)[1], rank) for name in names for rank in range(world)
    )
    assert stderr.count("DataLoader(s) recorded") == 4  # rank 0 prints the job's verdict once per trainer call
    # collector run: fit, validate, test and predict, every rank, named after the DataModule's lines
    stages = sorted((r["name"], r["rank"] or 0) for r in runs(run_db))
    assert stages == sorted((name, rank) for name in names for rank in range(world))
    assert run_stderr.count("DataLoader(s) recorded") == 1
    assert f"details: python -m collector report {run_db} --run" in run_stderr


@pytest.mark.parametrize("world", [1, 2])
def test_the_hugging_face_trainer_trains_identically_with_the_callback_and_collector_run(
    tmp_path: Path, world: int
) -> None:
    db, run_db = tmp_path / "hf.sqlite", tmp_path / "run" / "hf.sqlite"
    run_db.parent.mkdir()
    script = str(SCRIPTS / "fw_hf.py")
    launch = (
        [sys.executable] if world == 1 else [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    )
    workers = ["workers=2"] if world == 1 else []  # with workers, the DataLoader inside accelerate's shard is timed
    plain, stderr = run([*launch, script, str(tmp_path), "none,callback", "full", *workers], tmp_path)
    under_cmd = collector_run(run_db, script, str(run_db.parent), "none", *workers)
    if world == 2:
        under_cmd = [*launch, *under_cmd[1:]]  # torchrun -m collector run ...
    under, run_stderr = run(under_cmd, tmp_path)
    for rank in range(world):
        assert ("none", rank) in under, f"no result line from rank {rank}: {sorted(under)}\n{run_stderr[-3000:]}"
        assert same_training(plain[("none", rank)], plain[("callback", rank)])
        assert same_training(plain[("none", rank)], under[("none", rank)])
    if world == 2:
        assert_shards(plain, "none", 64)
    recorded = runs(db)
    assert sorted((r["name"], r["stage"], r["rank"] or 0) for r in recorded) == sorted(
        (f"fw_hf.py:{line} {stage}", stage, rank)
        for line, stage in ((68, "train"), (70, "val"), (71, "predict"))
        for rank in range(world)
    )
    assert all(r["tags"].get("framework") == "hf" for r in recorded)
    if world == 1:
        fields = query(str(db), "SELECT COUNT(worker_id), COUNT(ready), COUNT(*) FROM batches WHERE run_id = 1")
        assert fields[0][0] == fields[0][1] == fields[0][2] == 32
    else:
        assert len({r["job_id"] for r in recorded}) == 1
    assert "train (run" in stderr
    under_runs = runs(run_db)
    assert sorted(r["rank"] or 0 for r in under_runs) == list(range(world))
    assert run_stderr.count("DataLoader(s) recorded") == 1  # one verdict: rank 0's, for the job


def test_watching_an_accelerate_shard_trains_the_same_and_the_run_says_why_worker_fields_are_missing(
    db_path: str, collector_warnings: list[Any]
) -> None:
    from accelerate.data_loader import DataLoaderShard

    import collector

    expected = [b.tolist() for b in DataLoaderShard(list(range(8)), batch_size=2)]
    watched = collector.watch(DataLoaderShard(list(range(8)), batch_size=2), db=db_path, gpu_hz=0, host_hz=0)
    assert [b.tolist() for b in watched] == expected
    watched.close()
    (warning,) = Reader(db_path).run("latest")["warnings"]
    assert "worker and queue fields are not recorded" in warning and "collector.hf.StallwatchCallback" in warning
