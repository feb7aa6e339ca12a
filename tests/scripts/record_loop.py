"""A training loop in its own process, for durability tests.

usage: record_loop.py DB RUN BATCHES STEP_S [LOG] [--raise-in-loop]
BATCHES=0 loops until killed. LOG gets "idx wall_time" per batch, flushed.
"""

from __future__ import annotations

import sys
import time

import collector


def main() -> None:
    db, run, batches, step_s = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    log = open(sys.argv[5], "w", buffering=1) if len(sys.argv) > 5 and sys.argv[5] != "-" else None  # noqa: SIM115 - lives as long as the loop
    raise_in_loop = "--raise-in-loop" in sys.argv
    source = range(batches) if batches else iter(int, 1)  # iter(int, 1) never ends
    watched = collector.watch(source, db=db, run=run, gpu_hz=0, host_hz=0)
    for idx, _ in enumerate(watched):
        if log is not None:
            log.write(f"{idx} {time.time()}\n")
        if raise_in_loop and idx == 5:
            raise RuntimeError("loss is NaN")
        time.sleep(step_s)
    watched.close()


if __name__ == "__main__":
    main()
