"""The end-of-run verdict, prepared beside the job: a helper process that imports the diagnosis while the job runs."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
import time
from collections.abc import Sequence
from typing import TextIO

from collector.writer.names import name_this_thread
from collector.writer.spawn import end_child, forget_in_forks, lean_pandas, raise_to_ours, start_child

# NOTE [ Verdict beside the job ]
# The verdict printed when a script ends (``collector run``) needs pandas and
# the diagnosis rules: 0.3-0.5 s of CPU to import, on the job's critical path
# at its very end. So a helper process starts with the job, as politely as
# the writer (NOTE [ A polite writer ]: nice +10 in the job's session, so it
# runs on CPU the job leaves), imports them, says "ready" and waits. At the
# end the training process sends it the file, the runs and the launch tag,
# and prints the text it answers: the same ``verdict_text``, computed there,
# at the job's own priority where the user may raise it back (root,
# CAP_SYS_NICE, RLIMIT_NICE; then a helper still importing finishes at that
# priority, never slower than starting over here); elsewhere it answers at
# nice +10, which beside other busy processes is about as slow as computing
# it here, and a helper not ready yet (a script of a few seconds, a machine
# the job fills) is ended and the verdict computed here, as before. So is one
# that cannot start, dies, or stays silent for ANSWER_TIMEOUT_S. In a
# distributed job rank 0's helper first waits for the other ranks' runs (up
# to PEER_WAIT_S, collector/verdict/printing.py) and says "waiting" at each poll
# meanwhile, so it is not given up on, only to wait for them again here.
# Only a process that prints a verdict starts one (not ranks other than 0).
# Forked DataLoader workers close their copies of its pipes, so the helper
# sees its input end, and exits, when the training process is gone. It holds
# about 70 MB (pandas, numpy) while the job runs. It imports pandas without
# pyarrow (``lean_pandas`` in writer/spawn.py): pandas then keeps its strings
# in Python objects, which the diagnosis never notices, and the helper starts
# on about an eighth less CPU (0.58 s against 0.66 s here) and holds a third
# less memory (69 MB against 103 MB), with no jemalloc thread (the tuner's
# helper does the same).
ANSWER_TIMEOUT_S = 10.0  # silence after which the helper is given up on; each heartbeat starts it again
SERVE = "from collector.verdict.helper import serve; serve()"
READY = b"ready\n"
WAITING = b"waiting\n"  # the heartbeat of a helper waiting for a distributed job's other ranks (PEER_WAIT_S)

Runs = Sequence[tuple[str, int | None]]  # (name, run id) per recorded DataLoader


class VerdictHelper:
    """The helper process. ``text`` never raises: None means "compute it here"."""

    def __init__(self, code: str = SERVE) -> None:
        self.pid: int | None = None
        self._buffer = b""
        self._pos = len(READY)  # where the next line after "ready" starts
        self._req = self._rep = -1
        try:
            self.pid, self._req, self._rep = start_child(code)
        except OSError:
            return
        forget_in_forks(self)  # NOTE [ Forked children ] in collector/writer/spawn.py

    @property
    def ready(self) -> bool:
        """It has imported everything and waits for the question."""
        while self.pid is not None and not self._buffer.startswith(READY) and self._more(0.0):
            pass
        return self._buffer.startswith(READY)

    def text(self, db: str, runs: Runs, launch: str | None = None) -> str | None:
        """The verdict's text from the helper, or None where it cannot give it; the helper ends either way."""
        try:
            if self.pid is None:
                return None
            raised = self._raise_priority()
            if not self.ready and not (raised and self._until_ready(time.monotonic() + ANSWER_TIMEOUT_S)):
                return None  # still importing at nice +10: computing it here is quicker
            return self._ask(db, runs, launch)
        finally:
            self.close()

    def _raise_priority(self) -> bool:
        """The job's own priority for the answer, where the user may raise it back (root, CAP_SYS_NICE, RLIMIT_NICE)."""
        assert self.pid is not None
        return raise_to_ours(self.pid)

    def _until_ready(self, deadline: float) -> bool:
        while not self._buffer.startswith(READY):
            if not self._more(deadline - time.monotonic()):
                return False
        return True

    def _ask(self, db: str, runs: Runs, launch: str | None) -> str | None:
        try:
            os.write(self._req, json.dumps({"db": db, "runs": list(runs), "launch": launch}).encode() + b"\n")
            while (line := self._line(time.monotonic() + ANSWER_TIMEOUT_S)) == WAITING:
                pass  # still waiting for the other ranks, within PEER_WAIT_S: not stuck
            if line is None:
                return None
            answer = json.loads(line)
        except (OSError, ValueError):
            return None
        return answer if isinstance(answer, str) else None

    def _line(self, deadline: float) -> bytes | None:
        """The helper's next whole line after "ready", waiting until ``deadline``; None at a timeout or its end."""
        while (end := self._buffer.find(b"\n", self._pos)) < 0:
            if not self._more(deadline - time.monotonic()):
                return None
        line, self._pos = self._buffer[self._pos : end + 1], end + 1
        return line

    def _more(self, timeout_s: float) -> bool:
        """Read what the helper wrote, waiting up to ``timeout_s``; False at a timeout, its end or an error."""
        try:
            if not select.select([self._rep], [], [], max(0.0, timeout_s))[0]:
                return False
            chunk = os.read(self._rep, 1 << 16)
        except (OSError, ValueError):
            return False
        self._buffer += chunk
        return bool(chunk)

    def close(self) -> None:
        """End the helper and reap it. Idempotent."""
        if self.pid is not None:
            end_child(self.pid)
        self.forget_in_fork()

    def forget_in_fork(self) -> None:
        """Close the pipes and forget the helper: at its end, and in a forked process, whose child it is not."""
        for fd in (self._req, self._rep):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._req = self._rep = -1
        self.pid = None


