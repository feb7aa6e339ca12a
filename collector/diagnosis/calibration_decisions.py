"""The recommendation's, the live tuner's and the sweep's decision constants, each with where it came from.

The calibration table's second half.
"""

from __future__ import annotations

from collector.diagnosis.constant import Constant

# NOTE [ Decision constants ]
# What the model measures and what it cannot are in collector/diagnosis/calibration.py; the
# choices made on top of it (how far a search goes, how long a trial runs, what counts as a
# gain) are here, in the same table (``C.NAME``), each with the bench or the reasoning behind it.
# The sweep's (``collector sweep``, collector/diagnosis/decide_measured.py) come last: it ranks
# settings it measured, not predictions, so its thresholds are its own.
# Modules that need one as a plain name bind it from ``C`` at import (``BASELINE_EPOCHS =
# int(C.BASELINE_EPOCHS)``), so the value lives here alone.
DECISIONS = (
    Constant(
        "MAX_CANDIDATE_WORKERS",
        16,
        "workers",
        "chosen: the most workers any candidate has (I/O-bound loading, or the tuner on a quiet machine after "
        "measured steps); more sleeping workers cost memory and start-up for gains no bench has shown",
    ),
    Constant(
        "MAX_WORKERS",
        64,
        "workers",
        "chosen: memory's ceiling where a run measured no worker's size; the exporter reads this many workers' "
        "start-up batches at the head of an epoch",
    ),
    Constant(
        "MAX_SPREAD",
        0.5,
        "share of an epoch",
        "chosen: a run noisier than this (epochs 50% apart) still gets a range, not a negative lower bound",
    ),
    Constant(
        "SATURATED_THREADS_SLACK",
        0.2,
        "threads",
        "threads of torch's pool a step may leave idle and still count as using them all (Amdahl's law then plays "
        "it on more threads): bench/bench_tune.py's photo step kept 1.95 of its 2 threads busy without workers "
        "(tests/test_tuning_correction.py's PHOTO_AT_0)",
    ),
    Constant(
        "FILL_BATCHES",
        64,
        "batches",
        "batches of an epoch with fresh workers played out one by one (NOTE [ Fresh workers each epoch ]); the rest "
        "run at the steady cycle: the demos' 64-batch epochs are played whole",
    ),
    Constant(
        "MIN_THREADS_APART",
        0.5,
        "threads",
        "chosen: steps whose runnable threads are this far apart measure the step's parallel share between them "
        "(the photo step ran 1.0 on 1 thread and 1.95 on 2); closer, the two are one measurement",
    ),
    Constant(
        "MIN_SAMPLED_LOADS",
        5,
        "batches",
        "chosen: without workers, sampled next() CPU times needed before they replace the estimate from the "
        "process's CPU, so one cold batch (a first decode, a cache miss) does not decide",
    ),
    Constant(
        "QUIET_CORES",
        0.25,
        "busy cores",
        "chosen: other processes' busy cores below which the tuner's workers take no one's cores (NOTE [ After a "
        "miss ] in collector/tune/propose.py); the benches' quiet runs keep other processes under 0.05",
    ),
    Constant(
        "SHARED_WORKERS_PER_CORE",
        2,
        "workers a physical core",
        "the most of the articles' range, 1-2x the physical cores (../shared/SOURCES.md). Capped at 3 on 2 cores "
        "beside a hog, bench/bench_tune.py's cpu pipeline ran 1.19-1.33 s where 4 persistent workers ran 1.14-1.15 s",
    ),
    Constant(
        "NEIGHBOUR_STEP",
        0.25,
        "share of the workers",
        "chosen: a neighbour's worker count lies at least this share of the current one away (at least one worker) "
        "(NOTE [ Measured neighbours ] in collector/diagnosis/decide.py): a step of one worker in 20 moves "
        "loader-bound throughput 5%, within the demos' 1-9% epoch variation, and its trial's fresh workers cost an "
        "epoch (tests/test_tuning.py's starved loader: 20 to 21 persistent workers, 0.97x, their start 5x the epoch)",
    ),
    Constant(
        "BASELINE_EPOCHS",
        2,
        "epochs",
        "epochs at the user's own setting before the first trial: the warm-up (NOTE [ The warm-up segment ]) and "
        "one steady epoch, the least that measures the setting's speed",
    ),
    Constant(
        "WARMUP_SEGMENTS",
        1,
        "segments",
        "the run's first segment carries its one-time costs: on the demos it ran 4-20% slower than the epochs after "
        "it, while those varied 1-9% among themselves (NOTE [ The warm-up segment ])",
    ),
    Constant(
        "NOISE_FLOOR",
        0.03,
        "share of a segment",
        "chosen: a difference smaller than this is never a gain, until a setting's own measured variation (two "
        "steady segments) stands in; the demos' steady epochs varied 1-9% among themselves",
    ),
    Constant(
        "MAX_TRIALS",
        8,
        "trials",
        "chosen: at one epoch in four (tune=True's default) after the first, 8 trials span about 30 epochs",
    ),
    Constant(
        "MIN_CORRECTION",
        1 / 3,
        "measured / predicted gain",
        "chosen: one noisy trial moves the model's later gains by at most 3x (NOTE [ Measurement steers the model ])",
    ),
    Constant(
        "MAX_CORRECTION",
        3.0,
        "measured / predicted gain",
        "chosen: the bound's other side, as far above as MIN_CORRECTION is below",
    ),
    Constant(
        "STARVED",
        2.0,
        "queued / ran",
        "the tuner's helper queued for a core this many times as long as it ran: the machine is full, and it gets "
        "the job's priority while the job waits on it; beside a same-session hog it queued 0.9 s for each 0.09 s "
        "run, on a quiet machine 0.13 s for 0.31 s (NOTE [ A helper the job waits on ])",
    ),
    Constant(
        "STARVED_MIN_S",
        0.1,
        "s",
        "and queued at least this long: a scheduler's latency on an idle machine is not a full machine",
    ),
    Constant(
        "LONG_EPOCH_S",
        120.0,
        "s",
        "chosen: an epoch longer than this is tuned in windows (NOTE [ Windows of a long epoch ]); bench_tune.py "
        "--long 420 (the starved demo, one 7-minute epoch) ran at 1.06 of the best static rate by minute 4",
    ),
    Constant(
        "WINDOW_S",
        30.0,
        "s",
        "chosen: one window of a long epoch, one measured segment: long enough for a fresh trial's workers to "
        "start and run at their pace, short enough for four windows a 2-minute epoch",
    ),
    Constant(
        "MIN_TUNED_BATCHES",
        6,
        "batches an epoch",
        "chosen (NOTE [ One tuner for the job ] in collector/record/tuning_job.py): an epoch this short is mostly "
        "the first batch's latency, whatever the setting. The course pipeline's 3-batch evaluation loader, tuned, "
        "made the job's epochs 15-90% slower; its 8-batch training loader's trials paid 1.02-1.11x",
    ),
    Constant(
        "MIN_JOB_SHARE",
        0.15,
        "share of the job's loader time",
        "chosen: a loader below it gains the job at most 7.5% if made twice as fast, while one slow trial "
        "(+15-90% measured on the course pipeline's evaluation loader) costs about what several epochs gain",
    ),
    Constant(
        "PLATEAU_GAIN",
        0.10,
        "share of throughput",
        "chosen, the sweep's: it stops raising num_workers once a step buys less than this much more measured "
        "throughput than the best fewer workers gave (the articles' 'raise while watching until it plateaus', "
        "../shared/SOURCES.md); the same 10% a recommended change must buy (MIN_SPEEDUP)",
    ),
    Constant(
        "TOLERANCE",
        0.05,
        "share of the best throughput",
        "chosen, the sweep's: measured settings this close to the fastest count as as fast, and the cheapest of "
        "them (fewest workers, fewest batches held, no pinned memory) wins, as CLOSE does among predictions",
    ),
    Constant(
        "FED_WAIT_SHARE",
        0.05,
        "share of the measured time",
        "chosen, the sweep's: a paced trial whose loop waits for data at most this share of its measured time is "
        "fed; the sweep raises num_workers no further, and its verdict says whether the winner keeps the model fed",
    ),
    Constant(
        "MEMORY_HEADROOM",
        0.8,
        "share of available RAM",
        "chosen, the sweep's: more workers are not tried where their measured RSS (one worker's median times the "
        "workers added) would pass this share of the memory the last trial left available",
    ),
)
