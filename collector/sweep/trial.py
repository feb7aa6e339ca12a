"""One sweep trial: build the user's loader with one setting, consume it through ``watch``, measure."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from collector.diagnosis.setting import Setting
from collector.record.batchinfo import describe_batch
from collector.sweep.grid import factory_kwargs

HOST_HZ = 4.0  # memory samples per second; trials are short
MIN_BATCHES = 5  # measured batches before a trial may end
MAX_WARMUP_BATCHES = 64

Factory = Callable[..., Any]


@dataclass(frozen=True)
class Trial:
    """What one setting measured: a record, the decision's to read (collector/diagnosis/decide.py).

    ``error`` set: the factory or the loader raised.
    """

    setting: Setting
    samples_per_s: float | None = None  # after warm-up, start-up excluded
    batches_per_s: float | None = None
    wait_share: float | None = None  # share of the measured time the loop waited in next()
    startup_s: float | None = None  # iter() to the first batch: worker start-up
    batches: int = 0  # measured batches, warm-up excluded
    warmup_batches: int = 0
    epochs: int = 0  # epochs started
    peak_rss_bytes: int | None = None  # main process + workers, at the busiest sample
    worker_rss_bytes: int | None = None  # median RSS of one worker
    mem_available_bytes: int | None = None  # least memory the machine had left during the trial
    duration_s: float = 0.0  # wall time the trial took, start-up included
    run_id: int | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.samples_per_s is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "samples_per_s": self.samples_per_s,
            "batches_per_s": self.batches_per_s,
            "wait_share": self.wait_share,
            "startup_s": self.startup_s,
            "batches": self.batches,
            "warmup_batches": self.warmup_batches,
            "epochs": self.epochs,
            "peak_rss_bytes": self.peak_rss_bytes,
            "worker_rss_bytes": self.worker_rss_bytes,
            "mem_available_bytes": self.mem_available_bytes,
            "duration_s": self.duration_s,
            "error": self.error,
        }


@dataclass(frozen=True)
class TrialSpec:
    """How to run a trial: where to record it and how to consume the loader."""

    db: str
    name: str
    tags: dict[str, Any]
    trial_s: float = 3.0  # measured time after warm-up
    step_s: float = 0.0  # paced: the model's step per batch (0: as fast as possible)
    warmup_batches: int | None = None  # None: workers * prefetch_factor + 1, at least 2


def warmup_for(setting: Setting, requested: int | None = None) -> int:
    """Batches kept out of throughput: the first prefetch round that workers fill at start-up."""
    if requested is not None:
        return max(0, requested)
    return min(MAX_WARMUP_BATCHES, max(2, setting.num_workers * (setting.prefetch_factor or 0) + 1))


def run_trial(
    factory: Factory,
    setting: Setting,
    spec: TrialSpec,
    *,
    clock: Callable[[], float] = time.perf_counter,
    sleep: Callable[[float], None] = time.sleep,
    on_tick: Callable[[], None] | None = None,
) -> Trial:
    """Measure ``setting``; an exception from the factory or the loader becomes ``Trial.error``."""
    from collector.record.watch import watch_with

    started = clock()
    try:
        loader = factory(**factory_kwargs(setting))
    except Exception as exc:  # noqa: BLE001 - the user's factory may raise anything for one setting
        return Trial(setting, error=f"factory raised {_describe(exc)}", duration_s=clock() - started)
    if not hasattr(type(loader), "__iter__") or isinstance(loader, (str, bytes)):
        return Trial(setting, error=f"factory returned {type(loader).__name__}, not a DataLoader")
    iterators: list[Any] = []

    def iterate(target: Any) -> Iterator[Any]:
        it = target.__iter__()
        iterators.append(it)
        return it

    watched = watch_with(loader, spec.db, spec.name, gpu_hz=0.0, host_hz=HOST_HZ, tags=spec.tags, iterate=iterate)
    meter = _Meter(clock, warmup_for(setting, spec.warmup_batches), spec.trial_s, getattr(loader, "batch_size", None))
    error = None
    try:
        _consume(watched, meter, spec.step_s, sleep, on_tick)
    except Exception as exc:  # noqa: BLE001 - a worker crash for one setting must not end the sweep
        error = f"loader raised {_describe(exc)}"
    finally:
        _shutdown_workers(loader, iterators)
        watched.close()
    trial = meter.result(setting)
    run_id = watched.run_id
    return replace(trial, run_id=run_id, error=error or trial.error, duration_s=clock() - started)


class _Meter:
    """Counts batches and time after warm-up. See NOTE [ Trial window ]."""

    # NOTE [ Trial window ]
    # iter() -> first batch is the start-up (stored, not counted). The window
    # opens after the warm-up batches' steps and closes after the last step,
    # so it holds exactly the measured batches' waits and steps:
    #
    #   iter  b0 step  b1 step | w2 b2 step  w3 b3 step ... | end
    #   start-up   warm-up     |<-------- measured -------->|
    def __init__(self, clock: Callable[[], float], warmup: int, trial_s: float, batch_size: int | None) -> None:
        self.clock = clock
        self.warmup = warmup
        self.trial_s = trial_s
        self.batch_size = batch_size
        self.t_iter = clock()
        self.startup_s: float | None = None
        self.seen = 0
        self.epochs = 0
        self.window_start: float | None = None
        self.window_end: float | None = None
        self.measured = 0
        self.samples = 0
        self.waited_s = 0.0
        self.first_at: float | None = None

    def batch(self, batch: Any, requested: float, got: float) -> None:
        self.seen += 1
        if self.startup_s is None:
            self.startup_s = got - self.t_iter
            self.first_at = got
        if self.window_start is not None:
            self.measured += 1
            self.waited_s += got - requested
            count = describe_batch(batch)[0]
            self.samples += count if count is not None else (self.batch_size or 1)

    def after_step(self, now: float) -> bool:
        """Called after each batch's step; True once the trial has measured enough."""
        if self.window_start is None:
            if self.seen >= self.warmup or (self.first_at is not None and now - self.first_at >= self.trial_s):
                self.window_start = now
            return False
        self.window_end = now
        elapsed = now - self.window_start
        # Slow batches: after twice the window, whatever was measured will do.
        return elapsed >= self.trial_s and (self.measured >= MIN_BATCHES or elapsed >= 2 * self.trial_s)

    def result(self, setting: Setting) -> Trial:
        warm = self.seen - self.measured
        if self.window_start is None or self.window_end is None or self.measured == 0:
            error = "the loader yielded no batches"
            if self.seen:
                error = f"too few batches to measure ({self.seen}, all warm-up): raise --trial-s"
            return Trial(setting, startup_s=self.startup_s, epochs=self.epochs, warmup_batches=warm, error=error)
        span = max(self.window_end - self.window_start, 1e-9)
        return Trial(
            setting,
            samples_per_s=self.samples / span,
            batches_per_s=self.measured / span,
            wait_share=min(1.0, self.waited_s / span),
            startup_s=self.startup_s,
            batches=self.measured,
            warmup_batches=warm,
            epochs=self.epochs,
        )


