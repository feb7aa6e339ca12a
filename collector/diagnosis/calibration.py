"""Every calibration constant of the prediction model, with its unit and how and where it was measured: one table."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from collector.diagnosis.calibration_decisions import DECISIONS
from collector.diagnosis.constant import Constant

# NOTE [ Calibration table ]
# The prediction model (NOTE [ Sharing the cores ] in collector/diagnosis/model.py) measures what it
# can on the user's own run: loading's CPU and blocked time, the step's CPU and threads, the waits
# for a core, other processes' busy cores, fresh workers' start and end. What a run cannot show is
# here, once, with where it came from; docs/report.md lists it from this table, and the NOTEs cite
# it by name (``C.NAME``); the recommendation's and the tuner's decisions are in the same table
# (collector/diagnosis/calibration_decisions.py). bench/bench_predictions.py scores the model leave-one-pipeline-out
# against this table: ``override`` sets values for one evaluation.
_TABLE: dict[str, Constant] = {
    c.name: c
    for c in (
        Constant(
            "PARALLEL_SHARE",
            0.82,
            "share of a step's compute",
            "bench/bench_predictions.py's two CNNs (bench/pipelines.py's SmallCNN and a course's, batch 32 of 64 px), "
            "no workers, idle 2-core machine, two rounds each: their steps ran 1.52-1.93x faster on 2 intra-op "
            "threads than on 1; Amdahl's law solved for the parallel share, the median of the seven clean pairs. "
            "The bench's predictions cannot tell the shares apart: 1419-1424 of its 1443 within 25% at 0.68-0.90",
        ),
        Constant(
            "PARALLEL_SHARE_LOW",
            0.68,
            "share of a step's compute",
            "the least of the same seven pairs (1.52x on 2 threads): where a run did not measure its share, a "
            "prediction on another thread count spans PARALLEL_SHARE_LOW to PARALLEL_SHARE_HIGH",
        ),
        Constant(
            "PARALLEL_SHARE_HIGH",
            0.96,
            "share of a step's compute",
            "the most of the same seven pairs (1.93x); bench/bench_tune.py's photo pipeline measured 1.8-2.0x",
        ),
        Constant(
            "START_FIXED_S",
            0.01,
            "s an epoch",
            "fresh workers' start beyond what each worker adds (the iterator's queues and threads): the starved "
            "demo's iter() to batch 0, less its first fetch, was 22, 46 and 81 ms with 2, 6 and 12 workers on 2 "
            "cores (a line 10 ms + 5.9 ms a worker)",
        ),
        Constant(
            "START_PER_WORKER_S",
            0.006,
            "s an epoch a worker",
            "each fresh worker's fork and start, one after another in the loop's process, where a run did not "
            "measure it: the starved demo's line (START_FIXED_S); the photo-like pipelines of "
            "bench/bench_predictions.py measured 0-0.16 s with 1-3 workers",
        ),
        Constant(
            "END_FIXED_S",
            0.006,
            "s an epoch",
            "the final next() that shuts fresh workers down, beyond what each worker adds: 10, 20 and 34 ms with "
            "2, 6 and 12 of the starved demo's workers (a line 5.3 ms + 2.4 ms a worker); 10-11, 12-14 and 14-18 ms "
            "with 1, 2 and 3 workers of bench/bench_predictions.py's pipelines",
        ),
        Constant(
            "END_PER_WORKER_S",
            0.0025,
            "s an epoch a worker",
            "each fresh worker told to stop and joined in turn, where a run did not measure it (END_FIXED_S)",
        ),
        Constant(
            "HANDOFF_S",
            0.001,
            "s a batch",
            "next() of a batch a worker already delivered, where no worker run measured it: "
            "median 1.1 ms with sleeping workers on 2 cores (bench/bench_diagnosis.py)",
        ),
        Constant(
            "PINNED_COPY_BPS",
            11e9,
            "bytes/s",
            "not measured by this project (no GPU lent to its machines): a page-locked host-to-GPU copy on PCIe 3 x16, "
            "11 GB/s as reported beside NVIDIA's 'How to Optimize Data Transfers in CUDA C/C++'",
        ),
        Constant(
            "PAGEABLE_COPY_BPS",
            5.5e9,
            "bytes/s",
            "not measured by this project: half of PINNED_COPY_BPS, the ratio that post's bandwidthTest shows "
            "(a pageable copy goes through a page-locked staging buffer)",
        ),
        Constant(
            "SATURATED_WAIT",
            0.1,
            "wait for a core / CPU time",
            "a loading thread that waits this share of its CPU time for a core ran on a full machine; an idle "
            "2-core machine shows 0.04% (the scheduler's own latency), one busy process beside it 30-200%",
        ),
        Constant(
            "SURPLUS",
            1.15,
            "production / consumption",
            "headroom workers need over the loop's pace, since fetch times vary around the mean the model "
            "plays: bench/bench_predictions.py's light pipeline, 1 worker that only just kept up measured "
            "1.07-1.46 s an epoch against 1.22-1.31 s for 2",
        ),
        Constant(
            "IO_SURPLUS",
            1.5,
            "workers / workers needed",
            "I/O-bound loading gets this many times the workers the model needs: storage latency varies and "
            "a sleeping worker costs only memory (bench/bench_diagnosis.py's slow-storage case: 98-100% of "
            "the best of a 0-8 sweep)",
        ),
        Constant(
            "SPARE_CPU_WORKERS",
            1,
            "workers",
            "CPU-bound loading gets one worker a core and this many more: on 2 cores, 1 ms a sample decoding, "
            "a 10.8 ms step, 2 workers gave 77 batches/s, 3 gave 80, 8 gave 78 (bench/bench_diagnosis.py)",
        ),
        Constant(
            "MEMORY_SHARE",
            0.5,
            "share of available RAM",
            "chosen: workers and their prefetched batches may take this share of the memory the run saw available",
        ),
        Constant(
            "CLOSE",
            0.97,
            "share of the best speed-up",
            "chosen: settings within 3% of the best count as the best, and the least change among them wins",
        ),
        Constant(
            "ROBUST",
            0.90,
            "share of the best speed-up",
            "chosen: workers with SURPLUS headroom are preferred where the model gives them this share of the best",
        ),
        Constant(
            "MIN_SPEEDUP",
            1.10,
            "epoch time before / after",
            "chosen: a change must buy 10% to be recommended; a shared 2-core machine's epoch times vary "
            "about +-12% run to run, so less is not worth a user's try",
        ),
        Constant(
            "MODEL_LOW",
            0.76,
            "predicted / measured speed-up",
            "the model's error on bench/bench_predictions.py's 839 predictions (four JPEG pipelines: the bench's "
            "CNN and a course's 10-channel CNN, light and heavy transforms; 0-3 workers, 1-2 threads, persistent "
            "or not; idle and beside a hog; 2 cores): 10th percentile of predicted / measured",
        ),
        Constant(
            "MODEL_HIGH",
            1.18,
            "predicted / measured speed-up",
            "the same predictions' 90th percentile of predicted / measured",
        ),
        *DECISIONS,
    )
}


class _Values:
    """``C.NAME`` reads a constant's value at call time, so ``override`` reaches every user of it."""

    def __getattr__(self, name: str) -> float:
        try:
            return _TABLE[name].value
        except KeyError:
            raise AttributeError(f"no calibration constant {name!r}; see collector/diagnosis/calibration.py") from None


C = _Values()


def table() -> tuple[Constant, ...]:
    """Every constant, in the table's order."""
    return tuple(_TABLE.values())


@contextmanager
def override(**values: float) -> Iterator[None]:
    """Evaluate with other values (bench/bench_predictions.py's leave-one-out calibration); restored after."""
    unknown = set(values) - set(_TABLE)
    if unknown:
        raise KeyError(f"unknown calibration constants: {sorted(unknown)}")
    saved = dict(_TABLE)
    try:
        for name, value in values.items():
            _TABLE[name] = replace(_TABLE[name], value=value)
        yield
    finally:
        _TABLE.clear()
        _TABLE.update(saved)
