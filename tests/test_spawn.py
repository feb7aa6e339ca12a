"""Our helper children (the writer, the verdict's helper): their pipes in forked processes, their end."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from collections.abc import Iterator

import psutil
import pytest
from helpers import wait_until, writers_alive

from collector.sample.sampler import Rates
from collector.verdict.helper import VerdictHelper
from collector.writer import process as writer_process
from collector.writer.frames import Open, RunStart
from collector.writer.process import STARVED_LIMIT_S, STUCK_AFTER_S, WriterProcess
from collector.writer.spawn import (
    CHILD_NICE,
    end_child,
    forget_in_forks,
    make_polite,
    raise_to_ours,
    ran_and_waited_s,
    start_child,
    waiting_for_cpu,
)

READS_TO_THE_END = "import sys; sys.stdin.buffer.read()"
# Two threads: one spins until its input ends, the other reads it.
SPINS = "import sys, threading; t = threading.Thread(target=sys.stdin.buffer.read); t.start()\nwhile t.is_alive(): pass"


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


def thread_nices(pid: int) -> list[int]:
    """The nice value of each thread of ``pid``: field 19 of its /proc stat."""
    nices = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/stat", "rb") as stat:
            nices.append(int(stat.read().rsplit(b")", 1)[1].split()[16]))
    return nices


@contextlib.contextmanager
def sleeper_and_spinner() -> Iterator[tuple[tuple[int, int, int], tuple[int, int, int]]]:
    """Two children (pid, stdin, stdout): one blocked on its input, one spinning; both ended after."""
    sleeper, spinner = start_child(READS_TO_THE_END), start_child(SPINS)
    try:
        yield sleeper, spinner
    finally:
        for pid, stdin, stdout in (sleeper, spinner):
            end_child(pid)
            os.close(stdin)
            os.close(stdout)


def test_a_child_is_waiting_for_cpu_while_it_spins_not_while_it_sleeps_or_is_stopped():
    with sleeper_and_spinner() as (sleeper, spinner):
        assert wait_until(lambda: waiting_for_cpu(sleeper[0]) is False)  # booted, then blocked on its input
        assert not any(waiting_for_cpu(sleeper[0]) for _ in range(20))  # silence there would be a hang
        assert wait_until(lambda: len(thread_nices(spinner[0])) == 2)
        assert all(waiting_for_cpu(spinner[0]) for _ in range(20))  # runnable: silence there is a starved machine
        os.kill(spinner[0], signal.SIGSTOP)
        assert wait_until(lambda: waiting_for_cpu(spinner[0]) is False)  # stopped: not starved
    assert waiting_for_cpu(spinner[0]) is None  # gone: nothing to say


def test_a_childs_seconds_run_grow_while_it_spins_not_while_it_sleeps():
    with sleeper_and_spinner() as (sleeper, spinner):
        assert wait_until(lambda: waiting_for_cpu(sleeper[0]) is False)
        slept = ran_and_waited_s(sleeper[0])
        assert wait_until(lambda: (ran_and_waited_s(spinner[0]) or (0.0, 0.0))[0] > 0.3)  # spinning: it runs
        assert ran_and_waited_s(sleeper[0]) == slept  # blocked on its input: neither runs nor queues
    assert ran_and_waited_s(spinner[0]) is None  # gone: nothing to say


@pytest.mark.skipif(os.geteuid() != 0, reason="raising a priority back needs root (CI runs as root)")
def test_raise_to_ours_gives_every_thread_of_a_polite_child_our_priority_back():
    pid, stdin, stdout = start_child(SPINS)
    try:
        ours = os.getpriority(os.PRIO_PROCESS, 0)
        assert wait_until(lambda: len(thread_nices(pid)) == 2)
        assert thread_nices(pid) == [min(19, ours + CHILD_NICE)] * 2  # a thread started later inherits the nice
        assert raise_to_ours(pid)
        assert thread_nices(pid) == [ours, ours]
        make_polite(pid)  # NOTE [ A helper the job waits on ]: polite again once it answered
        assert thread_nices(pid) == [min(19, ours + CHILD_NICE)] * 2
    finally:
        os.close(stdin)
        end_child(pid)
        os.close(stdout)


@pytest.mark.slow
def test_a_silent_writer_is_stuck_unless_it_waits_for_a_core_and_then_only_up_to_the_limit(tmp_path, monkeypatch):
    writer = WriterProcess()
    runnable: list[bool] = [False]
    monkeypatch.setattr(writer_process, "waiting_for_cpu", lambda pid: runnable[-1])
    try:
        start = RunStart("silent", {}, {}, {}, "host", 1, "cmd", None, None)
        writer.open_channel(Open(str(tmp_path / "w.sqlite"), start, 0.0, 0, Rates(0, 0)))
        assert wait_until(lambda: writer.read() or writer.answered)
        assert wait_until(lambda: select.select([writer.replies_fd], [], [], 0)[0])  # its next ping, unread
        writer.heard_at = time.monotonic() - STUCK_AFTER_S - 0.5
        assert writer.health() == "ok"  # what waits in the pipe is read before silence is judged
        os.kill(writer.pid, signal.SIGSTOP)  # no ping from now on
        assert wait_until(lambda: psutil.Process(writer.pid).status() == psutil.STATUS_STOPPED)
        writer.read()
        for silent_s, is_runnable, health in [
            (STUCK_AFTER_S + 0.5, False, "stuck"),
            (STUCK_AFTER_S + 0.5, True, "ok"),  # starved by a full machine: waited for
            (STARVED_LIMIT_S + 1.0, True, "stuck"),
        ]:
            runnable.append(is_runnable)
            writer.heard_at = time.monotonic() - silent_s
            assert writer.health() == health, (silent_s, is_runnable)
    finally:
        writer.kill()


def test_our_threads_and_helper_processes_carry_their_names_in_the_os(tmp_path):
    import torch
    from torch.utils.data import DataLoader

    import collector

    def comms(pid: int) -> set[str]:
        return {open(f"/proc/{pid}/task/{tid}/comm").read().strip() for tid in os.listdir(f"/proc/{pid}/task")}

    watched = collector.watch(DataLoader(torch.arange(8)), db=str(tmp_path / "names.sqlite"), gpu_hz=0)
    for _ in watched:
        pass
    try:
        (writer,) = writers_alive()
        assert wait_until(lambda: "sw-monitor" in comms(os.getpid()))  # it names itself once it runs
        assert wait_until(lambda: {"sw-writer", "sw-ping"} <= comms(writer.pid))
    finally:
        watched.close()
    helper = VerdictHelper()
    try:
        assert wait_until(lambda: helper.ready) and "sw-verdict" in comms(helper.pid)
    finally:
        end_child(helper.pid)