def _consume(
    watched: Any, meter: _Meter, step_s: float, sleep: Callable[[float], None], on_tick: Callable[[], None] | None
) -> None:
    clock = meter.clock
    while True:
        before = clock()
        it: Iterator[Any] = iter(watched)
        meter.epochs += 1
        if meter.window_start is not None:
            meter.waited_s += clock() - before  # a new epoch's worker start counts as waiting
        got_any = False
        try:
            while True:
                requested = clock()
                try:
                    batch = next(it)
                except StopIteration:
                    break
                got_any = True
                meter.batch(batch, requested, clock())
                del batch
                if step_s > 0:
                    sleep(step_s)
                if on_tick is not None:
                    on_tick()
                if meter.after_step(clock()):
                    return
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()
        if not got_any:
            return


def _shutdown_workers(loader: Any, iterators: list[Any]) -> None:
    """Stop this trial's worker processes now: left running, they would skew the next trial.

    See NOTE [ Early exit ].
    """
    # NOTE [ Early exit ]
    # A trial leaves its epoch early, and persistent_workers keeps the iterator
    # on the loader. Shutting the iterators down here, while they are intact,
    # stops the workers now (~0.1 s) instead of whenever the last reference
    # goes, so no trial runs beside the previous trial's workers.
    for it in iterators:
        shutdown = getattr(it, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
    iterators.clear()
    if getattr(loader, "_iterator", None) is not None:  # persistent_workers keeps one here
        loader._iterator = None


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
