"""Each symptom fires on its own evidence and on nothing else: synthetic runs in real SQLite files."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from diagnosis_fixtures import HOST_2, T0, Synthetic, write_synthetic

from collector.diagnosis import diagnose
from collector.diagnosis.build import build_model
from collector.diagnosis.calibration import C
from collector.diagnosis.choose import candidates, choose
from collector.diagnosis.model import EpochModel, Setting
from collector.diagnosis.report_types import VERDICTS
from collector.diagnosis.verdict import verdict

GiB = 2**30
N = 300
HOST_8 = {**HOST_2, "physical_cores": 8, "logical_cores": 8, "usable_cores": 8}
WORKERS4 = {"batch_size": 32, "num_workers": 4, "prefetch_factor": 2, "persistent_workers": True, "pin_memory": True}


def every(k: int, hit: float, other: float, n: int = N) -> np.ndarray:
    return np.where(np.arange(n) % k == 0, hit, other)


def healthy_workers(**kw: object) -> Synthetic:
    base: dict[str, object] = dict(
        wait_s=np.full(N, 0.001),
        step_s=0.010,
        config=dict(WORKERS4),
        ready=3,
        worker_wall_s=0.030,
        worker_cpu_s=0.002,
        main_cpu_pct=40.0,
        worker_cpu_pct=5.0,
        host_cpu_pct=40.0,
        mem_available=lambda f: 8 * GiB,
    )
    base.update(kw)
    return Synthetic(**base)  # type: ignore[arg-type]


CASES: dict[str, tuple[Synthetic, set[str], str]] = {
    "cpu loading in the main process": (
        Synthetic(wait_s=np.full(N, 0.030), step_s=0.010, main_cpu_pct=95.0, host_cpu_pct=50.0),
        {"input_bound", "single_core_saturated"},
        "input-bound",
    ),
    "io loading in the main process": (
        Synthetic(wait_s=np.full(N, 0.030), step_s=0.010, main_cpu_pct=20.0, host_cpu_pct=10.0),
        {"input_bound", "io_bound_fetch"},
        "input-bound",
    ),
    "healthy without workers": (
        Synthetic(wait_s=np.full(N, 0.0001), step_s=0.010, main_cpu_pct=30.0, host_cpu_pct=15.0),
        set(),
        "not-input-bound",
    ),
    "healthy with workers": (healthy_workers(), set(), "not-input-bound"),
    "cpu-bound workers outnumber the cores": (
        healthy_workers(
            config={**WORKERS4, "num_workers": 8},
            worker_wall_s=0.034,
            worker_cpu_s=0.024,
            main_cpu_pct=60.0,
            worker_cpu_pct=17.0,
            host_cpu_pct=97.0,
        ),
        {"workers_exceed_cores"},
        "not-input-bound",
    ),
    "io-bound workers, too few": (
        healthy_workers(config={**WORKERS4, "num_workers": 2}, wait_s=np.full(N, 0.020), ready=0, worker_wall_s=0.060),
        {"input_bound", "io_bound_fetch"},
        "input-bound",
    ),
    "one slow worker": (
        healthy_workers(
            host=HOST_8,
            wait_s=every(4, 0.040, 0.0005),
            worker_wall_s=every(4, 0.120, 0.020),
            worker_cpu_s=every(4, 0.110, 0.018),
        ),
        {"input_bound", "worker_imbalance"},
        "input-bound",
    ),
    "bursts empty a shallow queue": (
        healthy_workers(
            wait_s=every(9, 0.060, 0.0005),
            ready=every(9, 0, 3),
            worker_wall_s=every(9, 0.150, 0.010),
            worker_cpu_s=0.001,
        ),
        {"input_bound", "prefetch_too_shallow", "io_bound_fetch"},
        "input-bound",
    ),
    "workers restart every epoch": (
        healthy_workers(
            config={**WORKERS4, "num_workers": 2, "persistent_workers": False},
            epoch_len=20,
            first_batch_s=0.5,
            ready=1,
            worker_wall_s=0.015,
        ),
        {"epoch_start_stall"},
        "input-bound",
    ),
    "pageable batches on CUDA": (
        healthy_workers(config={**WORKERS4, "pin_memory": False}, pinned=0, gpu_idle_s=0.0),
        {"pageable_memory"},
        "not-input-bound",
    ),
    "pageable batches on the CPU": (
        healthy_workers(config={**WORKERS4, "pin_memory": False}, pinned=0),
        set(),
        "not-input-bound",
    ),
    "gpu sawtooth in step with the waits": (
        Synthetic(
            wait_s=np.full(60, 0.4),
            step_s=0.4,
            config={"batch_size": 32, "num_workers": 0, "pin_memory": True},
            pinned=1,
            gpu_idle_s=0.4,
            gpu_util=lambda t: 5.0 if (t - T0) % 0.8 < 0.4 else 90.0,
        ),
        {"input_bound", "gpu_util_sawtooth"},
        "input-bound",
    ),
    "gpu sampled too coarsely for the step": (
        Synthetic(
            wait_s=np.full(N, 0.020),
            step_s=0.010,
            config={"batch_size": 32, "num_workers": 0, "pin_memory": True},
            pinned=1,
            gpu_idle_s=0.015,
            gpu_util=lambda t: 40.0,
            gpu_hz=1.0,
        ),
        {"input_bound", "gpu_util_sawtooth"},
        "input-bound",
    ),
    "available memory running out": (
        healthy_workers(mem_available=lambda f: (8 - 7.7 * f) * GiB),
        {"memory_pressure"},
        "not-input-bound",
    ),
    "workers' private memory grows (copy-on-write)": (
        healthy_workers(worker_uss=lambda f: (100 + 300 * f) * 2**20),
        {"memory_pressure"},
        "not-input-bound",
    ),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_each_scenario_gets_exactly_its_symptoms(tmp_path: Path, case: str) -> None:
    spec, expected, expected_verdict = CASES[case]
    path = str(tmp_path / "run.sqlite")
    write_synthetic(path, spec)
    report = diagnose(path)
    assert {s.id for s in report.symptoms} == expected
    assert report.verdict == expected_verdict
    for s in report.symptoms:
        assert s.severity in ("low", "medium", "high") and 0 < s.confidence <= 1
        assert any(ch.isdigit() for ch in s.evidence), s.evidence  # evidence carries numbers


@pytest.mark.parametrize(
    ("case", "parameter", "check"),
    [
        ("cpu loading in the main process", "num_workers", lambda v: 2 <= v <= 3),  # a worker a core, a spare at most
        ("io loading in the main process", "num_workers", lambda v: v >= 3),
        ("io-bound workers, too few", "num_workers", lambda v: v >= 6),
        ("cpu-bound workers outnumber the cores", "num_workers", lambda v: v <= 3),
        ("bursts empty a shallow queue", "prefetch_factor", lambda v: v == 5),
        ("workers restart every epoch", "persistent_workers", lambda v: v is True),
        ("pageable batches on CUDA", "pin_memory", lambda v: v is True),
    ],
)
def test_suggestions_name_a_concrete_value(tmp_path: Path, case: str, parameter: str, check: object) -> None:
    path = str(tmp_path / "run.sqlite")
    write_synthetic(path, CASES[case][0])
    report = diagnose(path)
    by_parameter = {s.parameter: s for s in report.suggestions}
    assert parameter in by_parameter, report.suggestions
    assert callable(check) and check(by_parameter[parameter].suggested)
    assert by_parameter[parameter].reason


@pytest.mark.parametrize("case", ["healthy without workers", "healthy with workers", "pageable batches on the CPU"])
def test_a_healthy_run_gets_no_change_and_a_not_starved_note(tmp_path: Path, case: str) -> None:
    path = str(tmp_path / "run.sqlite")
    write_synthetic(path, CASES[case][0])
    report = diagnose(path)
    assert report.suggestions == ()
    assert report.code_change() is None
    assert report.notes[0].startswith("Not starved")


def test_idle_workers_are_noted_not_suggested(tmp_path: Path) -> None:
    path = str(tmp_path / "run.sqlite")
    write_synthetic(path, healthy_workers(config={**WORKERS4, "num_workers": 8}, host=HOST_8, worker_wall_s=0.020))
    report = diagnose(path)
    assert report.suggestions == ()
    assert any(n.startswith("Workers sit idle") and "num_workers=3" in n for n in report.notes), report.notes


def test_when_all_cores_are_busy_with_cpu_loading_no_change_is_recommended_and_remedies_are_named(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "run.sqlite")
    spec = healthy_workers(
        config={**WORKERS4, "num_workers": 2},
        wait_s=np.full(N, 0.030),
        ready=0,
        worker_wall_s=0.080,
        worker_cpu_s=0.080,
        main_cpu_pct=40.0,
        worker_cpu_pct=80.0,
        host_cpu_pct=100.0,
    )
    write_synthetic(path, spec)
    report = diagnose(path)
    assert report.verdict == "input-bound"
    assert not [s for s in report.suggestions if (s.expected_speedup or 0) >= 1.1]
    note = next(n for n in report.notes if n.startswith("No change is predicted to buy 10%"))
    assert "try it for an epoch" in note and "caching decoded samples" in note and "GPU" in note


def test_num_workers_suggestion_shows_the_rule_of_thumb_beside_it(tmp_path: Path) -> None:
    path = str(tmp_path / "run.sqlite")
    spec = Synthetic(wait_s=np.full(N, 0.030), step_s=0.010, main_cpu_pct=20.0, host=HOST_8)
    write_synthetic(path, spec)
    (s,) = [s for s in diagnose(path).suggestions if s.parameter == "num_workers"]
    assert s.rule_of_thumb == 8  # min(8 physical cores, 2 * 32)
    assert s.expected_speedup is not None and s.expected_speedup > 2


def test_warm_up_does_not_fake_a_problem(tmp_path: Path) -> None:
    path = str(tmp_path / "run.sqlite")
    wait = np.full(N, 0.0005)
    wait[0] = 3.0  # workers starting: 3 s before the first batch, then never a wait
    write_synthetic(path, healthy_workers(wait_s=wait))
    report = diagnose(path)
    assert report.summary["data_wait_fraction"] > 0.4
    assert report.summary["warmup_s"] >= 3.0
    assert report.verdict == "not-input-bound"
    assert report.symptoms == ()


def test_epoch_starts_do_not_hide_a_steady_state_problem(tmp_path: Path) -> None:
    path = str(tmp_path / "run.sqlite")
    spec = healthy_workers(
        config={**WORKERS4, "num_workers": 2, "persistent_workers": False},
        epoch_len=50,
        first_batch_s=0.5,
        wait_s=np.full(N, 0.020),
        ready=0,
        worker_wall_s=0.060,
    )
    write_synthetic(path, spec)
    ids = {s.id for s in diagnose(path).symptoms}
    assert {"epoch_start_stall", "input_bound"} <= ids


SPORADIC = np.array([0, 0, 0.012, 0, 0, 0, 0.008, 0, 0, 0.001])  # 19% on average, 0%-50% over its windows


@pytest.mark.parametrize(
    ("wait_s", "step_s", "expected"),
    [
        (np.full(200, 0.004), 0.010, "input-bound"),  # 4 / (4 + 10) = 29% >= 20%
        (np.full(200, 0.002), 0.010, "partly-input-bound"),  # 17%
        (np.full(200, 0.0006), 0.010, "partly-input-bound"),  # 5.7%
        (np.full(200, 0.0004), 0.010, "not-input-bound"),  # 3.8% < 5%
        (np.full(10, 0.004), 0.010, "input-bound"),  # 10 batches, each 29%: the evidence is clear
        (np.full(18, 0.490), 0.041, "input-bound"),  # 18 batches each waiting 490 ms for a 41 ms step
        (SPORADIC, 0.010, "insufficient-data"),  # 10 batches whose range spans every threshold
        (np.full(4, 0.300), 0.040, "insufficient-data"),  # too few steady batches for a range
    ],
    ids=["29%", "17%", "5.7%", "3.8%", "10 clear", "18 starved", "10 sporadic", "4 batches"],
)
def test_verdict_thresholds(tmp_path: Path, wait_s: np.ndarray, step_s: float, expected: str) -> None:
    path = str(tmp_path / "run.sqlite")
    write_synthetic(path, Synthetic(wait_s=wait_s, step_s=step_s))
    report = diagnose(path)
    assert report.verdict == expected and report.verdict in VERDICTS


def test_verdict_thresholds_are_keyword_arguments(tmp_path: Path) -> None:
    from collector.diagnosis.data import load_run
    from collector.diagnosis.stats import measure

    path = str(tmp_path / "run.sqlite")
    write_synthetic(path, Synthetic(wait_s=np.full(100, 0.002), step_s=0.010))
    facts = measure(load_run(path))
    assert verdict(facts) == "partly-input-bound"
    assert verdict(facts, input_bound=0.10) == "input-bound"
    assert verdict(facts, partly_input_bound=0.5, input_bound=0.9) == "not-input-bound"


def two_cores(load_blocked_s: float, load_cpu_s: float, **kw: Any) -> EpochModel:
    """A 10 ms step (2 ms of CPU on one thread, 8 ms blocked, as on a GPU) on 2 idle cores, recorded without workers."""
    base: dict[str, Any] = dict(
        cores=2.0,
        background=0.0,
        step_work_s=0.002,
        step_threads=1.0,
        step_blocked_s=0.008,
        handoff_s=0.001,
        epoch_batches=1000,
        start_per_worker_s=C.START_PER_WORKER_S,
        end_per_worker_s=C.END_PER_WORKER_S,
        recorded=Setting(0, 1, None, False),
    )
    return EpochModel(load_cpu_s=load_cpu_s, load_blocked_s=load_blocked_s, **{**base, **kw})


def chosen_workers(model: EpochModel) -> int:
    chosen, _ = choose(model, candidates(model))
    return chosen.setting.num_workers


@pytest.mark.parametrize(("load_blocked_s", "least"), [(0.040, 4), (0.100, 10)])
def test_io_bound_loading_gets_workers_past_the_cores_and_headroom(load_blocked_s: float, least: int) -> None:
    """Sleeping workers take no core: as many as keep a 11 ms loop fed, and C.IO_SURPLUS more for storage's whims."""
    model = two_cores(load_blocked_s, 0.001)
    n = chosen_workers(model)
    assert n >= math.ceil(C.IO_SURPLUS * least) - 1 and n > model.cores
    assert model.cycle(model.recorded.but(num_workers=n)) == pytest.approx(0.011, rel=0.02)  # the loop is the limit


