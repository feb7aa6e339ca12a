"""The wire contract between the training process and the writer: the frames, their replies, and how they are encoded."""

from __future__ import annotations

import dataclasses
import json
import marshal
import struct
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from collector.sample.sampler import Rates
from collector.writer.batch_records import PAIR_BYTES, Record

# A worker's fetch timing (NOTE [ Worker timing ]): float64 values in a shared-memory ring, then a frame.
# An entry with seq < 0 is the worker's whole life, sent as it exits (NOTE [ Worker totals ]):
# started_at, wall_s (its lifetime), cpu_s and runq_s, stored in worker_exits.
FETCH = ("worker_pid", "worker_id", "incarnation", "seq", "started_at", "wall_s", "cpu_s", "runq_s")
# A worker's stage totals (NOTE [ Stage boards ]): each stage's figures, in this order; a flush carries their
# growth since the last as (worker_id, stage, *STAGE_FIELDS) rows, added to the worker_stages table.
STAGE_FIELDS = ("calls", "samples", "wall_s", "cpu_s", "pixels_in", "pixels_out")

FRAME_HEADER = struct.Struct("<I")


@dataclass
class RunStart:
    """Everything the run row needs; gathered on the training thread."""

    name: str
    config: dict[str, Any]
    host: dict[str, Any]
    versions: dict[str, Any]
    hostname: str
    pid: int
    command: str
    rank: int | None
    world_size: int | None
    tags: dict[str, Any] = field(default_factory=dict)
    job_id: str | None = None  # shared by the ranks of one distributed job
    stage: str | None = None  # train | val | test | predict, when a framework says


@dataclass
class Open:
    """The first frame: where to write, the run to create, the clocks' origin and the sampling rates."""

    db_path: str
    start: RunStart
    wall0_s: float
    perf0_ns: int
    rates: Rates
    run_id: int | None = None  # a replacement writer goes on with this run (NOTE [ Writer health ])
    samples_before: int = 0  # samples earlier writers of this run took (NOTE [ Accounting ])

    def __post_init__(self) -> None:
        # Only plain built-ins cross the pipe (NOTE [ Frames ]): a
        # torch.__version__ is a TorchVersion, a config may hold user objects.
        fields = ("config", "host", "versions", "tags")
        plain = {name: json.loads(json.dumps(getattr(self.start, name), default=str)) for name in fields}
        self.start = dataclasses.replace(self.start, **plain)


@dataclass
class EpochRow:
    """One row of the epochs table, as the monitor builds it up from the training thread's events."""

    epoch: int
    started_at: float
    ended_at: float | None = None
    first_batch_s: float | None = None
    batches: int = 0
    worker_pids_json: str = "[]"  # the sampler follows the newest epoch's workers through it
    end_wait_s: float | None = None  # the final next(), the one that ended the epoch
    collector_s: float | None = None  # the collector's own work inside first_batch_s, not the loader's
    setting_json: str | None = None  # the loader's setting this epoch, where a tuner changed it


