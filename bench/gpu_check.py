"""The GPU check: a real CUDA training step fed by a CPU-heavy DataLoader, recorded through watch, checked end to end.

usage: python bench/gpu_check.py [--seconds 12] [--workers 0,2,4] [--device cuda|cpu] [--db PATH]

For a machine with an NVIDIA GPU (one short run, a few minutes). A small CNN
trains on synthetic 64 px images on the GPU; each sample costs about 2 ms of
CPU to "decode" (so the GPU starves at num_workers=0). For each num_workers
(and, at the largest, with and without pin_memory) it records a run through
``collector.watch`` and checks:

- NVML samples arrive at the configured rate (``gpu_hz``), within 20%;
- starved (num_workers=0), the diagnosis sees the GPU utilisation sawtooth;
- the CUDA-event idle time during waits is within 25% (or 5 ms a batch) of the waits measured;
- ``pageable_memory`` fires without ``pin_memory`` and not with it;
- the speed-up predicted at num_workers=0 for its suggestion is within 25% of the one measured.

Prints one line per check, PASS / FAIL / SKIP with the numbers, and exits 1
if any failed. ``--device cpu`` runs the same code without a GPU (the
GPU-only checks then SKIP): that is what the test suite runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from collector import diagnose, watch
from collector.errors import StallwatchError
from collector.store.reader import Reader

CPU_PER_SAMPLE_S = 0.002
GPU_HZ = 10.0


class Decoding(Dataset[tuple[torch.Tensor, int]]):
    """A synthetic image whose 'decoding' keeps one core busy ``cpu_s``."""

    def __init__(self, cpu_s: float = CPU_PER_SAMPLE_S, length: int = 1 << 16) -> None:
        self.cpu_s, self.length = cpu_s, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        end = time.thread_time() + self.cpu_s
        while time.thread_time() < end:
            pass
        g = torch.Generator().manual_seed(index)
        return torch.rand(3, 64, 64, generator=g), index % 10


def model_for(device: str) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(), nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(64 * 16, 10),
    ).to(device)  # fmt: skip


@dataclass
class Run:
    workers: int
    pinned: bool
    name: str
    batches_per_s: float


def train(db: str, device: str, workers: int, pinned: bool, seconds: float, cpu_s: float = CPU_PER_SAMPLE_S) -> Run:
    loader = DataLoader(Decoding(cpu_s), batch_size=32, shuffle=True, num_workers=workers, pin_memory=pinned)
    net = model_for(device)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    name = f"gpu-check-{workers}-{'pinned' if pinned else 'pageable'}"
    batches, t0 = 0, None
    deadline = time.monotonic() + seconds
    with watch(loader, db=db, run=name, gpu_hz=GPU_HZ) as watched:
        while time.monotonic() < deadline:
            for x, y in watched:
                x, y = x.to(device, non_blocking=pinned), y.to(device, non_blocking=pinned)
                opt.zero_grad()
                nn.functional.cross_entropy(net(x), y).backward()
                opt.step()
                batches += 1
                if batches == 5:  # warm-up over: time from here
                    t0 = time.perf_counter()
                if time.monotonic() >= deadline:
                    break
        if device.startswith("cuda"):
            torch.cuda.synchronize()
    elapsed = time.perf_counter() - (t0 or time.perf_counter())
    return Run(workers, pinned, name, (batches - 5) / elapsed if elapsed > 0 else 0.0)


def verdict(ok: bool | None, what: str, numbers: str) -> str:
    word = "SKIP" if ok is None else ("PASS" if ok else "FAIL")
    return f"{word}  {what}: {numbers}"


def checks(db: str, runs: list[Run], on_gpu: bool) -> list[str]:
    reader = Reader(db)
    out = []
    base = next(r for r in runs if r.workers == 0 and not r.pinned)
    info = reader.run(base.name)
    samples = reader.gpu_samples(int(info["id"]))
    batches = reader.batches(int(info["id"]))
    span = float(batches["ts"].max() - batches["ts"].min()) if len(batches) > 1 else 0.0
    if on_gpu and span > 0:
        per_gpu = samples.groupby("gpu").size().max() if not samples.empty else 0
        rate = per_gpu / span
        out.append(
            verdict(
                abs(rate - GPU_HZ) <= 0.2 * GPU_HZ,
                "NVML samples at the configured rate",
                f"{rate:.1f}/s for {GPU_HZ:g}/s",
            )
        )
    else:
        out.append(verdict(None, "NVML samples at the configured rate", "no GPU"))
    report = diagnose(db, run=base.name)
    ids = {s.id for s in report.symptoms}
    out.append(
        verdict(
            "gpu_util_sawtooth" in ids if on_gpu else None,
            "sawtooth when starved (0 workers)",
            f"symptoms {sorted(ids)}",
        )
    )
    idle = batches["gpu_idle_s"].dropna()
    if on_gpu and len(idle):
        waits = batches.loc[idle.index, "wait_s"]
        gap = abs(float(idle.sum()) - float(waits.sum()))
        ok = gap <= max(0.25 * float(waits.sum()), 0.005 * len(idle))
        out.append(
            verdict(
                ok,
                "CUDA-event idle time against the measured wait",
                f"idle {idle.sum():.2f} s, waits {waits.sum():.2f} s over {len(idle)} batches",
            )
        )
    else:
        out.append(verdict(None, "CUDA-event idle time against the measured wait", "no GPU (no CUDA events)"))
    top = max(r.workers for r in runs)
    pageable = next((r for r in runs if r.workers == top and not r.pinned), None)
    pinned = next((r for r in runs if r.workers == top and r.pinned), None)
    if on_gpu and pageable and pinned:
        fired = {
            name: "pageable_memory" in {s.id for s in diagnose(db, run=name).symptoms}
            for name in (pageable.name, pinned.name)
        }
        out.append(
            verdict(
                fired[pageable.name] and not fired[pinned.name], "pageable_memory without pin_memory only", str(fired)
            )
        )
    else:
        out.append(verdict(None, "pageable_memory without pin_memory only", "no GPU: the rule never fires on the CPU"))
    suggested = [s for s in report.suggestions if s.parameter == "num_workers"]
    if suggested and suggested[0].expected_speedup:
        target = suggested[0].suggested
        measured = [r for r in runs if r.workers == target and not r.pinned]
        if measured:
            got = measured[0].batches_per_s / max(base.batches_per_s, 1e-9)
            pred = suggested[0].expected_speedup
            out.append(
                verdict(
                    abs(pred - got) <= 0.25 * got,
                    "predicted against measured speed-up",
                    f"num_workers={target}: predicted {pred:.2f}x, measured {got:.2f}x",
                )
            )
        else:
            out.append(
                verdict(None, "predicted against measured speed-up", f"num_workers={target} was not among --workers")
            )
    else:
        out.append(
            verdict(None, "predicted against measured speed-up", f"no num_workers suggestion ({report.verdict})")
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--workers", default="0,2,4")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--db", default=None)
    parser.add_argument("--cpu-ms", type=float, default=CPU_PER_SAMPLE_S * 1000, help="CPU per sample (default 2)")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    on_gpu = args.device.startswith("cuda") and torch.cuda.is_available()
    if args.device.startswith("cuda") and not on_gpu:
        print("no CUDA device: run with --device cpu, or on a machine with an NVIDIA GPU")
        return 2
    db = args.db or os.path.join(tempfile.mkdtemp(prefix="gpu-check-"), "gpu_check.sqlite")
    workers = sorted({0, *(int(w) for w in args.workers.split(","))})  # 0 is the starved baseline
    gpu = torch.cuda.get_device_name(0) if on_gpu else "none"
    print(f"device {args.device} ({gpu}); {os.cpu_count()} cores; torch {torch.__version__}; file {db}")
    cpu_s = args.cpu_ms / 1000
    runs = [train(db, args.device, n, False, args.seconds, cpu_s) for n in workers]
    runs.append(train(db, args.device, max(workers), True, args.seconds, cpu_s))
    for r in runs:
        print(f"      num_workers={r.workers} pin_memory={r.pinned}: {r.batches_per_s:.1f} batches/s")
    try:
        lines = checks(db, runs, on_gpu)
    except StallwatchError as exc:
        lines = [verdict(False, "recorded enough to check", str(exc))]
    print("\n".join(lines))
    print(
        "speed-ups measured: "
        + ", ".join(
            f"{r.workers}: {r.batches_per_s / max(runs[0].batches_per_s, 1e-9):.2f}x" for r in runs if not r.pinned
        )
    )
    return 1 if any(line.startswith("FAIL") for line in lines) else 0


if __name__ == "__main__":
    sys.exit(main())
