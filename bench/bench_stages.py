"""Stage timing's cost, its shares against a manual timing, and the decode-size advice against the change itself.

    python bench/bench_stages.py cost [--rounds 5] [--batches 40] [--hog]
    python bench/bench_stages.py shares [--transform light|heavy]
    python bench/bench_stages.py draft [--rounds 5] [--torchvision]
    python bench/bench_stages.py cache [--rounds 5]          (torchvision)

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
from collector.diagnosis.rules_stages import deterministic_front
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


class TimedByHand(pipelines.JpegFolder):
    """The photo pipeline timing its own open, decode and the rest (wall, thread CPU) into shared memory."""

    def __init__(self, root: Path, transform: str) -> None:
        super().__init__(root, transform)
        self.spent = multiprocessing.get_context("fork").RawArray("d", 6)  # wall x3, cpu x3

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        path, label = self.items[index]
        marks = [(time.perf_counter(), time.thread_time())]
        raw = Image.open(path)
        marks.append((time.perf_counter(), time.thread_time()))
        raw.load()
        marks.append((time.perf_counter(), time.thread_time()))
        rng = random.Random(self.seed * 1_000_003 + index)
        out = pipelines.to_tensor(self.transform(raw.convert("RGB"), rng)), label
        marks.append((time.perf_counter(), time.thread_time()))
        for k in range(3):
            self.spent[k] += marks[k + 1][0] - marks[k][0]
            self.spent[3 + k] += marks[k + 1][1] - marks[k][1]
        return out


def shares(args: argparse.Namespace, root: Path, db: str) -> None:
    dataset = TimedByHand(root, args.transform)
    run_id, _ = record(dataset, db, args.batches, True)
    table = stages(Reader(db).worker_stages(run_id))
    assert table is not None, "no stage rows"
    hand = list(dataset.spent)
    inside = [f for f in table.rows if f.row.stage != "hand-over" and f.row.stage != "collate"]
    groups = {
        "PIL open": [f for f in inside if f.row.stage == "PIL open"],
        "PIL decode JPEG": [f for f in inside if f.row.stage == "PIL decode JPEG"],
        "the rest": [f for f in inside if not f.row.stage.startswith("PIL ")],
    }
    print(f"{'stage':<18} {'table wall':>10} {'by hand':>8} {'table cpu':>10} {'by hand':>8}")
    for k, (name, parts) in enumerate(groups.items()):
        t_wall = sum(f.wall_s for f in parts) / sum(f.wall_s for f in inside)
        t_cpu = sum(f.cpu_s or 0.0 for f in parts) / sum(f.cpu_s or 0.0 for f in inside)
        h_wall, h_cpu = hand[k] / sum(hand[:3]), hand[3 + k] / sum(hand[3:])
        print(f"{name:<18} {t_wall:>10.1%} {h_wall:>8.1%} {t_cpu:>10.1%} {h_cpu:>8.1%}")
    print(
        "(by hand: the same workers timing their own open, decode and the rest of __getitem__, every sample; "
        "the table: the timed fetches, collate and the hand-over left out)"
    )


class TorchvisionFolder(pipelines.JpegFolder):
    """The light photo pipeline through torchvision: Compose([Resize(64), ToTensor()]); ``draft`` applies the advice."""

    def __init__(self, root: Path, draft: bool = False) -> None:
        from torchvision import transforms as T

        super().__init__(root, "light")
        self.draft = draft
        self.pipeline = T.Compose([T.Resize(pipelines.INPUT_PX), T.ToTensor()])

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        path, label = self.items[index]
        with Image.open(path) as raw:
            if self.draft:
                raw.draft("RGB", (pipelines.INPUT_PX, pipelines.INPUT_PX))
            image = raw.convert("RGB")
        return self.pipeline(image), label


def draft(args: argparse.Namespace, root: Path, db: str) -> None:
    files = tuple(str(path) for path, _ in pipelines.JpegFolder(root).items[:8])
    gain = replay_draft(files, pipelines.INPUT_PX)
    assert gain is not None

    def dataset(drafted: bool) -> pipelines.JpegFolder:
        if args.torchvision:
            return TorchvisionFolder(root, drafted)
        return DraftFolder(root, args.transform) if drafted else pipelines.JpegFolder(root, args.transform)

    measured = []
    for _ in range(args.rounds):
        _, full = record(dataset(False), db, args.batches, False)
        _, drafted = record(dataset(True), db, args.batches, False)
        measured.append(full / drafted)
    table = stages(Reader(db).worker_stages(record(dataset(False), db, args.batches, True)[0]))
    assert table is not None
    decoded = max(f.pixels_out or 0.0 for f in table.get("PIL decode"))
    parts = table.get("PIL decode") + [f for f in table.get("transform ") if (f.pixels_in or 0.0) >= decoded / 2]
    share = sum(f.cpu_s or 0.0 for f in parts) / table.fetch_cpu_s
    predicted = 1 / (1 - share * gain.saving)
    print(
        f"replayed: the draft saves {gain.saving:.0%} of a decode and shrink ({gain.files} files); "
        f"{', '.join(f.row.stage for f in parts)}: {share:.0%} of the workers' CPU: production "
        f"{predicted:.2f}x faster predicted, {statistics.median(measured):.2f}x measured (CPU a sample, "
        f"median of {args.rounds} interleaved rounds: {', '.join(f'{m:.2f}' for m in measured)})"
    )


class CachedFolder(TorchvisionFolder):
    """The torchvision pipeline with the caching advice applied: each worker keeps its samples after the front."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.cache: dict[int, tuple[torch.Tensor, int]] = {}

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if index not in self.cache:
            self.cache[index] = super().__getitem__(index)
        return self.cache[index]


