"""The throughput model: batches per second for any num_workers, from the run's own measurements."""

from __future__ import annotations

import math
from dataclasses import dataclass

from collector.diagnosis.stats import Facts

DEFAULT_HANDOFF_S = 0.001  # next() cost of a ready batch when no worker run measured it
SURPLUS = 1.15  # production headroom over consumption, to absorb uneven fetch times
IO_SURPLUS = 1.5  # more for I/O-bound fetching: storage latency varies, idle workers cost only memory
SPARE_CPU_WORKERS = 1  # CPU-bound loading that fills the cores gets this many workers beyond them (see NOTE)
CONTENTION_S = 0.0018  # loop time lost per batch when loading keeps every core busy (see NOTE [ Contention ])
MAX_WORKERS = 64
MEMORY_SHARE = 0.5  # workers and their prefetched batches may take this share of available RAM


@dataclass(frozen=True)
class LoaderModel:
    """Measured costs per batch (seconds) and the machine's capacity.

    NOTE [ Throughput model ]
    The loop consumes one batch per ``step_s + handoff_s``; n workers produce
    one each per ``load_io_s + load_cpu_s``; all loading and the main process
    together cannot use more CPU than the free cores::

        n = 0:  |== load (in next()) ==|-- step --|== load ==|-- step --|
        n = 3:  w0 |== load ==|  w1 |== load ==|  w2 |== load ==|
                loop: |-- step --|h|-- step --|h|-- step --|h|

        X(0) = 1 / (step + load)
        X(n) = min(1 / (step + handoff + contention * u),   the loop's own speed
                   n / (load_io + load_cpu),                n workers' output
                   free_cores / (load_cpu + step_cpu))      the CPU's capacity
        u    = X * load_cpu / free_cores                    share of the cores loading keeps busy

    I/O time (sleeping on storage) costs no core, so I/O-bound loading keeps
    scaling past the core count; CPU-bound loading stops at the cores.

    NOTE [ Contention ]
    Workers that compute take cores the loop needs too: when the loop wakes
    (after its step, and when a batch arrives) it finds every core busy about
    ``u`` of the time and waits for one. That costs the loop ``contention_s * u``
    per batch. Calibrated on 2 cores with bench/bench_diagnosis.py on a quiet
    machine (other processes < 0.05 cores; 1 ms/sample decoding, 10.8 ms step):
    at u = 0.65 the hand-off grew from 1.1 ms (sleeping workers) to 2.15 ms
    (median over 2-8 workers) and the step by 0.1 ms, so about 1.8 ms at u = 1.
    (With other processes using 0.2-0.8 cores it read 2.6 ms; their load is
    left out, see NOTE [ Background load ].) The loop limit then solves X = 1 / (a + k X) with a the uncontended
    loop time and k = contention_s * load_cpu / free_cores:
    X = 2 / (a + sqrt(a^2 + 4k)). Step and hand-off measured with workers
    already include the contention at the measured throughput
    (``measured_contention_s``), which is taken out before it is put back for
    the new setting. With num_workers=0 loading runs between steps, so the
    measured step is uncontended.
    """

    step_s: float  # mean: what throughput sees
    handoff_s: float
    load_io_s: float
    load_cpu_s: float
    step_cpu_s: float
    free_cores: float
    max_workers: int  # capped by memory (and MAX_WORKERS)
    pace_step_s: float | None = None  # median step: the pace workers are sized for (None: step_s)
    contention_s: float = CONTENTION_S  # loop time lost per batch at u = 1 (see NOTE [ Contention ])
    measured_contention_s: float = 0.0  # the part of step_s + handoff_s that was contention when measured

    def throughput(self, n: int) -> float:
        if n <= 0:
            return 1.0 / max(self.step_s + self.load_io_s + self.load_cpu_s, 1e-9)
        return min(self.loop_limit(), self.workers_limit(n), self.cpu_limit())

    def uncontended_loop_s(self) -> float:
        """The loop's time per batch (step + hand-off) when no core is taken by loading."""
        return max(self.step_s + self.handoff_s - self.measured_contention_s, 1e-9)

    def loop_limit(self) -> float:
        """Batches/s the loop reaches when batches are always ready (see NOTE [ Contention ])."""
        a = self.uncontended_loop_s()
        k = self.contention_s * self.load_cpu_s / max(self.free_cores, 1e-9)
        if k <= 0:
            return 1.0 / a
        x = 2.0 / (a + math.sqrt(a * a + 4.0 * k))
        if x * self.load_cpu_s >= self.free_cores:  # u capped at 1: every core busy
            x = 1.0 / (a + self.contention_s)
        return x

    def busy_share(self, throughput: float) -> float:
        """u: the share of the free cores that loading keeps busy at ``throughput`` batches/s."""
        return min(1.0, throughput * self.load_cpu_s / max(self.free_cores, 1e-9))

    def contention_at(self, throughput: float) -> float:
        """Seconds per batch the loop waits for a core at ``throughput``."""
        return self.contention_s * self.busy_share(throughput)

    def workers_limit(self, n: int) -> float:
        return n / max(self.load_io_s + self.load_cpu_s, 1e-9)

    def cpu_limit(self) -> float:
        return self.free_cores / max(self.load_cpu_s + self.step_cpu_s, 1e-9)

    def limit(self, n: int) -> str:
        """What caps throughput at n workers: "loop", "workers" or "cpu"."""
        if n <= 0:
            return "workers"
        limits = {"loop": self.loop_limit(), "workers": self.workers_limit(n), "cpu": self.cpu_limit()}
        return min(limits, key=lambda k: limits[k])

    def best_workers(self, *, surplus: float = SURPLUS, io_surplus: float = IO_SURPLUS) -> int:
        """The fewest workers that reach the model's ceiling, with headroom.

        Workers are sized for the loop's typical (median) step, so pauses that
        stretch the mean (garbage collection, other jobs) do not shrink the
        answer. Production must outpace consumption by ``surplus`` (15%), or by
        ``io_surplus`` (50%) when fetching is mostly I/O: storage latency varies
        and a sleeping worker costs only memory. CPU-bound loading (CPU at
        least half of a fetch) that needs the cores gets one worker per free core
        plus ``SPARE_CPU_WORKERS``.

        NOTE [ Spare CPU worker ]
        Batches are handed over in order. With one CPU-bound worker per core, a
        worker whose fetch was slowed (it shared a core with the loop) holds
        the loop up while the others, their queue slots full, sit idle. One
        spare keeps the cores busy meanwhile. Measured on 2 cores (1 ms/sample
        decoding, 10.8 ms step, median of 5 runs): 2 workers 77 batches/s, 3
        workers 80, 8 workers 78 on a quiet machine; 59, 67 and 62 with other
        processes using 0.2-0.8 cores.
        """
        pace = 1.0 / max((self.pace_step_s or self.step_s) + self.handoff_s - self.measured_contention_s, 1e-9)
        ceiling = min(max(pace, self.loop_limit()), self.cpu_limit())
        cpu_bound = self.load_cpu_s >= self.load_io_s
        headroom = surplus if cpu_bound else io_surplus
        needed = math.ceil(headroom * ceiling * (self.load_io_s + self.load_cpu_s) - 1e-9)
        if cpu_bound:
            cores = math.ceil(self.free_cores - 1e-9)
            needed = cores + SPARE_CPU_WORKERS if needed >= cores else needed
        return max(1, min(needed, self.max_workers))


