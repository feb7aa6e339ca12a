"""Other processes' CPU during a measurement, and ours by part: what a cost benchmark needs to trust its figures.

Every cost benchmark measures inside ``Others`` and refuses a figure taken
while other processes used more than QUIET_CORES of a core: on two cores a
stray process moves a wall ratio by more than the collector costs.
``Parts`` polls a process tree's threads and adds their CPU up by who they
belong to: ours name themselves (NOTE [ Named threads ] in
collector/writer/names.py), our helper processes are told by their command.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass, field

QUIET_CORES = 0.05  # other processes' CPU beyond which a run measures the machine, not us
TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
# our helper processes by a word of their command line, before their main thread names itself
HELPERS = {"collector.writer.child": "writer", "collector.verdict.helper": "verdict", "collector.tune.advisor": "tuner"}
THREADS = {
    "sw-monitor": "monitor",
    "sw-writer": "writer",
    "sw-ping": "writer",
    "sw-verdict": "verdict",
    "sw-tuner": "tuner",
}


def machine_busy_s() -> float:
    """Every core's busy seconds since boot (/proc/stat: all but idle and iowait)."""
    with open("/proc/stat") as f:
        fields = [float(x) for x in f.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) * TICK_S


def _stat(path: str) -> tuple[str, list[str]] | None:
    """(comm, the fields after it) of a /proc stat file; None where the task is gone."""
    try:
        with open(path, "rb") as f:
            raw = f.read().decode(errors="replace")
    except OSError:
        return None
    head, _, rest = raw.rpartition(")")
    return head.partition("(")[2], rest.split()


def _descendants(root: int) -> list[int]:
    """``root``'s living descendants, parents first (one pass over /proc)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (st := _stat(f"/proc/{name}/stat")) is not None:
            children.setdefault(int(st[1][1]), []).append(int(name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.extend(children.get(pid, []))
        todo.extend(children.get(pid, []))
    return found


def tree_cpu_s(root: int | None = None) -> float:
    """CPU seconds of ``root`` (this process) and every descendant, living or reaped."""
    if root is None:
        own = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        total = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
    else:
        st = _stat(f"/proc/{root}/stat")
        total = sum(float(x) for x in st[1][11:15]) * TICK_S if st else 0.0
    for pid in _descendants(os.getpid() if root is None else root):
        st = _stat(f"/proc/{pid}/stat")
        if st is not None:  # its own time and its reaped children's (utime, stime, cutime, cstime)
            total += sum(float(x) for x in st[1][11:15]) * TICK_S
    return total


@dataclass
class Others:
    """``with Others() as o:`` ... ``o.cores``: other processes' mean CPU over the block, in cores.

    The machine's busy CPU less this process tree's (``extra_cores``: a hog of
    ours, whose cores are expected). Reads happen at the edges only.
    """

    extra_cores: float = 0.0
    cores: float = float("nan")
    _t0: float = 0.0
    _busy0: float = 0.0
    _ours0: float = 0.0

    def __enter__(self) -> Others:
        self._t0, self._busy0, self._ours0 = time.monotonic(), machine_busy_s(), tree_cpu_s()
        return self

    def __exit__(self, *exc: object) -> None:
        wall = max(1e-9, time.monotonic() - self._t0)
        other = (machine_busy_s() - self._busy0) - (tree_cpu_s() - self._ours0)
        self.cores = max(0.0, other / wall - self.extra_cores)

    @property
    def quiet(self) -> bool:
        return self.cores <= QUIET_CORES

    def label(self) -> str:
        return f"others {self.cores:.3f} cores{'' if self.quiet else ' (NOT QUIET: left out)'}"


@dataclass
class Parts:
    """A process tree's CPU by part, polled: ``poll()`` often, then ``at(t)`` / ``final``.

    Parts: ``job_main`` (the root's main thread: the training loop), ``job``
    (its other threads and its other children, DataLoader workers included),
    ``monitor`` (our thread in it), ``writer``,
    ``verdict`` and ``tuner`` (our helper processes, every thread). A task's
    last reading counts, so what it spends after the last poll before it
    ends is missed: poll at least every 20 ms.
    """

    root: int
    seen: dict[tuple[int, int], tuple[str, float]] = field(default_factory=dict)
    timeline: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    _kind: dict[int, str] = field(default_factory=dict)  # our tree's processes, by part
    _outside: set[int] = field(default_factory=set)  # pids known not to be in it

    def poll(self) -> None:
        self._discover()
        for pid, kind in list(self._kind.items()):
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                del self._kind[pid]
                continue
            for tid in map(int, tids):
                st = _stat(f"/proc/{pid}/task/{tid}/stat")
                if st is not None:
                    part = THREADS.get(st[0], "job_main" if tid == self.root else kind)
                    self.seen[(pid, tid)] = (part, (float(st[1][11]) + float(st[1][12])) * TICK_S)
        self.timeline.append((time.time(), self.final))

    def _discover(self) -> None:
        """New processes whose parent is in the tree (a pid is read once: cheap enough to poll at 50 Hz)."""
        if not self._kind:
            self._kind[self.root] = "job"
        for pid in sorted(int(n) for n in os.listdir("/proc") if n.isdigit()):
            if pid in self._kind or pid in self._outside:
                continue
            st = _stat(f"/proc/{pid}/stat")
            if st is not None and int(st[1][1]) in self._kind:
                self._kind[pid] = self._process_kind(pid)
            else:
                self._outside.add(pid)

    def _process_kind(self, pid: int) -> str:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().decode(errors="replace")
        except OSError:
            return "job"
        return next((part for word, part in HELPERS.items() if word in cmd), "job")

    @property
    def final(self) -> dict[str, float]:
        totals: dict[str, float] = {}
        for part, cpu in self.seen.values():
            totals[part] = totals.get(part, 0.0) + cpu
        return totals

    def at(self, t: float) -> dict[str, float]:
        """The parts' CPU as last polled at or before wall-clock ``t``."""
        before = [parts for when, parts in self.timeline if when <= t]
        return before[-1] if before else {}


def shown(others: Others, label: str, figures: str) -> str:
    """``label: figures`` with the others' CPU, or the figures withheld where other processes were not quiet."""
    if others.quiet:
        return f"{label}: {figures}; {others.label()}"
    return f"{label}: no figure: {others.label()}"
