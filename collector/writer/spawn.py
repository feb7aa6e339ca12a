"""Starting a helper process of ours (the writer, the verdict's helper): isolated, polite, out of Ctrl-C's way."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import sys
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from collector.sample.schedstat import threads_ns

PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the folder holding collector/
# Isolated (-I: no working directory, no PYTHON* variables on the path; -S:
# no site, whose .pth files cost a writer about 25 ms of CPU), the
# standard library imported first, then this very copy of collector: the
# child runs the same code as its parent whatever the user's sys.path.
# The parent's other absolute path entries come last, so psutil, pynvml
# (NOTE [ Sampling beside the writer ]) and pandas are found even from a user site.
BOOT = "import sys; sys.path.insert(0, {root!r}); sys.path += [p for p in {path!r} if p not in sys.path]; {code}"
# NOTE [ A polite writer ]
# The job's own threads (the step's intra-op threads, the workers) are what
# matter on a machine they fill; a wakeup of the writer's (a ping, a sample,
# a flush) that preempts one of them can hold up a whole parallel region of
# the step. So the writer runs at nice +CHILD_NICE: the scheduler then
# rarely preempts the job for it and runs it in the gaps, and its own work,
# about 1% of a core, is never urgent (silence counts only after a second).
# Set from here at the spawn, so its boot (0.1 s of CPU) is polite too; and in
# the job's session: Linux's autogroup weighs a new session as an equal of
# the whole job, nice or not (there its boot held a 2-worker loader's first
# batch back by about 30 ms, bench/bench_stall.py). Its own process group
# keeps Ctrl-C away. The verdict's helper starts the same way. At the end
# the loop waits on it, so the last run's close raises it back to the job's
# priority where the user may (``raise_to_ours``: root, CAP_SYS_NICE,
# RLIMIT_NICE): beside 12 spinning processes on 2 cores a writer at +10 took
# over 1.5 s to write a run's end. Elsewhere it finishes alone, and says so.
CHILD_NICE = 10


def lean_pandas() -> None:
    """In a helper process of ours, before pandas is imported: pandas without pyarrow (NOTE [ Verdict beside the job ])."""
    sys.modules.setdefault("pyarrow", None)  # type: ignore[arg-type]  # import pyarrow now raises ImportError


def spawn_child(code: str, stdin_fd: int, stdout_fd: int, imports: str = "") -> int:
    """Start ``python -I -S -c`` running ``code`` (after ``imports``), with these pipe ends as stdin and stdout; its pid.

    Raises OSError where it cannot start. posix_spawn, not subprocess: it
    waits for the exec on no pipe, so it is safe from any thread while
    DataLoader workers fork (NOTE [ Forked children ]).
    """
    boot = imports + BOOT.format(root=PACKAGE_ROOT, path=parent_path(), code=code)
    pid = os.posix_spawn(
        sys.executable,
        [sys.executable, "-I", "-S", "-c", boot],
        dict(os.environ),
        file_actions=[
            (os.POSIX_SPAWN_DUP2, stdin_fd, 0),
            (os.POSIX_SPAWN_DUP2, stdout_fd, 1),
            (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
        ],
        setpgroup=0,  # Ctrl-C reaches the training process only; not setsid: NOTE [ A polite writer ]
    )
    with contextlib.suppress(OSError):  # raising a child's nice value is always allowed; it is clamped at 19
        os.setpriority(os.PRIO_PROCESS, pid, min(19, os.getpriority(os.PRIO_PROCESS, 0) + CHILD_NICE))
    return pid


def raise_to_ours(pid: int) -> bool:
    """Give every thread of our child ``pid`` this thread's priority back; False where the user may not (NOTE [ A polite writer ])."""
    return _set_priority(pid, os.getpriority(os.PRIO_PROCESS, 0))


def make_polite(pid: int) -> None:
    """Put every thread of our child ``pid`` back at nice +CHILD_NICE beside this thread (always allowed)."""
    _set_priority(pid, min(19, os.getpriority(os.PRIO_PROCESS, 0) + CHILD_NICE))


