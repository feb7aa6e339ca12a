"""The process's tuned loaders as one job: whose trial runs now, who sets torch's threads, which loaders pay to tune."""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass, field
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


@dataclass
class Job:
    """The tuners of one process: see NOTE [ One tuner for the job ]."""

    entries: dict[int, Entry] = field(default_factory=dict)  # id(tuner) -> its entry
    trying: int | None = None  # id of the tuner whose trial is in force
    lock: threading.Lock = field(default_factory=threading.Lock)

    def join(self, tuner: Any, label: str) -> Entry:
        with self.lock:
            if all(e.finished for e in self.entries.values()):
                self.entries.clear()  # a new job in the same process (a test, a second fit())
            entry = self.entries[id(tuner)] = Entry(label)
            return entry

    def measured(self, tuner: Any, seconds: float, batches: int) -> None:
        """A whole epoch of ``tuner``'s loader ended: its seconds count in the job's loader time."""
        entry = self.entries.get(id(tuner))
        if entry is not None:
            entry.epoch_s, entry.batches = seconds, batches

    def share(self, tuner: Any) -> float | None:
        """``tuner``'s loader's share of the job's loader time, from each loader's newest epoch; None until known."""
        mine = self.entries.get(id(tuner))
        if mine is None or mine.epoch_s is None:
            return None
        total = sum(e.epoch_s for e in self.entries.values() if e.epoch_s is not None and not e.finished)
        return mine.epoch_s / total if total > 0 else None

    def worth_tuning(self, tuner: Any) -> str | None:
        """None where ``tuner``'s loader may be tuned; else why it is left at its setting."""
        entry = self.entries.get(id(tuner))
        if entry is None or entry.batches is None:
            return None
        return worth_tuning(entry.batches, self.share(tuner))

    def may_try(self, tuner: Any) -> bool:
        """Whether ``tuner`` may start a trial now (no other loader's is in force); if so, it holds the turn."""
        with self.lock:
            if self.trying not in (None, id(tuner)):
                return False
            self.trying = id(tuner)
            return True

    def tried(self, tuner: Any) -> None:
        """``tuner``'s trial is judged or abandoned: another loader may start one."""
        with self.lock:
            if self.trying == id(tuner):
                self.trying = None

    def owns_threads(self, tuner: Any) -> bool:
        """Whether ``tuner``'s candidates may change torch's threads: its loader is the job's costliest."""
        mine = self.entries.get(id(tuner))
        if mine is None:
            return False
        rivals = [e.epoch_s or 0.0 for k, e in self.entries.items() if k != id(tuner) and not e.left]
        return not rivals or (mine.epoch_s or 0.0) >= max(rivals)

    def finish(self, tuner: Any) -> str | None:
        """``tuner``'s run ended; the job's line once every tuned loader has, where more than one was tuned."""
        with self.lock:
            entry = self.entries.get(id(tuner))
            if entry is None:
                return None
            entry.finished = True
            if self.trying == id(tuner):
                self.trying = None
            if len(self.entries) < 2 or not all(e.finished for e in self.entries.values()):
                return None
            return job_line(list(self.entries.values()))


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
