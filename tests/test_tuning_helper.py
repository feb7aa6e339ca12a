"""The tuner's helper process: what its answers carry, its priority, and the questions it answers."""

from __future__ import annotations

import dataclasses
import os
import select
import time

from test_spawn import thread_nices
from test_tuning import FOUR, START

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
            deadline = time.monotonic() + 60
            while (answer := advisor.poll()) is None and time.monotonic() < deadline:
                select.select([], [], [], 0.02)
            answers.append(answer)
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
