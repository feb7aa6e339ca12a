"""What the collector costs inside a Lightning Trainer: the real-loop pipeline, plain against StallwatchCallback.

usage: python bench/bench_lightning.py [--rounds 6] [--epochs 3] [--hog]

Each round runs three processes in rotated order: Lightning alone, with
``StallwatchCallback(verdict=False)`` and with the default callback (its
end-of-fit verdict included). The module is bench/pipelines.py's JPEG folder (PIL
decoding in 2 non-persistent workers, light transform) and small CNN on
torch's default threads, with a train and a val loader. Reported: the
median and range over rounds of each side's ``fit()`` time and whole-process
time against Lightning alone. ``--hog`` adds one busy process per core.
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
from quiet import Others  # noqa: E402

SIDES = ("plain", "callback-noverdict", "callback")


def child(side: str, data: str, epochs: int, db: str) -> None:
    import lightning.pytorch as pl
    import torch
    from pipelines import JpegFolder, SmallCNN
    from torch.utils.data import DataLoader

    torch.manual_seed(0)

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = SmallCNN(width=8)

        def training_step(self, batch: object, _: int) -> torch.Tensor:
            x, y = batch  # type: ignore[misc]
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def validation_step(self, batch: object, _: int) -> None:
            self.net(batch[0])  # type: ignore[index]

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)

    data_set = JpegFolder(data, "light")
    n_val = len(data_set) // 5
    train_set, val_set = torch.utils.data.random_split(data_set, [len(data_set) - n_val, n_val])
    train = DataLoader(train_set, batch_size=32, shuffle=True, num_workers=2)
    val = DataLoader(val_set, batch_size=32, num_workers=2)
    callbacks = []
    if side != "plain":
        from collector.lightning import StallwatchCallback

        callbacks.append(StallwatchCallback(db, verdict=side == "callback"))
    trainer = pl.Trainer(
        max_epochs=epochs,
        callbacks=callbacks,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    t0 = time.perf_counter()
    trainer.fit(Module(), train, val)
    print(json.dumps({"fit_s": time.perf_counter() - t0}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--hog", action="store_true")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--data", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--db", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.data, args.epochs, args.db)
        return
    from pipelines import make_jpegs

    data = str(make_jpegs(os.path.join(tempfile.gettempdir(), "stallwatch-bench-jpegs"), 320))
    hogs = (
        [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
        if args.hog
        else []
    )
    results: dict[str, list[tuple[float, float]]] = {side: [] for side in SIDES}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(args.rounds):
                order = SIDES[r % 3 :] + SIDES[: r % 3]
                with Others() as others:  # the hog is ours, so not counted
                    for side in order:
                        cmd = [sys.executable, __file__, "--child", side, "--data", data, "--epochs", str(args.epochs)]
                        cmd += ["--db", os.path.join(tmp, f"{side}-{r}.sqlite")]
                        t0 = time.perf_counter()
                        out = subprocess.run(
                            cmd,
                            capture_output=True,
                            text=True,
                            check=True,
                            env={**os.environ, "PYTHONWARNINGS": "ignore"},
                        )
                        wall = time.perf_counter() - t0
                        fit = json.loads(out.stdout.strip().splitlines()[-1])["fit_s"]
                        results[side].append((fit, wall))
                print(
                    f"round {r + 1}: "
                    + ", ".join(f"{s} fit {results[s][-1][0]:.2f} s" for s in SIDES)
                    + f"; {others.label()}",
                    flush=True,
                )
                if not others.quiet:
                    for side in SIDES:
                        results[side].pop()
    finally:
        for hog in hogs:
            hog.kill()
    if not results["plain"]:
        raise SystemExit("no quiet round: no figure printed")
    for side in SIDES[1:]:
        for k, label in ((0, "fit()"), (1, "whole process")):
            ratios = sorted(s[k] / p[k] for s, p in zip(results[side], results["plain"], strict=True))
            print(
                f"{side} / plain, {label}: median {statistics.median(ratios):.3f} (range {ratios[0]:.3f} to {ratios[-1]:.3f})"
            )


if __name__ == "__main__":
    main()
