"""Does the collector stall the loop it records? The worst next() with and without watch(), fresh processes.

usage: python bench/bench_stall.py [--rounds 8] [--workers 0,2] [--base DIR]

The loop of issue 14: ``DataLoader(TensorDataset(torch.randn(2000, 8),
torch.arange(2000)), batch_size=32)``, three epochs, a 2 ms sleep as the step,
each next() timed by the loop itself (iter() too, and the final next() that
ends the epoch). Each round runs both sides as fresh processes (the start is
where a collector would stall: the writer starting, the first flush), in an
order alternating every round. Reported per num_workers: the worst next()
of each run (median and range over rounds), where it was (epoch, batch), the
worst iter(), and the per-round difference watched - plain of the worst
next(), excluding each epoch's first num_workers batches (worker start-up,
which both sides pay) and including them; and the first iter() of each side
with the collector's own time the watched side stored for it
(epochs.collector_s, NOTE [ The collector's own time ]). ``--base DIR`` adds
a third side in the same rounds: watch() from another checkout of this
project (a worktree of an older commit), to compare before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def child(workers: int, watched: bool, db: str) -> None:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    loader = DataLoader(TensorDataset(torch.randn(2000, 8), torch.arange(2000)), batch_size=32, num_workers=workers)
    if watched:
        import collector

        loader = collector.watch(loader, db=db)
    nexts, iters = [], []
    for epoch in range(3):
        t = time.perf_counter()
        it = iter(loader)
        iters.append(time.perf_counter() - t)
        idx = 0
        while True:
            t = time.perf_counter()
            try:
                next(it)
            except StopIteration:
                nexts.append((time.perf_counter() - t, epoch, -1))
                break
            nexts.append((time.perf_counter() - t, epoch, idx))
            idx += 1
            time.sleep(0.002)
    own: list[float] = []
    if watched:
        import sqlite3

        loader.close()  # type: ignore[attr-defined]
        with sqlite3.connect(db) as conn:  # NOTE [ The collector's own time ] in collector/record/session.py
            own = [r[0] or 0.0 for r in conn.execute("SELECT collector_s FROM epochs ORDER BY epoch")]
    print(json.dumps({"nexts": nexts, "iters": iters, "own": own}))


def run(workers: int, side: str, db: str, base: str | None) -> dict[str, list]:
    watched = "plain" if side == "plain" else "watch"
    cmd = [sys.executable, __file__, "--child", str(workers), "--side", watched, "--db", db]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    if side == "base" and base is not None:
        env["PYTHONPATH"] = base  # that checkout's collector comes first on the path
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def worst(nexts: list, skip_head: int) -> tuple[float, int, int]:
    kept = [n for n in nexts if n[2] < 0 or n[2] >= skip_head]
    return max(kept)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--workers", default="0,2")
    parser.add_argument("--base", default=None, help="another checkout, run as a third side ('base')")
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--side", default="plain", help=argparse.SUPPRESS)
    parser.add_argument("--db", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.side == "watch", args.db)
        return
    workdir = tempfile.mkdtemp(prefix="bench-stall-")
    print(f"{os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f} at start; {args.rounds} rounds")
    for workers in [int(w) for w in args.workers.split(",")]:
        sides = ["plain", "watch", "base"] if args.base else ["plain", "watch"]
        res: dict[str, list[dict[str, list]]] = {side: [] for side in sides}
        for rnd in range(args.rounds):
            order = sides[rnd % len(sides) :] + sides[: rnd % len(sides)]  # each side first in turn
            if rnd // len(sides) % 2:
                order.reverse()
            for side in order:
                db = os.path.join(workdir, f"{workers}-{rnd}-{side}.sqlite")
                res[side].append(run(workers, side, db, args.base))
        skip = max(1, workers)
        print(f"\n## num_workers={workers} (load average now {os.getloadavg()[0]:.2f})")
        print(
            "| side | worst next(), ms (median, range) | where (epoch, batch; -1 = the final next) | worst next() after each epoch's first batches, ms | worst iter(), ms |"
        )
        print("|---|---|---|---|---|")
        for side in sides:
            w_all = [worst(r["nexts"], 0) for r in res[side]]
            w_steady = [worst(r["nexts"], skip)[0] * 1000 for r in res[side]]
            it = [max(r["iters"]) * 1000 for r in res[side]]
            vals = [w[0] * 1000 for w in w_all]
            where = ", ".join(f"({w[1]},{w[2]})" for w in w_all)
            print(f"| {side} | {statistics.median(vals):.1f} ({min(vals):.1f}-{max(vals):.1f}) | {where} | "
                  f"{statistics.median(w_steady):.1f} ({min(w_steady):.1f}-{max(w_steady):.1f}) | "
                  f"{statistics.median(it):.1f} ({min(it):.1f}-{max(it):.1f}) |")  # fmt: skip
        first = {side: [r["iters"][0] * 1000 for r in res[side]] for side in res}
        d_first = [w - p for w, p in zip(first["watch"], first["plain"], strict=True)]
        own0 = [r["own"][0] * 1000 for r in res["watch"] if r["own"]]
        later = [x * 1000 for r in res["watch"] for x in r["own"][1:]]
        print(f"\nfirst iter(): plain {statistics.median(first['plain']):.2f} ms, watched "
              f"{statistics.median(first['watch']):.2f} ms (per round {statistics.median(d_first):+.2f} ms, range "
              f"{min(d_first):+.2f} to {max(d_first):+.2f}); the collector's own time it measured (epochs.collector_s, "
              f"not counted as waiting): first epoch {statistics.median(own0):.2f} ms ({min(own0):.2f}-{max(own0):.2f}), "
              f"later epochs {statistics.median(later):.3f} ms")  # fmt: skip
        for side in sides[1:]:
            d_all = [
                worst(w["nexts"], 0)[0] * 1000 - worst(p["nexts"], 0)[0] * 1000
                for w, p in zip(res[side], res["plain"], strict=True)
            ]
            d_steady = [
                worst(w["nexts"], skip)[0] * 1000 - worst(p["nexts"], skip)[0] * 1000
                for w, p in zip(res[side], res["plain"], strict=True)
            ]
            print(f"\n{side} - plain, per round: worst next() {statistics.median(d_all):+.1f} ms "
                  f"(range {min(d_all):+.1f} to {max(d_all):+.1f}); after the epochs' first batches "
                  f"{statistics.median(d_steady):+.1f} ms (range {min(d_steady):+.1f} to {max(d_steady):+.1f}); target <= +5 ms")  # fmt: skip


if __name__ == "__main__":
    main()
