"""Shared fixtures: a database path, a fake NVML module, a fake clock, starving datasets."""

from __future__ import annotations

import os
import sqlite3
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from collector.errors import CollectorWarning

os.environ.setdefault("STALLWATCH_TEST", "1")


@pytest.fixture
def db_path(tmp_path: Path) -> str:
    return str(tmp_path / "stallwatch.sqlite")


@pytest.fixture
def collector_warnings() -> Iterator[list[warnings.WarningMessage]]:
    """Every CollectorWarning raised while the test runs (from any thread)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CollectorWarning)
        yield caught


def collector_messages(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, CollectorWarning)]


def query(path: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def wait_until(predicate: Any, timeout_s: float = 10.0, interval_s: float = 0.02) -> bool:
    """Poll ``predicate`` until true or the deadline passes (no fixed sleeps)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return bool(predicate())


# -- a fake NVML, shaped like the parts of pynvml that collector/sample/nvml.py uses ------


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


@pytest.fixture
def fake_nvml() -> FakeNvml:
    return FakeNvml()


@pytest.fixture(autouse=True)
def _restore_main_module() -> Iterator[None]:
    """AppTest swaps sys.modules['__main__'] for the app script; spawn workers need the real one back."""
    import sys

    main = sys.modules.get("__main__")
    yield
    if main is not None:
        sys.modules["__main__"] = main
