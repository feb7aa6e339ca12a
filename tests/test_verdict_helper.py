"""The verdict's helper (NOTE [ Verdict beside the job ]): the very text computed here, and here whenever it fails."""

from __future__ import annotations

import io
import os

import psutil
import pytest
import torch
from helpers import wait_until
from torch.utils.data import DataLoader

import collector
from collector.cli.run import print_verdict
from collector.verdict import helper as verdict_helper
from collector.verdict.helper import VerdictHelper, prints_verdict
from collector.verdict.printing import verdict_text
from collector.writer.spawn import CHILD_NICE

READY_S = 60  # pandas' import on a loaded machine, at nice +10


def recorded(db_path: str) -> list[tuple[str, int | None]]:
    loader = collector.watch(DataLoader(torch.arange(64), batch_size=4), db=db_path, run="helped", gpu_hz=0, host_hz=0)
    for _ in loader:
        pass
    loader.close()
    return [("helped", loader.run_id)]


class Recorded:
    """What print_verdict reads of collector run's AutoWatch."""

    def __init__(self, runs: list[tuple[str, int | None]]) -> None:
        self.runs = runs
        self.tags = {"launch": "host:1:2.0"}

    def run_ids(self) -> list[tuple[str, int | None]]:
        return self.runs


@pytest.mark.slow
def test_a_ready_helper_answers_the_very_text_computed_here_and_then_ends(db_path):
    runs = recorded(db_path)
    helper = VerdictHelper()
    pid = helper.pid
    assert pid is not None
    # As polite as the writer: niced, in the job's session, out of its process group (NOTE [ A polite writer ]).
    assert psutil.Process(pid).nice() == min(19, os.nice(0) + CHILD_NICE)
    assert os.getsid(pid) == os.getsid(0) and os.getpgid(pid) == pid
    assert wait_until(lambda: helper.ready, timeout_s=READY_S)
    out = io.StringIO()
    print_verdict(Recorded(runs), db_path, out, helper)
    assert out.getvalue() == verdict_text(db_path, runs, launch="host:1:2.0")
    assert f"helped (run {runs[0][1]})" in out.getvalue()
    assert not psutil.pid_exists(pid)


def test_a_helper_never_ready_is_ended_and_the_verdict_computed_here(db_path, monkeypatch):
    monkeypatch.setattr(verdict_helper, "ANSWER_TIMEOUT_S", 0.5)  # how long a raised helper is waited for
    runs = recorded(db_path)
    helper = VerdictHelper(code="import time; time.sleep(120)")
    pid = helper.pid
    out = io.StringIO()
    print_verdict(Recorded(runs), db_path, out, helper)
    assert out.getvalue() == verdict_text(db_path, runs, launch="host:1:2.0") != ""
    assert not psutil.pid_exists(pid)


@pytest.mark.parametrize(
    "answer",
    ["", "not json\\n", "42\\n"],
    ids=["dies without answering", "answers garbage", "answers no text"],
)
def test_a_ready_helper_that_fails_to_answer_gives_none_and_is_ended(db_path, answer):
    code = f"import sys; sys.stdout.write('ready\\n'); sys.stdout.flush(); sys.stdin.readline(); sys.stdout.write('{answer}')"
    helper = VerdictHelper(code=code)
    pid = helper.pid
    assert wait_until(lambda: helper.ready, timeout_s=READY_S)
    assert helper.text(db_path, recorded(db_path)) is None
    assert not psutil.pid_exists(pid)


def test_only_a_process_that_prints_the_verdict_starts_a_helper():
    assert prints_verdict({}) and prints_verdict({"RANK": "0"})
    assert not prints_verdict({"RANK": "1"}) and not prints_verdict({"RANK": "3"})


def test_the_helper_answers_at_the_jobs_own_priority_where_it_may_be_raised_back(db_path):
    code = (
        "import json, os, sys; sys.stdout.write('ready\\n'); sys.stdout.flush(); sys.stdin.readline(); "
        "sys.stdout.write(json.dumps(str(os.nice(0))) + '\\n'); sys.stdout.flush()"
    )
    helper = VerdictHelper(code=code)
    assert wait_until(lambda: helper.ready, timeout_s=READY_S)
    answered_at = int(helper.text(db_path, []) or "-100")
    if os.geteuid() == 0:  # allowed to lower a nice value again
        assert answered_at == os.nice(0)
    else:
        assert answered_at in (os.nice(0), min(19, os.nice(0) + CHILD_NICE))


def test_a_helper_still_importing_at_the_end_finishes_at_the_jobs_priority_where_allowed(db_path):
    code = (
        "import json, sys, time; time.sleep(0.5); sys.stdout.write('ready\\n'); sys.stdout.flush(); "
        "sys.stdin.readline(); sys.stdout.write(json.dumps('from the helper') + '\\n'); sys.stdout.flush()"
    )
    helper = VerdictHelper(code=code)
    assert not helper.ready
    answer = helper.text(db_path, [])
    # Raised back to the job's priority (allowed as root), it is waited for; else the caller computes the text.
    assert answer == ("from the helper" if os.geteuid() == 0 else None)


BEATS_THEN_ANSWERS = (
    "import sys, time; sys.stdout.write('ready\\n'); sys.stdout.flush(); sys.stdin.readline()\n"
    "for _ in range({beats}):\n"
    "    time.sleep(0.2); sys.stdout.write('{beat}'); sys.stdout.flush()\n"
    "sys.stdout.write('\"answered\"\\n'); sys.stdout.flush()"
)


@pytest.mark.parametrize(("beat", "expected"), [("waiting\\n", "answered"), ("", None)], ids=["beats", "silent"])
@pytest.mark.slow
def test_a_helper_waiting_for_the_other_ranks_is_waited_for_while_it_says_so(db_path, monkeypatch, beat, expected):
    monkeypatch.setattr(verdict_helper, "ANSWER_TIMEOUT_S", 0.6)  # silence given up on; 2 s of beats outlast it
    helper = VerdictHelper(code=BEATS_THEN_ANSWERS.format(beats=10, beat=beat))
    assert wait_until(lambda: helper.ready, timeout_s=READY_S)
    assert helper.text(db_path, []) == expected  # silent for 2 s: given up on, the verdict computed here


def test_the_verdict_calls_waiting_while_it_waits_for_the_other_ranks(db_path, monkeypatch):
    from collector.verdict import printing as verdict

    runs = recorded(db_path)
    beats = []
    monkeypatch.setattr(verdict, "_world", lambda row: 2)  # a job of two ranks whose other rank never reports
    monkeypatch.setattr(verdict, "MISSING_WAIT_S", 0.5)
    text = verdict_text(db_path, runs, waiting=lambda: beats.append(1))
    assert len(beats) >= 2 and "helped" in text
