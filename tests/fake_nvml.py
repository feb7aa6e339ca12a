"""A pynvml stand-in, shaped like the parts of pynvml that collector/sample/nvml.py uses."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any


class FakeNVMLError(Exception):
    pass


class FakeNotSupported(FakeNVMLError):
    pass


class FakeNotFound(FakeNVMLError):
    pass


class FakeNvml:
    """A pynvml stand-in: two GPUs, a utilisation ring buffer per GPU, memory and power."""

    NVML_GPU_UTILIZATION_SAMPLES = 1
    NVMLError = FakeNVMLError
    NVMLError_NotSupported = FakeNotSupported
    NVMLError_NotFound = FakeNotFound

    def __init__(self, gpus: int = 2, init_error: Exception | None = None, samples: bool = True) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.samples_supported = samples
        self.ring: dict[int, list[tuple[int, int]]] = {i: [] for i in range(gpus)}
        self.fail_memory_after: int | None = None
        self.memory_calls = 0
        self.shutdown_called = False

    def push(self, gpu: int, ts_us: int, util: int) -> None:
        self.ring[gpu].append((ts_us, util))

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise self.init_error

    def nvmlShutdown(self) -> None:
        self.shutdown_called = True

    def nvmlDeviceGetCount(self) -> int:
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.54.15"

    def nvmlDeviceGetName(self, handle: int) -> str:
        return "Fake H200"

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        self.memory_calls += 1
        if self.fail_memory_after is not None and self.memory_calls > self.fail_memory_after:
            raise FakeNVMLError("GPU is lost")
        return SimpleNamespace(used=(handle + 1) * 2**30, total=80 * 2**30, free=0)

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        return 250_000  # in milliwatts

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=42, memory=10)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Any]:
        return []

    def nvmlDeviceGetSamples(self, handle: int, kind: int, last_seen_us: int) -> tuple[int, list[Any]]:
        if not self.samples_supported:
            raise FakeNotSupported()
        rows = [
            SimpleNamespace(timeStamp=ts, sampleValue=SimpleNamespace(uiVal=util))
            for ts, util in self.ring[handle]
            if ts > last_seen_us
        ]
        if not rows:
            raise FakeNotFound()
        return 1, rows
