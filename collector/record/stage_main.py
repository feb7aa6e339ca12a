"""Stages at num_workers=0: a stack sampler beside the training thread, reading its frames, changing nothing."""

from __future__ import annotations

import os
import sys
import threading
import time
import weakref
from types import FrameType
from typing import Any

from collector.record.stage_board import Totals, deltas
from collector.record.stage_clock import FETCH, GETITEM
from collector.record.stage_sampler import DATASET_METHODS, library_roots

# NOTE [ Stages in the training process ]
# Without workers the fetches run on the training thread, in the user's own
# process, whose classes stallwatch does not change (NOTE [ Stage hooks ]
# hooks workers only) and through whose frames an exception must pass as it
# would without us. So nothing is wrapped: a daemon thread looks at the
# training thread's stack every INTERVAL_S and, when a DataLoader fetch is on
# it (torch's fetcher's ``fetch``), books the time since its last look, and
# the training thread's CPU time since then (its CPU clock, read from this
# thread), to the stage the stack shows: PIL's decode or open where it is
# innermost, else the Compose step (its position and class, from the
# Compose frame's loop variable), else collate, else the innermost function
# of the user's own code (the dataset's own method: __getitem__). Row FETCH
# gets every look inside a fetch, and the batches the iterator yielded
# meanwhile times the batch size as its samples. The figures are estimates
# by sampling (a stage under INTERVAL_S shows only on average), and a look
# needs the GIL, so it lands where the training thread lets go of it (I/O, a
# sleep, most torch and PIL calls): pure-Python work that holds it reads
# low, and the call it next makes reads high. The thread stops once its
# iterator is gone and no new epoch came for STOP_AFTER_S.

INTERVAL_S = 0.02  # 50 looks a second, as in a worker (NOTE [ Stack sampling ])
STOP_AFTER_S = 5.0
_FETCH_FILE = os.path.join("torch", "utils", "data", "_utils", "fetch.py")
_COLLATE_FILE = os.path.join("torch", "utils", "data", "_utils", "collate.py")
_PIL = os.sep + "PIL" + os.sep
_PIL_STAGES = {("ImageFile.py", "load"): "PIL decode", ("Image.py", "open"): "PIL open"}
_COMPOSE = {
    os.path.join("torchvision", "transforms", "transforms.py"): ("__call__", "t"),
    os.path.join("torchvision", "transforms", "v2", "_container.py"): ("forward", "transform"),
}


