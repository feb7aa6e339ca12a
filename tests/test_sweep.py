"""The sweep on real loaders of known cost (tests/scripts/sweep_factories.py), recorded in real SQLite files.

The storage serves two reads at a time, each 5 ms of sleep (no CPU), so on any
machine: 0 or 1 worker ~200 samples/s, 2 or more ~400. A 30 ms step per batch of
4 needs ~133 samples/s, which one worker already delivers. Margins are 2x.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from helpers import query

from collector.store.reader import Reader
from collector.sweep.grid import Grid, from_row, sweep_setting
from collector.sweep.loop import SweepConfig, SweepResult, run_sweep
from collector.sweep.trial import TrialSpec, run_trial

sys.path.insert(0, str(Path(__file__).parent / "scripts"))
import sweep_factories

GRID = Grid(workers=(0, 1, 2, 4, 8), prefetch=(2, 4), persistent_workers=(False,))
TRIAL_S = 0.6


def sweep(db: str, factory=sweep_factories.make_capped, grid: Grid = GRID, **kwargs) -> SweepResult:  # type: ignore[no-untyped-def]
    return run_sweep(factory, SweepConfig(db=db, grid=grid, trial_s=TRIAL_S, budget_s=60.0, **kwargs))


@pytest.fixture(scope="module")
def unpaced(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, SweepResult]:
    db = str(tmp_path_factory.mktemp("sweep") / "sweep.sqlite")
    return db, sweep(db)


@pytest.mark.slow
def test_sweep_lands_within_10pct_of_the_grid_best_while_trying_fewer_settings(
    unpaced: tuple[str, SweepResult], tmp_path: Path
) -> None:
    _, adaptive = unpaced
    full = sweep(str(tmp_path / "full.sqlite"), full_grid=True)
    assert len(full.trials) == full.grid_size == 9
    assert len(adaptive.trials) < full.grid_size
    assert adaptive.chosen is not None
    chosen = adaptive.chosen.setting
    assert chosen.num_workers >= 2  # fewer cannot use both of the storage's readers
    measured = {t.setting: t.samples_per_s or 0.0 for t in full.trials}
    # A 0.6 s trial can read up to ~10% high (batches prefetched before its
    # window opened), and the highest of nine such trials is the luckiest one
    # (a quiet CI run read 359/s beside 319/s for two settings alike): the
    # grid's best is its second highest, and no setting truly beats the
    # storage's cap.
    cap = sweep_factories.READERS / sweep_factories.SAMPLE_S
    assert measured[chosen] >= 0.9 * min(sorted(measured.values())[-2], cap)


@pytest.mark.slow
def test_every_trial_is_a_run_tagged_with_its_sweep_and_exactly_one_is_chosen(unpaced: tuple[str, SweepResult]) -> None:
    db, result = unpaced
    rows = query(db, "SELECT id, status, tags FROM runs ORDER BY id")
    tags = [json.loads(t) for _, _, t in rows]
    assert [t["sweep"] for t in tags] == [result.sweep_id] * len(result.trials)
    assert [from_row(t["trial"], threads=GRID.threads) for t in tags] == [t.setting for t in result.trials]
    assert all(status == "completed" for _, status, _ in rows)
    assert all(t["result"]["samples_per_s"] > 0 for t in tags)
    chosen = [row_id for (row_id, _, _), t in zip(rows, tags, strict=True) if t.get("chosen")]
    assert chosen == [result.chosen.run_id]  # type: ignore[union-attr]
    batches = query(db, "SELECT run_id, COUNT(*) FROM batches GROUP BY run_id")
    assert len(batches) == len(result.trials) and all(n > 10 for _, n in batches)


def test_trials_with_workers_record_their_memory(unpaced: tuple[str, SweepResult]) -> None:
    _, result = unpaced
    with_workers = [t for t in result.trials if t.setting.num_workers >= 2]
    assert with_workers
    for trial in with_workers:
        assert trial.peak_rss_bytes is not None and trial.worker_rss_bytes is not None
        assert trial.peak_rss_bytes > trial.worker_rss_bytes


@pytest.mark.slow
def test_paced_sweep_picks_fewer_workers_than_the_unpaced_one(unpaced: tuple[str, SweepResult], tmp_path: Path) -> None:
    _, fast = unpaced
    paced = sweep(str(tmp_path / "paced.sqlite"), step_s=0.030)
    assert paced.paced and paced.chosen is not None and fast.chosen is not None
    assert paced.chosen.setting.num_workers < fast.chosen.setting.num_workers
    assert paced.chosen.setting.num_workers == 1
    assert (paced.chosen.wait_share or 1.0) < 0.10  # it does keep the model fed


@pytest.mark.slow
def test_a_factory_that_raises_for_one_setting_is_reported_and_the_sweep_goes_on(tmp_path: Path) -> None:
    db = str(tmp_path / "fail.sqlite")
    grid = Grid(workers=(1, 2), prefetch=(2, 4), persistent_workers=(False,))
    result = sweep(db, sweep_factories.make_failing_prefetch4, grid)
    failed = [t for t in result.trials if t.error is not None]
    assert [t.setting.prefetch_factor for t in failed] == [4]
    assert "prefetch_factor=4" in (failed[0].error or "")
    assert result.chosen is not None and result.chosen.setting.prefetch_factor == 2
    status, error = query(db, "SELECT status, error FROM runs WHERE id = ?", (failed[0].run_id,))[0]
    assert status == "crashed" and "prefetch_factor=4" in error


@pytest.mark.slow
def test_worker_start_up_and_warm_up_stay_out_of_throughput(tmp_path: Path) -> None:
    db = str(tmp_path / "slowstart.sqlite")
    trial = run_trial(
        sweep_factories.make_slow_start,
        sweep_setting(2, 2, threads=1),
        TrialSpec(db=db, name="slow start", tags={}, trial_s=0.8),
    )
    assert trial.error is None
    assert trial.startup_s is not None and trial.startup_s >= 0.45
    assert trial.warmup_batches >= 5
    # Steady state is ~400 samples/s; counting the 0.5 s start-up would give under 250.
    assert (trial.samples_per_s or 0.0) > 300
    epochs = Reader(db).epochs(trial.run_id)  # type: ignore[arg-type]
    assert float(epochs["first_batch_s"].iloc[0]) >= 0.45  # the collector measured the start-up too


def test_a_trial_leaves_no_worker_processes_behind(tmp_path: Path) -> None:
    import multiprocessing

    before = {p.pid for p in multiprocessing.active_children()}
    trial = run_trial(
        sweep_factories.make_capped,
        sweep_setting(2, 2, persistent_workers=True, threads=1),
        TrialSpec(db=str(tmp_path / "w.sqlite"), name="t", tags={}, trial_s=0.3),
    )
    assert trial.error is None
    assert {p.pid for p in multiprocessing.active_children()} <= before