def _set_priority(pid: int, nice: int) -> bool:
    try:
        for tid in _threads(pid) or [pid]:
            with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
                os.setpriority(os.PRIO_PROCESS, tid, nice)
    except OSError:  # a lower nice value than now: not root, no CAP_SYS_NICE, RLIMIT_NICE below it
        return False
    return True


def ran_and_waited_s(pid: int) -> tuple[float, float] | None:
    """Seconds the threads of ``pid`` ran, and waited queued for a core, so far; None where Linux's /proc cannot say."""
    totals = threads_ns(pid, _threads(pid) or [])
    return None if totals is None else (totals[0] / 1e9, totals[1] / 1e9)


def waiting_for_cpu(pid: int) -> bool | None:
    """Whether a thread of ``pid`` is runnable (running or queued for a core); None where Linux's /proc cannot say.

    A child that is silent but runnable is starved by a full machine, not
    stopped or hung (NOTE [ Writer health ] in process.py).
    """
    states = []
    for tid in _threads(pid) or []:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as stat:
                states.append(stat.read().rsplit(b")", 1)[1].split()[0])
        except (OSError, IndexError):  # a thread that ended meanwhile
            continue
    return b"R" in states if states else None


def _threads(pid: int) -> list[int] | None:
    try:
        return [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except (OSError, ValueError):
        return None


def parent_path() -> list[str]:
    return [p for p in sys.path if p and os.path.isabs(p)]


def start_child(code: str, imports: str = "") -> tuple[int, int, int]:
    """``spawn_child`` on two new pipes: (pid, the write end of its stdin, the read end of its stdout).

    Raises OSError where it cannot start, its pipes closed.
    """
    stdin_r, stdin_w = _pipe()
    stdout_r, stdout_w = _pipe()
    try:
        pid = spawn_child(code, stdin_r, stdout_w, imports)
    except BaseException:
        for fd in (stdin_w, stdout_r):
            os.close(fd)
        raise
    finally:
        os.close(stdin_r)
        os.close(stdout_w)
    return pid, stdin_w, stdout_r


def end_child(pid: int, timeout_s: float = 5.0) -> int | None:
    """SIGKILL (a stopped process dies of it too) and reap within ``timeout_s``.

    Its exit status (-1 where it was reaped elsewhere), or None while it
    outlives the wait (stuck in the kernel): reaped later by whoever polls.
    """
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere (SIGCHLD ignored): gone all the same
            return -1
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.005)


def _pipe() -> tuple[int, int]:
    """A pipe whose ends are not 0, 1 or 2 (where stdin is closed), so dup2 onto them never no-ops."""
    ends = []
    for fd in os.pipe():
        if fd <= 2:
            moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
            os.close(fd)
            fd = moved
        ends.append(fd)
    return ends[0], ends[1]


# NOTE [ Forked children ]
# A DataLoader worker started with fork inherits every descriptor. A worker
# holding a child's input open would keep that child from ever seeing the end
# of its input should the training process die (the writer would never exit,
# nor the verdict's helper). So each owner of a child's pipes registers here,
# and in a forked process ``forget_in_fork`` closes its copies: the child is
# not that process's. The writer is started on the thread that calls
# watch(), which cannot be forking workers at that moment, so no worker forks
# between a pipe's creation and its registration. (The spawn itself is safe
# from any thread: posix_spawn waits on no pipe that a worker forked
# meanwhile could hold open.)


class ForkAware(Protocol):
    def forget_in_fork(self) -> None: ...


_owners: weakref.WeakSet[ForkAware] = weakref.WeakSet()
_fork_hooks: list[Callable[[], None]] = []


def forget_in_forks(owner: ForkAware) -> None:
    """Have ``owner.forget_in_fork()`` run in every process forked from this one while ``owner`` lives."""
    _owners.add(owner)


def at_fork_in_child(hook: Callable[[], None]) -> None:
    """Run ``hook`` in every process forked from this one, after the owners have forgotten their children."""
    _fork_hooks.append(hook)


def _after_fork_in_child() -> None:
    for owner in list(_owners):
        owner.forget_in_fork()
    _owners.clear()
    for hook in _fork_hooks:
        hook()


os.register_at_fork(after_in_child=_after_fork_in_child)
