"""A recording session: opens each epoch on the loop that fits the loader, and ends the run."""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from multiprocessing import get_context
from typing import TYPE_CHECKING, Any

from collector.record import cuda_idle, exits, loader_probe, worker_timing
from collector.record.cuda_idle import IdleResolver
from collector.record.exits import SIGINT_EXIT, error_text, exit_code
from collector.record.full_loop import FullLoop
from collector.record.handover import BUFFER_RECORDS, EpochStarted, Shared
from collector.record.load_clock import LoadClock
from collector.record.monitor import Monitor
from collector.record.plain_loop import plain_loop
from collector.record.runinfo import command_line, distributed, job_id, loader_config, resumes, torch_threads, versions
from collector.record.stage_main import follow_in_process
from collector.record.worker_timing import TimingRings, WorkerHook
from collector.sample.host import host_facts
from collector.sample.sampler import Rates
from collector.writer.frames import RunStart

if TYPE_CHECKING:
    from collector.record.tuning import LiveTuner

CLOSE_TIMEOUT_S = 2.5  # the monitor ends a stuck writer within LINK_CLOSE_TIMEOUT_S (1.5 s) of it
CLOSE_GRACE_S = 1.0  # see Session.close_soon
READY_TIMEOUT_S = 15.0  # a writer's start on a loaded machine (collector/writer/link.py START_TIMEOUT_S)


