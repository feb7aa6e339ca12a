"""GPU and host samples on their own clock, taken beside the Sink: in the writer process."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from collector.sample.host import HostSampler
from collector.sample.nvml import Nvml
from collector.store.fold import DEFAULT_KEEP_BATCHES as DEFAULT_KEEP_BATCHES  # re-exported for the callbacks
from collector.store.fold import MIN_KEEP_BATCHES
from collector.store.schema import SAMPLE_TABLES

Warn = Callable[[str, str], None]
NvmlFactory = Callable[[Warn], Nvml]
HostFactory = Callable[[Warn], HostSampler]

DETAIL_MEMORY_INTERVAL_S = 5.0  # USS/PSS walk page tables: expensive
DETAIL_MEMORY_BUDGET = 0.001  # at most 1 ms of CPU a second on them; see Sampler.sample
DEVICE_REFRESH_INTERVAL_S = 5.0
SATURATED_PCT = 95.0  # whole-machine CPU at or above which the sampler backs off
RELAXED_PCT = 80.0  # ... and below which it returns to its rates
MAX_SLOWDOWN = 8  # at most 8x slower: 2 Hz host sampling becomes one sample every 4 s
SLOWED_NOTE = "note-sampling-slowed"  # stored with the run, not raised: see NOTE [ Saturated machine ]

# NOTE [ Saturated machine ]
# When the job fills every core, each sample the writer takes is CPU taken
# from the job. So after each host sample whose whole-machine CPU is at or
# above SATURATED_PCT the sampler doubles its intervals (GPU and host, up to
# MAX_SLOWDOWN) and leaves out the USS/PSS reads; below RELAXED_PCT it halves
# them again, back to the rates asked for. The first slow-down is noted with
# the run (in runs.warnings, starting "note: "), so whoever reads fewer
# samples knows why; it is not raised as a warning, as nothing is wrong.
# The first host sample never slows it: its share is over the time since
# the writer started (NOTE [ Our own processes ]). Beside a CPU hog it did,
# the next sample came a second later, and the training process was sampled
# once in bench_tune.py's 0.9-s first epochs of epoch-stall: too few for
# the tuner's first question, which waited an epoch.

# NOTE [ Sampling beside the writer ]
# psutil and NVML are called from Python code that holds its interpreter's
# GIL: in the training process, host sampling alone held it about 4.4 ms of
# every second (bench/, num_workers=2), time the training thread waits for.
# The writer process runs beside every run anyway, so the sampling happens
# there: it learns the training process's pid from the run start and the
# workers' pids from the epoch rows (NOTE [ Frames ]). psutil reads another
# process's CPU and memory as well as its own, and NVML finds the GPUs a pid
# computes on from any process. Where no writer process starts, the Sink
# and this Sampler run in the monitor thread together.

# NOTE [ Our own processes ]
# The diagnosis reads other processes' busy cores as the machine's busy
# cores less the job's (collector/diagnosis/accounting.py), and the tuner
# tries workers past a core each only where those stay under QUIET_CORES
# (collector/tune/propose.py). The collector's own processes are neither
# the job's nor another user's: the writer, whose start takes about 0.13 s
# of CPU, and the tuner's helper, whose imports take 0.36-0.41 s in the
# run's first second. Read as another's, they put bench_tune.py's photo
# pipeline's warm-up at 0.43 busy cores of other processes: its first
# question ranked only settings up to the cap, tried 2 workers at 1 thread
# (1.33x predicted, 1.01x measured) and no other, and the run stayed at its
# untuned speed. So the writer samples itself (from its first reading of
# the machine's counters) and the helpers it is told of (from their start:
# ``see_ours``) as proc_samples rows with roles COLLECTOR_ROLES, and the
# diagnosis subtracts them at each host sample. The host's first sample is
# left out too: its share is over the time since the writer started.


MAX_HZ = 100.0  # NVML buffers about 6 samples a second; psutil above 100 Hz costs the writer a core
# The sampling rates unless a caller says (watch(), the callbacks, `collector run`): defined here only.
DEFAULT_GPU_HZ = 10.0
DEFAULT_HOST_HZ = 2.0


@dataclass(frozen=True)
class Rates:
    """What the writer takes and keeps: samples per second, and the per-batch rows' window (NOTE [ Rollups ])."""

    gpu_hz: float = DEFAULT_GPU_HZ
    host_hz: float = DEFAULT_HOST_HZ
    keep_batches: int | None = DEFAULT_KEEP_BATCHES  # None: every batch stays a row

    def __post_init__(self) -> None:
        check_keep_batches(self.keep_batches)
        for name in ("gpu_hz", "host_hz"):
            value = getattr(self, name)
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not number or not 0 <= value <= MAX_HZ:  # NaN fails both comparisons
                raise ValueError(
                    f"{name} must be a number of samples per second from 0 to {MAX_HZ:g} "
                    f"(0 turns that sampling off), got {value!r}"
                )