def later_epochs_cpu(dataset: pipelines.JpegFolder, db: str, batches: int, stages_on: bool) -> tuple[int, float]:
    """(run id, the workers' CPU a batch in the epochs after the first), persistent workers, 3 epochs."""
    loader = DataLoader(dataset, batch_size=16, num_workers=2, persistent_workers=True)
    with collector.watch(loader, db=db, gpu_hz=0, host_hz=0, stages=stages_on) as watched:
        for _ in range(3):
            for i, _ in enumerate(watched):
                if i + 1 >= batches:
                    break
        run_id = watched.run_id
    rows = Reader(db).batches(run_id)
    return run_id, float(rows.loc[rows["epoch"] > 0, "worker_cpu_s"].mean())


def cache(args: argparse.Namespace, root: Path, db: str) -> None:
    measured = []
    for _ in range(args.rounds):
        _, plain = later_epochs_cpu(TorchvisionFolder(root), db, args.batches, False)
        _, cached = later_epochs_cpu(CachedFolder(root), db, args.batches, False)
        measured.append(plain / cached)
    table = stages(Reader(db).worker_stages(later_epochs_cpu(TorchvisionFolder(root), db, args.batches, True)[0]))
    assert table is not None
    front = deterministic_front(table)
    share = sum(f.cpu_s or 0.0 for f in front) / table.fetch_cpu_s
    speedup = statistics.median(measured)
    print(
        f"the front ({', '.join(f.row.stage for f in front)}): {share:.1%} of the workers' CPU, {0.95 * share:.1%} "
        f"saved predicted (95% of it): production {1 / (1 - 0.95 * share):.2f}x; measured {1 - 1 / speedup:.1%} "
        f"saved, {speedup:.2f}x (workers' CPU a batch after the first epoch, median of {args.rounds} interleaved "
        f"rounds: {', '.join(f'{m:.2f}' for m in measured)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("cost", "shares", "draft", "cache"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--transform", choices=tuple(pipelines.TRANSFORMS), default="light")
    parser.add_argument("--hog", action="store_true")
    parser.add_argument("--torchvision", action="store_true", help="draft: the pipeline through torchvision's Compose")
    parser.add_argument("--images", default=str(Path(tempfile.gettempdir()) / "stallwatch-bench-jpegs"))
    args = parser.parse_args()
    root = pipelines.make_jpegs(args.images, args.batches * 16)
    with tempfile.TemporaryDirectory() as tmp:
        what = {"cost": cost, "shares": shares, "draft": draft, "cache": cache}[args.what]
        what(args, root, str(Path(tmp) / "bench.sqlite"))


if __name__ == "__main__":
    main()