class MainStages:
    """Samples one thread's stack into stage totals; the monitor drains their growth as worker id -1."""

    def __init__(self, thread_id: int, batch_size: int | None, interval_s: float = INTERVAL_S) -> None:
        self.thread_id = thread_id
        self.batch_size = batch_size or 1
        self.interval_s = interval_s
        self.stop = threading.Event()
        self._iterator: weakref.ref[Any] | None = None
        self._yielded = 0
        self._totals: dict[str, list[float]] = {}
        self._seen: Totals = {}
        self._roots = library_roots()
        self._cpu_id = _cpu_clock_id(thread_id)
        self._thread: threading.Thread | None = None

    def follow(self, iterator: Any) -> None:
        """Sample this epoch's iterator (started at the first, restarted after a stop)."""
        try:
            self._iterator = weakref.ref(iterator)
        except TypeError:
            return
        self._yielded = int(getattr(iterator, "_num_yielded", 0) or 0)
        if self._thread is None or not self._thread.is_alive():
            self.stop.clear()
            self._thread = threading.Thread(target=self._run, name="sw-stages", daemon=True)
            self._thread.start()

    def drain(self) -> list[tuple[Any, ...]]:
        """(-1, stage, *STAGE_FIELDS) growth since the last drain (NOTE [ Stage boards ])."""
        now = {stage: tuple(row) for stage, row in list(self._totals.items())}
        rows = deltas(-1, self._seen, now)
        self._seen = now
        return rows

    def _run(self) -> None:
        last, last_cpu, idle_since = time.perf_counter(), self._cpu(), None
        try:
            while not self.stop.wait(self.interval_s):
                now, cpu = time.perf_counter(), self._cpu()
                iterator = self._iterator() if self._iterator is not None else None
                if iterator is None:
                    idle_since = idle_since or now
                    if now - idle_since > STOP_AFTER_S:
                        return
                else:
                    idle_since = None
                    self.tick(iterator, now - last, cpu - last_cpu)
                last, last_cpu = now, cpu
        except Exception:  # noqa: BLE001 - a sampler is optional; the training is not
            return

    def tick(self, iterator: Any, wall_s: float, cpu_s: float) -> None:
        """Book the time since the last look to the stage the stack shows, if a fetch is on it."""
        yielded = int(getattr(iterator, "_num_yielded", 0) or 0)
        batches, self._yielded = max(0, yielded - self._yielded), yielded
        frame = sys._current_frames().get(self.thread_id)
        stage = self.stage_of(frame)
        self._add(FETCH, batches, batches * self.batch_size, wall_s if stage else 0.0, cpu_s if stage else 0.0)
        if stage is not None:
            self._add(stage, 1, 0, wall_s, cpu_s)

    def stage_of(self, frame: FrameType | None) -> str | None:
        """The stage a stack shows (NOTE [ Stages in the training process ]); None outside a fetch."""
        innermost: str | None = None  # PIL's open or decode, where the innermost frames are PIL's
        step: str | None = None  # the outermost Compose step, or collate
        user: str | None = None  # the innermost user function
        in_pil = True
        while frame is not None:
            code = frame.f_code
            name, filename = code.co_name, code.co_filename
            if filename.endswith(_FETCH_FILE) and name == "fetch":
                return innermost or step or user or GETITEM
            in_pil = in_pil and _PIL in filename
            if in_pil and innermost is None:
                innermost = _PIL_STAGES.get((os.path.basename(filename), name))
                if innermost == "PIL decode":
                    innermost += f" {getattr(frame.f_locals.get('self'), 'format', None) or 'image'}"
            compose = next((v for k, v in _COMPOSE.items() if filename.endswith(k) and name == v[0]), None)
            if compose is not None:
                step = _compose_step(frame, compose[1]) or step
            elif filename.endswith(_COLLATE_FILE):
                step = "collate"
            elif user is None and not filename.startswith(self._roots) and not filename.startswith("<"):
                user = GETITEM if name in DATASET_METHODS else f"code {os.path.basename(filename)}:{name}"
            frame = frame.f_back
        return None

    def _add(self, stage: str, calls: int, samples: int, wall_s: float, cpu_s: float) -> None:
        row = self._totals.get(stage)
        if row is None:
            if len(self._totals) >= 64:
                return
            row = self._totals[stage] = [0.0, 0.0, 0.0, 0.0, float("nan"), float("nan")]
        row[0] += calls
        row[1] += samples
        row[2] += max(0.0, wall_s)
        row[3] += max(0.0, cpu_s)

    def _cpu(self) -> float:
        if self._cpu_id is None:
            return 0.0
        try:
            return time.clock_gettime(self._cpu_id)
        except OSError:
            return 0.0


def _compose_step(frame: FrameType, variable: str) -> str | None:
    """``transform <position> <class>`` of the step a Compose frame is in, from its loop variable."""
    try:
        step = frame.f_locals.get(variable)
        transforms = list(frame.f_locals["self"].transforms)
        position = next(i for i, t in enumerate(transforms) if t is step)
    except (KeyError, AttributeError, TypeError, StopIteration):
        return None
    return f"transform {position} {type(step).__name__}"


def _cpu_clock_id(thread_id: int) -> int | None:
    try:
        return time.pthread_getcpuclockid(thread_id)
    except (AttributeError, OSError):
        return None


def follow_in_process(shared: Any, iterator: Any, loader: Any) -> Any:
    """Sample ``iterator``'s fetches on this thread (NOTE [ Stages in the training process ]); ``iterator`` as it is."""
    if not hasattr(iterator, "_dataset_fetcher"):  # not a DataLoader's own iterator: no fetch to find
        return iterator
    try:
        sampler = next((s for s in shared.stage_sources if isinstance(s, MainStages)), None)
        if sampler is None:
            sampler = MainStages(threading.get_ident(), getattr(loader, "batch_size", None))
            shared.stage_sources.append(sampler)
        sampler.follow(iterator)
    except Exception:  # noqa: BLE001 - a sampler is optional; the epoch is not
        pass
    return iterator