def test_more_workers_for_headroom_keep_the_picks_persistent_workers() -> None:
    """The starved demo's measured model: 64 batches an epoch, a 33 ms sleep each, an 11 ms step. 3 persistent
    workers are as fast as any but barely keep up; the workers added for headroom change only their count,
    not the persistence the fastest settings have (fresh ones start and end each epoch: 8% of it)."""
    model = two_cores(0.0332, 0.001, step_work_s=0.0008, step_blocked_s=0.0101, epoch_batches=64)
    best = max(candidates(model), key=model.speedup)
    assert best.persistent_workers and model.headroom(best.but(num_workers=3)) < C.SURPLUS
    chosen, _ = choose(model, candidates(model))
    assert chosen.setting.persistent_workers and model.headroom(chosen.setting) >= C.SURPLUS
    fresh = chosen.setting.but(persistent_workers=False)
    assert model.speedup(chosen.setting) > 1.05 * model.speedup(fresh)


def test_cpu_bound_loading_stops_at_a_worker_a_core_and_a_spare() -> None:
    model = two_cores(0.0, 0.060)
    assert max(s.num_workers for s in candidates(model)) == 2 + C.SPARE_CPU_WORKERS
    assert chosen_workers(model) <= 2 + C.SPARE_CPU_WORKERS
    assert chosen_workers(two_cores(0.0, 0.004)) == 1  # cheap: one worker keeps up, with headroom


