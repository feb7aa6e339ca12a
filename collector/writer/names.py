"""Our threads and helper processes by name, as ``top -H``, ``ps -L`` and the cost benchmark see them."""

from __future__ import annotations

import contextlib
import threading

# NOTE [ Named threads ]
# Python's thread names stay inside Python (3.11 does not hand them to the
# OS), so ``top -H`` shows every thread of a training process as "python".
# Each thread and helper process of ours names itself in Linux (at most 15
# bytes, ``/proc/self/task/TID/comm``) so that a user who sees CPU in ``top``
# can tell ours from the job's, and bench/bench_cost.py adds up our CPU by
# these names. Elsewhere (no /proc) nothing is named.
PREFIX = "sw-"


def name_this_thread(name: str) -> None:
    """Best effort: the calling thread's name in the OS, ``sw-`` ``name``; never raises."""
    with contextlib.suppress(OSError), open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as comm:
        comm.write((PREFIX + name)[:15])
