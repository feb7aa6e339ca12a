"""One prediction path: every speed-up is epoch time before / after, one recommendation, and honest ranges."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from diagnosis_fixtures import write_synthetic
from helpers import REPO
from test_diagnosis_rules import CASES

from collector.diagnosis import diagnose
from collector.diagnosis.build import build_model
from collector.diagnosis.calibration import C, override, table
from collector.diagnosis.data import load_run
from collector.diagnosis.stats import measure
from collector.diagnosis.text import render

RECOMMENDED = ["io-bound workers, too few", "workers restart every epoch", "bursts empty a shallow queue"]


def recorded(tmp_path: Path, case: str) -> str:
    path = str(tmp_path / "run.sqlite")
    write_synthetic(path, CASES[case][0])
    return path


@pytest.mark.parametrize("case", RECOMMENDED)
def test_the_recommendations_speedup_is_the_models_epoch_time_before_over_after(tmp_path: Path, case: str) -> None:
    path = recorded(tmp_path, case)
    report = diagnose(path)
    rec = report.recommendation
    assert rec is not None
    model = build_model(measure(load_run(path)))
    assert model is not None
    fields = {"torch.set_num_threads": "threads"}
    setting = model.recorded.but(**{fields.get(k, k): v for k, v in rec.changes.items() if k not in rec.unpriced})
    assert rec.expected_speedup == pytest.approx(model.epoch_s(model.recorded) / model.epoch_s(setting), abs=0.006)


@pytest.mark.parametrize("case", RECOMMENDED)
def test_the_paste_line_holds_exactly_the_recommended_changes(tmp_path: Path, case: str) -> None:
    report = diagnose(recorded(tmp_path, case))
    rec = report.recommendation
    assert rec is not None
    line = report.code_change()
    assert line is not None
    written = dict(re.findall(r"(\w+)=([^,)]+)", line.split("DataLoader(..., ")[-1]))
    loader_changes = {k: repr(v) for k, v in rec.changes.items() if k != "torch.set_num_threads"}
    assert written == loader_changes
    assert ("torch.set_num_threads(" in line) is ("torch.set_num_threads" in rec.changes)


def test_each_change_of_the_recommendation_is_priced_alone_and_the_whole_at_least_as_high(tmp_path: Path) -> None:
    report = diagnose(recorded(tmp_path, "bursts empty a shallow queue"))
    rec = report.recommendation
    assert rec is not None and len(rec.changes) - len(rec.unpriced) >= 2
    priced = [s for s in report.suggestions if s.expected_speedup is not None]
    assert {s.parameter for s in priced} == set(rec.changes) - set(rec.unpriced)
    assert all(s.expected_speedup <= rec.expected_speedup + 0.01 for s in priced)


@pytest.mark.parametrize("case", RECOMMENDED)
def test_every_prediction_carries_a_range_around_it(tmp_path: Path, case: str) -> None:
    report = diagnose(recorded(tmp_path, case))
    rec = report.recommendation
    assert rec is not None
    low, high = rec.expected_speedup_range
    assert low < rec.expected_speedup < high
    assert high / low >= C.MODEL_HIGH / C.MODEL_LOW - 0.02  # at least the model's own measured error
    for s in report.suggestions:
        if s.expected_speedup is not None:
            assert s.expected_speedup_range is not None
            assert s.expected_speedup_range[0] < s.expected_speedup < s.expected_speedup_range[1]
    for a in rec.alternatives:
        assert a.expected_speedup_range[0] < a.expected_speedup < a.expected_speedup_range[1]
    data = json.loads(json.dumps(report.to_dict()))
    assert data["recommendation"]["expected_speedup_range"] == [low, high]
    assert data["recommendation"]["code_change"] == report.code_change()


def test_a_range_that_includes_no_gain_says_try_it_for_an_epoch(tmp_path: Path) -> None:
    path = recorded(tmp_path, "io-bound workers, too few")
    sure = diagnose(path)
    assert sure.recommendation is not None and not sure.recommendation.uncertain
    assert "try it for an epoch" not in render(sure).split("each change:")[0]
    with override(MODEL_LOW=0.3, MODEL_HIGH=sure.recommendation.expected_speedup * 1.2):
        doubtful = diagnose(path)
    assert doubtful.recommendation is not None and doubtful.recommendation.uncertain
    assert "uncertain on this machine: try it for an epoch" in render(doubtful)


def test_the_run_s_own_spread_widens_its_ranges(tmp_path: Path) -> None:
    steady = build_model(measure(load_run(recorded(tmp_path, "io-bound workers, too few"))))
    assert steady is not None
    from collector.diagnosis.choose import predict

    setting = steady.recorded.but(num_workers=6)
    narrow = predict(steady, setting)
    import dataclasses

    wide = predict(dataclasses.replace(steady, spread=0.2), setting)
    assert wide.speedup == narrow.speedup
    assert wide.low < narrow.low and wide.high > narrow.high


def test_the_docs_list_every_calibration_constant_with_its_value() -> None:
    text = (REPO / "docs" / "report.md").read_text()
    for constant in table():
        assert f"| `{constant.name}` | {constant.value:g} | {constant.unit} |" in text, constant.name
        assert constant.measured


def test_an_override_sets_values_for_one_evaluation_only() -> None:
    before = C.PARALLEL_SHARE
    with override(PARALLEL_SHARE=0.5):
        assert C.PARALLEL_SHARE == 0.5
    assert before == C.PARALLEL_SHARE
    with pytest.raises(KeyError), override(NOT_A_CONSTANT=1.0):
        pass
