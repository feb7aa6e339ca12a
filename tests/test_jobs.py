"""Distributed jobs: the id every rank computes alike, the straggler named from the ranks' tables, report per job and rank."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from diagnosis_fixtures import Synthetic, write_synthetic

from collector.cli import main
from collector.diagnosis import diagnose_job
from collector.errors import UnknownRun
from collector.record.runinfo import JOB_STARTED_ENV, job_id, job_start
from collector.verdict.printing import verdict_lines

N = 200
JOB = "127.0.0.1:29500@1700000000"


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, None),
        ({"TORCHELASTIC_RUN_ID": "3f2c"}, "3f2c"),
        ({"TORCHELASTIC_RUN_ID": "none", "MASTER_ADDR": "h", "MASTER_PORT": "1", JOB_STARTED_ENV: "9"}, "h:1@9"),
        (
            {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", JOB_STARTED_ENV: "1700000000"},
            "10.0.0.1:29500@1700000000",
        ),
        ({"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}, "10.0.0.1:29500@1234"),  # the launcher's start time
    ],
)
def test_job_id_comes_from_the_launchers_environment(environ: dict[str, str], expected: str | None) -> None:
    assert job_id(environ, launcher_started_at=lambda: 1234.4) == expected


def test_the_job_start_is_exported_by_the_launcher_and_never_by_a_rank() -> None:
    assert set(job_start({})) == {JOB_STARTED_ENV}
    assert job_start({JOB_STARTED_ENV: "5"}) == {}  # inherited: the same for every rank
    assert job_start({"MASTER_PORT": "29500"}) == {} and job_start({"RANK": "1"}) == {}


def ranks(
    path: str, stall_by_rank: dict[int, float], step_by_rank: dict[int, float], name: str = "train.py:41 train"
) -> list[int]:
    """A 2-rank job: each rank waits stall x (wait + step) for data; ids in rank order."""
    ids = []
    for rank, stall in stall_by_rank.items():
        step = step_by_rank[rank]
        wait = stall * step / (1 - stall)
        spec = Synthetic(
            wait_s=np.full(N, wait), step_s=step, rank=rank, world_size=2, job_id=JOB, stage="train", name=name
        )
        ids.append(write_synthetic(path, spec))
    return ids


def test_the_rank_whose_data_wait_holds_the_others_back_is_named_and_sets_the_jobs_verdict(tmp_path: Path) -> None:
    path = str(tmp_path / "job.sqlite")
    # rank 1's items cost 3x: it waits for data; rank 0 finishes its batch sooner and waits in all-reduce
    ranks(path, {0: 0.10, 1: 0.60}, {0: 0.030, 1: 0.010})
    report = diagnose_job(path, "train.py:41 train")
    assert [r["rank"] for r in report.ranks] == [0, 1]
    assert [r["straggler"] for r in report.ranks] == [False, True]
    assert report.verdict == "input-bound"  # rank 1's, though rank 0 alone reads partly-input-bound
    assert report.run["rank"] == 1
    straggler = report.symptoms[0]
    assert straggler.id == "straggler_rank" and straggler.metrics["rank"] == 1
    assert straggler.metrics["collective_wait_s"] == pytest.approx(0.020, abs=0.002)
    assert "waiting at the collective for rank 1, not computing" in straggler.evidence
    assert report.ranks[0]["collective_wait_s"] == pytest.approx(0.020, abs=0.002)
    assert report.to_dict()["ranks"][1]["verdict"] == "input-bound"


def test_balanced_ranks_name_no_straggler(tmp_path: Path) -> None:
    path = str(tmp_path / "job.sqlite")
    ranks(path, {0: 0.30, 1: 0.32}, {0: 0.010, 1: 0.010})
    report = diagnose_job(path)
    assert len(report.ranks) == 2 and not any(r["straggler"] for r in report.ranks)
    assert all(s.id != "straggler_rank" for s in report.symptoms)
    assert "none holding the others back" in report.notes[0]


def test_each_loader_of_a_job_pairs_with_the_same_loader_on_the_other_ranks(tmp_path: Path) -> None:
    path = str(tmp_path / "job.sqlite")
    train = ranks(path, {0: 0.1, 1: 0.6}, {0: 0.03, 1: 0.01})
    val = ranks(path, {0: 0.3, 1: 0.3}, {0: 0.01, 1: 0.01}, name="train.py:44 val")
    assert {r["run_id"] for r in diagnose_job(path, train[0]).ranks} == set(train)
    assert {r["run_id"] for r in diagnose_job(path, val[1]).ranks} == set(val)


def test_report_prints_every_rank_and_rank_picks_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_path / "job.sqlite")
    ids = ranks(path, {0: 0.10, 1: 0.60}, {0: 0.030, 1: 0.010})
    assert main(["report", path, "--run", "train.py:41 train"]) == 0
    text = capsys.readouterr().out
    assert "job verdict: INPUT-BOUND" in text
    assert "rank 1 (run 2): input-bound, waiting for data 60%" in text and ": the straggler" in text
    assert "of it waiting at the collective, not compute" in text

    assert main(["report", path, "--run", "train.py:41 train", "--rank", "0", "--json"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert one["run"]["id"] == ids[0] and one["run"]["rank"] == 0 and one["ranks"] == []
    assert one["verdict"] == "partly-input-bound"
    with pytest.raises(UnknownRun, match="no rank 5"):
        diagnose_job(path, ids[0], rank=5)


def test_the_closing_verdict_of_collector_run_words_each_ranks_wait_as_everywhere_else(tmp_path: Path) -> None:
    path = str(tmp_path / "job.sqlite")
    ids = ranks(path, {0: 0.10, 1: 0.60}, {0: 0.030, 1: 0.010})
    lines = verdict_lines(path, ids[1])
    assert any(line.startswith("rank 1 (run 2): input-bound, waiting for data 60%") for line in lines)
    assert not any("stalled" in line for line in lines)


def test_a_run_outside_any_job_is_diagnosed_alone(tmp_path: Path) -> None:
    path = str(tmp_path / "one.sqlite")
    write_synthetic(path, Synthetic(wait_s=np.full(N, 0.02), step_s=0.01))
    report = diagnose_job(path)
    assert report.ranks == () and report.to_dict()["ranks"] == []
    assert dataclasses.asdict(report.symptoms[0])["id"] == "input_bound"


class FakeError(Exception):
    pass


class FakeProc:
    def __init__(self, exe: str, started: float, parents: list[FakeProc] | None = None) -> None:
        self._exe, self._started, self._parents = exe, started, parents or []

    def exe(self) -> str:
        if self._exe == "denied":
            raise FakeError("access denied")
        return self._exe

    def parents(self) -> list[FakeProc]:
        return self._parents

    def create_time(self) -> float:
        return self._started


def fake_psutil(me: FakeProc) -> object:
    class Psutil:
        Error = FakeError

        @staticmethod
        def Process() -> FakeProc:
            return me

    return Psutil


def test_the_launcher_is_the_oldest_ancestor_running_the_same_python() -> None:
    from collector.sample.host import launcher_started_at

    init = FakeProc("denied", 1.0)  # a process psutil may not read ends the walk, it does not void it
    shell = FakeProc("/bin/bash", 2.0)
    launcher = FakeProc("/usr/bin/python3", 10.0)
    rank1 = FakeProc("/usr/bin/python3", 11.0, [launcher, shell, init])
    assert launcher_started_at(fake_psutil(rank1)) == 10.0  # type: ignore[arg-type]
    assert launcher_started_at(fake_psutil(FakeProc("/usr/bin/python3", 12.0, [init]))) == 12.0  # type: ignore[arg-type]