def test_without_workers_an_epoch_is_its_batches_steps_and_loads() -> None:
    model = two_cores(0.030, 0.001)
    assert model.epoch_s(model.recorded) == pytest.approx(1000 * (0.010 + 0.030 + 0.001))


def test_the_closed_form_is_the_same_model_where_no_wait_for_a_core_was_measured(tmp_path: Path) -> None:
    """A run without schedstat (an older file, another OS) still gets the one model, with no wait for a core."""
    from collector.diagnosis.data import load_run
    from collector.diagnosis.stats import measure

    path = str(tmp_path / "run.sqlite")
    write_synthetic(path, Synthetic(wait_s=np.full(N, 0.030), step_s=0.010, load_cpu_s=np.full(N, 0.025)))
    facts = measure(load_run(path))
    assert facts.load_runq_s is None
    model = build_model(facts)
    assert isinstance(model, EpochModel)
    assert model.load_cpu_s == pytest.approx(0.025, rel=0.01) and model.load_blocked_s == pytest.approx(
        0.005, abs=0.001
    )
    assert model.cycle(model.recorded) == pytest.approx(facts.cycle_s, rel=0.05)


def test_next_cpu_time_replaces_the_estimate_without_workers(tmp_path: Path) -> None:
    """load_cpu_s says how much of the wait was decoding: here 25 of 30 ms, whatever the process CPU suggests."""
    from collector.diagnosis.data import load_run
    from collector.diagnosis.stats import measure

    path = str(tmp_path / "run.sqlite")
    load_cpu = np.where(np.arange(N) % 2 == 0, 0.025, np.nan)  # every other batch sampled
    write_synthetic(path, Synthetic(wait_s=np.full(N, 0.030), step_s=0.010, main_cpu_pct=30.0, load_cpu_s=load_cpu))
    facts = measure(load_run(path))
    assert facts.load_cpu_known
    assert facts.load_cpu_s == pytest.approx(0.025, rel=0.01)
    assert facts.load_cpu_upper == pytest.approx(0.025 / 0.030, rel=0.01)
    unsampled = str(tmp_path / "estimate.sqlite")
    write_synthetic(unsampled, Synthetic(wait_s=np.full(N, 0.030), step_s=0.010, main_cpu_pct=30.0))
    estimated = measure(load_run(unsampled))
    assert not estimated.load_cpu_known and estimated.load_cpu_s is not None
    assert estimated.load_cpu_s < 0.025  # 30% of a core cannot cover 25 of every 40 ms


