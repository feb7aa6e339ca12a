"""A low-rate stack sampler in a worker: the dataset's own time by the user's functions (file:function)."""

from __future__ import annotations

import os
import sys
import sysconfig
import threading
from types import FrameType

from collector.record import stage_hooks
from collector.record.stage_clock import StageClock

# NOTE [ Stack sampling ]
# A dataset built without torchvision or PIL has no hooks to time, so its
# whole fetch would read as one GETITEM row. A daemon thread in the worker
# looks at the worker's main thread every INTERVAL_S during a fetch; unless
# a hooked stage is on its stack (a frame of collector/record/stage_hooks.py:
# that time is the stage's), it books one tick to GETITEM and one to the
# innermost frame of the user's own code:
# a file outside the standard library, site-packages and stallwatch, named
# "code <file>:<function>"; a tick in the dataset's own method itself
# (DATASET_METHODS) stays GETITEM's, which already names it. At publish, GETITEM's own wall time is split by
# the ticks (StageClock.totals: sampled_rows), and its CPU in the same
# proportion (an estimate: a sampler sees no CPU clock); ticks in no user
# frame stay GETITEM's. A sampled stage's calls are its ticks. A look needs
# the GIL, so it lands where the worker lets go of it: pure-Python work that
# holds it reads low (NOTE [ Stages in the training process ]). At 50 Hz a look
# costs tens of microseconds: well under the budget of NOTE [ Stage timing ].
# The thread waits on an Event with a timeout, so it never holds the worker's
# exit; it stops itself at the first error.

INTERVAL_S = 0.02
_HOOKED = "(hooked)"
_HOOKS_FILE = stage_hooks.__file__
_FETCH = "(fetch)"
_OWN = "(own)"
DATASET_METHODS = ("__getitem__", "__getitems__", "__iter__", "__next__")
_FETCH_FILE = os.path.join(os.path.dirname(stage_hooks.__file__), "worker_timing.py")  # TimedFetcher.fetch
MAX_NAMES = 32  # distinct functions booked; later ones count as "code (other)"


class StackSampler:
    """Samples one thread's stack into a clock's ``sampled`` ticks."""

    def __init__(self, clock: StageClock, thread_id: int | None = None, interval_s: float = INTERVAL_S) -> None:
        self.clock = clock
        self.thread_id = thread_id if thread_id is not None else threading.get_ident()
        self.interval_s = interval_s
        self.stop = threading.Event()
        self._ours = library_roots()
        self._names: dict[object, str] = {}  # code object -> stage name

    def start(self) -> None:
        threading.Thread(target=self._run, name="sw-stages", daemon=True).start()

    def _run(self) -> None:
        try:
            while not self.stop.wait(self.interval_s):
                self.tick()
        except Exception:  # noqa: BLE001 - a sampler is optional; the worker is not
            return

    def tick(self) -> None:
        """One look at the sampled thread: a tick to its innermost user function, when in GETITEM."""
        clock = self.clock
        if not clock.in_fetch:
            return
        frame = sys._current_frames().get(self.thread_id)
        stage = self.stage_of(frame)
        if stage is None:  # inside a hooked stage, timed as itself
            return
        clock.ticks += 1
        if stage:
            clock.sampled[stage] = clock.sampled.get(stage, 0) + 1

    def stage_of(self, frame: FrameType | None) -> str | None:
        """The innermost user function's stage; "" when none; None inside a hooked stage (any frame of ours)."""
        found = ""
        while frame is not None:
            code = frame.f_code
            name = self._names.get(code)
            if name is None:
                name = self._names[code] = self._name(code.co_filename, code.co_name)
            if name is _HOOKED:
                return None
            if name is _FETCH:  # the fetch itself: frames further out are the worker loop's, not the dataset's
                return found
            if name is _OWN and not found:  # the dataset's own method: its time stays GETITEM's
                return ""
            if name and not found:
                found = name
            frame = frame.f_back
        return found

    def _name(self, filename: str, function: str) -> str:
        if filename == _HOOKS_FILE:
            return _HOOKED
        if filename == _FETCH_FILE:
            return _FETCH
        if filename.startswith("<") or any(filename.startswith(root) for root in self._ours):
            return ""
        if function in DATASET_METHODS:
            return _OWN
        if len(set(self._names.values()) - {""}) >= MAX_NAMES:
            return "code (other)"
        return f"code {os.path.basename(filename)}:{function}"


def library_roots() -> tuple[str, ...]:
    """Where code that is not the user's lives: the standard library, installed packages, stallwatch."""
    paths = sysconfig.get_paths()
    roots = {paths.get(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots.add(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # collector/
    roots.update(p for p in sys.path if p.endswith(("site-packages", "dist-packages")))
    return tuple(sorted(os.path.join(root, "") for root in roots if root))
