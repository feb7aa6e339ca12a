"""A long run recorded through the writer's own code (the Sink, its fold), fast: clock pairs as the C hot loop sends them.

    record(path, batches=1_200_000, keep_batches=100_000)

Each flush carries the clock pairs of ``flush_s`` simulated seconds, as the
compiled Timer hands them over (NOTE [ Compiled hot loop ]), with its epoch
rows, and the samples a 10 Hz GPU and 2 Hz host sampler would have taken in
that time (a stand-in for the Sampler: the simulated clock runs far ahead of
the real one). The Sink writes, folds and accounts for them exactly as the
writer process does; only the pipe and the real loop are left out. The waits
follow a sawtooth: ``starved_share`` of every 60 s the loop waits about as long
as its step, otherwise a ready hand-off.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from collector.sample.sampler import Rates
from collector.store.fold import DEFAULT_KEEP_BATCHES
from collector.writer.frames import EpochRow, Flush, Open, RunStart
from collector.writer.sink import Sink

PERIOD_S = 60.0  # the sawtooth's period


@dataclass
class SyntheticSampler:
    """What the Sink asks of its Sampler, with rows on the simulated clock (the real one is far behind)."""

    gpu_hz: float = 10.0
    host_hz: float = 2.0
    pid: int = 4242
    taken: int = 0
    pending: dict[str, list[tuple[Any, ...]]] = field(default_factory=dict)

    def between(self, t0: float, t1: float, starved_at: Any) -> None:
        """The rows sampled in [t0, t1) of simulated time."""
        rows: dict[str, list[tuple[Any, ...]]] = {"gpu_samples": [], "host_samples": [], "proc_samples": []}
        if self.gpu_hz > 0:
            for ts in np.arange(np.ceil(t0 * self.gpu_hz), np.ceil(t1 * self.gpu_hz)) / self.gpu_hz:
                util = 20.0 if starved_at(ts) else 95.0
                rows["gpu_samples"].append((float(ts), 0, util, 30 << 30, 80 << 30, 250.0))
        if self.host_hz > 0:
            for ts in np.arange(np.ceil(t0 * self.host_hz), np.ceil(t1 * self.host_hz)) / self.host_hz:
                rows["host_samples"].append((float(ts), 30.0, json.dumps([30.0] * 8), 64 << 30, 1e6))
                cpu_s = float(ts - self.start) * 0.9
                rows["proc_samples"].append(
                    (float(ts), self.pid, "main", None, 90.0, 4 << 30, None, None, cpu_s, 0.01 * cpu_s, 12)
                )
        for table, new in rows.items():
            self.pending.setdefault(table, []).extend(new)
        self.taken += sum(len(new) for new in rows.values())

    start: float = 0.0

    def see_workers(self, epoch: int, pids: list[int]) -> None:
        pass

    def sample(self, final: bool = False) -> None:
        pass

    def take(self) -> tuple[dict[str, list[tuple[Any, ...]]], dict[str, Any]]:
        out, self.pending = self.pending, {}
        return out, {}

    def close(self) -> None:
        pass


def record(
    path: str,
    *,
    batches: int,
    keep_batches: int | None = DEFAULT_KEEP_BATCHES,
    rate_hz: float = 200.0,
    epoch_batches: int = 50_000,
    starved_share: float = 0.3,
    flush_s: float = 10.0,
    samples: bool = True,
    end_at: float | None = None,
    seed: int = 0,
    name: str = "simulated",
    after_flush: Callable[[Sink, int], None] | None = None,
) -> int:
    """Record one completed run of ``batches`` batches at about ``rate_hz``; returns its run id.

    ``after_flush(sink, batches_so_far)`` runs after each write (a test's scrape or fault).
    """
    rng = np.random.default_rng(seed)
    cycle_s = 1.0 / rate_hz
    step_ns = np.full(batches, cycle_s * 0.6e9)
    starved_wait = cycle_s * 0.9e9
    # the sawtooth on the batch's position in time, near enough: batch i is at about i * cycle
    phase = (np.arange(batches) * cycle_s) % PERIOD_S
    starved = phase >= PERIOD_S * (1.0 - starved_share)
    wait_ns = np.where(starved, starved_wait, cycle_s * 0.02e9) * rng.uniform(0.5, 1.5, batches)
    t_request = np.cumsum(step_ns + wait_ns) - wait_ns
    t_return = (t_request + wait_ns).astype(np.int64)
    t_request = t_request.astype(np.int64)
    duration_s = float(t_return[-1]) / 1e9
    wall0 = (time.time() if end_at is None else end_at) - duration_s - 1.0
    start = RunStart(
        name,
        {"num_workers": 0, "batch_size": 32, "shuffle": True, "prefetch_factor": None},
        {"logical_cores": 8, "physical_cores": 4, "usable_cores": 8, "ram_bytes": 64 << 30},
        {"stallwatch": "bench"},
        "bench",
        4242,
        "simulate.py",
        None,
        None,
    )
    sink = Sink(Open(path, start, wall0, 0, Rates(0, 0, keep_batches)))
    sampler = SyntheticSampler(gpu_hz=10.0 if samples else 0.0, host_hz=2.0 if samples else 0.0, start=wall0)
    sink.sampler = sampler  # type: ignore[assignment]
    try:
        starved_at = lambda ts: ((ts - wall0) % PERIOD_S) >= PERIOD_S * (1.0 - starved_share)  # noqa: E731
        per_flush = max(1, int(flush_s * rate_hz))
        epoch_of = np.arange(batches) // epoch_batches
        i, sampled_to = 0, wall0
        while i < batches:
            epoch = int(epoch_of[i])
            j = min(i + per_flush, batches, (epoch + 1) * epoch_batches)
            pairs = np.column_stack([t_request[i:j], t_return[i:j]]).astype(np.int64).tobytes()
            first = i - epoch * epoch_batches
            rows = [_epoch_row(epoch, epoch_batches, wall0, t_request, t_return, j, batches)]
            now = wall0 + float(t_return[j - 1]) / 1e9
            sampler.between(sampled_to, now, starved_at)
            sampled_to = now
            last = j == batches
            update = {"status": "completed", "ended_at": now} if last else {}
            sink.write(
                Flush(timed=[(epoch, first, pairs)], epochs=rows, update=update, iterated=batches if last else None)
            )
            i = j
            if after_flush is not None:
                after_flush(sink, i)
    finally:
        sink.store.close()
    return sink.run_id


def _epoch_row(
    epoch: int, size: int, wall0: float, t_request: np.ndarray, t_return: np.ndarray, upto: int, total: int
) -> EpochRow:
    lo = epoch * size
    hi = min(lo + size, total)
    started = wall0 + float(t_request[lo]) / 1e9 - 0.001
    done = upto >= hi
    return EpochRow(
        epoch=epoch,
        started_at=started,
        ended_at=wall0 + float(t_return[hi - 1]) / 1e9 + 0.0005 if done else None,
        first_batch_s=float(t_return[lo] - t_request[lo]) / 1e9 + 0.001,
        batches=min(upto, hi) - lo,
        end_wait_s=0.0005 if done else None,
        collector_s=0.0,
    )
