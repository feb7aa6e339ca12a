"""The false cases of real programs: no alarm without its evidence, and a verdict where the evidence is clear."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from diagnosis_fixtures import HOST_2, Synthetic, write_synthetic
from test_diagnosis_rules import CASES

from collector.diagnosis import diagnose

GiB = 2**30
W2 = {"batch_size": 32, "num_workers": 2, "prefetch_factor": 2, "persistent_workers": True}


def report(tmp_path: Path, spec: Synthetic) -> Any:
    path = str(tmp_path / "run.sqlite")
    write_synthetic(path, spec)
    return diagnose(path)


def memory(report: Any) -> Any:
    return next((s for s in report.symptoms if s.id == "memory_pressure"), None)


def falls(start_gib: float, end_gib: float, until: float = 1.0) -> Any:
    """Available memory falling linearly from ``start_gib`` to ``end_gib`` over the run's first ``until``, then flat."""
    return lambda f: (start_gib + (end_gib - start_gib) * min(f, until) / until) * GiB


# (available memory over the run, batches of 0.1 s wait + 0.1 s step, severity or None, a note says too short)
MEMORY: dict[str, tuple[Any, int, str | None, bool]] = {
    # pytorch/examples imagenet, 16.8 s: start-up took 1.2 GiB; its slope said "gone in about 5 min"
    "a short run's start-up": (falls(8.0, 6.8, until=0.3), 80, None, True),
    "a long run whose start-up took memory, then held": (falls(8.0, 6.0, until=0.1), 400, None, False),
    "a long run that leaks to zero within what it ran": (falls(8.0, 2.5), 400, "high", False),
    "a long run that leaks, projected far past it": (falls(8.0, 7.0), 400, "low", False),
    "a short run that ran out": (falls(8.0, 0.4), 80, "high", False),
}


@pytest.mark.parametrize("case", list(MEMORY), ids=list(MEMORY))
def test_a_memory_trend_is_called_only_after_start_up_over_a_window(tmp_path: Path, case: str) -> None:
    available, n, severity, too_short = MEMORY[case]
    found = report(tmp_path, Synthetic(wait_s=np.full(n, 0.1), step_s=0.1, config=dict(W2), mem_available=available))
    symptom = memory(found)
    assert (symptom and symptom.severity) == severity
    assert any("too short to tell a trend" in note for note in found.notes) == too_short


def test_memory_that_other_programs_take_is_not_this_jobs(tmp_path: Path) -> None:
    """Available memory leaks away while the job's own (its main process's RSS, sampled) holds: another program."""
    spec = Synthetic(
        wait_s=np.full(400, 0.1), step_s=0.1, config=dict(W2), mem_available=falls(8.0, 2.5), main_cpu_pct=50.0
    )
    assert memory(report(tmp_path, spec)) is None


def test_a_short_run_projects_no_time_to_exhaustion(tmp_path: Path) -> None:
    spec = Synthetic(wait_s=np.full(80, 0.1), step_s=0.1, config=dict(W2), mem_available=falls(8.0, 6.8, until=0.3))
    found = report(tmp_path, spec)
    note = next(n for n in found.notes if "trend" in n)
    assert memory(found) is None and "no time to exhaustion" in note and " min" not in note


ROUNDS = np.where(np.arange(300) % 2 == 0, 0.356, 0.0053)  # the loop's wait falls on every other batch


@pytest.mark.parametrize(
    ("fetch_s", "imbalanced"),
    [
        (None, False),  # fetch times not recorded: the waits alone are the order, not a worker
        (0.36, False),  # identical workers, round-robin: each fetch takes as long
        (np.where(np.arange(300) % 2 == 0, 0.60, 0.20), True),  # worker 0 fetches 3x slower
    ],
    ids=["waits only", "identical fetches", "a slow worker's fetches"],
)
def test_imbalance_is_judged_from_each_workers_own_fetch_time(tmp_path: Path, fetch_s: Any, imbalanced: bool) -> None:
    host = {**HOST_2, "usable_cores": 8, "logical_cores": 8, "physical_cores": 8}
    cpu_s = None if fetch_s is None else np.asarray(fetch_s) * 0.9
    spec = Synthetic(
        wait_s=ROUNDS, step_s=0.041, config=dict(W2), host=host, ready=0, worker_wall_s=fetch_s, worker_cpu_s=cpu_s
    )
    assert ("worker_imbalance" in {s.id for s in report(tmp_path, spec).symptoms}) == imbalanced


@pytest.mark.parametrize(
    ("wait_s", "step_s"),
    [(np.full(18, 0.490), 0.041), (np.full(15, 0.74), 0.1)],
    ids=["18 batches waiting 490 ms for a 41 ms step", "a 15-batch evaluation loader waiting 88%"],
)
def test_clearly_starved_short_runs_are_named_input_bound(tmp_path: Path, wait_s: Any, step_s: float) -> None:
    found = report(tmp_path, Synthetic(wait_s=wait_s, step_s=step_s))
    assert found.verdict == "input-bound"
    assert "input_bound" in {s.id for s in found.symptoms}
    assert not any("too few" in note for note in found.notes)


@pytest.mark.parametrize(("grad_enabled", "shuffle_advised"), [(True, True), (False, False)])
def test_an_evaluation_loader_under_no_grad_is_told_no_shuffle(
    tmp_path: Path, grad_enabled: bool, shuffle_advised: bool
) -> None:
    spec = CASES["bursts empty a shallow queue"][0]  # uneven batches in dataset order
    config = {**spec.config, "shuffle": False, "grad_enabled": grad_enabled}
    found = report(tmp_path, dataclasses.replace(spec, config=config))
    assert ("shuffle=True" in (found.code_change() or "")) == shuffle_advised


@pytest.mark.parametrize(("wait_s", "step_s", "severity"), [(0.002, 0.001, "low"), (0.020, 0.010, "high")])
def test_a_loader_of_a_fraction_of_a_second_raises_no_alarm_above_low(
    tmp_path: Path, wait_s: float, step_s: float, severity: str
) -> None:
    """Lightning's BoringModel: 0.1-ms batches, 0.2 s in all; the same shares over 9 s are an alarm."""
    found = report(tmp_path, Synthetic(wait_s=np.full(300, wait_s), step_s=step_s))
    assert found.verdict == "input-bound"
    assert {s.severity for s in found.symptoms} == {severity}
    assert any("too little at stake" in note for note in found.notes) == (severity == "low")
