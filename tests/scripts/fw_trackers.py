"""Trains a tiny model without and with stallwatch, logging to TensorBoard, W&B (offline) and MLflow (a file store).

``fw_trackers.py OUT KIND``: KIND is ``plain`` (watch(log=...) with the three
one-line recipes of docs/trackers.md), ``lightning`` (StallwatchCallback with
Lightning's three loggers) or ``hf`` (StallwatchCallback, report_to the three).
Prints one RESULT line per mode (``none``, ``stallwatch``) with every step's
loss; ``plain`` also writes what its log function was given to OUT/logged.json.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import warnings

import torch
from fw_common import Items
from torch.utils.data import DataLoader

import collector.record.live

warnings.filterwarnings("ignore")
OUT, KIND = sys.argv[1], sys.argv[2]
DB = os.path.join(OUT, "stallwatch.sqlite")
MLRUNS = "file://" + os.path.join(OUT, "mlruns")
os.environ["MLFLOW_TRACKING_URI"] = MLRUNS  # where the Hugging Face MLflow integration logs
collector.record.live.LOG_WINDOW_S = 0.3  # figures every 0.3 s, so a 2 s job logs several


def loader(workers: int = 2) -> DataLoader:  # type: ignore[type-arg]
    generator = torch.Generator().manual_seed(0)
    return DataLoader(Items(64, cost_s=0.01), batch_size=4, shuffle=True, num_workers=workers, generator=generator)


def emit(mode: str, losses: list[float]) -> None:
    sys.stdout.flush()
    os.write(1, f"RESULT {json.dumps({'mode': mode, 'losses': losses})}\n".encode())


def plain(watched: bool) -> list[float]:
    import mlflow
    import wandb
    from torch.utils.tensorboard import SummaryWriter

    torch.manual_seed(0)
    net = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    data = loader()
    if watched:
        writer = SummaryWriter(os.path.join(OUT, "tb"))
        run = wandb.init(project="stallwatch-test", dir=OUT, mode="offline")
        mlflow.set_tracking_uri(MLRUNS)
        ml_run = mlflow.start_run()
        logged: list[tuple[dict[str, float], int, str]] = []

        def log(m: dict[str, float], step: int) -> None:
            logged.append((m, step, threading.current_thread().name))
            [writer.add_scalar(k, v, step) for k, v in m.items()]  # the three recipes of docs/trackers.md
            wandb.log({**m, "stallwatch/batches": step})
            mlflow.log_metrics(m, step=step, run_id=ml_run.info.run_id)

        data = collector.watch(data, db=DB, run="plain", gpu_hz=0, host_hz=0, log=log)
    losses = []
    for _ in range(3):
        for batch in data:
            loss = torch.nn.functional.mse_loss(net(batch["x"]), batch["y"])
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    if watched:
        data.close()
        writer.close()
        run.finish()
        mlflow.end_run()
        with open(os.path.join(OUT, "logged.json"), "w") as f:
            json.dump({"logged": logged, "mlflow_run": ml_run.info.run_id}, f)
    return losses


def lightning(watched: bool) -> list[float]:
    import lightning.pytorch as pl
    from lightning.pytorch.loggers import MLFlowLogger, TensorBoardLogger, WandbLogger

    from collector.lightning import StallwatchCallback

    class Model(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(8, 1)
            self.losses: list[float] = []

        def training_step(self, batch: dict[str, torch.Tensor], _: int) -> torch.Tensor:
            loss = torch.nn.functional.mse_loss(self.net(batch["x"]), batch["y"])
            self.losses.append(loss.item())
            self.log("loss", loss)
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.05)

    torch.manual_seed(0)
    loggers: list[object] | bool = False
    if watched:
        loggers = [
            TensorBoardLogger(os.path.join(OUT, "tb")),
            WandbLogger(project="stallwatch-test", save_dir=OUT, offline=True),
            MLFlowLogger(experiment_name="stallwatch-test", tracking_uri=MLRUNS),
        ]
    trainer = pl.Trainer(
        max_epochs=3,
        accelerator="cpu",
        logger=loggers,
        log_every_n_steps=2,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[StallwatchCallback(DB, gpu_hz=0, host_hz=0, verdict=False)] if watched else [],
    )
    model = Model()
    trainer.fit(model, loader())
    if watched:
        with open(os.path.join(OUT, "mlflow_run.txt"), "w") as f:
            f.write(loggers[2].run_id)  # type: ignore[index]
    return model.losses


def hf(watched: bool) -> list[float]:
    from transformers import Trainer as HfTrainer
    from transformers import TrainerCallback, TrainingArguments

    from collector.hf import StallwatchCallback

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(8, 1)

        def forward(self, x: torch.Tensor, y: torch.Tensor, idx: torch.Tensor) -> dict[str, torch.Tensor]:
            return {"loss": torch.nn.functional.mse_loss(self.net(x), y)}

    class Losses(TrainerCallback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.losses: list[float] = []

        def on_log(self, args: object, state: object, control: object, logs: object = None, **kw: object) -> None:
            if isinstance(logs, dict) and "loss" in logs:
                self.losses.append(float(logs["loss"]))

    torch.manual_seed(0)
    args = TrainingArguments(
        output_dir=os.path.join(OUT, "hf-" + str(watched)),
        per_device_train_batch_size=4,
        num_train_epochs=3,
        learning_rate=0.05,
        seed=0,
        logging_steps=2,
        save_strategy="no",
        report_to=["tensorboard", "wandb", "mlflow"] if watched else [],
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=2,
    )
    losses = Losses()
    callbacks = [losses, *([StallwatchCallback(DB, gpu_hz=0, host_hz=0, verdict=False)] if watched else [])]
    trainer = HfTrainer(model=Net(), args=args, train_dataset=Items(64, cost_s=0.01), callbacks=callbacks)
    trainer.train()
    return losses.losses


if __name__ == "__main__":
    run_kind = {"plain": plain, "lightning": lightning, "hf": hf}[KIND]
    for mode in ("none", "stallwatch"):
        emit(mode, run_kind(mode == "stallwatch"))
