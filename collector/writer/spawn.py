"""Starting a helper process of ours (the writer, the verdict's helper): isolated, polite, out of Ctrl-C's way."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

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
# keeps Ctrl-C away. The verdict's helper starts the same way.
CHILD_NICE = 10


def spawn_child(code: str, stdin_fd: int, stdout_fd: int, imports: str = "") -> int:
    """Start ``python -I -S -c`` running ``code`` (after ``imports``), with these pipe ends as stdin and stdout; its pid.

    Raises OSError where it cannot start. posix_spawn, not subprocess: it
    waits for the exec on no pipe, so it is safe from any thread while
    DataLoader workers fork (NOTE [ Forked children ] in process.py).
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


def parent_path() -> list[str]:
    return [p for p in sys.path if p and os.path.isabs(p)]