def test_model_respects_the_memory_cap() -> None:
    assert chosen_workers(two_cores(0.100, 0.001, max_workers=3)) == 3


@pytest.mark.parametrize(("shuffle", "suggested"), [(False, True), (True, False), (None, False)])
def test_uneven_batches_in_dataset_order_suggest_shuffle(tmp_path: Path, shuffle: bool | None, suggested: bool) -> None:
    path = str(tmp_path / "run.sqlite")
    spec = CASES["bursts empty a shallow queue"][0]
    spec = dataclasses.replace(spec, config={**spec.config, "shuffle": shuffle})
    write_synthetic(path, spec)
    parameters = {s.parameter for s in diagnose(path).suggestions}
    assert ("shuffle" in parameters) is suggested
    assert "prefetch_factor" in parameters


def test_io_bound_evidence_names_the_disk_rate(tmp_path: Path) -> None:
    path = str(tmp_path / "run.sqlite")
    write_synthetic(path, CASES["io loading in the main process"][0])
    import sqlite3

    conn = sqlite3.connect(path)
    conn.execute("UPDATE host_samples SET disk_read_bps = 52428800")
    conn.commit()
    conn.close()
    (s,) = [s for s in diagnose(path).symptoms if s.id == "io_bound_fetch"]
    assert "50.0 MiB/s" in s.evidence


def test_a_deeper_queue_is_suggested_only_where_the_model_says_it_pays(tmp_path: Path) -> None:
    """The symptom stands either way; the suggestion needs min_speedup, as every other one does."""
    from collector.diagnosis.data import load_run
    from collector.diagnosis.stats import measure
    from collector.diagnosis.suggest import suggest

    path = str(tmp_path / "run.sqlite")
    write_synthetic(path, CASES["bursts empty a shallow queue"][0])
    report = diagnose(path)
    deeper = next(s for s in report.suggestions if s.parameter == "prefetch_factor")
    assert deeper.expected_speedup is not None and deeper.expected_speedup >= 1.1
    facts = measure(load_run(path))
    symptoms = {s.id: s for s in report.symptoms}
    assert "prefetch_too_shallow" in symptoms
    assert report.recommendation is not None and "prefetch_factor" in report.recommendation.changes
    beyond = 2 * report.recommendation.expected_speedup  # a bar no setting reaches
    advice = suggest(facts, build_model(facts), symptoms, min_speedup=beyond)
    assert advice.recommendation is None
    assert "prefetch_factor" not in {s.parameter for s in advice.suggestions}