def check_keep_batches(value: object) -> None:
    """Raises, saying how to fix it, unless ``value`` is None or an integer of at least MIN_KEEP_BATCHES."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < MIN_KEEP_BATCHES:
        raise ValueError(
            f"keep_batches must be a whole number of batches of at least {MIN_KEEP_BATCHES:,} (or None to keep "
            f"every batch as a row), got {value!r}"
        )


class Sampler:
    """Samples the GPUs and the host when due; hands the rows to whoever writes the next flush.

    ``nvml_factory`` and ``host_factory`` are parameters for tests (fake NVML, fake psutil).
    """

    def __init__(
        self,
        rates: Rates,
        main_pid: int,
        host_facts: dict[str, Any],
        warn: Warn,
        *,
        nvml_factory: NvmlFactory | None = None,
        host_factory: HostFactory | None = None,
        wall_clock: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.monotonic,
        cpu_clock: Callable[[], float] = time.thread_time,
    ) -> None:
        self.rates = rates
        self._wall = wall_clock
        self._clock = clock
        self._cpu_clock = cpu_clock
        self._rows: dict[str, list[tuple[Any, ...]]] = {table: [] for table in SAMPLE_TABLES}
        self._update: dict[str, Any] = {}
        self._workers: dict[int, int] = {}  # pid -> worker id, of the newest epoch
        self._newest_epoch = -1
        self._handed = 0  # rows handed on by take()
        self._nvml: Nvml | None = None
        self._host: HostSampler | None = None
        self._due = {"gpu": float("inf"), "host": float("inf"), "detail": 0.0, "devices": 0.0}
        self._warn = warn
        self.slowdown = 1  # NOTE [ Saturated machine ]
        self._noted = False
        self._read_host = False  # a host sample taken: the next is the first to read the machine's load
        if rates.gpu_hz > 0:
            nvml = (nvml_factory or (lambda w: Nvml(w, pid=main_pid)))(warn)
            if nvml.available:
                self._nvml = nvml
                self._due["gpu"] = 0.0
                self._update["host"] = json.dumps({**host_facts, "gpus": nvml.device_info()}, default=str)
            else:
                self._update["host"] = json.dumps({**host_facts, "gpus": [], "no_gpu": nvml.unavailable}, default=str)
                nvml.close()
        self._ours: dict[int, str] = {}  # pid -> role: NOTE [ Our own processes ]
        if rates.host_hz > 0:
            self._host = (host_factory or (lambda w: HostSampler(w, main_pid=main_pid)))(warn)
            self._due["host"] = 0.0
            if os.getpid() != main_pid:
                self.see_ours(os.getpid(), "writer")

    def due(self) -> float:
        """When the next sample is due, on ``clock``; infinity when nothing is sampled."""
        return min(self._due["gpu"], self._due["host"])

    def sample(self, final: bool = False) -> None:
        """Take whatever is due (and a last GPU sample when ``final``)."""
        now = self._clock()
        wall = self._wall()
        due = self._due
        if self._nvml is not None and (final or now >= due["gpu"]):
            if now >= due["devices"]:
                self._nvml.refresh_devices()
                due["devices"] = now + DEVICE_REFRESH_INTERVAL_S
            self._rows["gpu_samples"].extend(self._nvml.sample(wall))
            due["gpu"] = now + self.slowdown / self.rates.gpu_hz
        if self._host is not None and now >= due["host"]:
            detail = now >= due["detail"] and self.slowdown == 1 and bool(self._workers)  # workers' USS only
            cpu0 = self._cpu_clock()
            h = self._host.host(wall)
            per_core = None if h.per_core_pct is None else json.dumps(h.per_core_pct)
            self._rows["host_samples"].append((h.ts, h.cpu_pct, per_core, h.mem_available_bytes, h.disk_read_bps))
            procs = self._host.processes(wall, self._workers, detail, self._ours)
            self._rows["proc_samples"].extend(procs)
            self._ours = {p.pid: p.role for p in procs if p.pid in self._ours}  # an ended helper is not read again
            if detail:
                # USS/PSS cost 4-7 ms of CPU a worker (a torch process's page
                # tables; measured), more for a bigger process: with many
                # workers, read them less often than every 5 s rather than
                # spend more than the budget. Only the workers' are read: the
                # diagnosis uses them (copy-on-write growth, the memory each
                # worker takes), and the main process's chart line is its RSS.
                spent = self._cpu_clock() - cpu0
                due["detail"] = now + max(DETAIL_MEMORY_INTERVAL_S, spent / DETAIL_MEMORY_BUDGET)
            self._adapt(h.cpu_pct if self._read_host else None)
            self._read_host = True
            due["host"] = now + self.slowdown / self.rates.host_hz

    def _adapt(self, cpu_pct: float | None) -> None:
        """Back off while the machine is saturated, return when it is not: NOTE [ Saturated machine ]."""
        if cpu_pct is None:
            return
        if cpu_pct >= SATURATED_PCT and self.slowdown < MAX_SLOWDOWN:
            self.slowdown *= 2
            if not self._noted:
                self._noted = True
                self._warn(
                    SLOWED_NOTE,
                    f"note: the machine's CPU was saturated ({cpu_pct:.0f}% of every core): GPU and host sampling "
                    f"slowed down, up to {MAX_SLOWDOWN}x, and USS/PSS reads paused, while it lasted",
                )
        elif cpu_pct < RELAXED_PCT and self.slowdown > 1:
            self.slowdown //= 2

    @property
    def taken(self) -> int:
        """Sample rows taken so far, written or not (NOTE [ Accounting ] in collector/store/connection.py)."""
        return self._handed + sum(len(r) for r in self._rows.values())

    def workers(self) -> list[int]:
        """The pids of the newest epoch's workers."""
        return list(self._workers)

    def see_workers(self, epoch: int, worker_pids: list[int]) -> None:
        """Follow the workers of the newest epoch: ``worker_pids[i]`` is worker i's pid."""
        if epoch > self._newest_epoch:
            self._newest_epoch = epoch
            self._workers = {pid: i for i, pid in enumerate(worker_pids)}

    def see_ours(self, pid: int, role: str, started: float | None = None) -> None:
        """Sample one of the collector's own processes too (``role`` in COLLECTOR_ROLES), from ``started`` (monotonic)."""
        if self._host is not None:
            self._ours[pid] = role
            self._host.follow(pid, started)

    def take(self) -> tuple[dict[str, list[tuple[Any, ...]]], dict[str, Any]]:
        """The rows sampled since the last take, and the run update (the GPUs found), once."""
        rows, self._rows = self._rows, {table: [] for table in SAMPLE_TABLES}
        self._handed += sum(len(r) for r in rows.values())
        update, self._update = self._update, {}
        return rows, update

    def close(self) -> None:
        if self._nvml is not None:
            self._nvml.close()
        if self._host is not None:
            self._host.close()
