"""The process's tuned loaders as one job: whose trial runs now, who sets torch's threads, which loaders pay to tune."""

from __future__ import annotations

import sys
import threading
import weakref
from dataclasses import dataclass
from typing import Any

from collector.tune.job import worth_tuning

# NOTE [ One tuner for the job ]
# A training job iterates several loaders in one process (training, then an
# evaluation pass each epoch) and shares one thing among them that no loader
# owns: torch's intra-op thread count, process-wide. Tuned one at a time, as
# if each were alone, a 3-batch evaluation loader kept torch.set_num_threads(1)
# for the training loader's epochs after it, while their records said 2, and
# its trials (workers started and ended each evaluation) made the whole job's
# epochs 15-90% slower. So the tuners of one process are one job (``JOB``):
# - a loader is tuned only where a trial can be judged and paid back
#   (``worth_tuning``): epochs of at least C.MIN_TUNED_BATCHES batches, and at
#   least C.MIN_JOB_SHARE of the job's loader time (its epochs' seconds among
#   every tuned loader's newest epoch). Any other is left at its own setting,
#   with a note, and says why at the run's end;
# - one trial at a time: a loader starts a trial only while no other has one
#   in force (from its first segment to its judgement), so each trial is
#   measured beside the job's other loaders at their settings;
# - torch's threads belong to the job's costliest tuned loader: only its
#   candidates change them; the others keep whatever the process runs at, and
#   every epoch row stores the thread count in force, not the one a loader
#   started with;
# - the run's end prints each tuned loader's line, named, and once every tuned
#   loader has finished, the job's: its loaders' epoch seconds at their start
#   settings over those at the settings kept.


@dataclass
class Entry:
    """One tuned loader as the job sees it."""

    label: str  # the run's name and where watch() was called
    epoch_s: float | None = None  # its newest measured epoch's seconds
    batches: int | None = None  # its newest measured epoch's batches
    start_s: float | None = None  # its median epoch seconds at its start setting
    now_s: float | None = None  # ... at the setting it ends with
    left: str | None = None  # why it is left at its setting
    finished: bool = False


class Job:
    """The tuners of one process, held weakly: see NOTE [ One tuner for the job ]."""

    def __init__(self) -> None:
        self._tuners: list[weakref.ref[Any]] = []  # in the order they joined
        self._trying: weakref.ref[Any] | None = None  # the tuner whose trial is in force
        self._owner: weakref.ref[Any] | None = None  # the tuner that sets torch's threads, once measured
        self.lock = threading.Lock()

    def _live(self) -> list[Any]:
        return [t for t in (r() for r in self._tuners) if hasattr(t, "job")]

    def _entries(self) -> list[Entry]:
        return [t.job for t in self._live()]

    def join(self, tuner: Any, label: str) -> Entry:
        """``tuner`` is one of the job's; its entry (``tuner.job``)."""
        with self.lock:
            if all(e.finished for e in self._entries()):
                self._tuners, self._owner = [], None  # a new job in the same process (a test, a second fit())
            self._tuners.append(weakref.ref(tuner))
            return Entry(label)

    @staticmethod
    def measured(tuner: Any, seconds: float, batches: int) -> None:
        """A whole epoch of ``tuner``'s loader ended: its seconds count in the job's loader time."""
        tuner.job.epoch_s, tuner.job.batches = seconds, batches

    def share(self, tuner: Any) -> float | None:
        """``tuner``'s loader's share of the job's loader time, from each loader's newest epoch; None until known."""
        mine = tuner.job.epoch_s
        total = sum(e.epoch_s for e in self._entries() if e.epoch_s is not None and not e.finished)
        return None if mine is None or total <= 0 else mine / total

    def worth_tuning(self, tuner: Any) -> str | None:
        """None where ``tuner``'s loader may be tuned; else why it is left at its setting."""
        batches = tuner.job.batches
        return None if batches is None else worth_tuning(batches, self.share(tuner))

    def may_try(self, tuner: Any) -> bool:
        """Whether ``tuner`` may start a trial now (no other loader's is in force); if so, it holds the turn."""
        with self.lock:
            holder = None if self._trying is None else self._trying()
            if holder is not None and holder is not tuner and not holder.job.finished:
                return False
            self._trying = weakref.ref(tuner)
            return True

    def tried(self, tuner: Any) -> None:
        """``tuner``'s trial is judged or abandoned: another loader may start one."""
        with self.lock:
            if self._trying is not None and self._trying() is tuner:
                self._trying = None

    def owns_threads(self, tuner: Any) -> bool:
        """Whether ``tuner`` sets torch's threads: its loader is the job's costliest tuned one.

        The first measured costliest keeps them while it runs and is tuned (a change of owner would
        undo the thread count it kept); before any epoch is measured, the first to join.
        """
        owner = None if self._owner is None else self._owner()
        if owner is not None and not owner.job.finished and not owner.job.left:
            return owner is tuner
        rivals = [t for t in self._live() if not t.job.left and not t.job.finished]
        if tuner not in rivals:
            return not rivals and not tuner.job.left
        costliest = max(rivals, key=lambda t: (t.job.epoch_s or 0.0, -rivals.index(t)))
        if costliest.job.epoch_s is not None:
            self._owner = weakref.ref(costliest)
        return costliest is tuner

    def finish(self, tuner: Any) -> str | None:
        """``tuner``'s run ended; the job's line once every tuned loader has, where more than one was tuned."""
        self.tried(tuner)
        with self.lock:
            tuner.job.finished = True
            entries = self._entries()
            if len(entries) < 2 or not all(e.finished for e in entries):
                return None
            return job_line(entries)


def job_line(entries: list[Entry]) -> str | None:
    """``tuned the job: 1.21x measured over 2 loaders (train 1.25x; val left: ...)``, or None where unmeasured."""
    measured = [e for e in entries if e.start_s and e.now_s]
    if not measured:
        return None
    speedup = sum(e.start_s or 0.0 for e in measured) / sum(e.now_s or 0.0 for e in measured)
    parts = []
    for e in entries:
        if e.left:
            parts.append(f"{e.label} left at its setting")
        elif e.start_s and e.now_s:
            parts.append(f"{e.label} {e.start_s / e.now_s:.2f}x")
        else:
            parts.append(f"{e.label} not measured")
    return f"tuned the job: {speedup:.2f}x measured over {len(entries)} loaders ({'; '.join(parts)})"


JOB = Job()


def say(text: str) -> None:
    """A line for the user at the run's end, on stderr as every end-of-run line."""
    print(f"stallwatch {text}", file=sys.stderr)
