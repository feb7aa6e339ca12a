"""Intra-op threads: how much faster a step runs on more of them, by Amdahl's law."""

from __future__ import annotations


def amdahl(q: float, p: float) -> float:
    """How much faster a step runs on q intra-op threads than on one (Amdahl, ``p`` of it parallel).

    NOTE [ Intra-op threads ]
    A step's threads spin at the barriers of its parallel regions, so a run
    measures q threads busy for the whole step and cannot tell the useful
    share from the spinning. Its CPU is not the work one thread would do: so
    a step on fewer threads is predicted from Amdahl's law with a parallel
    share, not from its CPU (reading 2 threads' CPU as one thread's work had
    a 1-thread step take 40% too long). The same law plays a step on more
    threads than it was recorded on, where it kept every thread it had busy
    (``threads_saturated``). The share is the job's own: on an idle 2-core
    machine without workers, bench/bench_predictions.py's two CNNs ran 1.52x
    to 1.93x faster on 2 threads than on 1 (shares 0.68-0.96, median 0.82),
    as much between rounds of one pipeline as between pipelines, and
    bench/bench_tune.py's photo pipeline 1.8-2.0x. One thread count cannot
    show it, so a prediction at another spans C.PARALLEL_SHARE_LOW to
    C.PARALLEL_SHARE_HIGH (``speedup_span``) about C.PARALLEL_SHARE, and
    ``choose`` ranks it by the least of that span; where the run ran at two
    thread counts (a tuner's trial), their steps measure the share
    (``parallel_share_between`` in collector/diagnosis/build.py).
    """
    return 1.0 / ((1.0 - p) + p / max(q, 1.0))
