"""Our helper children (the writer, the verdict's helper): their pipes in forked processes, their end."""

from __future__ import annotations

import os
import signal
import time

from collector.cli.verdict_helper import VerdictHelper
from collector.writer.spawn import end_child, forget_in_forks, start_child

READS_TO_THE_END = "import sys; sys.stdin.buffer.read()"


class Child:
    """A child that exits at the end of its input; registered or not for forks."""

    def __init__(self, registered: bool) -> None:
        self.pid, self.stdin, self.stdout = start_child(READS_TO_THE_END)
        if registered:
            forget_in_forks(self)

    def close_input(self) -> None:
        os.close(self.stdin)
        self.stdin = -1

    def forget_in_fork(self) -> None:  # and at the end: a later fork must not close numbers reused meanwhile
        for fd in (self.stdin, self.stdout):
            if fd >= 0:
                os.close(fd)
        self.stdin = self.stdout = -1


def exited_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if os.waitpid(pid, os.WNOHANG)[0]:
            return True
        time.sleep(0.01)
    return False


def with_a_fork_alive(check):
    """``check()`` while a forked copy of this process sleeps (as a DataLoader worker would live on)."""
    fork = os.fork()
    if fork == 0:
        time.sleep(30)
        os._exit(0)
    try:
        return check()
    finally:
        os.kill(fork, signal.SIGKILL)
        os.waitpid(fork, 0)


def test_a_child_sees_the_end_of_its_input_while_a_forked_process_lives_on():
    registered, unregistered = Child(registered=True), Child(registered=False)

    def ends() -> tuple[bool, bool]:
        registered.close_input()
        unregistered.close_input()
        return exited_within(registered.pid, 5.0), exited_within(unregistered.pid, 0.5)

    assert with_a_fork_alive(ends) == (True, False)  # the fork holds the unregistered child's input open
    assert exited_within(unregistered.pid, 5.0)  # ... until the fork is gone
    registered.forget_in_fork()
    unregistered.forget_in_fork()


def test_the_verdict_helper_ends_with_the_job_even_beside_a_forked_worker():
    helper = VerdictHelper(code=READS_TO_THE_END)
    pid, request = helper.pid, helper._req
    assert pid is not None

    def ends() -> bool:
        os.close(request)  # as the training process's exit would
        return exited_within(pid, 5.0)

    assert with_a_fork_alive(ends)
    helper._req = -1
    helper.close()
    assert helper.pid is None and helper._rep == -1


def test_end_child_kills_and_reaps_and_says_how_it_ended():
    pid, stdin, stdout = start_child(READS_TO_THE_END)
    os.kill(pid, signal.SIGSTOP)  # a stopped child dies of SIGKILL too
    assert end_child(pid) == -signal.SIGKILL
    assert end_child(pid) == -1  # already reaped: gone all the same
    os.close(stdin)
    os.close(stdout)