def build_model(
    facts: Facts,
    *,
    default_handoff_s: float = DEFAULT_HANDOFF_S,
    memory_share: float = MEMORY_SHARE,
    worker_bytes: float | None = None,
) -> LoaderModel | None:
    """The model for this run, or None when the load time per batch was not measured.

    Workers' wall time includes waiting for a core when they outnumber the cores
    left by the main process and other processes, so the I/O part is what wall
    time leaves beyond the CPU time stretched by that contention.
    ``worker_bytes`` is one worker's private memory (None: not measured; only
    prefetched batches count against RAM then).
    """
    if facts.load_wall_s is None:
        return None
    load_cpu = facts.load_cpu_s if facts.load_cpu_s is not None else facts.load_wall_s  # unknown: assume CPU
    load_cpu = min(load_cpu, facts.load_wall_s)
    # NOTE [ Background load ] Other processes' load is measured (and noted in
    # the report) but not subtracted from the capacity: it is transient, and the
    # advice is for the machine's cores, not for whatever else ran during this
    # recording. It is taken out of the measured fetch times (below).
    free = float(max(1, facts.usable_cores))
    stretch = 1.0
    if facts.fetch_concurrency is not None:
        # Fetches waited for a core behind each other, the main process and other
        # processes (host samples): all of that was measured, so all of it comes out.
        taken = (facts.main_cpu_cores or 0.0) + facts.background_cores
        stretch = max(1.0, facts.fetch_concurrency / max(0.5, free - taken))
    load_io = max(0.0, facts.load_wall_s - load_cpu * stretch)
    if facts.load_blocked_s is not None:  # measured: the wait for a core is not I/O (NOTE [ Where the time goes ])
        load_io = facts.load_blocked_s
    handoff = facts.handoff_s if facts.num_workers > 0 and facts.handoff_s > 0 else default_handoff_s
    max_workers = MAX_WORKERS
    if facts.mem_available_min_bytes:
        per_worker = (worker_bytes or 0.0) + max(2, facts.prefetch_factor) * (facts.batch_nbytes or 0.0)
        if per_worker > 0:
            max_workers = max(1, min(MAX_WORKERS, int(memory_share * facts.mem_available_min_bytes / per_worker)))
    # See NOTE [ Contention ]: with workers, the measured step and hand-off
    # already include waiting for cores at the measured throughput.
    measured_contention = 0.0
    if facts.num_workers > 0:
        busy = min(1.0, facts.steady_batches_per_s * load_cpu / free)
        measured_contention = min(CONTENTION_S * busy, max(0.0, facts.step_mean_s + handoff - default_handoff_s))
    return LoaderModel(
        measured_contention_s=measured_contention,
        step_s=facts.step_mean_s,
        pace_step_s=facts.step_p50_s or None,
        handoff_s=handoff,
        load_io_s=load_io,
        load_cpu_s=load_cpu,
        step_cpu_s=facts.step_cpu_s,
        free_cores=free,
        max_workers=max_workers,
    )
