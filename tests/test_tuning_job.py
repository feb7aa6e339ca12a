"""A job's loaders tuned together: one trial at a time, one owner of torch's threads, a few-batch loader left alone."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest
import torch
from fixture_datasets import SlowDataset
from torch.utils.data import DataLoader

from collector import watch
from collector.record import tuning
from collector.record.tuning_job import Entry, job_line
from collector.tune.answers import Proposal
from collector.tune.job import worth_tuning
from collector.tune.policy import Setting

EPOCHS = 6


class Proposing:
    """The tuner's helper, faked: once asked, offers ``change`` against the setting it was asked about, 10x."""

    pid = None

    def __init__(self, **change: Any) -> None:
        self.change = change
        self.current: Setting | None = None

    def poll(self) -> Proposal | None:
        if self.current is None:
            return None
        return Proposal(self.current, self.current.but(**self.change), 10.0, 8.0, 12.0)

    def ask(self, db: str, run_id: int, epoch: Any, current: Setting, *args: Any, **kwargs: Any) -> None:
        self.current = current

    def close(self) -> None:
        pass


@pytest.fixture
def threads_back():
    threads = torch.get_num_threads()
    yield threads
    torch.set_num_threads(threads)


def job(db: str, eval_batches: int, **change: Any) -> dict[str, list[dict[str, Any]]]:
    """A training loader (12 batches) and an evaluation loader, both watched with tune=True, EPOCHS epochs."""
    train = DataLoader(SlowDataset(48, 0.01), batch_size=4)  # I/O-like: 2 workers make it about twice as fast
    val = DataLoader(SlowDataset(4 * eval_batches, 0.01), batch_size=4)
    with watch(train, db=db, run="train", tune=True) as t, watch(val, db=db, run="val", tune=True) as v:
        for _ in range(EPOCHS):
            for _ in t:
                pass
            for _ in v:
                pass
    with sqlite3.connect(db) as conn:
        query = (
            "SELECT r.name, e.epoch, e.setting, e.started_at, e.ended_at FROM epochs e JOIN runs r ON r.id = e.run_id"
            " ORDER BY r.name, e.epoch"
        )
        out: dict[str, list[dict[str, Any]]] = {}
        for name, epoch, setting, started, ended in conn.execute(query):
            out.setdefault(name, []).append(
                {"epoch": epoch, "setting": json.loads(setting) if setting else None, "at": (started, ended)}
            )
        out["warnings"] = [
            {"run": name, "warnings": warnings} for name, warnings in conn.execute("SELECT name, warnings FROM runs")
        ]
        out["trials"] = [
            {"run": name, "epoch": epoch, "kept": kept}
            for name, epoch, kept in conn.execute(
                "SELECT r.name, t.epoch, t.kept FROM trials t JOIN runs r ON r.id = t.run_id ORDER BY t.rowid"
            )
        ]
    return out


@pytest.mark.slow
def test_a_few_batch_evaluation_loader_is_left_alone_and_never_sets_the_threads_the_training_loader_tuned(
    db_path, monkeypatch, capsys, threads_back
):
    if threads_back < 2:
        pytest.skip("needs 2 intra-op threads to take one away")  # never on CI's 2 cores
    monkeypatch.setattr(tuning, "Advisor", lambda: Proposing(num_workers=2, persistent_workers=True, threads=1))
    rows = job(db_path, eval_batches=3)
    assert {t["run"] for t in rows["trials"]} == {"train"}  # the evaluation loader tried nothing
    kept = [t for t in rows["trials"] if t["kept"]]
    assert kept, rows["trials"]
    after = [e for e in rows["val"] if e["at"][0] > rows["train"][kept[0]["epoch"]]["at"][1]]
    assert after and all(e["setting"]["threads"] == 1 for e in after)  # stored as in force: the train loader's 1
    assert all(e["setting"]["num_workers"] == 0 for e in rows["val"])
    assert torch.get_num_threads() == 1  # the evaluation loader never put its own 2 back
    err = capsys.readouterr().err
    assert "stallwatch left val (test_tuning_job.py:" in err and "3 batches are too short" in err
    assert "stallwatch tuned train (test_tuning_job.py:" in err and "num_workers 0 -> 2" in err
    assert "stallwatch tuned the job: " in err and "over 2 loaders" in err
    (val_warnings,) = [w["warnings"] for w in rows["warnings"] if w["run"] == "val"]
    assert "live tuning left this loader at its setting" in val_warnings  # the note, stored with the run


@pytest.mark.slow
def test_two_loaders_trials_never_overlap(db_path, monkeypatch):
    monkeypatch.setattr(tuning, "Advisor", lambda: Proposing(num_workers=2, persistent_workers=True))
    rows = job(db_path, eval_batches=12)  # two loaders of the same size: each is worth tuning
    spans = {
        name: [e["at"] for e in rows[name] if e["setting"] and e["setting"].get("trial")] for name in ("train", "val")
    }
    assert spans["train"] and spans["val"], rows["trials"]
    first, second = sorted(spans.values(), key=lambda s: s[0][0])
    assert second[0][0] >= first[-1][1]  # the second loader's trial began after the first's was judged


@pytest.mark.parametrize(
    ("batches", "share", "left"),
    [(3, 0.5, "3 batches are too short"), (12, 0.1, "10% of the job's loader time"), (12, 0.5, None), (6, None, None)],
)
def test_a_loader_is_tuned_only_where_a_trial_can_be_judged_and_pay_for_itself(batches, share, left):
    why = worth_tuning(batches, share)
    assert (why is None) if left is None else (left in why)


def test_the_job_line_weighs_each_loader_by_its_epoch_seconds():
    train = Entry("train (t.py:3)", start_s=2.0, now_s=1.0)
    val = Entry("val (t.py:4)", start_s=0.5, now_s=0.5, left="its epochs of 3 batches are too short")
    assert job_line([train, val]) == (
        "tuned the job: 1.67x measured over 2 loaders (train (t.py:3) 2.00x; val (t.py:4) left at its setting)"
    )