def start_helper() -> VerdictHelper | None:
    """A helper where this process will print a verdict; None on ranks other than 0."""
    return VerdictHelper() if prints_verdict() else None


def print_verdict_text(
    helper: VerdictHelper | None, db: str, runs: Runs, out: TextIO, launch: str | None = None
) -> None:
    """Print the verdict: the helper's text where it is ready, else the same text computed here. Ends the helper."""
    out.write(verdict_text_of(helper, db, runs, launch))
    out.flush()


def verdict_text_of(helper: VerdictHelper | None, db: str, runs: Runs, launch: str | None = None) -> str:
    """The verdict's text: the helper's where it is ready, else computed here. Ends the helper."""
    from collector.verdict.printing import verdict_text

    text = None if helper is None else helper.text(db, runs, launch)
    return verdict_text(db, runs, launch=launch) if text is None else text


def prints_verdict(environ: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """Whether this process will print a verdict, so a helper is worth starting: not a rank other than 0."""
    return environ.get("RANK", "0").strip() in ("", "0")


def serve() -> None:
    """In the helper: import the diagnosis, say ready, answer one question (db, runs, launch) with the verdict's text."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    name_this_thread("verdict")  # NOTE [ Named threads ] in collector/writer/names.py
    lean_pandas()
    from collector.diagnosis import diagnose_data, diagnose_job  # noqa: F401 - pandas and every rule, imported while the job runs
    from collector.verdict.printing import verdict_text

    _say(READY)
    request = sys.stdin.buffer.readline()
    if not request:
        return  # the training process is gone
    asked = json.loads(request)
    runs = [(str(name), None if run_id is None else int(run_id)) for name, run_id in asked["runs"]]
    answer = verdict_text(asked["db"], runs, launch=asked["launch"], waiting=lambda: _say(WAITING))
    _say(json.dumps(answer).encode() + b"\n")


def _say(line: bytes) -> None:
    sys.stdout.buffer.write(line)
    sys.stdout.buffer.flush()
