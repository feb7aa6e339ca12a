"""A tiny Lightning job on the CPU: ``fw_lightning.py DB DEVICES MODE[,MODE...]``; a RESULT line per mode and rank.

Modes: ``none`` (plain Lightning), ``watch`` (collector.watch in the DataModule),
``callback`` (collector.lightning.StallwatchCallback). ``full`` adds validate,
test and predict after fit.
"""

from __future__ import annotations

import sys
import warnings

import lightning.pytorch as pl
import torch
from fw_common import Items, result
from torch.utils.data import DataLoader

import collector

warnings.filterwarnings("ignore")  # Lightning's advice on num_workers and logging on a tiny CPU job
DB, DEVICES, MODES = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
FULL = "full" in sys.argv[4:]


class Model(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(8, 1)
        self.seen: list[int] = []
        self.last_loss = float("nan")

    def training_step(self, batch: dict[str, torch.Tensor], _: int) -> torch.Tensor:
        self.seen += batch["idx"].tolist()
        loss = torch.nn.functional.mse_loss(self.net(batch["x"]), batch["y"])
        self.last_loss = float(loss)
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], _: int) -> None:
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(batch["x"]), batch["y"]), sync_dist=True)

    def test_step(self, batch: dict[str, torch.Tensor], _: int) -> None:
        self.validation_step(batch, _)

    def predict_step(self, batch: dict[str, torch.Tensor], _: int) -> torch.Tensor:
        return self.net(batch["x"])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


class Data(pl.LightningDataModule):
    def __init__(self, watch: bool) -> None:
        super().__init__()
        self.watch = watch

    def train_dataloader(self) -> DataLoader:  # type: ignore[type-arg]
        loader = DataLoader(Items(64), batch_size=4, shuffle=True)
        return collector.watch(loader, db=DB, run="dm-train", gpu_hz=0, host_hz=0) if self.watch else loader

    def val_dataloader(self) -> DataLoader:  # type: ignore[type-arg]
        return DataLoader(Items(16), batch_size=4)

    def test_dataloader(self) -> DataLoader:  # type: ignore[type-arg]
        return DataLoader(Items(16), batch_size=4)

    def predict_dataloader(self) -> DataLoader:  # type: ignore[type-arg]
        return DataLoader(Items(16), batch_size=4)


for mode in MODES:
    torch.manual_seed(0)
    callbacks = []
    if mode == "callback":
        from collector.lightning import StallwatchCallback

        callbacks.append(StallwatchCallback(DB, gpu_hz=0, host_hz=0))
    trainer = pl.Trainer(
        max_epochs=2,
        accelerator="cpu",
        devices=DEVICES,
        strategy="ddp" if DEVICES > 1 else "auto",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
    )
    model, data = Model(), Data(watch=mode == "watch")
    trainer.fit(model, data)
    if FULL:
        trainer.validate(model, data, verbose=False)
        trainer.test(model, data, verbose=False)
        predictions = trainer.predict(model, data)
        assert predictions is not None and len(predictions) == 4 // DEVICES
    result(mode, trainer.global_rank, model, model.seen, model.last_loss)
