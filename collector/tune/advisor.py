"""The tuner's helper process: the prediction model, run beside the job, asked without waiting for its answer."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
import time
from collections.abc import Iterator
from typing import Any

from collector.diagnosis.calibration import C
from collector.diagnosis.model import Setting
from collector.diagnosis.setting import stored
from collector.tune.answers import NothingPays, Proposal, setting_from
from collector.writer.names import name_this_thread
from collector.writer.spawn import (
    end_child,
    forget_in_forks,
    lean_pandas,
    make_polite,
    raise_to_ours,
    ran_and_waited_s,
    start_child,
)

# NOTE [ The tuner's helper ]
# Proposing a setting means diagnosing the run so far: pandas and every rule,
# 0.3-0.5 s of CPU to import and about 0.1-0.5 s a proposal. None of it may
# run on the training thread, nor hold its GIL. So a helper process starts
# with the first tuned epoch as politely as the writer
# (NOTE [ A polite writer ]: nice +10, in the job's session, in a process
# group of its own), imports the diagnosis and answers one JSON line per
# question: the run's file and id, the current setting, the settings tried.
# Polite, because at the job's own priority its import preempted the job's
# threads at every wakeup, and the healthy demo's first epoch ran 0.07-0.11 s
# longer (1.020-1.038 of the untuned run, against 0.962-1.007 at nice +10).
# Its price, latency beside a CPU hog in the job's own session (one
# autogroup, NOTE [ A polite writer ]), is paid back where the job waits on
# it (NOTE [ A helper the job waits on ]). The training thread writes the
# question at an epoch's end and reads whatever answer has come by a later epoch's
# start, never waiting (``poll``). A helper slower than the epochs answers
# only the newest question waiting: the ones before it ask about a run that
# has moved on, and answering each in turn (1.3 s apiece beside that hog)
# puts every later answer further behind. A helper that cannot start, dies
# or answers nonsense ends tuning with one warning; the loop goes on at the
# last good setting.
#
# NOTE [ A helper the job waits on ]
# Polite is right while the helper's work can wait, not while the job waits
# on its answer for a core: beside the same-session hog its threads queued
# 0.9 s for each 0.09 s they ran, and the first answer came at the sixth
# epoch. So at each question, and at each epoch's start while one waits,
# the training thread reads from Linux's schedstat how long the helper ran
# and queued since it last looked. Where it queued more than STARVED times
# as long as it ran (and at least STARVED_MIN_S), the machine is full, with
# other processes or the job's own threads, and the helper gets the job's
# priority (``raise_to_ours``, where the user may: root, CAP_SYS_NICE,
# RLIMIT_NICE) until the answer comes, then goes back to nice +10. Beside
# that hog (bench/bench_tune.py --hog; epochs count from 0), epoch-stall's
# trial ran at epoch 4 (6 before) and oversubscribed's at epoch 3 (4 or 5
# at +10), its epochs before it as slow as at +10. On a quiet
# machine beside the healthy demo the helper queued 0.13 s for 0.31 s run,
# and stays polite.
SERVE = "from collector.tune.advisor import serve; serve()"


class AdvisorError(Exception):
    """The helper cannot answer: tuning ends."""


class Advisor:
    """The training process's end of the helper: ``ask`` and ``poll`` never block."""

    def __init__(self, code: str = SERVE) -> None:
        self.pid: int | None = None
        self._req = self._rep = -1
        self._buffer = b""
        self._asked: int | None = -1  # the last question's ``seen``; -1: none waits for its answer
        self._last = (0.0, 0.0)  # the helper's seconds run and queued, when last looked at
        self._raised = False
        self._may_raise = True
        self.started = time.monotonic()  # the writer samples it from here: NOTE [ Our own processes ]
        try:
            self.pid, self._req, self._rep = start_child(code)
        except OSError as exc:
            raise AdvisorError(f"the tuner's helper process could not start ({exc})") from exc
        os.set_blocking(self._rep, False)
        forget_in_forks(self)  # NOTE [ Forked children ] in collector/writer/spawn.py

    def ask(
        self,
        db: str,
        run_id: int,
        epoch: int | None,
        current: Setting,
        tried: list[Setting],
        fixed_workers: bool,
        correction: float = 1.0,
        seen: int | None = None,
        edges: list[tuple[float, float, float]] | None = None,
        fixed_threads: bool = False,
        missed: Setting | None = None,
        noise: float = 0.0,
        banked: float | None = None,
    ) -> None:
        """Send a question about the run once ``epoch`` is in the file (None: a window, now); answered by a later ``poll``.

        ``seen`` (the policy's segments measured) comes back with the answer. ``edges``: the
        training process's (wall time, CPU s, run-queue s) at the epoch's start and end
        (NOTE [ The first question ] in collector/tune/propose.py). ``fixed_threads``: another loader
        of the job owns torch's threads (NOTE [ One tuner for the job ] in collector/record/tuning_job.py).
        ``missed``: the last trial's setting, where it measured no gain (NOTE [ After a miss ] in propose.py).
        ``noise`` and ``banked``: the current setting's variation and measured gain over the start
        (NOTE [ Measured neighbours ] in collector/diagnosis/decide.py).
        """
        question = {
            "db": db,
            "run_id": run_id,
            "epoch": epoch,
            "current": stored(current),
            "tried": [stored(s) for s in tried],
            "fixed_workers": fixed_workers,
            "fixed_threads": fixed_threads,
            "missed": None if missed is None else stored(missed),
            "correction": correction,
            "noise": noise,
            "banked": banked,
            "seen": seen,
            "edges": edges,
        }
        try:
            os.write(self._req, json.dumps(question).encode() + b"\n")
        except OSError as exc:
            raise AdvisorError(f"the tuner's helper is gone ({exc})") from exc
        self._asked = seen
        self._spur()

    def poll(self) -> Proposal | NothingPays | None:
        """The newest answer, if one came: a Proposal, or why nothing pays; None while none has. Never blocks."""
        answer: Proposal | NothingPays | None = None
        while (line := self._line()) is not None:
            answer = _decode(line)
        if answer is not None and answer.seen == self._asked:
            self._asked = -1
            if self._raised and self.pid is not None:
                make_polite(self.pid)
                self._raised = False
                self._last = ran_and_waited_s(self.pid) or self._last
        elif self._asked != -1:
            self._spur()
        return answer

    def _spur(self) -> None:
        """The job's priority for a helper that queues for a core while the job waits on it (NOTE [ A helper the job waits on ])."""
        now = ran_and_waited_s(self.pid) if self.pid is not None and self._may_raise else None
        if now is None:
            return
        ran, waited = now[0] - self._last[0], now[1] - self._last[1]
        self._last = now
        if not self._raised and waited > max(C.STARVED * ran, C.STARVED_MIN_S):
            self._raised = self._may_raise = raise_to_ours(self.pid)  # type: ignore[arg-type]

    def _line(self) -> bytes | None:
        while (end := self._buffer.find(b"\n")) < 0:
            try:
                ready = select.select([self._rep], [], [], 0.0)[0]
                chunk = os.read(self._rep, 1 << 16) if ready else None
            except BlockingIOError:
                return None
            except (OSError, ValueError) as exc:
                raise AdvisorError(f"the tuner's helper is gone ({exc})") from exc
            if chunk is None:
                return None
            if not chunk:
                raise AdvisorError("the tuner's helper ended")
            self._buffer += chunk
        line, self._buffer = self._buffer[:end], self._buffer[end + 1 :]
        return line

    def close(self) -> None:
        """End the helper and reap it. Idempotent."""
        if self.pid is not None:
            end_child(self.pid)
        self.forget_in_fork()

    def forget_in_fork(self) -> None:
        for fd in (self._req, self._rep):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._req = self._rep = -1
        self.pid = None


