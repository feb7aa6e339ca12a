"""The batches table's hot-path records: every layout by name, and beside each the one function that packs it."""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator, Sequence
from itertools import chain, repeat
from typing import Any

# NOTE [ Record layouts ]
# Each hot-path loop builds the shortest tuple it can (every field costs the
# training thread time: a measured choice, see NOTE [ Hot path ] in
# collector/record/session.py), so records are positional on the training
# thread. Their layouts are defined here, once, by name, each beside the one
# function that packs it, whose parameters are the layout's fields: the
# full loop (collector/record/full_loop.py) and the plain loop
# (collector/record/plain_loop.py) call the packers; the compiled Timer packs
# only clock pairs into its ring (NOTE [ Compiled hot loop ]), which the
# writer turns into fast records with ``fast_records`` (collector/writer/sink.py);
# and the writer turns records into rows with one statement per layout, NULL
# for the fields it lacks (collector/store/connection.py). Of the fields, the
# three clocks become ts, wait_s and step_s (NOTE [ Clocks in SQL ]); every
# other field is a ``batches`` column, a field named *_ns (a CPU reading in
# nanoseconds) stored in seconds in the column of the same name ending in _s.
# tests/test_batch_records.py holds each loop's records to these layouts and
# every field to the schema.
#   fast       clocks only, from a plain loop's Timer (NOTE [ Compiled hot loop ])
#   queue      fast + the loader's queue and the worker that produced the batch
#   rich       queue + the batch's size and whether it is pinned (no loop packs it
#              now; test fixtures write such rows)
#   sampled    rich + the loading threads' CPU and the training thread's wait for a
#              core during next() (NOTE [ Loading CPU in the main process ]): batches also described
#   described  as sampled, from the plain loop: its batch is also among a
#              Timer's clock pairs, so it replaces that row and is not counted twice
FAST = ("epoch", "idx", "t_request_ns", "t_return_ns", "t_prev_return_ns")
QUEUE = (*FAST, "ready", "in_flight", "worker_id", "worker_pid", "worker_incarnation", "worker_seq")
RICH = (*QUEUE, "samples", "nbytes", "pinned")
SAMPLED = (*RICH, "load_cpu_ns", "load_runq_ns")
LAYOUTS: dict[str, tuple[str, ...]] = {
    "fast": FAST,
    "queue": QUEUE,
    "rich": RICH,
    "sampled": SAMPLED,
    "described": SAMPLED,
}
CLOCKS = len(FAST)  # every layout starts with the fast fields
EPOCH, IDX, T_RETURN = FAST.index("epoch"), FAST.index("idx"), FAST.index("t_return_ns")
PAIR_BYTES = 16  # a Timer's (t_request_ns, t_return_ns) pair: two int64

Record = tuple[Any, ...]


def fast_records(
    epoch: int,
    idx: int,
    t_request_ns: Sequence[int],
    t_return_ns: Sequence[int],
    t_prev_return_ns: int | None,
) -> Iterator[Record]:
    """FAST records, packed by column: a Timer's clocks from batch ``idx`` on.

    ``t_request_ns`` and ``t_return_ns`` hold one clock a batch (``ring_clocks``);
    ``t_prev_return_ns`` is the return before the first (None: unknown).
    """
    prev = chain((t_prev_return_ns,), t_return_ns[:-1])
    return zip(repeat(epoch), range(idx, idx + len(t_return_ns)), t_request_ns, t_return_ns, prev)


def ring_clocks(pairs: bytes) -> tuple[Sequence[int], Sequence[int]]:
    """(t_request_ns, t_return_ns) columns from a Timer's drained int64 clock pairs."""
    clocks = array("q")
    clocks.frombytes(pairs)
    return clocks[0::2], clocks[1::2]


def queue_record(
    epoch: int,
    idx: int,
    t_request_ns: int,
    t_return_ns: int,
    t_prev_return_ns: int | None,
    ready: int | None,
    in_flight: int | None,
    worker_id: int | None,
    worker_pid: int | None,
    worker_incarnation: int | None,
    worker_seq: int | None,
) -> Record:
    """A QUEUE record: a batch of the full loop that was not described."""
    return (
        epoch,
        idx,
        t_request_ns,
        t_return_ns,
        t_prev_return_ns,
        ready,
        in_flight,
        worker_id,
        worker_pid,
        worker_incarnation,
        worker_seq,
    )


def rich_record(
    epoch: int,
    idx: int,
    t_request_ns: int,
    t_return_ns: int,
    t_prev_return_ns: int | None,
    ready: int | None,
    in_flight: int | None,
    worker_id: int | None,
    worker_pid: int | None,
    worker_incarnation: int | None,
    worker_seq: int | None,
    samples: int | None,
    nbytes: int | None,
    pinned: int | None,
) -> Record:
    """A RICH record: a described batch without its loading CPU (written by tests and benchmarks, no loop)."""
    return (
        epoch,
        idx,
        t_request_ns,
        t_return_ns,
        t_prev_return_ns,
        ready,
        in_flight,
        worker_id,
        worker_pid,
        worker_incarnation,
        worker_seq,
        samples,
        nbytes,
        pinned,
    )


def sampled_record(
    epoch: int,
    idx: int,
    t_request_ns: int,
    t_return_ns: int,
    t_prev_return_ns: int | None,
    ready: int | None,
    in_flight: int | None,
    worker_id: int | None,
    worker_pid: int | None,
    worker_incarnation: int | None,
    worker_seq: int | None,
    samples: int | None,
    nbytes: int | None,
    pinned: int | None,
    load_cpu_ns: int | None,
    load_runq_ns: int | None,
) -> Record:
    """A SAMPLED record: a described batch with its loading CPU (the full loop's sampled, the plain loop's described)."""
    return (
        epoch,
        idx,
        t_request_ns,
        t_return_ns,
        t_prev_return_ns,
        ready,
        in_flight,
        worker_id,
        worker_pid,
        worker_incarnation,
        worker_seq,
        samples,
        nbytes,
        pinned,
        load_cpu_ns,
        load_runq_ns,
    )


PACKERS: dict[str, Callable[..., Any]] = {
    "fast": fast_records,
    "queue": queue_record,
    "rich": rich_record,
    "sampled": sampled_record,
    "described": sampled_record,
}
