"""How much of a core each of our runnable threads gets beside other processes' busy threads."""

from __future__ import annotations

import math

MAX_THREADS = 4096.0  # other processes' busy threads read from the cores they used: at most this many


def share(ours: float, background: float, cores: float) -> float:
    """Each of our runnable threads' share of a core, with ``background`` threads of other processes runnable.

    NOTE [ Crowded cores ]
    Linux keeps a run queue per core and balances the queues by how many
    threads they hold, not by what each thread gets: R runnable threads on C
    cores leave some cores with floor(R / C) threads and the others with one
    more. A busy process never sleeps, so it stays where it is; our threads
    sleep and wake beside the thread that woke them (a worker hands the loop
    its batch), so ours fill the crowded cores. On 2 cores beside one busy
    process, 1 worker and a 1-thread step got 0.52, 0.64 and 0.54 of a core
    each (bench/bench_predictions.py's light pipeline), where an even split
    of 2 cores among 3 threads gives 0.67; without workers the loop had a
    core to itself. Split evenly, those waits had read as about two busy
    threads beside ours where there was one, and the model put the loop
    without workers at 0.55-0.75 of the speed it then measured. With ours
    alone on the machine this is the even split; the threads of another job
    that sleeps and wakes as ours do would share more evenly than this.
    """
    if ours + background <= cores:
        return 1.0
    if ours <= 0:
        return cores / (ours + background)
    return max(0.0, cores - their_cores(ours, background, cores)) / ours


def their_cores(ours: float, background: float, cores: float) -> float:
    """The cores other processes' ``background`` busy threads get beside our ``ours``: the least crowded ones first."""
    total = ours + background
    if total <= cores:
        return background
    per_core = math.floor(total / cores)
    roomy = cores - (total - per_core * cores)  # cores holding per_core threads; the rest hold one more
    on_roomy = min(background, roomy * per_core)
    return on_roomy / per_core + (background - on_roomy) / (per_core + 1)


def background_using(ours: float, busy: float, cores: float) -> float:
    """The fewest other processes' busy threads that would get ``busy`` cores beside our ``ours`` (their_cores' inverse).

    Up to the cores ours leave free that is ``busy`` itself; beyond, their
    threads share cores: two busy processes beside our three runnable
    threads on 2 cores get one core between them.
    """
    low, high = busy, max(1.0, 2.0 * busy)
    if their_cores(ours, low, cores) >= busy - 1e-9:
        return low
    while their_cores(ours, high, cores) < busy and high < MAX_THREADS:
        low, high = high, 2.0 * high
    for _ in range(60):
        mid = 0.5 * (low + high)
        if their_cores(ours, mid, cores) < busy:
            low = mid
        else:
            high = mid
    return high


def background_for(ours: float, measured: float, cores: float) -> float:
    """The fewest other processes' runnable threads that leave each of ours ``measured`` of a core (share's inverse)."""
    if measured >= 1.0:
        return 0.0
    return background_using(ours, cores - measured * ours, cores)  # share is what their cores leave to ours
