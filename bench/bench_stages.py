"""Stage timing's cost, its shares against a manual timing, and the decode-size advice against the change itself.

    python bench/bench_stages.py cost [--rounds 5] [--batches 40] [--hog]
    python bench/bench_stages.py shares [--transform light|heavy]
    python bench/bench_stages.py draft [--rounds 5]

``cost``: the photo pipeline (bench/pipelines.py, 512-px JPEGs, 2 workers) recorded with ``stages=True`` and
``stages=False``, interleaved; the figure is the workers' CPU a sample (their whole lives, from the file's
worker_exits, every thread), on minus off over off, the median of the rounds. CPU time, not wall time: a busy
machine blurs it less, but a quiet run (bench/quiet.py) still gives the figure docs/performance.md keeps.
``--hog`` runs a CPU-bound process beside it. ``shares``: each stage's share from the table against the same
stages timed by hand in this process over the same samples (the Proof wants them within 10 points).
``draft``: the replayed gain of a decode at reduced size against the workers' CPU a sample measured with
``draft()`` put in the pipeline itself, interleaved (within 25%).
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import statistics
import tempfile
import time
from pathlib import Path

import pipelines  # bench/, beside this script
import torch
from PIL import Image
from torch.utils.data import DataLoader

import collector
from collector.diagnosis.replay import replay_draft
from collector.diagnosis.stages import stages
from collector.store.reader import Reader


class DraftFolder(pipelines.JpegFolder):
    """The photo pipeline with the advice applied: the JPEG decoded at the size the network sees."""

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        path, label = self.items[index]
        with Image.open(path) as raw:
            raw.draft("RGB", (pipelines.INPUT_PX, pipelines.INPUT_PX))
            image = raw.convert("RGB")
        return pipelines.to_tensor(self.transform(image, random.Random(self.seed * 1_000_003 + index))), label


def record(dataset, db: str, batches: int, stages_on: bool) -> tuple[int, float]:
    """(run id, the workers' CPU seconds a sample) of one recorded pass over ``batches`` batches."""
    loader = DataLoader(dataset, batch_size=16, num_workers=2, shuffle=False)
    with collector.watch(loader, db=db, gpu_hz=0, host_hz=0, stages=stages_on) as watched:
        for i, _ in enumerate(watched):
            if i + 1 >= batches:
                break
        run_id = watched.run_id
    exits = Reader(db).worker_exits(run_id)
    return run_id, float(exits["cpu_s"].sum()) / (batches * 16)


def spin() -> None:
    while True:
        pass


def hog() -> multiprocessing.Process:
    process = multiprocessing.Process(target=spin, daemon=True)
    process.start()
    return process


def cost(args: argparse.Namespace, root: Path, db: str) -> None:
    beside = hog() if args.hog else None
    try:
        ratios = []
        for _ in range(args.rounds):
            _, off = record(pipelines.JpegFolder(root, args.transform), db, args.batches, False)
            _, on = record(pipelines.JpegFolder(root, args.transform), db, args.batches, True)
            ratios.append(on / off - 1)
            print(f"  off {off * 1e3:.3f} ms CPU a sample, on {on * 1e3:.3f}: {on / off - 1:+.2%}")
        print(
            f"stage timing's cost ({args.transform}, {'beside a CPU hog' if args.hog else 'alone'}): "
            f"median {statistics.median(ratios):+.2%} of the workers' CPU over {args.rounds} rounds"
        )
    finally:
        if beside is not None:
            beside.terminate()


def manual_shares(root: Path, transform: str, count: int) -> dict[str, float]:
    """Open, decode, the transform and to_tensor timed by hand, as shares of their sum (thread CPU time)."""
    dataset = pipelines.JpegFolder(root, transform)
    spent = {"PIL open": 0.0, "PIL decode JPEG": 0.0, "transform": 0.0, "to_tensor": 0.0}
    for index in range(count):
        path, _ = dataset.items[index]
        t0 = time.thread_time()
        raw = Image.open(path)
        t1 = time.thread_time()
        raw.load()
        t2 = time.thread_time()
        image = dataset.transform(raw.convert("RGB"), random.Random(index))
        t3 = time.thread_time()
        pipelines.to_tensor(image)
        t4 = time.thread_time()
        for key, seconds in zip(spent, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
            spent[key] += seconds
    total = sum(spent.values())
    return {key: value / total for key, value in spent.items()}


def shares(args: argparse.Namespace, root: Path, db: str) -> None:
    run_id, _ = record(pipelines.JpegFolder(root, args.transform), db, args.batches, True)
    table = stages(Reader(db).worker_stages(run_id))
    assert table is not None, "no stage rows"
    by_hand = manual_shares(root, args.transform, args.batches * 16)
    print(f"{'stage':<40} {'table':>7} {'by hand':>8}")
    for row in table.table():
        print(f"{row.stage:<40} {row.share:>7.1%} {by_hand.get(row.stage, float('nan')):>8.1%}")
    print(
        "(by hand: thread CPU, PIL open/decode/the transform function/to_tensor; the table's __getitem__ and "
        "code rows hold the transform and to_tensor: compare their sum)"
    )


def draft(args: argparse.Namespace, root: Path, db: str) -> None:
    files = tuple(str(path) for path, _ in pipelines.JpegFolder(root).items[:8])
    gain = replay_draft(files, pipelines.INPUT_PX)
    assert gain is not None
    measured = []
    for _ in range(args.rounds):
        _, full = record(pipelines.JpegFolder(root, args.transform), db, args.batches, False)
        _, drafted = record(DraftFolder(root, args.transform), db, args.batches, False)
        measured.append(full / drafted)
    table = stages(Reader(db).worker_stages(record(pipelines.JpegFolder(root, args.transform), db, 8, True)[0]))
    decode = sum(f.row.share for f in table.get("PIL decode")) if table else float("nan")
    predicted = 1 / (1 - decode * gain.saving)
    print(
        f"replayed: the draft saves {gain.saving:.0%} of a decode ({gain.files} files); decode is {decode:.0%} of "
        f"the workers' time: production {predicted:.2f}x faster predicted, {statistics.median(measured):.2f}x "
        f"measured (CPU a sample, median of {args.rounds} interleaved rounds)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("cost", "shares", "draft"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--transform", choices=tuple(pipelines.TRANSFORMS), default="light")
    parser.add_argument("--hog", action="store_true")
    parser.add_argument("--images", default=str(Path(tempfile.gettempdir()) / "stallwatch-bench-jpegs"))
    args = parser.parse_args()
    root = pipelines.make_jpegs(args.images, args.batches * 16)
    with tempfile.TemporaryDirectory() as tmp:
        {"cost": cost, "shares": shares, "draft": draft}[args.what](args, root, str(Path(tmp) / "bench.sqlite"))


if __name__ == "__main__":
    main()
