"""Does the advice match what the change then measures? Real image pipelines at 0-3 workers, idle and beside a CPU hog.

usage: python bench/bench_pipelines.py [--rounds 3] [--epochs 4] [--light-epochs 12] [--images 320]
                                       [--conditions idle,hog] [--transforms light,heavy] [--workers 0,1,2,3]

The program is a course-style training loop (bench/pipelines.py: JPEGs
decoded with PIL, a light or a heavy augmentation, a small CNN on torch's
default intra-op threads; non-persistent workers, a train and a val loader),
recorded through ``collector.watch``. Every setting runs as its own
process; a round runs each (transform, num_workers) once, in an order
rotated every round, so background load spreads over all of them. Each run's
measured speed is its median train-epoch time (the epoch's iter(), every
next() and its step, the final next() included; the first epoch left out as
warm-up; the light transform's epochs take about 1.5 s, so it runs more of
them); speed-ups are medians over rounds against the same transform at the
baseline. Each baseline run of a round is diagnosed, and its suggestion
(num_workers, and torch.set_num_threads where suggested) is run right after
it: the predicted speed-up against the measured ratio of that pair.
``hog``: one busy process per ``--hog-procs`` (default 1: half of a 2-core
machine), started before the round and stopped after it.
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
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
HOG = "while True: pass"


def child(args: argparse.Namespace) -> None:
    """One training process: prints its train-epoch times and its own meter of time blocked in the train loader."""
    import torch
    from pipelines import NETS, PIPELINES, JpegFolder
    from torch.utils.data import DataLoader

    import collector

    torch.manual_seed(0)
    if args.threads:
        torch.set_num_threads(args.threads)
    net, transform = PIPELINES[args.transform]
    data = JpegFolder(args.data, transform)
    n_val = len(data) // 5
    train_set, val_set = torch.utils.data.random_split(data, [len(data) - n_val, n_val])
    persistent = bool(args.persistent and args.child)
    train = DataLoader(train_set, batch_size=32, shuffle=True, num_workers=args.child, persistent_workers=persistent)
    val = DataLoader(val_set, batch_size=32, num_workers=args.child, persistent_workers=persistent)
    watched_train = collector.watch(train, db=args.db, run=args.run, gpu_hz=0)
    watched_val = collector.watch(val, db=args.db, run=args.run + "-val", gpu_hz=0)
    model = NETS[net]()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    epoch_s, wait_s = [], []
    for _ in range(args.epochs):
        model.train()
        t0 = time.perf_counter()
        blocked = 0.0
        t = time.perf_counter()
        it = iter(watched_train)
        blocked += time.perf_counter() - t
        while True:
            t = time.perf_counter()
            try:
                x, y = next(it)
            except StopIteration:
                blocked += time.perf_counter() - t
                break
            blocked += time.perf_counter() - t
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
        epoch_s.append(time.perf_counter() - t0)
        wait_s.append(blocked)
        model.eval()
        with torch.no_grad():
            for x, _ in watched_val:
                model(x)
    watched_train.close()
    watched_val.close()
    print(json.dumps({"epoch_s": epoch_s, "wait_s": wait_s}), flush=True)


def run_one(
    data: str,
    pipeline: str,
    workers: int,
    epochs: int,
    db: str,
    run: str,
    threads: int = 0,
    persistent: bool = False,
) -> dict[str, list[float]]:
    """One training process of ``pipeline`` (bench/pipelines.py's PIPELINES): its train-epoch times and waits."""
    cmd = [sys.executable, __file__, "--child", str(workers), "--data", data, "--transform", pipeline]
    cmd += ["--epochs", str(epochs), "--db", db, "--run", run, "--threads", str(threads)]
    cmd += ["--persistent"] if persistent else []
    out = subprocess.run(
        cmd, capture_output=True, text=True, check=True, env={**os.environ, "PYTHONWARNINGS": "ignore"}
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def steady(epoch_s: list[float]) -> float:
    return statistics.median(epoch_s[1:] if len(epoch_s) > 1 else epoch_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--light-epochs", type=int, default=12, help="epochs a run for the light transform")
    parser.add_argument("--images", type=int, default=320)
    parser.add_argument("--conditions", default="idle,hog")
    parser.add_argument(
        "--transforms", default="light,heavy", help="pipelines: light, heavy, course-light, course-heavy"
    )
    parser.add_argument("--workers", default="0,1,2,3")
    parser.add_argument("--baselines", default="0,2", help="settings whose runs are diagnosed")
    parser.add_argument("--hog-procs", type=int, default=1)
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--data", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--transform", default="light", help=argparse.SUPPRESS)
    parser.add_argument("--db", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--run", default="train", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--persistent", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args)
        return
    from pipelines import make_jpegs

    from collector import diagnose

    data = str(make_jpegs(Path(tempfile.gettempdir()) / "stallwatch-bench-jpegs", args.images))
    transforms = args.transforms.split(",")
    settings = [int(w) for w in args.workers.split(",")]
    baselines = [int(w) for w in args.baselines.split(",")]
    workdir = tempfile.mkdtemp(prefix="bench-pipelines-")
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at start; {args.images} JPEGs, "
          f"{args.epochs} epochs a run, {args.rounds} rounds")  # fmt: skip
    for condition in args.conditions.split(","):
        times: dict[tuple[str, int], list[float]] = {}
        advice: dict[tuple[str, int], list[tuple[str, float | None, float | None, str]]] = {}
        loads = []
        for rnd in range(args.rounds):
            hogs = [
                subprocess.Popen([sys.executable, "-c", HOG])
                for _ in range(args.hog_procs if condition == "hog" else 0)
            ]
            try:
                order = [(t, w) for t in transforms for w in settings]
                order = order[rnd % len(order) :] + order[: rnd % len(order)]
                for transform, workers in order:
                    db = os.path.join(workdir, f"{condition}-{transform}-{workers}-{rnd}.sqlite")
                    epochs = args.light_epochs if transform.endswith("light") else args.epochs
                    out = run_one(data, transform, workers, epochs, db, "train")
                    times.setdefault((transform, workers), []).append(steady(out["epoch_s"]))
                    loads.append(os.getloadavg()[0])
                    if workers in baselines:
                        report = diagnose(db, run="train")
                        n = next((g.suggested for g in report.suggestions if g.parameter == "num_workers"), workers)
                        t = next((g.suggested for g in report.suggestions if g.parameter == "torch.set_num_threads"), 0)
                        gain = next((g.expected_speedup for g in report.suggestions if g.expected_speedup), None)
                        notes = "; ".join(x[:60] for x in report.notes if "help" in x or "busy" in x)
                        symptoms = ",".join(x.id for x in report.symptoms)
                        measured = None
                        if (n, t) != (workers, 0):  # the suggestion, measured right after its baseline
                            follow = run_one(data, transform, n, epochs, db + ".after", "train", threads=t)
                            measured = steady(out["epoch_s"]) / steady(follow["epoch_s"])
                        label = f"{n}" + (f", {t} thread(s)" if t else "")
                        advice.setdefault((transform, workers), []).append(
                            (label, gain, measured, f"{symptoms} {notes}")
                        )
            finally:
                for hog in hogs:
                    hog.kill()
                    hog.wait()
        print(f"\n## {condition} (load average during the runs: median {statistics.median(loads):.2f}, "
              f"range {min(loads):.2f}-{max(loads):.2f}; hog: {args.hog_procs if condition == 'hog' else 0} busy processes)")  # fmt: skip
        print("| transform | workers | epoch s (median, range) | vs 0 workers |")
        print("|---|---|---|---|")
        for transform in transforms:
            base = statistics.median(times[(transform, 0)]) if (transform, 0) in times else None
            for w in settings:
                v = times[(transform, w)]
                ratio = "" if base is None else f"{base / statistics.median(v):.2f}x"
                print(f"| {transform} | {w} | {statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f}) | {ratio} |")
        print(
            "\n| transform | from | suggested (each round) | predicted | measured, paired run right after | symptoms, notes |"
        )
        print("|---|---|---|---|---|---|")
        for (transform, workers), rows in advice.items():
            for label, gain, measured, notes in rows:
                pred = "-" if gain is None else f"{gain:.2f}x"
                got = "-" if measured is None else f"{measured:.2f}x"
                print(f"| {transform} | {workers} | {label} | {pred} | {got} | {notes} |")


if __name__ == "__main__":
    main()
