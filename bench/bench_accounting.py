"""Where the time goes, against ground truth: datasets with a known CPU and sleep cost, idle and beside a CPU hog.

usage: python bench/bench_accounting.py [--seconds 4] [--repeats 2] [--workers 0,2] [--hog-procs 2]

Each case records a real loop through ``watch`` (a 10 ms sleeping step, batch
16) over a dataset whose every sample costs a known CPU time (a busy loop on
the thread's CPU clock) and a known sleep (storage-like), and prints the split
the collector measured for producing one batch (CPU, waiting for a core,
blocked) against what was injected, the old "wall - CPU" I/O share for
contrast, and which of io_bound_fetch / cpu_contention fired. Cases run
interleaved, ``--repeats`` times; ``hog`` cases beside ``--hog-procs`` busy
processes started for the case and stopped after it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import torch
from torch.utils.data import DataLoader, Dataset

from collector import diagnose, watch

HOG = "while True: pass"


class Costly(Dataset[tuple[torch.Tensor, int]]):
    """Each sample: ``cpu_s`` of CPU on the thread's clock, then ``sleep_s`` asleep."""

    def __init__(self, cpu_s: float, sleep_s: float) -> None:
        self.cpu_s, self.sleep_s = cpu_s, sleep_s

    def __len__(self) -> int:
        return 1 << 16

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        end = time.thread_time() + self.cpu_s
        x = 0.0
        while time.thread_time() < end:
            x += 1.0
        if self.sleep_s:
            time.sleep(self.sleep_s)
        return torch.full((64,), x), index % 10


CASES = {  # name -> (cpu per sample, sleep per sample, hog)
    "sleeping (storage-like), idle": (0.0, 0.002, False),
    "CPU, idle": (0.001, 0.0, False),
    "CPU, beside a CPU hog": (0.001, 0.0, True),
    "storage-like, beside a CPU hog": (0.0001, 0.002, True),
}


def record(db: str, dataset: Dataset, workers: int, seconds: float, name: str) -> None:
    loader = DataLoader(dataset, batch_size=16, num_workers=workers)
    torch.set_num_threads(1)
    deadline = time.monotonic() + seconds
    with watch(loader, db=db, run=name, gpu_hz=0) as watched:
        while time.monotonic() < deadline:
            for _ in watched:
                time.sleep(0.010)
                if time.monotonic() >= deadline:
                    break


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--workers", default="0,2")
    parser.add_argument("--hog-procs", type=int, default=2)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    db = os.path.join(tempfile.mkdtemp(prefix="bench-accounting-"), "runs.sqlite")
    rows: dict[tuple[str, int], list[dict]] = {}
    loads = []
    for rep in range(args.repeats):
        for workers in [int(w) for w in args.workers.split(",")]:
            for case, (cpu_s, sleep_s, hog) in CASES.items():
                hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(args.hog_procs if hog else 0)]
                try:
                    name = f"{case}|{workers}|{rep}"
                    record(db, Costly(cpu_s, sleep_s), workers, args.seconds, name)
                    loads.append(os.getloadavg()[0])
                finally:
                    for h in hogs:
                        h.kill()
                        h.wait()
                report = diagnose(db, run=name)
                split = report.summary["time_split"]["load"]
                rows.setdefault((case, workers), []).append(
                    {**split, "ids": {s.id for s in report.symptoms}, "others": report.summary["cpu_cores"]["others"]}
                )
    print(f"{os.cpu_count()} cores; load average over the runs median {statistics.median(loads):.2f} "
          f"(range {min(loads):.2f}-{max(loads):.2f}); {args.repeats} repeats, medians; per batch of 16 samples")  # fmt: skip
    print("\n| case | workers | injected CPU / asleep | measured wall | CPU | waiting for a core | blocked | "
          "old 'wall - CPU' I/O share | measured blocked share | io_bound_fetch | cpu_contention | other processes, cores |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (case, workers), got in rows.items():
        cpu_s, sleep_s, _ = CASES[case]

        wall, cpu, runq, blocked = (_median(got, key) for key in ("wall_s", "cpu_s", "runq_s", "blocked_s"))
        io_fired = sum("io_bound_fetch" in g["ids"] for g in got)
        cc_fired = sum("cpu_contention" in g["ids"] for g in got)
        print(
            f"| {case} | {workers} | {16 * cpu_s * 1000:.1f} / {16 * sleep_s * 1000:.1f} ms | {wall * 1000:.1f} ms | "
            f"{cpu * 1000:.1f} ms | {runq * 1000:.1f} ms | {blocked * 1000:.1f} ms | {(wall - cpu) / wall:.0%} | "
            f"{blocked / wall:.0%} | {io_fired}/{len(got)} | {cc_fired}/{len(got)} | {_median(got, 'others'):.2f} |"
        )


def _median(rows: list[dict], key: str) -> float:
    vals = [r[key] for r in rows if r[key] is not None]
    return statistics.median(vals) if vals else float("nan")


if __name__ == "__main__":
    main()
