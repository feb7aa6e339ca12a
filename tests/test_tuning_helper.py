"""The tuner's helper process: what its answers carry, its priority, and the questions it answers."""

from __future__ import annotations

import dataclasses
import os
import select
import time

from test_spawn import thread_nices
from test_tuning import FOUR, START

from collector.tune.advisor import SERVE as SERVE_FAKE
from collector.tune.advisor import Advisor, newest_questions
from collector.tune.answers import NothingPays, Proposal
from collector.writer.spawn import CHILD_NICE


def test_the_helper_answers_with_what_its_question_had_seen_as_politely_as_the_writer():
    """``seen`` goes to the helper with the question and comes back with the answer, either kind."""
    offer = {"baseline": dataclasses.asdict(START), "setting": dataclasses.asdict(FOUR)}
    offer.update(predicted=1.5, low=1.2, high=1.8)
    fake = (
        "import collector.tune.propose as p; "
        f"p.propose = lambda *a, **k: {{'none': 'nothing'}} if k['epoch'] is not None else {offer!r}; "
        "from collector.tune.advisor import serve; serve()"
    )
    advisor = Advisor(fake)
    try:
        pid, polite = advisor.pid, min(19, os.getpriority(os.PRIO_PROCESS, 0) + CHILD_NICE)
        assert pid is not None and set(thread_nices(pid)) == {polite}  # NOTE [ The tuner's helper ]
        answers = []
        for epoch, seen in ((0, 1), (None, 3)):
            advisor.ask("run.sqlite", 1, epoch, START, [START], False, seen=seen)
            answers.append(_answered(advisor))
    finally:
        advisor.close()
    assert answers[0] == NothingPays("nothing", seen=1)
    assert answers[1] == Proposal(START, FOUR, 1.5, 1.2, 1.8, seen=3)


def test_the_helper_answers_only_the_newest_of_the_questions_waiting():
    """Questions that came while the last was answered: the newest is answered, the older ones it replaced are not."""
    read, write = os.pipe()
    questions = newest_questions(read)
    try:
        os.write(write, b"1\n2\n3\n")
        assert next(questions) == b"3"
        os.write(write, b"4\n5")
        os.write(write, b"\n")
        assert next(questions) == b"5"
        os.write(write, b"6\n")
    finally:
        os.close(write)
    assert list(questions) == [b"6"]  # then input ends, and so does the helper
    os.close(read)


def _answered(advisor: Advisor) -> NothingPays | Proposal | None:
    deadline = time.monotonic() + 60
    while (answer := advisor.poll()) is None and time.monotonic() < deadline:
        select.select([], [], [], 0.02)
    return answer


def test_a_helper_queued_behind_a_full_machine_gets_the_jobs_priority_until_it_answers(monkeypatch):
    """NOTE [ A helper the job waits on ]: schedstat's run and queued seconds (faked) decide; its answer ends it."""
    from collector.tune import advisor as module

    schedstat = [(0.09, 0.91)]  # seconds the helper ran and queued so far, as Linux would say
    monkeypatch.setattr(module, "ran_and_waited_s", lambda pid: schedstat[-1])
    calls: list[str] = []
    monkeypatch.setattr(module, "raise_to_ours", lambda pid: calls.append("raise") or True)
    monkeypatch.setattr(module, "make_polite", lambda pid: calls.append("polite"))
    advisor = Advisor("import collector.tune.propose as p; p.propose = lambda *a, **k: {'none': 'x'}; " + SERVE_FAKE)
    try:
        advisor.ask("run.sqlite", 1, 0, START, [], False, seen=1)  # queued 0.91 s for 0.09 s run: raised
        assert calls == ["raise"]
        assert _answered(advisor) == NothingPays("x", seen=1)
        assert calls == ["raise", "polite"]  # answered: polite again
        schedstat.append((0.14, 0.96))
        advisor.ask("run.sqlite", 1, 1, START, [], False, seen=2)  # 0.05 s run, 0.05 s queued since
        assert _answered(advisor) == NothingPays("x", seen=2)
        assert calls == ["raise", "polite"]
        schedstat.append((0.18, 1.90))
        advisor.ask("run.sqlite", 1, 2, START, [], False, seen=3)  # 0.04 s run, 0.94 s queued: raised again
        assert _answered(advisor) == NothingPays("x", seen=3)
    finally:
        advisor.close()
    assert calls == ["raise", "polite", "raise", "polite"]


def test_a_helper_that_ran_more_than_it_queued_stays_polite_and_a_refused_raise_is_not_retried(monkeypatch):
    from collector.tune import advisor as module

    schedstat = [(0.31, 0.13)]  # the healthy demo's, quiet
    monkeypatch.setattr(module, "ran_and_waited_s", lambda pid: schedstat[-1])
    calls: list[str] = []
    monkeypatch.setattr(module, "raise_to_ours", lambda pid: calls.append("raise") and False)  # not root
    advisor = Advisor("import time; time.sleep(60)")  # never answers
    try:
        advisor.ask("run.sqlite", 1, 0, START, [], False, seen=1)
        schedstat.append((0.40, 0.20))
        assert advisor.poll() is None  # 0.09 s run, 0.07 s queued: polite still
        assert calls == []
        schedstat.append((0.40, 2.20))
        assert advisor.poll() is None  # queued 2 s: the user may not raise it
        schedstat.append((0.40, 9.00))
        assert advisor.poll() is None and advisor.poll() is None
    finally:
        advisor.close()
    assert calls == ["raise"]  # tried once
