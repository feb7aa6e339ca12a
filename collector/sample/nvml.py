"""The only module that calls NVML: GPU utilisation, memory and power samples."""

from __future__ import annotations

import os
from collections.abc import Callable
from types import ModuleType
from typing import Any, NamedTuple

Warn = Callable[[str, str], None]

NO_DRIVER_HINT = (
    "GPU metrics are off: NVML is not available ({reason}). "
    "Install the NVIDIA driver and `pip install nvidia-ml-py` to record GPU utilisation."
)


class GpuSample(NamedTuple):  # a tuple: it is the gpu_samples row as it stands
    ts: float  # Unix seconds
    gpu: int  # NVML device index
    util_pct: float | None
    mem_used_bytes: int | None
    mem_total_bytes: int | None
    power_w: float | None


def _load_pynvml() -> ModuleType:
    import pynvml

    return pynvml


def _describe(exc: BaseException) -> str:
    return exc.__class__.__name__ + (f": {exc}" if str(exc) else "")


class Nvml:
    """A probe that never raises: a missing metric is None, a missing driver is one warning.

    ``pynvml`` is a parameter so tests hand in a small fake module.
    """

    def __init__(self, warn: Warn, pynvml: ModuleType | None = None, pid: int | None = None) -> None:
        self._warn = warn
        self._pid = os.getpid() if pid is None else pid
        self._nv: Any = None
        self._handles: dict[int, Any] = {}
        self._last_seen_us: dict[int, int] = {}
        self._use_samples = True
        self.unavailable: str | None = None  # why there are no GPU samples (no driver, no GPU), for the run record
        try:
            nv = pynvml if pynvml is not None else _load_pynvml()
        except ImportError as exc:
            self._no_gpu(_describe(exc))
            return
        try:
            nv.nvmlInit()
            count = nv.nvmlDeviceGetCount()
            self._all = {i: nv.nvmlDeviceGetHandleByIndex(i) for i in range(count)}
        except (nv.NVMLError, OSError) as exc:  # no driver, no library: no GPU data
            self._no_gpu(_describe(exc))
            return
        self._nv = nv
        self._handles = self._visible(self._all)
        if not self._handles:
            self.unavailable = "NVML found no GPU" + (" in CUDA_VISIBLE_DEVICES" if self._all else "")

    def _no_gpu(self, reason: str) -> None:
        # NOTE [ No GPU ]
        # A CPU-only machine is a normal state: the reason goes into the run's
        # host record ("no_gpu") and is handed on under the key "nvml"; the
        # monitor warns with it only if the training process uses CUDA.
        self.unavailable = f"NVML is not available ({reason})"
        self._warn("nvml", NO_DRIVER_HINT.format(reason=reason))

    @property
    def available(self) -> bool:
        return self._nv is not None and bool(self._handles)

    def _visible(self, handles: dict[int, Any]) -> dict[int, Any]:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is None:
            return handles
        picked = [int(v) for v in visible.split(",") if v.strip().isdigit()]
        return {i: handles[i] for i in picked if i in handles} if picked else handles

    def refresh_devices(self) -> None:
        """Narrow to the GPUs this process computes on, once it shows up on any."""
        if self._nv is None:
            return
        mine = {}
        for index, handle in self._all.items():
            try:
                procs = self._nv.nvmlDeviceGetComputeRunningProcesses(handle)
            except self._nv.NVMLError:  # unsupported query: keep the visible set
                return
            if any(p.pid == self._pid for p in procs):
                mine[index] = handle
        if mine:
            self._handles = mine

    def device_info(self) -> list[dict[str, Any]]:
        """Name, memory and driver of each sampled GPU, for the run's host record."""
        if self._nv is None:
            return []
        driver = self._call(self._nv.nvmlSystemGetDriverVersion)
        info = []
        for index, handle in self._handles.items():
            mem = self._call(self._nv.nvmlDeviceGetMemoryInfo, handle)
            name = self._call(self._nv.nvmlDeviceGetName, handle)
            info.append(
                {
                    "index": index,
                    "name": name.decode() if isinstance(name, bytes) else name,
                    "mem_total_bytes": None if mem is None else int(mem.total),
                    "driver": driver.decode() if isinstance(driver, bytes) else driver,
                }
            )
        return info

    def sample(self, now: float) -> list[GpuSample]:
        """Every utilisation sample NVML buffered since the last call, plus memory and power."""
        samples: list[GpuSample] = []
        for index, handle in self._handles.items():
            mem = self._call(self._nv.nvmlDeviceGetMemoryInfo, handle)
            power_mw = self._call(self._nv.nvmlDeviceGetPowerUsage, handle)
            used = None if mem is None else int(mem.used)
            total = None if mem is None else int(mem.total)
            power_w = None if power_mw is None else power_mw / 1000.0
            buffered = self._buffered_util(index, handle)
            if buffered:
                for ts, util in buffered:
                    samples.append(GpuSample(ts, index, util, used, total, power_w))
                continue
            if buffered is not None:  # the buffer works but holds nothing new yet
                samples.append(GpuSample(now, index, None, used, total, power_w))
                continue
            rates = self._call(self._nv.nvmlDeviceGetUtilizationRates, handle)
            rate_pct = None if rates is None else float(rates.gpu)
            samples.append(GpuSample(now, index, rate_pct, used, total, power_w))
        return samples

    def _buffered_util(self, index: int, handle: Any) -> list[tuple[float, float]] | None:
        """New (ts, util_pct) samples; None when the buffer is unsupported (use rates)."""
        # NOTE [ NVML samples ]
        # nvmlDeviceGetSamples returns the driver's ring buffer of utilisation
        # samples newer than a timestamp (microseconds). Its period (about
        # 1/6 s on many GPUs) decides whether a short sawtooth can be seen at
        # all; keeping every sample is the finest view NVML offers.
        if not self._use_samples:
            return None
        nv = self._nv
        try:
            _, raw = nv.nvmlDeviceGetSamples(handle, nv.NVML_GPU_UTILIZATION_SAMPLES, self._last_seen_us.get(index, 0))
        except nv.NVMLError_NotSupported:
            self._use_samples = False
            return None
        except nv.NVMLError_NotFound:
            return []
        except nv.NVMLError as exc:  # any other NVML error: fall back to rates
            self._warn("nvml-samples", f"NVML sample buffer failed ({exc}); using utilisation rates")
            self._use_samples = False
            return None
        out = []
        last = self._last_seen_us.get(index, 0)
        for s in raw:
            if s.timeStamp <= last:
                continue
            out.append((s.timeStamp / 1e6, float(s.sampleValue.uiVal)))
        if out:
            self._last_seen_us[index] = max(s.timeStamp for s in raw)
        return out

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except self._nv.NVMLError_NotSupported:
            return None
        except self._nv.NVMLError as exc:  # NVML failing mid-run: NULL and one warning
            self._warn(
                "nvml-" + getattr(fn, "__name__", "call"), f"NVML call {getattr(fn, '__name__', fn)} failed: {exc}"
            )
            return None

    def close(self) -> None:
        if self._nv is not None:
            try:
                self._nv.nvmlShutdown()
            except self._nv.NVMLError:  # shutting down: nothing left to protect
                pass
            self._nv = None