class Session:
    """One recorded run: the buffer the loop appends to and the monitor that drains it."""

    def __init__(
        self,
        loader: Any,
        db: str,
        name: str,
        rates: Rates,
        tags: dict[str, Any],
        iterate: Callable[[Any], Iterator[Any]] = iter,
        stage: str | None = None,
        timing_rings: TimingRings | None = None,  # made ahead, at watch(): TimingRings.for_loader
        tune: int | None = None,  # live tuning: at most one epoch in ``tune`` on a trial (None: off)
        stages: bool = True,  # time each worker's stages: NOTE [ Stage timing ] in collector/record/stage_clock.py
        **monitor_kwargs: Any,
    ) -> None:
        self.loader = loader
        self.stage, self.stages = stage, stages
        self._iterate = iterate  # `collector run` passes DataLoader's original __iter__
        self.shared = Shared(
            records={shape: deque(maxlen=BUFFER_RECORDS) for shape in ("queue", "sampled", "described")},
            epoch_events=deque(maxlen=100_000),
            resolver=IdleResolver(),
            stride=[1],
        )
        if timing_rings is not None and timing_rings.workers == getattr(loader, "num_workers", 0):
            self.shared.timing_rings = timing_rings
        self._epoch, self.closed = 0, False
        rank, world = distributed()
        start = RunStart(
            name=name,
            config=loader_config(loader),
            host=host_facts(),
            versions=versions(),
            hostname=socket.gethostname(),
            pid=os.getpid(),
            command=command_line(),
            rank=rank,
            world_size=world,
            tags=tags,
            job_id=job_id(),
            stage=stage,
        )
        self.monitor = Monitor(db, start, self.shared, rates, **monitor_kwargs)
        self._started = False
        self.tuner: LiveTuner | None = None
        if tune is not None:  # imported here: an untuned job does not pay for the tuner's imports
            from collector.record.tuning import LiveTuner, TunedEvents

            label = f"{name} ({os.path.basename(self.monitor.origin[0])}:{self.monitor.origin[1]})"
            monitor = self.monitor
            self.tuner = LiveTuner(
                loader, self.shared, db, tune, lambda: monitor.run_id, label, monitor.warn, monitor.note
            )
            self.shared.epoch_events = TunedEvents(100_000, self.tuner, self._wall_of)

    def _wall_of(self, t_ns: int) -> float:
        return float(self.monitor.wall0 + (t_ns - self.monitor.perf0) / 1e9)

    # NOTE [ Started after the fork ]
    # The monitor thread, the writer's spawn and its pipes start at the first
    # epoch just after the loader's own iter() (from this thread, so still
    # never while it forks workers: NOTE [ Forked children ] in
    # collector/writer/spawn.py), not before it. Started before, they held the
    # fork of a 2-worker loader back by 1-4 ms and, with the new thread and
    # process competing for the cores while the workers started, its worst
    # next() by +6.8 to +8.8 ms at the median against -0.4 to +1.2 ms now
    # (bench/bench_stall.py). The workers then inherit none of our pipes.

    def start(self) -> None:
        """Start the monitor (and so the writer) once; the run row appears when it has."""
        if not self._started:
            self._started = True
            self.monitor.start()
            exits.register(self)

    def run_id(self, timeout_s: float) -> int | None:
        """The run's id once the monitor has created it, starting the monitor if no epoch has yet."""
        self.start()
        self.monitor.ready.wait(timeout_s)
        return self.monitor.run_id

    # -- the loop -----------------------------------------------------------

    # NOTE [ The collector's own time ]
    # An epoch starts when the loop calls iter() (``called_ns``, read before a
    # first iter() creates the session: watch.py, autowatch.py), and
    # first_batch_s runs from there to the first batch, as the loop's own meter
    # sees it. Only the loader's iter() and first next() in it are the
    # loader's; the rest is ours: the session's start (the writer's spawn, host
    # facts), the timing rings, the worker hook, the probe, the epoch's loop.
    # It is read on this thread's clock (iter() call to loop ready, less the
    # loader's iter()) and stored as epochs.collector_s, which the diagnosis
    # takes out of the loader's wait (collector/diagnosis/phases.py). Per
    # batch our work lies outside t0..t1: in step_s, never in wait_s.

    def epoch(self, called_ns: int | None = None, owner: Any = None) -> Iterator[Any]:
        """Start one pass over the loader (iter() happens now, as on the DataLoader).

        ``owner`` (the watched loader) lives as long as the epoch's iterator: in
        ``for batch in watch(loader)`` nothing else holds it, and its end ends the run.
        """
        epoch = self._epoch
        self._epoch += 1
        t_start = time.perf_counter_ns() if called_ns is None else called_ns
        if resumes(self.loader):  # NOTE [ Resumed runs ] in collector/record/runinfo.py
            self.monitor.note(f"resumed-{epoch}", f"epoch {epoch} resumed mid-epoch from a saved state_dict")
        self.end_open_epochs()  # before the tuner chooses this epoch's setting
        tuner = self.tuner
        setting = None if tuner is None else tuner.before_epoch(epoch, t_start, self._wall_of(t_start))
        lent = contextlib.nullcontext() if tuner is None else tuner.lend()
        try:
            try:
                with lent:
                    it, iter_ns = self._open_iterator()
            except Exception as exc:
                setting = None if tuner is None else tuner.open_failed(exc, epoch)  # NOTE [ Trials never hurt ]
                if tuner is None or setting is None:
                    raise
                lent = tuner.lend()
                with lent:
                    it, iter_ns = self._open_iterator()
        finally:
            if tuner is not None:
                tuner.after_iter()
            self.start()  # NOTE [ Started after the fork ]
        if tuner is not None:
            tuner.opened(it)
        windowed = None if tuner is None else tuner.windowed(it, lent, epoch, lambda: self._open_iterator()[0])
        probe = None
        if getattr(self.loader, "num_workers", 0):
            probe = loader_probe.attach(it, self.monitor.warn)
            untimed = loader_probe.untimed(it, self.shared.timing_rings, type(self.loader).__name__)
            if untimed is not None:
                self.monitor.warn("worker-timing", untimed)
        pids = [] if probe is None else probe.worker_pids()
        threads = torch_threads()
        cuda = cuda_idle.cuda_active()
        served = it if windowed is None else windowed  # NOTE [ Windows of a long epoch ]
        clock = LoadClock(self.monitor.ident)
        if probe is None and not cuda:
            loop = plain_loop(served, epoch, t_start, self.shared, self.count_error, clock, owner)
        else:
            full = FullLoop(served, epoch, t_start, self.shared, probe, cuda, self.count_error, clock, pids)
            full.owner = owner
            loop = full.iterator()
            if windowed is not None:
                from collector.record.windows import follow

                # weakly: the loop holds the Windowed, and a cycle would keep its workers until a gc
                windowed.retarget = functools.partial(follow, weakref.ref(full), self.monitor.warn)
        own_ns = time.perf_counter_ns() - t_start - iter_ns  # See NOTE [ The collector's own time ]
        self.shared.epoch_events.append(EpochStarted(epoch, t_start, pids, threads, own_ns, setting))
        return loop

    def end_open_epochs(self) -> None:
        """Epochs whose iterator the loop still holds end now: NOTE [ An epoch's end ] in collector/record/handover.py."""
        for report in list(self.shared.open_epochs.values()):
            report()

    def _open_iterator(self) -> tuple[Iterator[Any], int]:
        """The loader's iterator, and the nanoseconds its own iter() took."""
        loader = self.loader
        workers = getattr(loader, "num_workers", 0)
        unsupported = worker_timing.not_supported() if workers else None
        if unsupported is not None:
            self.monitor.warn("worker-timing", unsupported)
        if not workers or not hasattr(loader, "worker_init_fn") or unsupported is not None:
            t0 = time.perf_counter_ns()
            it, t1 = self._iterate(loader), time.perf_counter_ns()  # in this order: iter() timed alone
            return (follow_in_process(self.shared, it, loader) if self.stages and not workers else it), t1 - t0
        # Workers that start in iter() get the timing hook for this call only (the loader keeps its own
        # worker_init_fn); those already running (persistent) keep theirs. See NOTE [ Worker timing ].
        rings = self.shared.timing_rings
        if rings is None or rings.workers < workers:  # a tuner may add workers: NOTE [ Live tuning ]
            if rings is not None:
                self.shared.retired_rings.append(rings)  # the monitor drains what is left in them
            context = loader.multiprocessing_context or get_context()
            rings = self.shared.timing_rings = TimingRings(context, workers, self.stages)
        original = loader.worker_init_fn
        loader.worker_init_fn = WorkerHook(rings, original)
        t0 = time.perf_counter_ns()
        try:
            if self.tuner is not None:
                return self.tuner.quietly(self._iterate, loader), time.perf_counter_ns() - t0
            return self._iterate(loader), time.perf_counter_ns() - t0
        finally:
            loader.worker_init_fn = original

    # NOTE [ Hot path ]
    # Per batch the training thread reads the clock twice and keeps both
    # readings; SQLite turns the raw clocks into columns later (see NOTE
    # [ Clocks in SQL ]). The plain loop serves num_workers=0 and plain
    # iterables on the CPU, timed in C between described batches; the full
    # loop adds queue depth, worker ids and CUDA events, one tuple a batch.

    # -- ending -------------------------------------------------------------

    # NOTE [ How a run ends ]
    # An exception the loader raises into the loop is counted (error_count,
    # first_error, last_error) and changes nothing else: the loop may catch
    # it and go on, as with the loader itself. The run is ``crashed`` (or
    # ``interrupted`` for Ctrl-C) only when an exception ends the process
    # (sys.excepthook) or the ``with`` block; ``exit_code`` is recorded when
    # the process is known to exit non-zero: an uncaught exception (1), Ctrl-C
    # (130, as a shell reports a SIGINT death), ``sys.exit(n)`` leaving the
    # with-block or the script under ``collector run``.

    def count_error(self, exc: BaseException) -> None:
        """An exception from the loader reached the loop (a KeyboardInterrupt or SystemExit is not counted)."""
        if not isinstance(exc, Exception):
            return
        status = self.shared.status
        text = error_text(exc)
        status["error_count"] = status.get("error_count", 0) + 1
        status.setdefault("first_error", text)
        status["last_error"] = text

    def fail(self, exc: BaseException, process_ends: bool = False) -> None:
        """An exception ended the with-block or the process: mark the run crashed, interrupted or exited."""
        status = self.shared.status
        if isinstance(exc, SystemExit):
            code = exit_code(exc)
            status["status"] = "completed" if code == 0 else "crashed"
            if code != 0:
                status.update(exit_code=code, error=error_text(exc))
            return
        status.update(status="interrupted" if isinstance(exc, KeyboardInterrupt) else "crashed", error=error_text(exc))
        if process_ends:
            status["exit_code"] = SIGINT_EXIT if isinstance(exc, KeyboardInterrupt) else 1

    def exited(self, code: int) -> None:
        """The process is about to exit with ``code`` (``collector run`` knows it)."""
        if code != 0:
            self.shared.status["exit_code"] = code
            self.shared.status.setdefault("status", "crashed")

    def close_soon(self) -> None:
        """Close in CLOSE_GRACE_S, on a thread of its own: the loader was let go (NOTE [ Weak loader ]).

        The loop that let it go may be unwinding from an exception that is about
        to end the process; closing a moment later lets ``process_ends`` say so.
        """
        timer = threading.Timer(CLOSE_GRACE_S, self.close)
        timer.daemon = True
        try:
            timer.start()
        except RuntimeError:  # at exit, where Python 3.12+ starts no thread (a finalizer run by atexit): now
            self.close()

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Flush everything and mark the run ended. Idempotent; never raises."""
        if self.closed:
            return
        self.closed = True
        try:
            self.start()  # a run never iterated is recorded all the same, with 0 batches
        except RuntimeError:  # at exit, where Python 3.12+ starts no thread: nothing was recorded, nothing to end
            return
        if self.tuner is not None:
            self.tuner.ending = True  # an epoch ended now may be cut short: NOTE [ Trials never hurt ]
        self.end_open_epochs()
        if self.tuner is not None:
            self.tuner.finish()
        status = self.shared.status.get("status", "completed")
        self.monitor.final_status = (status, self.shared.status.get("error"))
        self.monitor.stop_event.set()
        if threading.current_thread() is not self.monitor:
            self.monitor.join(timeout_s)
        exits.unregister(self)
