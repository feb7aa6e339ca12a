"""A course-style training program over generated JPEGs: ImageFolder-like data, PIL transforms, a small CNN.

usage: python bench/train_images.py DATA [--epochs 5] [--workers 2] [--width 32] [--transform light|heavy] [--watch DB]

Run unmodified (``python bench/train_images.py ...``), under ``python -m
collector run``, or with ``--watch DB`` (the two loaders wrapped in
``collector.watch``). Prints one JSON line with its own meters: the time
inside the epoch loops, each epoch's iter(), the time blocked in next() (the final
next() that ends each epoch also on its own) and the batches,
as a training script's own "data time" meter would, and the wall clock when
the loops began and ended (the benchmark compares them with the process's
start and exit).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

T_IMPORTED = time.time()

import torch  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pipelines import JpegFolder, SmallCNN  # noqa: E402


def epoch(loader, step, meter):
    t0 = time.perf_counter()
    it = iter(loader)
    meter["iter_s"] += time.perf_counter() - t0
    while True:
        t = time.perf_counter()
        try:
            batch = next(it)
        except StopIteration:
            last = time.perf_counter() - t
            meter["wait_s"] += last
            meter["last_s"] += last
            break
        meter["wait_s"] += time.perf_counter() - t
        meter["batches"] += 1
        step(batch)
    meter["loop_s"] += time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("data")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--transform", default="light")
    parser.add_argument("--persistent", action="store_true")
    parser.add_argument("--width", type=int, default=32, help="the CNN's width (its cost a batch grows as its square)")
    parser.add_argument("--watch", metavar="DB", help="wrap both loaders in collector.watch")
    args = parser.parse_args()
    torch.manual_seed(0)
    data = JpegFolder(args.data, args.transform)
    n_val = len(data) // 5
    train_set, val_set = torch.utils.data.random_split(data, [len(data) - n_val, n_val])
    kwargs = {"batch_size": args.batch_size, "num_workers": args.workers}
    if args.workers:
        kwargs["persistent_workers"] = args.persistent
    train = DataLoader(train_set, shuffle=True, **kwargs)
    val = DataLoader(val_set, **kwargs)
    if args.watch:
        import collector

        train = collector.watch(train, db=args.watch, run="train")
        val = collector.watch(val, db=args.watch, run="val")
    model = SmallCNN(width=args.width)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def train_step(batch):
        x, y = batch
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        meters["loss"] = loss.item()

    def val_step(batch):
        with torch.no_grad():
            model(batch[0])

    meters = {"loop_s": 0.0, "iter_s": 0.0, "wait_s": 0.0, "last_s": 0.0, "batches": 0, "loss": None}
    t_loops = time.time()
    for _ in range(args.epochs):
        model.train()
        epoch(train, train_step, meters)
        model.eval()
        epoch(val, val_step, meters)
    t_loops_end = time.time()
    if args.watch:
        train.close()
        val.close()
    print(
        json.dumps(
            {**meters, "t_imported": T_IMPORTED, "t_loops": t_loops, "t_loops_end": t_loops_end, "t_done": time.time()}
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