def _decode(line: bytes) -> Proposal | NothingPays:
    try:
        answer = json.loads(line)
        if "error" in answer:
            raise AdvisorError(f"the tuner's helper failed: {answer['error']}")
        seen = None if answer.get("seen") is None else int(answer["seen"])
        if "none" in answer:
            return NothingPays(str(answer["none"]), seen, bool(answer.get("later", False)))
        return Proposal(
            baseline=setting_from(answer["baseline"]),
            setting=setting_from(answer["setting"]),
            predicted=float(answer["predicted"]),
            low=float(answer["low"]),
            high=float(answer["high"]),
            seen=seen,
            between=bool(answer.get("between", False)),
            neighbour=bool(answer.get("neighbour", False)),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise AdvisorError(f"the tuner's helper answered {line[:200]!r}") from exc


def serve() -> None:
    """In the helper: import the diagnosis, then answer the newest question line with one answer line until input ends."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    name_this_thread("tuner")  # NOTE [ Named threads ] in collector/writer/names.py
    lean_pandas()
    from collector.tune.propose import propose

    for line in newest_questions(sys.stdin.fileno()):
        q: Any = None
        try:
            q = json.loads(line)
            answer: dict[str, Any] = propose(
                q["db"],
                int(q["run_id"]),
                setting_from(q["current"]),
                [setting_from(s) for s in q["tried"]],
                fixed_workers=bool(q["fixed_workers"]),
                fixed_threads=bool(q.get("fixed_threads", False)),
                missed=None if q.get("missed") is None else setting_from(q["missed"]),
                epoch=q.get("epoch"),
                correction=float(q.get("correction", 1.0)),
                edges=q.get("edges"),
                noise=float(q.get("noise", 0.0)),
                banked=None if q.get("banked") is None else float(q["banked"]),
            )
        except Exception as exc:  # noqa: BLE001 - the helper's boundary: the question's error goes back as the answer
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        if isinstance(q, dict) and q.get("seen") is not None:
            answer["seen"] = q["seen"]
        sys.stdout.buffer.write(json.dumps(answer).encode() + b"\n")
        sys.stdout.buffer.flush()


def newest_questions(fd: int) -> Iterator[bytes]:
    """Each question line read from ``fd``, less those a newer one came behind while the last was answered."""
    buffer = b""
    while True:
        while b"\n" not in buffer:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return
            buffer += chunk
        while select.select([fd], [], [], 0.0)[0] and (chunk := os.read(fd, 1 << 16)):
            buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        yield lines[-1]