@dataclass
class Flush:
    """One flush interval's worth of records; written as one transaction.

    Rows carry no run id: the sink adds it. ``records`` maps a layout name
    (NOTE [ Record layouts ] in collector/writer/batch_records.py) to hot-path tuples, ``timed`` holds (epoch,
    first idx, int64 clock pairs) from the plain loop's Timer (NOTE
    [ Compiled hot loop ]), ``fetches`` raw float64 ring segments (NOTE
    [ Timing rings ]), ``idle`` ((epoch, idx), gpu_idle_s) pairs. Samples are
    not in it: the Sink's own Sampler takes them.
    """

    records: dict[str, list[Record]] = field(default_factory=dict)
    timed: list[tuple[int, int, bytes]] = field(default_factory=list)
    epochs: list[EpochRow] = field(default_factory=list)
    fetches: list[bytes] = field(default_factory=list)
    idle: list[tuple[tuple[int, int], float | None]] = field(default_factory=list)
    update: dict[str, Any] = field(default_factory=dict)
    iterated: int | None = None  # the final flush: batches handed to the loop in all (NOTE [ Accounting ])
    trials: list[tuple[Any, ...]] = field(default_factory=list)  # rows of the trials table (TRIAL_COLUMNS), no run id
    helpers: list[tuple[int, float]] = field(
        default_factory=list
    )  # the tuner's helpers started: (pid, monotonic start)
    stages: list[tuple[Any, ...]] = field(default_factory=list)  # (worker_id, stage, *STAGE_FIELDS) growth

    def record_count(self) -> int:
        """Batches in this frame (a described batch is also among the timed pairs: counted once)."""
        described = len(self.records.get("described", ()))
        timed = sum(len(pairs) // PAIR_BYTES for *_, pairs in self.timed)
        return sum(len(chunk) for chunk in self.records.values()) - described + timed


class Close(NamedTuple):
    """The last frame: write what is left and exit."""


# The writer's replies.
class RunCreated(NamedTuple):
    run_id: int


class Warned(NamedTuple):
    key: str  # one warning per key
    text: str


class Unwritten(NamedTuple):
    records: int  # batches lost to a failed write


class Taken(NamedTuple):
    samples: int  # sample rows this writer has taken so far (NOTE [ Accounting ])


class Alive(NamedTuple):
    """The writer's ping, also while it waits on SQLite (NOTE [ Writer health ])."""


class Closed(NamedTuple):
    """The channel's run is finished (its Close written): the last reply on that channel."""


Reply = RunCreated | Warned | Unwritten | Taken | Alive | Closed
_REPLY_TAGS: dict[type, str] = {
    RunCreated: "run_id",
    Warned: "warn",
    Unwritten: "unwritten",
    Taken: "taken",
    Alive: "alive",
    Closed: "closed",
}
_REPLY_TYPES = {tag: kind for kind, tag in _REPLY_TAGS.items()}


def open_failure(db_path: str, exc: BaseException) -> Warned:
    return Warned("store", f"cannot record to {db_path} ({exc}); training continues unrecorded")


# NOTE [ Frames ]
# A frame is a 4-byte length and a marshal payload: marshal encodes the
# built-in types records are made of about twice as fast as pickle, and
# decoding it can never run code or import a module. It encodes exact tuples
# only, so each message travels as a tagged tuple and is named again on
# arrival (decode_frame, decode_replies):
#   ("open", db_path, run_start_fields, wall0_s, perf0_ns, (gpu_hz, host_hz, keep_batches), run_id, samples_before)
#   ("flush", records, timed, epoch_rows, fetches, idle, update, iterated, trials, helpers, stages)
#   ("close",)
# and the writer's replies are lists of ("run_id", id) | ("warn", key, text)
# | ("unwritten", records) | ("taken", samples) | ("alive",) | ("closed",).
# Epoch rows travel as tuples in EpochRow's order. On the pipe each frame and
# each list of replies travels in an envelope (channel, message): one writer
# serves every run of a training process, one channel a run (NOTE [ One
# writer a process ] in collector/writer/channel.py). Pings go on channel -1.
Frame = Open | Flush | Close
PROCESS_CHANNEL = -1  # replies about the writer itself (its pings), not about one run


def encode_message(channel: int, frame: Frame) -> bytes:
    """One frame for one channel, as it crosses the pipe."""
    return frame_bytes((channel, frame_payload(frame)))


def decode_message(payload: Any) -> tuple[int, Frame | None]:
    """(channel, frame) from an envelope; (PROCESS_CHANNEL, None) for anything else."""
    if not isinstance(payload, tuple) or len(payload) != 2 or not isinstance(payload[0], int):
        return PROCESS_CHANNEL, None
    return payload[0], decode_frame(payload[1])


def encode_channel_replies(channel: int, replies: list[Reply]) -> bytes:
    return frame_bytes((channel, [(_REPLY_TAGS[type(reply)], *reply) for reply in replies]))


def decode_channel_replies(payload: tuple[int, list[tuple[Any, ...]]]) -> tuple[int, list[Reply]]:
    channel, replies = payload
    return channel, decode_replies(replies)


def encode_frame(frame: Frame) -> bytes:
    return frame_bytes(frame_payload(frame))


def frame_payload(frame: Frame) -> tuple[Any, ...]:
    if isinstance(frame, Open):
        rates = (frame.rates.gpu_hz, frame.rates.host_hz, frame.rates.keep_batches)
        start = vars(frame.start)
        payload: tuple[Any, ...] = (
            "open",
            frame.db_path,
            start,
            frame.wall0_s,
            frame.perf0_ns,
            rates,
            frame.run_id,
            frame.samples_before,
        )
    elif isinstance(frame, Flush):
        epochs = [dataclasses.astuple(row) for row in frame.epochs]
        payload = (
            "flush",
            frame.records,
            frame.timed,
            epochs,
            frame.fetches,
            frame.idle,
            frame.update,
            frame.iterated,
            frame.trials,
            frame.helpers,
            frame.stages,
        )
    else:
        payload = ("close",)
    return payload


def decode_frame(payload: Any) -> Frame | None:
    """The frame a payload carries; None for anything else."""
    if not isinstance(payload, tuple) or not payload:
        return None
    tag, *rest = payload
    if tag == "open":
        db_path, start, wall0_s, perf0_ns, rates, run_id, samples_before = rest
        return Open(db_path, RunStart(**start), wall0_s, perf0_ns, Rates(*rates), run_id, samples_before)
    if tag == "flush":
        records, timed, epochs, fetches, idle, update, iterated, trials, helpers, stages = rest
        rows = [EpochRow(*row) for row in epochs]
        helpers = [tuple(h) for h in helpers]
        return Flush(records, timed, rows, fetches, idle, update, iterated, trials, helpers, stages)
    if tag == "close":
        return Close()
    return None


def decode_replies(payload: list[tuple[Any, ...]]) -> list[Reply]:
    return [_REPLY_TYPES[tag](*rest) for tag, *rest in payload]


def frame_bytes(payload: Any) -> bytes:
    """One frame: a 4-byte length, then the marshal payload."""
    data = marshal.dumps(payload)
    return FRAME_HEADER.pack(len(data)) + data
